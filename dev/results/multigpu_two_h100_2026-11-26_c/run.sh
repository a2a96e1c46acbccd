#!/usr/bin/env bash
# Two GPUs, main with the three-stage attention backward and RMSNorm's one-kernel backward:
# GPT-2 124M on one GPU (each) and on two in ZeRO-1's two modes, beside PyTorch torch.compile and
# DDP + torch.compile in the same call, at V 262144 and 50304.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
G=2 TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="262144 50304" \
    TP_MODES="zero1|--zero 1;zero1_after|--zero 1 --overlap-comm 0" OUT=$OUT/tp \
    timeout 580 bash dev/check/multigpu_check.sh >$OUT/multigpu_tp.log 2>&1
echo "rc $?"; cp /tmp/mg/torch_*.log $OUT/ 2>/dev/null
cat $OUT/tp/summary.txt
