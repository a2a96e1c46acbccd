#!/usr/bin/env bash
# Two GPUs: --overlap-comm auto (the new default) against ZeRO-1 overlapped, GPT-2 124M at V 262144
# and 50304, beside PyTorch torch.compile and DDP + torch.compile in the same call. Each throughput
# line is followed by the mode the run took ("data parallel: ..."). A summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $OUT/gpus.txt
G=2 TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="262144 50304" \
    TP_MODES="default|;zero1_overlapped|--zero 1 --overlap-comm 1" OUT=$OUT/tp \
    timeout 560 bash dev/check/multigpu_check.sh >$OUT/multigpu_tp.log 2>&1
echo "rc $?"
cat $OUT/tp/summary.txt
