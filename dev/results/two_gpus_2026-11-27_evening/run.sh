#!/usr/bin/env bash
# Two GPUs, the code of commit aaab3fb (product code of 6a5413c): the multi-GPU GPU tests, then the
# default mode at V 262144 and 50304 beside PyTorch torch.compile and DDP + torch.compile in the same
# call. Needs ./train and build/run_gpu_tests built beforehand (TRAIN_PREBUILT=1). Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $OUT/gpus.txt
G=2 TRAIN_PREBUILT=1 SECTIONS="tests throughput peers" TP_VOCABS="262144 50304" TP_MODES="default|" OUT=$OUT/tp \
    timeout 560 bash dev/check/multigpu_check.sh >$OUT/multigpu_tp.log 2>&1
echo "rc $?"
cat $OUT/tp/summary.txt
