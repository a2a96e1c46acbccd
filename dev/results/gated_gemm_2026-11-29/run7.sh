#!/bin/bash
# Copies issued by consumer thread 0 and four epilogue warps (the default build) against a producer
# warp and three epilogue warps (build/tmp/gg_producer_warp, -DGG_INLINE_ISSUE=0), alternating.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
./build/bench_gemm_gated_sm90 --check-only 2>&1 | tee "$OUT/inline_check.txt" | tail -1
./build/bench_gemm_gated_sm90 --cluster 1 --check-only 2>&1 | tail -1
for r in 1 2; do
    echo "== $r inline issue, four epilogue warps"; ./build/bench_gemm_gated_sm90 2>&1 | tail -5 | tee "$OUT/inline_r$r.txt"
    echo "== $r producer warp, three epilogue warps"; ./build/tmp/gg_producer_warp 2>&1 | tail -5 | tee "$OUT/producer_warp_r$r.txt"
done
