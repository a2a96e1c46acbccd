#!/usr/bin/env bash
# Two GPUs, the second call of the night: the default mode at V 262144 and 50304 beside PyTorch
# torch.compile and DDP + torch.compile in the same call (run.sh's second part alone). Needs ./train.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $OUT/gpus.txt
G=2 TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="262144 50304" TP_MODES="default|" OUT=$OUT/tp \
    timeout 500 bash dev/check/multigpu_check.sh >$OUT/multigpu_tp.log 2>&1
echo "rc $?"
cat $OUT/tp/summary.txt
