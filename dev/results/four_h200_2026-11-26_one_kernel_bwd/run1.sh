#!/usr/bin/env bash
# One four-GPU host (it gave four H200s), code of main after the one-kernel attention backward, three jobs side by side:
#   GPUs 0,1: GPT-2 124M on one GPU (each) and on two in ZeRO-1's two modes, beside PyTorch
#             torch.compile and DDP + torch.compile, at V 262144 and 50304;
#   GPU 2:    every GPU test;
#   GPU 3:    Qwen3-0.6B and Llama-3.2-1B at B 16 (Qwen3 also B 32) beside Liger eager in bf16.
# Each GPU has its own power cap; the host has 64 cores. A summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $OUT/gpus.txt
nvidia-smi topo -m >$OUT/topo.txt 2>&1
( CUDA_VISIBLE_DEVICES=2 timeout 400 ./build/run_gpu_tests >$OUT/gpu_tests_gpu2.log 2>&1; echo "rc $?" >>$OUT/gpu_tests_gpu2.log ) &
tests=$!
( CUDA_VISIBLE_DEVICES=3 TESTS=attention OUT=$OUT/families_gpu3 timeout 560 bash dev/check/families_peers.sh >$OUT/families_gpu3.log 2>&1 ) &
fam=$!
CUDA_VISIBLE_DEVICES=0,1 G=2 TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="262144 50304" \
    TP_MODES="zero1|--zero 1;zero1_after|--zero 1 --overlap-comm 0" OUT=$OUT/g2 \
    timeout 560 bash dev/check/multigpu_check.sh >$OUT/multigpu_g2.log 2>&1
echo "g2 rc $?"
mkdir -p $OUT/g2_torch; cp /tmp/mg/torch_*.log $OUT/g2_torch/ 2>/dev/null
wait $tests; wait $fam
echo "==== GPU tests (GPU 2)"; grep -E "passed|FAIL|^rc" $OUT/gpu_tests_gpu2.log | tail -5
echo "==== families (GPU 3)"; cat $OUT/families_gpu3/summary.txt
echo "==== two GPUs (0,1)"; cat $OUT/g2/summary.txt
