#!/usr/bin/env bash
# Two GPUs, the same code: one GPU against two at the same global batch in every mode, the RoPE
# families' verdicts and Qwen3-0.6B's scaling, and two identical runs bit for bit. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $OUT/gpus.txt
G=2 TRAIN_PREBUILT=1 SECTIONS="correct bitwise families" OUT=$OUT/ck \
    timeout 560 bash dev/check/multigpu_check.sh >$OUT/multigpu_ck.log 2>&1
echo "rc $?"
cat $OUT/ck/summary.txt
