#!/usr/bin/env bash
# One four-GPU host (it gave four H200s), the same code as run1.sh: GPT-2 124M on one GPU (GPU 0 and GPU 1 alone) and on
# four in every data-parallel mode, beside PyTorch torch.compile and DDP + torch.compile on four, at
# V 262144 and 50304. A summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
G=4 TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="262144 50304" OUT=$OUT/g4 \
    timeout 585 bash dev/check/multigpu_check.sh >$OUT/multigpu_g4.log 2>&1
echo "g4 rc $?"
mkdir -p $OUT/g4_torch; cp /tmp/mg/torch_*.log $OUT/g4_torch/ 2>/dev/null
cat $OUT/g4/summary.txt
tar -czf $OUT/g4_logs.tar.gz -C $OUT g4 g4_torch multigpu_g4.log 2>/dev/null; rm -rf $OUT/g4 $OUT/g4_torch $OUT/multigpu_g4.log
