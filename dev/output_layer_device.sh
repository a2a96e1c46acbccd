#!/bin/bash
# dev/output_layer_device.sh - one device call for the output layer (issue 5): build, GPU tests,
# benchmark, short table last. Logs go to $OUT (or ./out) as tests.log and bench.log.
#   dev/output_layer_device.sh [bench arguments...]     e.g. --max-seconds 240
# Builds with make when the whole tree links; when a file in progress elsewhere breaks the link,
# builds the output layer's own objects by hand into build/ol/ (same flags as the Makefile).
set -o pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
if make -j16 build/run_gpu_tests build/bench_output_layer >"$OUT/build.log" 2>&1; then
    TESTS=./build/run_gpu_tests BENCH=./build/bench_output_layer
else
    echo "(make failed, see build.log tail below; building the output layer alone)"
    tail -5 "$OUT/build.log"
    B=build/ol
    mkdir -p $B
    NVF="-O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I."
    for f in kernels/output_layer kernels/output_fused kernels/output_canonical tests/test_output_layer_gpu \
        dev/bench_output_layer; do
        nvcc $NVF -c $f.cu -o $B/$(basename $f).o &
    done
    gcc -std=c11 -O3 -D_GNU_SOURCE -I. -c tests/runner.c -o $B/runner.o
    wait
    nvcc -gencode arch=compute_90a,code=sm_90a -o $B/run_gpu_tests $B/test_output_layer_gpu.o $B/runner.o \
        $B/output_layer.o $B/output_fused.o $B/output_canonical.o -lcublasLt -lcublas || exit 1
    nvcc -gencode arch=compute_90a,code=sm_90a -o $B/bench_output_layer $B/bench_output_layer.o \
        $B/output_layer.o $B/output_fused.o $B/output_canonical.o -lcublasLt -lcublas || exit 1
    TESTS=$B/run_gpu_tests BENCH=$B/bench_output_layer
fi
$TESTS output 2>&1 | tee "$OUT/tests.log"
timeout 500 $BENCH "$@" 2>&1 | tee "$OUT/bench.log" | grep -v '^csv'
echo "== tests: $(tail -1 "$OUT/tests.log")"
sed -n '/^$/,$p' "$OUT/bench.log"
