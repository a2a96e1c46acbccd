#!/usr/bin/env bash
# ab_one_gpu.sh - a change that should give the same bits, against the binary before it, on one GPU:
#   BASE=<the parent's ./train> [TESTS="attention backend"] bash dev/check/ab_one_gpu.sh
# (this tree's ./train and build/run_gpu_tests are the change's). The GPU tests (TESTS: filters, or
# all); every loss, norm and validation line and the final weights of tiny runs (GPT-2, T not a
# multiple of 128, gradient accumulation, Qwen3 at head sizes 64 and 128, an untied Llama, Gemma 3's
# windows); then the trainer's throughput in alternating rounds (GPT-2 124M at V 50304, Qwen3-0.6B
# and Llama-3.2-1B at B 16), whose first round's loss, lse, lr and norm columns are compared too
# (the same bits at full size); GPT2_VOCABS="50304 262144" runs GPT-2 at each. EXTRA adds ./train flags to the families' throughput runs (e.g.
# "--optimizer-state bf16"); THROUGHPUT=0 stops before the throughput rounds. Prints a summary last.
set -uo pipefail
OUT=${OUT:-out}; M=/tmp/ad; mkdir -p $OUT $M
S=$OUT/summary.txt; : >$S
say() { echo "$1" | tee -a $S; }
BASE=${BASE:?the parent commit\'s ./train}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $S
t0=$SECONDS
for f in ${TESTS:-all}; do
  timeout 230 ./build/run_gpu_tests $([ "$f" = all ] || echo $f) >$OUT/gpu_tests_$f.log 2>&1
  say "gpu tests $f rc $?: $(grep -E '[0-9]+ passed' $OUT/gpu_tests_$f.log | tail -1) $(grep -m3 FAIL $OUT/gpu_tests_$f.log | tr '\n' ' ') [$((SECONDS-t0)) s]"
done
python3 tests/fixtures/gen/make_shard.py $M/t.bin 2000000 1000 pattern 1 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/v.bin 100000 1000 pattern 2 >/dev/null
data="-v 1000 -b 8 -t 128 -x 30 -l 2e-3 --warmup 5 --val-every 7 --val-batches 2 -s 0 -i $M/t.bin -j $M/v.bin"
fam="--layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256"
for run in "gpt2|-e tiny" "gpt2_t100|-e tiny -b 6 -t 100" "accum|-e tiny -d 4096" "qwen3|--family qwen3 $fam --head-dim 64" \
           "qwen3_hd128|--family qwen3 $fam --head-dim 128" "llama_untied|--family llama $fam --head-dim 64 --untied-head" \
           "gemma3|--family gemma3 $fam --head-dim 64 --sliding-window 64" \
           "qwen3_bf16_state|--family qwen3 $fam --head-dim 128 --optimizer-state bf16"; do
  IFS='|' read -r tag flags <<<"$run"
  for b in base new; do bin=$([ $b = base ] && echo $BASE || echo ./train); rm -rf $M/sb_${tag}_$b
    timeout 60 $bin $data $flags -o $M/sb_${tag}_$b >$M/sb_${tag}_$b.log 2>&1; done
  l=$(diff <(grep -E '^step|val loss' $M/sb_${tag}_base.log | cut -d'|' -f1-5) <(grep -E '^step|val loss' $M/sb_${tag}_new.log | cut -d'|' -f1-5) >/dev/null && grep -q '^step' $M/sb_${tag}_new.log && echo equal || echo DIFFERENT)
  w1=$(ls $M/sb_${tag}_base/step_*/model.safetensors 2>/dev/null | tail -1); w2=${w1/sb_${tag}_base/sb_${tag}_new}
  say "same bits as the parent, $tag: lines $l, final weights $([ -n "$w1" ] && cmp -s "$w1" "$w2" && echo equal || echo DIFFERENT) $(grep -m1 error $M/sb_${tag}_new.log)"
done
say "[$((SECONDS-t0)) s]"
[ "${THROUGHPUT:-1}" = 0 ] && { cat $S; exit 0; }
python3 tests/fixtures/gen/make_shard.py $M/r.bin 8000000 50304 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/rq.bin 2000000 151936 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/rl.bin 2000000 128256 random 4 >/dev/null
for r in 1 2; do for b in base new; do bin=$([ $b = base ] && echo $BASE || echo ./train)
  for v in ${GPT2_VOCABS:-50304}; do g=g$([ $v = 50304 ] || echo $v)
  rm -rf $M/o; timeout 90 $bin -e d12 -v $v -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 -n 0 --step-parts 1 -i $M/r.bin -o $M/o >$M/${g}_${b}_$r.log 2>&1
  cp $M/${g}_${b}_$r.log $M/g.log
  say "GPT-2 124M V$v B32 $b r$r: $(grep '| loss' $M/g.log | tail -30 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 15p) $(grep '| loss' $M/g.log | tail -1 | grep -oE 'fwd [0-9.]+ out [0-9.]+ bwd [0-9.]+')"
  done
  rm -rf $M/o; timeout 120 $bin -e qwen3-0.6b -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 ${EXTRA:-} -i $M/rq.bin -o $M/o >$M/q_${b}_$r.log 2>&1
  cp $M/q_${b}_$r.log $M/q.log
  say "Qwen3-0.6B B16 ${EXTRA:-} $b r$r: $(grep '| loss' $M/q.log | tail -8 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 4p) $(grep '| loss' $M/q.log | tail -1 | grep -oE 'bwd [0-9.]+')"
done; done
for b in base new; do bin=$([ $b = base ] && echo $BASE || echo ./train)
  rm -rf $M/o; timeout 150 $bin -e llama3.2-1b -b 16 -t 2048 --max-seq-len 2048 -x 12 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 ${EXTRA:-} -i $M/rl.bin -o $M/o >$M/l_${b}_1.log 2>&1
  cp $M/l_${b}_1.log $M/l.log
  say "Llama-3.2-1B B16 ${EXTRA:-} $b: $(grep '| loss' $M/l.log | tail -6 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 3p) $(grep '| loss' $M/l.log | tail -1 | grep -oE 'bwd [0-9.]+')"
done
for m in g $(for v in ${GPT2_VOCABS:-}; do [ $v = 50304 ] || echo g$v; done) q l; do
  same=$(diff <(grep '^step' $M/${m}_base_1.log | cut -d'|' -f1-5) <(grep '^step' $M/${m}_new_1.log | cut -d'|' -f1-5) >/dev/null &&
    grep -q '^step' $M/${m}_new_1.log && echo equal || echo DIFFERENT)
  say "same bits as the parent at full size, $m (first round): loss, lse, lr and norm lines $same"
done
say "---- elapsed $((SECONDS-t0)) s"
cat $S
