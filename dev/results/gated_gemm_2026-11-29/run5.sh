#!/bin/bash
# Staged epilogue with the fast activation (ex2.approx, rcp.approx; the default build), against
# build/tmp/gg_exact (-DGG_FAST_ACT=0: expf and IEEE division, one exponential for act and slope)
# and build/tmp/gg_batch4 (-DGG_BATCH=4).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
./build/bench_gemm_gated_sm90 2>&1 | tee "$OUT/fast.txt" | grep -vE '^  |^check'
for b in gg_exact gg_batch4; do echo "== $b"; ./build/tmp/$b 2>&1 | tail -5 | tee "$OUT/fast_$b.txt"; done
echo "== again, default"; ./build/bench_gemm_gated_sm90 2>&1 | tail -5 | tee "$OUT/fast_again.txt"
