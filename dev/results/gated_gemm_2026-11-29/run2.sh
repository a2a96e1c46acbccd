#!/bin/bash
# Where the fused forward's time goes: probes of its epilogue (GG_PROBE, dev/bench/gemm_gated_sm90.cu),
# built beside the tree as build/tmp/gg_probe<n>; build/tmp/gg_b4_d0 is the whole epilogue.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
for round in 1 2; do
    for b in gg_b4_d0 gg_probe4 gg_probe1 gg_probe3 gg_probe2; do
        echo "== round $round $b"; ./build/tmp/$b 2>&1 | tail -4 | tee "$OUT/probe_${b}_r$round.txt"
    done
done
