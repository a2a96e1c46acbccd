#!/usr/bin/env bash
# dev/attention_variants.sh - compile-time variants of kernels/attention.cu, each checked by the
# attention tests and timed by dev/bench_kernels.cu (attention section), in rounds that take the
# variants in turn so clock drift hits them alike. One device call:
#   bash dev/attention_variants.sh            (B=32 by default; ROUNDS=3)
# VARIANTS below: "name|nvcc flags" entries; the first is the default build.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-out}
B=${B:-32}
ROUNDS=${ROUNDS:-3}
# (2026-11-23: two waits uncapped; 4 blocks; one wait, 3 blocks, the default since; one wait
#  uncapped. Seventh session: the softmax overlapped with tensor-core work at 3 and 2 blocks,
#  commit afa72d1, no faster, reverted.) VARIANTS_ENV="name|flags;name|flags" replaces the list.
VARIANTS=("default|" "two_waits_uncapped|-DATT_WG_DKDV_ONE_WAIT=0 -DATT_WG_BWD_MINB=1"
    "bwd_4_blocks|-DATT_WG_DKDV_ONE_WAIT=0 -DATT_WG_BWD_MINB=4" "one_wait_uncapped|-DATT_WG_BWD_MINB=1")
if [ -n "${VARIANTS_ENV:-}" ]; then IFS=';' read -r -a VARIANTS <<<"$VARIANTS_ENV"; fi
NV="nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I."
LIBS="-lcublasLt -lcublas -lcudart"
MINE="build/kernels/encoder.cu.o build/kernels/layernorm.cu.o build/kernels/gelu.cu.o build/kernels/matmul.cu.o build/kernels/adamw.cu.o"
mkdir -p "$OUT" build/variants
make -j16 build/run_gpu_tests >"$OUT/att_build.log" 2>&1 || { tail -20 "$OUT/att_build.log"; exit 1; }
# the test runner's objects as the Makefile links them, with the variant's attention object instead
TEST_OBJS="$(make -s -n -W tests/runner.c build/run_gpu_tests | tail -1 | tr ' ' '\n' | grep '\.o$' | grep -v kernels/attention | tr '\n' ' ')"
for v in "${VARIANTS[@]}"; do
    IFS='|' read -r name flags <<<"$v"
    (
        $NV $flags -c kernels/attention.cu -o build/variants/att_$name.o &&
            $NV dev/bench_kernels.cu $MINE build/variants/att_$name.o $LIBS -o build/variants/bench_$name &&
            $NV -Xcompiler -fopenmp $TEST_OBJS build/variants/att_$name.o $LIBS -lnccl -lm -lpthread \
                -o build/variants/tests_$name
    ) >"$OUT/att_build_$name.log" 2>&1 &
done
wait
for v in "${VARIANTS[@]}"; do
    IFS='|' read -r name flags <<<"$v"
    echo "$name [$flags] tests: $(./build/variants/tests_$name kernels_attention 2>&1 | tail -1)"
done
for r in $(seq "$ROUNDS"); do
    for v in "${VARIANTS[@]}"; do
        IFS='|' read -r name flags <<<"$v"
        ./build/variants/bench_$name "$B" attention 2>&1 | grep 'HS=64' | grep -v mma.sync | sed "s/^/round $r $name: /"
    done
done
