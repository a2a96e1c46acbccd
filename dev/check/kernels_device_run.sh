#!/bin/bash
# kernels_device_run.sh - on a GPU machine: build and run the kernel tests, time every launcher
# of kernels/kernels.h (dev/bench/bench_kernels.cu) twice (the spread between runs), and PyTorch's
# flash attention.
# Full logs go to $OUT; a short summary is printed last.
set -o pipefail
OUT=${OUT:-/tmp/kernels_out}
mkdir -p "$OUT"
NV="nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I."
LIBS="-lcublasLt -lcublas -lcudart"
MINE="build/kernels/encoder.cu.o build/kernels/layernorm.cu.o build/kernels/gelu.cu.o build/kernels/matmul.cu.o build/kernels/adamw.cu.o"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
make -j16 build/run_gpu_tests 2>&1 | tail -3
$NV dev/bench/bench_kernels.cu $MINE build/kernels/attention.cu.o $LIBS -o build/bench_kernels || exit 1
./build/run_gpu_tests kernels > "$OUT/tests.log" 2>&1
grep -E "^  kernels|passed|FAILED|^    tests" "$OUT/tests.log"
./build/bench_kernels "${B:-16}" 2>&1 | tee "$OUT/bench.log"

echo "default build, second bench run (spread):" | tee -a "$OUT/variants.log"
./build/bench_kernels "${B:-16}" 2>&1 | grep -v "^device\|^kernel \|^done" | tee -a "$OUT/variants.log"
timeout 150 compute-sanitizer --tool memcheck --leak-check no ./build/run_gpu_tests kernels > "$OUT/memcheck.log" 2>&1
echo "memcheck (rc $?): $(grep -E 'ERROR SUMMARY|passed' "$OUT/memcheck.log" | tr '\n' ' ')" | tee -a "$OUT/variants.log"
python3 dev/bench/bench_attention_torch.py "${B:-16}" 2>&1 | tee "$OUT/torch.log"
echo "=== SUMMARY"
grep -E "passed" "$OUT/tests.log"
cat "$OUT/variants.log" "$OUT/torch.log"
