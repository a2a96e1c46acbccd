#!/usr/bin/env bash
# One H100: every cuBLASLt offer for the fused layer's dH and dW products (device alpha, beta = 1, fp32
# output) at three chunk shapes, with the layer's 1 MiB of workspace and with 32 MiB, to see whether
# the workspace bounds the choice. Needs build/lt_algo_probe built beforehand.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for shape in "4096 4096 128256" "768 4096 262144" "1024 7061 151936"; do
  for ws in 1 32; do
    echo "== d rows cols: $shape, workspace $ws MiB" | tee -a $OUT/probe.txt
    ./build/lt_algo_probe $shape $ws 2>&1 | tee -a $OUT/probe.txt
  done
done
