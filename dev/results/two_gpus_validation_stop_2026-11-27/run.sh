#!/usr/bin/env bash
# Two GPUs, the code of this folder's commit: the multi-GPU GPU tests and a stop asked for during a
# validation on two ranks (SECTIONS "tests stop"), then the default mode at V 262144 and 50304 beside
# PyTorch torch.compile and DDP + torch.compile in the same call. Needs ./train and
# build/run_gpu_tests built beforehand. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $OUT/gpus.txt
G=2 TRAIN_PREBUILT=1 SECTIONS="tests stop" OUT=$OUT/stop timeout 150 bash dev/check/multigpu_check.sh >$OUT/multigpu_stop.log 2>&1
echo "rc $?"
cp /tmp/mg/stop.log $OUT/stop/stopped_run.log 2>/dev/null
G=2 TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="262144 50304" TP_MODES="default|" OUT=$OUT/tp \
    timeout 400 bash dev/check/multigpu_check.sh >$OUT/multigpu_tp.log 2>&1
echo "rc $?"
cat $OUT/stop/summary.txt $OUT/tp/summary.txt
