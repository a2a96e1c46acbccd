#!/usr/bin/env bash
# Loss curves, fused vs canonical output layer: trains the same model with the same seed and data
# once with each layer, keeps both logs, prints the largest per-step difference relative to the
# loss, and draws both curves into one PNG (dev/plots/plot_losses.sh, gnuplot).
#   bash dev/check/compare_output_layers.sh OUT_DIR [train flags...]
# Example (GPU):
#   bash dev/check/compare_output_layers.sh runs/compare -e d12 -v 262144 -b 16 -t 1024 -x 500 -i train.bin -j val.bin
# Without a GPU: make compare COMPARE_ARGS="--device cpu -e tiny -v 512 -b 4 -t 64 -x 120 --warmup 10 -l 3e-3"
set -euo pipefail
out=$1
shift
mkdir -p "$out"
for layer in fused canonical; do
    rm -rf "$out/$layer"
    if ! ./train "$@" --output "$layer" -o "$out/$layer" -s 0 | tee "$out/$layer.txt" | grep -E "^step +[0-9]+/" |
        tail -1; then
        case " $* " in
        *" --device cpu "*) ;;
        *) echo "compare: without a GPU, compare on the CPU backend with a tiny model:" \
               "make compare COMPARE_ARGS=\"--device cpu -e tiny -v 512 -b 4 -t 64 -x 120 --warmup 10 -l 3e-3\"" >&2 ;;
        esac
        exit 1
    fi
done
# per-step |fused - canonical| / canonical, from the two JSON logs
python3 dev/check/compare_losses.py "$out/fused/log.jsonl" "$out/canonical/log.jsonl" fused canonical ||
    echo "compare: python3 missing or failed: compare $out/*/log.jsonl by hand"
bash dev/plots/plot_losses.sh "$out/loss_curves.png" "$out/fused/log.jsonl" "$out/canonical/log.jsonl" || true
