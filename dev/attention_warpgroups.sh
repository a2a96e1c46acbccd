#!/usr/bin/env bash
# dev/attention_warpgroups.sh - one warpgroup per attention block against two, in one device call:
#   1. the kernel tests (both block shapes against the CPU reference, bitwise determinism) and
#      compute-sanitizer on the attention tests;
#   2. dev/bench_kernels.cu's attention section: every warpgroup combination (forward / dQ / dK,dV)
#      timed in turn over three rounds in one process;
#   3. the trainer (GPT-2 124M, B=32, T=1024, random tokens, fused output layer) built with the
#      defaults and with one warpgroup everywhere (-DATT_WG_FWD=1 -DATT_WG_DQ=1 -DATT_WG_DKDV=1),
#      taken in turn over ROUNDS rounds: median ms/step of steps 11-30.
# Output in $OUT (default ./out); a short summary last.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-out}
ROUNDS=${ROUNDS:-2}
VOCABS=${VOCABS:-50304 262144}
NV="nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I."
LIBS="-lcublasLt -lcublas -lcudart"
MINE="build/kernels/encoder.cu.o build/kernels/layernorm.cu.o build/kernels/gelu.cu.o build/kernels/matmul.cu.o build/kernels/adamw.cu.o"
mkdir -p "$OUT" build/variants /tmp/awg
summary=()

make -j16 train build/run_gpu_tests >"$OUT/awg_build.log" 2>&1 || { tail -20 "$OUT/awg_build.log"; exit 1; }
$NV dev/bench_kernels.cu $MINE build/kernels/attention.cu.o $LIBS -o build/bench_kernels >>"$OUT/awg_build.log" 2>&1 || exit 1
# the trainer as the Makefile links it, with a one-warpgroup attention object instead
TRAIN_LINK="$(make -s -n -W train.c train | tail -1 | sed -e 's| -o train | -o build/variants/train_wg1 |' \
    -e 's|build/kernels/attention.cu.o|build/variants/att_wg1.o|')"
{ $NV -DATT_WG_FWD=1 -DATT_WG_DQ=1 -DATT_WG_DKDV=1 -c kernels/attention.cu -o build/variants/att_wg1.o &&
    eval "$TRAIN_LINK"; } >>"$OUT/awg_build.log" 2>&1 || { echo "variant build failed"; tail -5 "$OUT/awg_build.log"; }

./build/run_gpu_tests kernels >"$OUT/awg_tests.log" 2>&1
summary+=("kernel tests: $(tail -1 "$OUT/awg_tests.log")")
timeout 300 compute-sanitizer --tool memcheck --leak-check no ./build/run_gpu_tests kernels_attention \
    >"$OUT/awg_memcheck.log" 2>&1
summary+=("memcheck attention (rc $?): $(grep -E 'ERROR SUMMARY|passed' "$OUT/awg_memcheck.log" | tr '\n' ' ')")

./build/bench_kernels 32 attention >"$OUT/awg_bench.log" 2>&1
summary+=("$(grep 'HS=64' "$OUT/awg_bench.log" | grep -v round)")
summary+=("$(grep 'round' "$OUT/awg_bench.log")")

for V in $VOCABS; do
    python3 dev/make_shard.py /tmp/awg/rand_$V.bin 20000000 $V random 3 >/dev/null
done
for r in $(seq "$ROUNDS"); do
    for V in $VOCABS; do
        for bin in ./train ./build/variants/train_wg1; do
            [ -x "$bin" ] || continue
            log="$OUT/awg_train_$(basename "$bin")_V${V}_r$r.log"
            FUSEDGPT_STEP_PARTS=1 $bin -e d12 -v "$V" -b 32 -t 1024 -x 30 --warmup 10 --val-every 0 -s 0 \
                -i /tmp/awg/rand_$V.bin -o /tmp/awg/run >"$log" 2>&1
            med=$(grep '| loss' "$log" | tail -20 | awk -F'|' '{print $5}' | awk '{print $1}' | sort -n | sed -n 10p)
            parts=$(grep '| loss' "$log" | tail -1 | grep -o 'fwd [0-9.]* out [0-9.]* bwd [0-9.]* ms')
            summary+=("round $r V=$V $(basename "$bin"): median ${med} ms/step (last step parts: $parts)")
            grep -q error "$log" && summary+=("  $(grep error "$log" | head -1)")
        done
    done
done

echo "=== SUMMARY"
printf '%s\n' "${summary[@]}"
