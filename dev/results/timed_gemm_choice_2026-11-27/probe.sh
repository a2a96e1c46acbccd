#!/usr/bin/env bash
# Every cuBLASLt offer for the families' linear layers at N = 32768 (Qwen3-0.6B's four, then
# Llama-3.2-1B's), each timed and its result compared with the first choice's bits:
#   make build/lt_algo_probe && OUT=out bash probe.sh
set -uo pipefail
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
mkdir -p $OUT
N=32768
for shape in "1024 4096" "2048 1024" "1024 6144" "3072 1024" "2048 3072" "2048 2048" "2048 16384" "8192 2048"; do
  echo "== linear $shape N=$N"
  timeout 120 ./build/lt_algo_probe linear $shape $N
done 2>&1 | tee $OUT/probe.log | grep -v "^  #" 
echo; grep -c "same bits" $OUT/probe.log
