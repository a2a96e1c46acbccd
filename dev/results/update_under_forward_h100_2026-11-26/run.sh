#!/usr/bin/env bash
# One H100: AdamW on a stream of its own under the next forward (update_under_forward.patch on a5fdd9e, $NEW and
# $TESTS built from it) against a5fdd9e ($BASE): every GPU test, same bits in five tiny runs, a resume, throughput.
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-out}; M=/tmp/v8; mkdir -p $OUT $M
S=$OUT/summary.txt; : >$S
say() { echo "$1" | tee -a $S; }
BASE=${BASE:?the parent's ./train}; NEW=${NEW:?the patched ./train}; TESTS=${TESTS:?the patched build/run_gpu_tests}
PARTS=${PARTS:-one}   # one: GPU tests, one-GPU same bits and throughput; two: the two-GPU parts
cp $NEW ./train && cp $TESTS build/run_gpu_tests
chmod +x ./train $BASE build/* 2>/dev/null
NG=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=index,name --format=csv,noheader | tee -a $S
if [ "$PARTS" = one ]; then
# 1. every GPU test on GPU 0 (background)
( t0=$(date +%s); CUDA_VISIBLE_DEVICES=0 timeout 240 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1
  echo "gpu tests: $(grep -E '[0-9]+ passed' $OUT/gpu_tests.log | tail -1) ($(( $(date +%s) - t0 )) s)" >$OUT/gpu_tests_line.txt ) &
tp=$!
# 2. one GPU (the last one): same bits as main in tiny runs
G1=$(( NG - 1 ))
python3 tests/fixtures/gen/make_shard.py $M/t.bin 2000000 1000 pattern 1 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/v.bin 100000 1000 pattern 2 >/dev/null
data="-v 1000 -b 8 -t 128 -x 30 -l 2e-3 --warmup 5 --val-every 7 --val-batches 2 -s 0 -i $M/t.bin -j $M/v.bin"
qwen3="--family qwen3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --head-dim 64 --ffn-dim 256"
for run in "gpt2|-e tiny" "accum|-e tiny -d 4096" "qwen3|$qwen3" "qwen3_untied|$qwen3 --untied-head" \
           "gemma3|--family gemma3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --head-dim 64 --ffn-dim 256 --sliding-window 64"; do
  IFS='|' read -r tag flags <<<"$run"
  for b in base new; do bin=$([ $b = base ] && echo $BASE || echo ./train); rm -rf $M/sb_${tag}_$b
    CUDA_VISIBLE_DEVICES=$G1 timeout 60 $bin $flags $data -o $M/sb_${tag}_$b >$M/sb_${tag}_$b.log 2>&1; done
  l=$(diff <(grep -E '^step|val loss' $M/sb_${tag}_base.log | cut -d'|' -f1-5) <(grep -E '^step|val loss' $M/sb_${tag}_new.log | cut -d'|' -f1-5) >/dev/null && grep -q '^step' $M/sb_${tag}_new.log && echo equal || echo DIFFERENT)
  w1=$(ls $M/sb_${tag}_base/step_*/model.safetensors 2>/dev/null | tail -1); w2=${w1/sb_${tag}_base/sb_${tag}_new}
  say "1 GPU same bits as main, $flags: lines $l, final weights $([ -n "$w1" ] && cmp -s "$w1" "$w2" && echo equal || echo DIFFERENT) $(grep -m1 error $M/sb_${tag}_new.log)"
done
# resume from step 10 on the new binary, against its own uninterrupted run
rm -rf $M/rs; CUDA_VISIBLE_DEVICES=$G1 timeout 60 ./train -e tiny $data -x 10 -n 10 -o $M/rs >/dev/null 2>&1
CUDA_VISIBLE_DEVICES=$G1 timeout 60 ./train -e tiny $data -y 1 -o $M/rs >$M/rs.log 2>&1
say "1 GPU resume at 10: steps 11-30 $(diff <(grep -E '^step +(1[1-9]|2[0-9]|30)/' $M/rs.log | cut -d'|' -f1-5) <(grep -E '^step +(1[1-9]|2[0-9]|30)/' $M/sb_gpt2_new.log | cut -d'|' -f1-5) >/dev/null && echo identical || echo DIFFERENT)"
wait $tp; cat $OUT/gpu_tests_line.txt | tee -a $S; grep -E "FAIL" $OUT/gpu_tests.log | head -5 | tee -a $S
# 3. one GPU throughput, alternating: GPT-2 at both V, Qwen3-0.6B B 16
for V in 50304 262144; do python3 tests/fixtures/gen/make_shard.py $M/r$V.bin 8000000 $V random 3 >/dev/null; done
python3 tests/fixtures/gen/make_shard.py $M/rq.bin 2000000 151936 random 3 >/dev/null
for r in 1 2; do for b in base new; do bin=$([ $b = base ] && echo $BASE || echo ./train)
  for V in 50304 262144; do rm -rf $M/o; CUDA_VISIBLE_DEVICES=0 timeout 90 $bin -e d12 -v $V -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 -n 0 --step-parts 1 -i $M/r$V.bin -o $M/o >$M/tp.log 2>&1
    say "1 GPU GPT-2 V$V $b r$r: $(grep '| loss' $M/tp.log | tail -30 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 15p) $(grep '| loss' $M/tp.log | tail -1 | grep -oE 'fwd [0-9.]+ out [0-9.]+ bwd [0-9.]+')"; done
  rm -rf $M/o; CUDA_VISIBLE_DEVICES=0 timeout 120 $bin -e qwen3-0.6b -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 -i $M/rq.bin -o $M/o >$M/tq.log 2>&1
  say "1 GPU Qwen3-0.6B B16 $b r$r: $(grep '| loss' $M/tq.log | tail -8 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 4p)"
done; done
fi
# 4. two GPUs: same bits as main, checks, throughput A/B
if [ "$PARTS" = two ] && [ "$NG" -ge 2 ]; then
  TRAIN_PREBUILT=1 G=2 SECTIONS="bitwise resume kill" OUT=$OUT/mg MG_TMP=/tmp/mg timeout 200 bash dev/check/multigpu_check.sh >$OUT/mg.log 2>&1
  cat $OUT/mg/summary.txt >>$S
  BASE=$BASE NEW=./train MG_TMP=/tmp/sb bash dev/check/same_bits.sh 2>&1 | tee -a $S
  BASE=$BASE ROUNDS=2 BUDGET=$(( 560 - $(date +%s) + START )) MODES="after|--zero 1 --overlap-comm 0;overlap|--zero 1" OUT=$OUT MG_TMP=/tmp/ab bash dev/check/ab_throughput.sh 2>&1 | tail -14 | tee -a $S
fi
echo "==== summary ($(( $(date +%s) - START )) s)"; cat $S
