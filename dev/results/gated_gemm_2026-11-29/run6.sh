#!/bin/bash
# The staged products with the backward's g and u prefetched into L2 a tile ahead (a variant of
# dev/bench/gemm_gated_sm90.cu never committed: the producer issued cp.async.bulk.prefetch.tensor
# for the tile's eight 64 x 128 boxes of g and u as it began each tile; it was the default build of
# this call) against build/tmp/gg_noprefetch (the code as committed) and build/tmp/gg_batch4
# (-DGG_BATCH=4, with the prefetch), alternating.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
./build/bench_gemm_gated_sm90 --check-only 2>&1 | tail -1 | tee "$OUT/prefetch_check.txt"
for r in 1 2; do
    echo "== $r default (prefetch)"; ./build/bench_gemm_gated_sm90 2>&1 | tail -5 | tee "$OUT/prefetch_r$r.txt"
    echo "== $r no prefetch"; ./build/tmp/gg_noprefetch 2>&1 | tail -5 | tee "$OUT/noprefetch_r$r.txt"
    echo "== $r batch 4"; ./build/tmp/gg_batch4 2>&1 | tail -5 | tee "$OUT/prefetch_batch4_r$r.txt"
done
