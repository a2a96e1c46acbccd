#!/usr/bin/env bash
# Fifth call: half tiles staged beside a fourth ring stage (kernels/gated_mlp.cu from C = 2048). The
# products' GPU tests; the bench built with half tiles never (inputs/bench_gated_halves_never, the
# previous kernels) and for every producer-warp kernel (inputs/bench_gated_halves_always), one after
# the other at the families' shapes and wider ones; Llama-3.2-1B in the trainer, this tree's ./train
# (half tiles at its C = 2048) against inputs/train_halves_never, B 16, T 2048, bf16 state.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
chmod +x inputs/*
timeout 120 ./build/run_gpu_tests gated >$OUT/gpu_tests_gated.log 2>&1
echo "gpu tests gated rc $?: $(tail -1 $OUT/gpu_tests_gated.log) $(grep -m5 FAILED $OUT/gpu_tests_gated.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
for b in never always never always; do
  timeout 60 inputs/bench_gated_halves_$b >$OUT/bench_$b.log 2>&1; echo "$b rc $? $(grep 'checks passed' $OUT/bench_$b.log)" | tee -a $S
  grep '^| 32768' $OUT/bench_$b.log | tee -a $S
  timeout 60 inputs/bench_gated_halves_$b --shape 32768,4096,14336 --shape 32768,3072,8192 >$OUT/bench_wide_$b.log 2>&1
  grep '^| 32768' $OUT/bench_wide_$b.log | tee -a $S
  timeout 60 inputs/bench_gated_halves_$b --gelu --shape 32768,2560,10240 >$OUT/bench_gelu_$b.log 2>&1
  grep '^| 32768' $OUT/bench_gelu_$b.log | tee -a $S
  echo "[$((SECONDS - t0)) s]" | tee -a $S
done
python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 6000000 128256 random 3 >/dev/null
CK=/dev/shm/fp
for who in new never; do
  bin=./train; [ $who = never ] && bin=inputs/train_halves_never
  log=$OUT/${who}_llama.log; rm -rf $CK
  timeout 100 $bin -e llama3.2-1b -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 \
    --optimizer-state bf16 -i /tmp/f/l.bin -o $CK >$log 2>&1
  echo "$who llama3.2-1b: median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB'), step 14 $(grep -E '^step +14/' $log | cut -d'|' -f2) $(grep '| loss' $log | tail -1 | grep -o 'fwd.*' | cut -c1-50) $(grep -m1 error $log) [$((SECONDS - t0)) s]" | tee -a $S
done
rm -rf $CK
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
