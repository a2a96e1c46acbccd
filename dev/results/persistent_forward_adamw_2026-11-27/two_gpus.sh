#!/usr/bin/env bash
# two GPUs: ZeRO-1 and the all-reduce bitwise, GPT-2 124M at V 50304 (the default mode) beside DDP + torch.compile
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $OUT/gpus.txt
G=2 TRAIN_PREBUILT=1 SECTIONS="bitwise throughput peers" TP_VOCABS="50304" TP_MODES="default|" OUT=$OUT/tp \
    timeout 390 bash dev/check/multigpu_check.sh >$OUT/multigpu.log 2>&1
echo "rc $?"
cat $OUT/tp/summary.txt
