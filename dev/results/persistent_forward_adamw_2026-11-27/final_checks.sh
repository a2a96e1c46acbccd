#!/usr/bin/env bash
# One GPU: every GPU test, the same bits as the parent's ./train (BASE), the attention forward's speed.
#   BASE=<the parent's ./train> OUT=out bash dev/results/persistent_forward_adamw_2026-11-27/final_checks.sh
t0=$SECONDS; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $S
timeout 300 ./build/run_gpu_tests > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $?: $(grep -E '[0-9]+ passed' $OUT/gpu_tests.log | tail -1) $(grep -m3 FAIL $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS-t0)) s]" >> $S
grep -A1 'two_streams' $OUT/gpu_tests.log >> $S
THROUGHPUT=0 TESTS=none BASE=${BASE:?the parent commit\'s ./train} OUT=$OUT/ab timeout 120 bash dev/check/ab_one_gpu.sh > $OUT/ab.log 2>&1
grep 'same bits' $OUT/ab/summary.txt >> $S
timeout 60 ./build/bench_kernels 16 attention > $OUT/bench_att.log 2>&1; grep -E '^attention B|forward wgmma' $OUT/bench_att.log >> $S
echo "[$((SECONDS-t0)) s]" >> $S
gzip $OUT/gpu_tests.log
cat $S
