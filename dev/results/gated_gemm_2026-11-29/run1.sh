#!/bin/bash
# The gated MLP's products with the activation in the consumers' epilogue (dev/bench/gemm_gated_sm90.cu
# at commit 774b2f4)
# against the trainer's cuBLASLt product + kernels/swiglu.cu pass. Binaries built beside the tree:
# build/bench_gemm_gated_sm90 (8 blocks of g, u a batch, the next batch in flight) and variants in
# build/tmp/gg_b<batch>_d<double>.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
./build/bench_gemm_gated_sm90 --check-only 2>&1 | tee "$OUT/check.txt" || exit 1
./build/bench_gemm_gated_sm90 2>&1 | tee "$OUT/bench_b8_d1.txt"
./build/bench_gemm_gated_sm90 --cluster 1 2>&1 | tail -6 | tee "$OUT/bench_b8_d1_cluster1.txt"
for b in gg_b4_d0 gg_b16_d0 gg_b4_d1; do
    echo "== $b"; ./build/tmp/$b 2>&1 | tail -6 | tee "$OUT/bench_$b.txt"
done
