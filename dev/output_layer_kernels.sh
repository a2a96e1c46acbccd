#!/usr/bin/env bash
# One device call that compares the fused layer's tile kernels (OUTPUT_TILE_KERNEL_* numbers of
# kernels/output_layer.h): builds, runs the GPU tests whose names contain TEST_FILTER, times the
# kernels interleaved twice (bench_output_layer, fused only, with the cuBLAS GEMM yardstick), runs
# every output test with the fastest if it is not the default (FUSEDGPT_OUTL_KERNEL), then the trainer
# (GPT-2 124M, V=262144, B=32) with each kernel, and torch.compile at one shape if time is left.
# Summary last. Used for the 4- and 8-CTA cluster variants (dev/RESULTS.md, 2026-11-23).
#   KERNELS="4 5" TEST_FILTER=tma MAX_SECONDS=400 bash dev/output_layer_kernels.sh   (the defaults)
# BASES="name=file ..." (other versions of kernels/output_fused.cu, carried, e.g. `git show
# REV:kernels/output_fused.cu >.carry/output_fused_base.cu`) also builds the benchmark with each file
# in a copy of the tree; a KERNELS entry "name:K" then times that build's kernel K, interleaved with
# the others.
set -uo pipefail
OUT=${OUT:-out}
KERNELS=${KERNELS:-4 5}
TEST_FILTER=${TEST_FILTER:-tma}
MAX_SECONDS=${MAX_SECONDS:-400}
SHAPES=${SHAPES:-"768,16384,262144 768,65536,262144 768,16384,50304 4096,16384,262144"}
mkdir -p "$OUT" /tmp/oc
start=$(date +%s)
left() { echo $((MAX_SECONDS - ($(date +%s) - start))); }
summary=()
note() { summary+=("$1"); echo "$1" >>"$OUT/summary.txt"; }
: >"$OUT/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
make -j16 train build/run_gpu_tests build/bench_output_layer >/tmp/oc/build.log 2>&1 || { tail -30 /tmp/oc/build.log; exit 1; }
for base in ${BASES:-}; do
    name=${base%%=*}
    rm -rf /tmp/oc/$name && mkdir -p /tmp/oc/$name
    cp -r Makefile train.c kernels model data tokenizer dev tests /tmp/oc/$name/
    cp "${base#*=}" /tmp/oc/$name/kernels/output_fused.cu
    (cd /tmp/oc/$name && make -j16 build/bench_output_layer >/tmp/oc/build_$name.log 2>&1) ||
        { tail -30 /tmp/oc/build_$name.log; exit 1; }
done
bench_of() { case $1 in *:*) echo /tmp/oc/${1%%:*}/build/bench_output_layer ;; *) echo ./build/bench_output_layer ;; esac; }
note "build done after $(($(date +%s) - start)) s"

timeout -k 5 150 ./build/run_gpu_tests "$TEST_FILTER" >"$OUT/gpu_tests_kernels.log" 2>&1
note "GPU tests (*$TEST_FILTER*): $(tail -1 "$OUT/gpu_tests_kernels.log") $(grep -m3 FAILED "$OUT/gpu_tests_kernels.log")"

args=""
for s in $SHAPES; do args="$args --shape $s"; done
for round in 1 2; do
    for k in $KERNELS; do
        [ "$(left)" -gt 150 ] || break
        timeout -k 5 90 "$(bench_of "$k")" --kernel "${k#*:}" --no-canonical --reps 5 $args \
            >"/tmp/oc/bench_${k/:/_}_$round.log" 2>&1
        grep '^csv,[0-9]' "/tmp/oc/bench_${k/:/_}_$round.log" | sed "s/^csv,/bench,$k,$round,/" >>"$OUT/bench.csv"
    done
done
note "bench (kernel, round, d, N, V, gemm ms, -, -, fused fwd ms, fused fwd+bwd ms, -, TF 4G, TF fwd, TF gemm, -, fused MB):"
while read -r line; do note "  $line"; done <"$OUT/bench.csv"

# the kernel with the smallest summed fused forward+backward time: its run of every output test
best=$(awk -F, '{t[$2] += $11} END {for (k in t) print t[k], k}' "$OUT/bench.csv" | sort -n | head -1 | awk '{print $2}')
note "fastest over the shapes: kernel ${best:-none}"
if [ -n "$best" ] && [ "$best" != 5 ] && [ "$best" != 0 ] && [ "${best#*:}" = "$best" ] && [ "$(left)" -gt 160 ]; then
    FUSEDGPT_OUTL_KERNEL=$best timeout -k 5 120 ./build/run_gpu_tests output_ >"$OUT/gpu_tests_output_k$best.log" 2>&1
    note "GPU tests (output_*, FUSEDGPT_OUTL_KERNEL=$best): $(tail -1 "$OUT/gpu_tests_output_k$best.log") $(grep -m3 FAILED "$OUT/gpu_tests_output_k$best.log")"
fi

if [ "$(left)" -gt 100 ]; then
    python3 dev/make_shard.py /tmp/oc/rand.bin 20000000 262144 random 3 >/dev/null
    for k in $KERNELS; do
        [ "$(left)" -gt 40 ] || break
        [ "${k#*:}" = "$k" ] || continue # the trainer is built from this tree only
        log=/tmp/oc/train_$k.log
        FUSEDGPT_OUTL_KERNEL=$k timeout -k 5 60 ./train -e d12 -v 262144 -b 32 -t 1024 -x 30 --warmup 10 \
            --val-every 0 -s 0 -i /tmp/oc/rand.bin -o /tmp/oc/run_$k >"$log" 2>&1
        col() { grep '| loss' "$log" | tail -20 | awk -F'|' -v c=$1 '{print $c}' | awk '{print $1}' | sort -n | sed -n 10p; }
        note "trainer d12 V=262144 B=32 kernel $k: median $(col 5) ms/step, $(col 6) tok/s (steps 11-30) $(grep -m1 error "$log")"
    done
fi

if [ "$(left)" -gt 90 ]; then
    timeout -k 5 $(($(left) - 15)) python3 dev/bench_output_layer_torch.py --no-fwd --no-eager --reps 5 768,16384,262144 \
        >"$OUT/torch.log" 2>&1
    note "torch.compile: $(grep '^csv_torch,[0-9]' "$OUT/torch.log" | tr '\n' ' ')"
fi
tar -czf "$OUT/logs.tar.gz" -C /tmp/oc $(cd /tmp/oc && ls *.log) 2>/dev/null
echo
echo "==== summary ($(($(date +%s) - start)) s) ===="
printf '%s\n' "${summary[@]}"
