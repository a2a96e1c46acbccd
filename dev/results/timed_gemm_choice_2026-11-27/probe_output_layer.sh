#!/usr/bin/env bash
# The fused output layer's two cuBLAS GEMMs per chunk (dH, dW; lt_algo_probe's output-layer mode, 1 MiB
# workspace as the layer has) at the default chunk rows of GPT-2 124M at V 262144, Qwen3-0.6B and
# Llama-3.2-1B (B 16-32, T 1024-2048):  OUT=out bash probe_output_layer.sh
mkdir -p $OUT
for shape in "768 4128 262144" "1024 7061 151936" "2048 8438 128256"; do
  echo "== output layer $shape"; timeout 150 ./build/lt_algo_probe $shape 1
done 2>&1 | tee $OUT/probe_output_layer.log | grep -E "^(==|dH|dW)|#0 |same bits" | cut -c1-150
