#!/usr/bin/env bash
# Every cuBLASLt algorithm the heuristic offers for the model body's matmuls (GPT-2 124M: C=768,
# N = B x 1024 rows), timed one by one (dev/profile/lt_algo_probe.cu, body mode), then the body kernels'
# own benchmark at the same B (dev/bench/bench_kernels.cu: matmul, layernorm, optimizer sections).
#   bash dev/profile/body_gemm_probe.sh            (B=32; OUT defaults to ./out)
set -uo pipefail
OUT=${OUT:-out}
B=${B:-32}
N=$((B * 1024))
mkdir -p "$OUT"
make -j16 build/lt_algo_probe build/run_gpu_tests build/bench_kernels >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
for shape in "768 2304" "768 768" "768 3072" "3072 768"; do
    ./build/lt_algo_probe body $shape $N
done 2>&1 | tee "$OUT/body_gemm_probe.log"
for section in matmul layernorm optimizer; do ./build/bench_kernels "$B" $section; done 2>&1 | tee "$OUT/bench_kernels.log"
