#!/usr/bin/env bash
# One H100: QK-norm's rotated q, k kept per layer (this tree's ./train) against the parent's
# (BASE, built from commit a72de08): every GPU test; the tiny QK-norm runs of
# dev/check/ab_one_gpu.sh, which must give the parent's bits (the kept rows are the recomputed ones);
# Qwen3-0.6B at B 16 (bf16 state) in alternating rounds, and at B 32, where memory sends the backend
# back to recomputing them.
#   BASE=inputs/train_base OUT=out bash dev/results/rotated_qk_kept_2026-11-27/run.sh
set -uo pipefail
OUT=${OUT:-out}; M=/tmp/rq; mkdir -p $OUT/logs $M
S=$OUT/summary.txt; : >$S
say() { echo "$1" | tee -a $S; }
BASE=${BASE:?the parent commit\'s ./train}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $S
t0=$SECONDS
timeout 240 ./build/run_gpu_tests >$OUT/logs/gpu_tests.log 2>&1
say "gpu tests rc $?: $(grep -E '[0-9]+ passed' $OUT/logs/gpu_tests.log | tail -1) $(grep -m3 FAIL $OUT/logs/gpu_tests.log | tr '\n' ' ') [$((SECONDS-t0)) s]"
python3 tests/fixtures/gen/make_shard.py $M/t.bin 2000000 1000 pattern 1 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/v.bin 100000 1000 pattern 2 >/dev/null
data="-v 1000 -b 8 -t 128 -x 30 -l 2e-3 --warmup 5 --val-every 7 --val-batches 2 -s 0 -i $M/t.bin -j $M/v.bin"
fam="--layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256"
for run in "qwen3|--family qwen3 $fam --head-dim 64" "qwen3_hd128|--family qwen3 $fam --head-dim 128" \
           "gemma3|--family gemma3 $fam --head-dim 64 --sliding-window 64" \
           "qwen3_bf16_state|--family qwen3 $fam --head-dim 128 --optimizer-state bf16"; do
  IFS='|' read -r tag flags <<<"$run"
  for b in base new; do bin=$([ $b = base ] && echo $BASE || echo ./train); rm -rf $M/sb_${tag}_$b
    timeout 60 $bin $data $flags -o $M/sb_${tag}_$b >$OUT/logs/sb_${tag}_$b.log 2>&1; done
  l=$(diff <(grep -E '^step|val loss' $OUT/logs/sb_${tag}_base.log | cut -d'|' -f1-5) <(grep -E '^step|val loss' $OUT/logs/sb_${tag}_new.log | cut -d'|' -f1-5) >/dev/null && grep -q '^step' $OUT/logs/sb_${tag}_new.log && echo equal || echo DIFFERENT)
  w1=$(ls $M/sb_${tag}_base/step_*/model.safetensors 2>/dev/null | tail -1); w2=${w1/sb_${tag}_base/sb_${tag}_new}
  say "same bits as the parent, $tag: lines $l, final weights $([ -n "$w1" ] && cmp -s "$w1" "$w2" && echo equal || echo DIFFERENT) $(grep -m1 error $OUT/logs/sb_${tag}_new.log)"
done
say "[$((SECONDS-t0)) s]"
python3 tests/fixtures/gen/make_shard.py $M/rq.bin 2000000 151936 random 3 >/dev/null
for r in 1 2; do for b in base new; do bin=$([ $b = base ] && echo $BASE || echo ./train)
  rm -rf $M/o; timeout 120 $bin -e qwen3-0.6b -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 --optimizer-state bf16 -i $M/rq.bin -o $M/o >$OUT/logs/q_${b}_$r.log 2>&1
  say "Qwen3-0.6B B16 bf16 state $b r$r: $(grep '| loss' $OUT/logs/q_${b}_$r.log | tail -8 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 4p) $(grep '| loss' $OUT/logs/q_${b}_$r.log | tail -1 | grep -oE 'fwd [0-9.]+ out [0-9.]+ bwd [0-9.]+|[0-9.]+ GB$' | tr '\n' ' ')$(grep -m1 -oE 'activations and scratch[^:]*' $OUT/logs/q_${b}_$r.log) $(grep -m1 error $OUT/logs/q_${b}_$r.log)"
done; done
same=$(diff <(grep '^step' $OUT/logs/q_base_1.log | cut -d'|' -f1-5) <(grep '^step' $OUT/logs/q_new_1.log | cut -d'|' -f1-5) >/dev/null && echo equal || echo DIFFERENT)
say "Qwen3-0.6B B16 loss, lse, lr and norm lines against the parent (first round): $same"
rm -rf $M/o; timeout 120 ./train -e qwen3-0.6b -b 32 -t 2048 --max-seq-len 2048 -x 10 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 --optimizer-state bf16 -i $M/rq.bin -o $M/o >$OUT/logs/q32_new.log 2>&1
say "Qwen3-0.6B B32 bf16 state new: $(grep '| loss' $OUT/logs/q32_new.log | tail -6 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 3p) $(grep '| loss' $OUT/logs/q32_new.log | tail -1 | grep -oE '[0-9.]+ GB$') $(grep -m1 -oE 'activations and scratch[^:]*' $OUT/logs/q32_new.log) $(grep -m1 error $OUT/logs/q32_new.log)"
say "---- elapsed $((SECONDS-t0)) s"
tar -czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
