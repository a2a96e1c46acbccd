#!/usr/bin/env bash
# One device call: the canonical loss kernel's launch shapes (FUSEDGPT_OUTL_LOSS_BLOCKS = rows in
# flight, 0 = one block per row; FUSEDGPT_OUTL_LOSS_REVERSE = 1: the gradient pass walks rows
# backwards, so that it starts on what pass 1 left in L2), timed through the canonical layer's
# forward + backward, each setting twice in interleaved rounds; the output GPU tests run first with
# a non-default setting. Summary last.
#   SETTINGS="0:0 132:1" SHAPES="768,32768,262144" bash dev/canonical_loss_sweep.sh
set -uo pipefail
OUT=${OUT:-out}
SETTINGS=${SETTINGS:-"0:0 0:1 264:1 132:0 132:1 66:1"}
SHAPES=${SHAPES:-"768,32768,262144 768,16384,50304"}
mkdir -p "$OUT"
make -j16 build/run_gpu_tests build/bench_output_layer >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
FUSEDGPT_OUTL_LOSS_BLOCKS=66 FUSEDGPT_OUTL_LOSS_REVERSE=1 ./build/run_gpu_tests output >"$OUT/tests.log" 2>&1
summary=("output tests with 66 rows in flight, reversed: $(tail -1 "$OUT/tests.log")")
args=()
for s in $SHAPES; do args+=(--shape "$s"); done
for round in 1 2; do
    for set in $SETTINGS; do
        FUSEDGPT_OUTL_LOSS_BLOCKS=${set%%:*} FUSEDGPT_OUTL_LOSS_REVERSE=${set#*:} ./build/bench_output_layer \
            --no-fused --no-chunked "${args[@]}" >"$OUT/bench_${set/:/_}_$round.log" 2>&1
        while read -r line; do summary+=("round $round blocks:reverse $set | $line"); done < \
            <(grep '^csv,[0-9]' "$OUT/bench_${set/:/_}_$round.log" | cut -d, -f2-7)
    done
done
echo "columns: d,N,V,gemm_ms,canonical_fwd_ms,canonical_fwdbwd_ms" | tee "$OUT/summary.txt"
printf '%s\n' "${summary[@]}" | tee -a "$OUT/summary.txt"
