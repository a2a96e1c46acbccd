#!/usr/bin/env bash
# loss_noise_floor.sh - how far two bf16 training runs that differ only in rounding drift apart,
# as the yardstick for "fused and canonical agree to bf16 noise". One run on a GPU machine, the
# default corpus copied there (dev/check/pack_corpus.sh --shards -o inputs/corpus.tar.xz):
#   SEEDS="1337 1" bash dev/check/loss_noise_floor.sh
# For each seed, GPT-2 124M at V = 262144, T = 1024, 16 sequences per step, STEPS (500) steps, four
# runs: each output layer with one micro-batch of 16 (-b 16) and with two of 8 (-b 8 -d 16384).
# The two batchings see the same sequences in every step and compute the same mean loss (checked
# on the CPU, fp32: the same losses to 1e-6), so a pair that differs only in batching differs only
# in rounding: the GEMMs' and attention's shapes, the order of the gradient sums. Printed per
# seed (dev/check/compare_losses.py): fused vs canonical at each batching (the comparison that
# matters) and canonical vs canonical, fused vs fused across batchings (the noise floor). Logs in $OUT/noise_floor.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out}
SEEDS=${SEEDS:-1337 1 2}
STEPS=${STEPS:-500}
runs=/tmp/nf
mkdir -p "$OUT/noise_floor" "$runs"
if [ -f inputs/corpus.tar.xz ]; then mkdir -p .cache && tar -xJf inputs/corpus.tar.xz -C .cache; fi
make -j16 train >"$OUT/noise_floor/build.log" 2>&1 || { tail -20 "$OUT/noise_floor/build.log"; exit 1; }
summary=()
for seed in $SEEDS; do
    for layer in fused canonical; do
        for batching in b16 b8x2; do
            [ $batching = b16 ] && bargs="-b 16" || bargs="-b 8 -d 16384"
            name=${layer}_${batching}_seed$seed
            ./train -e d12 -v 262144 $bargs -t 1024 -x "$STEPS" --val-every 0 -s 0 --seed "$seed" \
                --output $layer -o "$runs/$name" >"$OUT/noise_floor/$name.txt" 2>&1 ||
                summary+=("$name failed: $(grep -m1 error "$OUT/noise_floor/$name.txt")")
            cp "$runs/$name/log.jsonl" "$OUT/noise_floor/$name.jsonl" 2>/dev/null
            rm -rf "${runs:?}/$name" # its final checkpoint (4.5 GB at V = 262144): 12 runs fill the disk
        done
    done
    c() { python3 dev/check/compare_losses.py "$OUT/noise_floor/$1_seed$seed.jsonl" "$OUT/noise_floor/$2_seed$seed.jsonl" "$1" "$2"; }
    summary+=("seed $seed:" "  $(c fused_b16 canonical_b16)" "  $(c fused_b8x2 canonical_b8x2)"
        "  $(c canonical_b8x2 canonical_b16)" "  $(c fused_b8x2 fused_b16)")
done
printf '%s\n' "${summary[@]}" | tee "$OUT/noise_floor/summary.txt"
