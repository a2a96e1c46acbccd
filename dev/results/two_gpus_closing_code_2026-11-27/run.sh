#!/usr/bin/env bash
# Two GPUs, the code with the timed body GEMMs and QK-norm's kept q, k: the default mode at V 262144
# and 50304, beside PyTorch torch.compile and DDP + torch.compile in the same call. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $OUT/gpus.txt
G=2 TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="262144 50304" TP_MODES="default|" OUT=$OUT/tp \
    timeout 560 bash dev/check/multigpu_check.sh >$OUT/multigpu_tp.log 2>&1
echo "rc $?"
cat $OUT/tp/summary.txt
