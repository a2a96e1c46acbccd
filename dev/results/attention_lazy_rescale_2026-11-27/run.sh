#!/usr/bin/env bash
# One H100: the lazy-rescale forward (commit 447701a) against its parent, from binaries built here:
#   inputs/lazy/{train,run_gpu_tests} and inputs/probe/bench_kernels_lazy from 447701a,
#   inputs/probe/*_base and inputs/train_base from the parent, and the removal probes
#   (dev/profile/removal_probes.sh build). As run, build/ did not exist there, so the two test lines
#   failed with rc 127 (fixed below: mkdir -p build).
set -u
OUT=${OUT:-out}; mkdir -p $OUT; T=$OUT/table.txt; : >$T
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $T
P=inputs/probe
for r in 1 2 3; do for v in base lazy; do
  echo "== attention $v round $r" >>$OUT/attn_bench.txt
  timeout 60 $P/bench_kernels_$v 16 attention >>$OUT/attn_bench.txt 2>&1
done; done
echo "bench done [$((SECONDS-t0)) s]" | tee -a $T
mkdir -p build; cp inputs/lazy/train ./train; cp inputs/lazy/run_gpu_tests build/run_gpu_tests
timeout 200 ./build/run_gpu_tests attention >$OUT/t_attention.log 2>&1; echo "tests attention rc $? $(grep -E '[0-9]+ passed' $OUT/t_attention.log | tail -1) [$((SECONDS-t0)) s]" | tee -a $T
timeout 200 ./build/run_gpu_tests backend >$OUT/t_backend.log 2>&1; echo "tests backend rc $? $(grep -E '[0-9]+ passed' $OUT/t_backend.log | tail -1) [$((SECONDS-t0)) s]" | tee -a $T
ROUNDS=1 timeout 150 bash $P/removal_probes.sh run >/dev/null 2>&1; echo "probes rc $? [$((SECONDS-t0)) s]" | tee -a $T
BASE=inputs/train_base TESTS=none timeout $((540 - (SECONDS-t0))) bash dev/check/ab_one_gpu.sh >$OUT/ab.log 2>&1
echo "ab rc $? [$((SECONDS-t0)) s]" | tee -a $T
mkdir -p $OUT/ad; cp /tmp/ad/*.log $OUT/ad/ 2>/dev/null
cat $OUT/summary.txt >>$T 2>/dev/null
grep -E "^attention|forward|backward" $OUT/attn_bench.txt | head -80 >>$T
