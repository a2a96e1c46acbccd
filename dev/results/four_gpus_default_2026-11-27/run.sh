#!/usr/bin/env bash
# One four-GPU host: the vocabulary-parallel checks on four ranks (their data-parallel runs now take
# the default, ZeRO-1 after the backward on one NVLink host), then GPT-2 124M on one GPU and on four
# in the default and in ZeRO-1 overlapped, beside PyTorch torch.compile and DDP + torch.compile on
# four, at V 262144 and 50304. Needs ./train and build/run_gpu_tests built. A summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $OUT/gpus.txt
G=4 TRAIN_PREBUILT=1 SECTIONS="vocabpar" OUT=$OUT/vp timeout 170 bash dev/check/multigpu_check.sh >$OUT/multigpu_vp.log 2>&1
echo "vocabpar rc $?"
G=4 TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="262144 50304" \
    TP_MODES="default|;zero1_overlapped|--zero 1 --overlap-comm 1" OUT=$OUT/g4 \
    timeout 400 bash dev/check/multigpu_check.sh >$OUT/multigpu_g4.log 2>&1
echo "g4 rc $?"
mkdir -p $OUT/g4_torch; cp /tmp/mg/torch_*.log $OUT/g4_torch/ 2>/dev/null
cp $OUT/vp/summary.txt $OUT/summary_vp.txt; cp $OUT/g4/summary.txt $OUT/summary_g4.txt
tar -czf $OUT/logs.tar.gz -C $OUT vp g4 g4_torch multigpu_vp.log multigpu_g4.log 2>/dev/null &&
    rm -rf $OUT/vp $OUT/g4 $OUT/g4_torch $OUT/multigpu_vp.log $OUT/multigpu_g4.log # the returned files are few
echo "==== vocabpar (four ranks)"; cat $OUT/summary_vp.txt
echo "==== four GPUs"; cat $OUT/summary_g4.txt
