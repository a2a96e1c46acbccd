#!/usr/bin/env bash
# Two GPUs, the code of this folder's commit: the multi-GPU GPU tests; GPU 0 alone against each rank
# of the default mode under the CUPTI probe at V 50304 (where a two-GPU step's extra time goes, part
# by part, and each run's GEMM kernels); then the default mode at V 262144 and 50304 beside PyTorch
# torch.compile and DDP + torch.compile in the same call. Needs ./train, build/run_gpu_tests and
# build/kernel_trace.so built beforehand. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $OUT/gpus.txt
G=2 TRAIN_PREBUILT=1 SECTIONS="tests trace" TP_VOCABS=50304 OUT=$OUT/trace \
    timeout 170 bash dev/check/multigpu_check.sh >$OUT/multigpu_trace.log 2>&1
echo "rc $?"
G=2 TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="262144 50304" TP_MODES="default|" OUT=$OUT/tp \
    timeout 390 bash dev/check/multigpu_check.sh >$OUT/multigpu_tp.log 2>&1
echo "rc $?"
cat $OUT/trace/summary.txt $OUT/tp/summary.txt
