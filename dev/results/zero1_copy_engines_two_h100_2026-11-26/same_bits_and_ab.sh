#!/usr/bin/env bash
# ZeRO-1 through the copy engines against the base binary ($BASE, commit cf99dd2), on two GPUs: the
# exchange's GPU tests, the same bits as the base (dev/check/same_bits.sh: for two ranks the
# rank-order sum is the reduce-scatter's), then the throughput of both in ZeRO-1 after the backward
# and overlapped, two alternating rounds (dev/check/ab_throughput.sh). Run from the root
# of the tree of commit 993e6b5 with its ./train and build/run_gpu_tests.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
BASE=${BASE:?base ./train}
./build/run_gpu_tests grad_ >$OUT/gpu_tests_grad.log 2>&1
echo "gpu tests grad_: $(grep -E 'passed|failed' $OUT/gpu_tests_grad.log | tail -1)" | tee $OUT/ce_summary.txt
BASE=$BASE NEW=./train bash dev/check/same_bits.sh | tee -a $OUT/ce_summary.txt
BASE=$BASE ROUNDS=2 BUDGET=570 MODES="after|--zero 1 --overlap-comm 0;overlap|--zero 1" \
    bash dev/check/ab_throughput.sh
