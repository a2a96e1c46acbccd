#!/usr/bin/env bash
# Two GPUs, current main: GPT-2 124M throughput on 1 and 2 GPUs beside PyTorch torch.compile / DDP.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
G=2 TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="262144 50304" OUT=$OUT/tp timeout 570 bash dev/check/multigpu_check.sh >$OUT/multigpu_tp.log 2>&1
echo "rc $?"; cp /tmp/mg/torch_*.log $OUT/ 2>/dev/null
cat $OUT/tp/summary.txt
