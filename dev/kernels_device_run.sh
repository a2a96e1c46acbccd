#!/bin/bash
# dev/kernels_device_run.sh - on the device: build and run the kernel tests, time every launcher
# of kernels/kernels.h (dev/bench_kernels.cu), compare attention variants (compile-time tile and
# register-cap choices, each also checked by the attention tests) and PyTorch's flash attention.
# Full logs go to $OUT; a short summary is printed last.
set -o pipefail
OUT=${OUT:-/tmp/kernels_out}
mkdir -p "$OUT" build/variants
NV="nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I."
LIBS="-lcublasLt -lcublas -lcudart"
MINE="build/kernels/encoder.cu.o build/kernels/layernorm.cu.o build/kernels/gelu.cu.o build/kernels/matmul.cu.o build/kernels/adamw.cu.o"
HOST="$(ls build/model/*.o build/data/*.o build/tokenizer/*.o 2>/dev/null | grep -v "\.cu\.o$" | tr "\n" " ")"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
make -j16 build/run_gpu_tests 2>&1 | tail -3
$NV dev/bench_kernels.cu $MINE build/kernels/attention.cu.o $LIBS -o build/bench_kernels || exit 1
./build/run_gpu_tests kernels > "$OUT/tests.log" 2>&1
grep -E "^  kernels|passed|FAILED|^    tests" "$OUT/tests.log"
./build/bench_kernels "${B:-16}" 2>&1 | tee "$OUT/bench.log"

# Variants, each "name|source|nvcc flags|test filter|bench section": one object rebuilt from
# `source` with `flags` replaces the default one; its tests and its bench section run.
# (2026-11-22 also ran -DMATMUL_FUSED_BGRAD=0/1 and the previous LayerNorm backward; see dev/RESULTS.md.)
VARIANTS=(
    "att_uncapped|kernels/attention.cu|-DATT_BWD64_MINB=1|kernels_attention|attention"
)
for v in "${VARIANTS[@]}"; do
    IFS='|' read -r name src flags filter section <<< "$v"
    base=$(basename "$src" .cu)
    others=$(echo "$MINE build/kernels/attention.cu.o" | tr ' ' '\n' | grep -v "/$base.cu.o" | tr '\n' ' ')
    # PREBUILT=1: the variants were built on the host beside (same nvcc), to save device time.
    if [ "${PREBUILT:-0}" != 1 ]; then
        $NV $flags -c "$src" -o build/variants/$name.o || continue
        $NV dev/bench_kernels.cu $others build/variants/$name.o $LIBS -o build/variants/bench_$name || continue
        $NV -Xcompiler -fopenmp build/tests/test_kernels_gpu.cu.o build/tests/runner.o $HOST $others \
            build/variants/$name.o $LIBS -lm -o build/variants/tests_$name || continue
    fi
    res=$(./build/variants/tests_$name "$filter" 2>>"$OUT/variants_tests.log" | tail -1)
    echo "variant $name [$src $flags] tests: $res" | tee -a "$OUT/variants.log"
    ./build/variants/bench_$name "${B:-16}" "$section" 2>&1 | grep -v "^device\|^ceilings\|^kernel \|^done" | tee -a "$OUT/variants.log"
done
echo "default build, second bench run (spread):" | tee -a "$OUT/variants.log"
./build/bench_kernels "${B:-16}" 2>&1 | grep -v "^device\|^kernel \|^done" | tee -a "$OUT/variants.log"
timeout 150 compute-sanitizer --tool memcheck --leak-check no ./build/run_gpu_tests kernels > "$OUT/memcheck.log" 2>&1
echo "memcheck (rc $?): $(grep -E 'ERROR SUMMARY|passed' "$OUT/memcheck.log" | tr '\n' ' ')" | tee -a "$OUT/variants.log"
python3 dev/bench_attention_torch.py "${B:-16}" 2>&1 | tee "$OUT/torch.log"
echo "=== SUMMARY"
grep -E "passed" "$OUT/tests.log"
cat "$OUT/variants.log" "$OUT/torch.log"
