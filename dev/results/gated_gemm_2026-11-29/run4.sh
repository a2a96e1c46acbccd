#!/bin/bash
# The epilogue by three epilogue warps from a staged bf16 tile, against the trainer's path. The code
# of this call was dev/bench/gemm_gated_sm90.cu as committed in c19be68 but with the activation of
# kernels/swiglu.cu (gated_act: expf and IEEE division, then in kernels/gated_act.cuh of 774b2f4);
# build/tmp/gg_batch<n>: the backward's epilogue with n items' loads in flight (the default is 8).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
./build/bench_gemm_gated_sm90 2>&1 | tee "$OUT/staged.txt" | grep -vE '^  |^check' 
./build/bench_gemm_gated_sm90 --cluster 1 2>&1 | tail -5 | tee "$OUT/staged_cluster1.txt"
for b in gg_batch4 gg_batch16; do echo "== $b"; ./build/tmp/$b 2>&1 | tail -5 | tee "$OUT/staged_$b.txt"; done
echo "== again, default"; ./build/bench_gemm_gated_sm90 2>&1 | tail -5 | tee "$OUT/staged_again.txt"
