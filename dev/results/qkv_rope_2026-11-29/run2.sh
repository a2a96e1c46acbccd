#!/usr/bin/env bash
# One GPU, the second version (each drain thread one lane of its rows, QR_ROWS rows' loads in flight,
# the norm's gains loaded once a tile): the qkv and rope GPU tests, `bench_kernels 16 qkv` for this
# tree's kernel and for variants built beside it into build/tmp/qr/ (bench_r1: one row at a time,
# bench_r3, bench_r4: three and four, bench_r2i: two with the copies issued inline and a fourth drain
# warp), then Qwen3-0.6B and Gemma-3-1B against inputs/train_parent (as run.sh's trainer runs).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
chmod +x inputs/train_parent build/tmp/qr/bench_*
. dev/bench/family_rounds.sh  # CK, shard, trainer
for f in qkv rope; do
  timeout 120 ./build/run_gpu_tests $f >>$OUT/gpu_tests.log 2>&1
  echo "gpu tests $f rc $?: $(tail -1 $OUT/gpu_tests.log) $(grep -m5 -E 'FAIL' $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
done
for b in build/bench_kernels build/tmp/qr/bench_r1 build/tmp/qr/bench_r3 build/tmp/qr/bench_r4 build/tmp/qr/bench_r2i build/bench_kernels; do
  echo "-- $b" | tee -a $S; timeout 60 $b 16 qkv 2>&1 | grep -E 'qkv|epilogue|error' | tee -a $S
done
shard q 151936; shard g 262144
trainer 1 parent qwen3-0.6b q; trainer 1 new qwen3-0.6b q
trainer 1 new gemma3-1b g; trainer 1 parent gemma3-1b g
rm -rf $CK
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
cat $S
