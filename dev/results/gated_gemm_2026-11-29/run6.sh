#!/bin/bash
# The backward's g and u prefetched into L2 a tile ahead (the default build) against
# build/tmp/gg_noprefetch (-DGG_PREFETCH=0) and build/tmp/gg_batch4 (-DGG_BATCH=4), alternating.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
./build/bench_gemm_gated_sm90 --check-only 2>&1 | tail -1 | tee "$OUT/prefetch_check.txt"
for r in 1 2; do
    echo "== $r default (prefetch)"; ./build/bench_gemm_gated_sm90 2>&1 | tail -5 | tee "$OUT/prefetch_r$r.txt"
    echo "== $r no prefetch"; ./build/tmp/gg_noprefetch 2>&1 | tail -5 | tee "$OUT/noprefetch_r$r.txt"
    echo "== $r batch 4"; ./build/tmp/gg_batch4 2>&1 | tail -5 | tee "$OUT/prefetch_batch4_r$r.txt"
done
