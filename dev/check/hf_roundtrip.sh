#!/usr/bin/env bash
# The Hugging Face round trip of a checkpoint: AutoTokenizer and AutoModelForCausalLM load it (the
# tokenizer.json and tokenizer_config.json it carries, config.json, model.safetensors), generate
# greedily, and the tokens must be ./train sample's greedy tokens, one for one (>= 32 of them).
# Local files only: without a run directory it prepares a corpus from this repository's own text
# files and trains a small model on it first (~20 s on an H100).
#
#   bash dev/check/hf_roundtrip.sh [RUN_DIR]        (DEVICE=cpu to train and sample on the CPU; needs
#                                              python3 with torch and transformers)
# Env: DEVICE (cuda), GEN (48 tokens), PROMPT, STEPS (300), WORK (runs/hf_roundtrip).
# Prints PASS or FAIL last; exits non-zero on a mismatch.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEVICE=${DEVICE:-cuda}
GEN=${GEN:-48}
PROMPT=${PROMPT:-"The output layer"}
STEPS=${STEPS:-300}
WORK=${WORK:-runs/hf_roundtrip}
[ -x ./train ] || make -j"$(nproc)" train
python3 -c 'import torch, transformers' || { echo "FAIL: python3 needs torch and transformers"; exit 1; }

run=${1:-}
if [ -z "$run" ]; then
    run=$WORK/run
    rm -rf "$WORK" && mkdir -p "$WORK"
    # the repository's own text: no network needed
    ./train prepare -v 4096 -o "$WORK/prep" README.md dev/RESULTS.md train.c data/*.c model/*.c model/*/*.c tokenizer/*.c \
        > "$WORK/prepare.log" 2>&1
    if [ "$DEVICE" = cpu ]; then model="-e tiny -b 8 -t 128 --max-seq-len 256"; else model="-e d6 -b 16 -t 256 --max-seq-len 256"; fi
    # shellcheck disable=SC2086
    ./train -i "$WORK/prep/train.bin" -j "$WORK/prep/val.bin" --tokenizer "$WORK/prep/tokenizer.bin" -v 4096 \
        $model -x "$STEPS" --warmup 20 -l 1e-3 --lr-final 1e-4 -s 0 --val-every "$STEPS" --device "$DEVICE" \
        -o "$run" > "$WORK/train.log" 2>&1 || { tail -5 "$WORK/train.log"; echo "FAIL: training"; exit 1; }
    grep "val loss" "$WORK/train.log" | tail -2 || true
fi
ckpt="$run/$(cat "$run/latest")"
echo "checkpoint: $ckpt ($(ls "$ckpt" | tr '\n' ' '))"

status=0
# The fp32 CPU backend is the one compared token for token with Hugging Face's fp32 model; the
# GPU's bf16 logits may part from it where two tokens are nearly tied, so that one is reported.
for dev in cpu $([ "$DEVICE" = cuda ] && echo cuda); do
    out=$(./train sample -o "$run" --device "$dev" --prompt "$PROMPT" -G "$GEN" --temperature 0 --ids)
    prompt_ids=$(grep '^prompt ids:' <<<"$out" | sed 's/^prompt ids://')
    ids=$(grep '^ids:' <<<"$out" | sed 's/^ids://')
    echo "== ./train sample --device $dev against Hugging Face"
    if python3 dev/check/hf_roundtrip.py "$ckpt" "$PROMPT" "$GEN" "$prompt_ids" "$ids"; then :; else
        [ "$dev" = cpu ] && status=1 || echo "(bf16 sampling on the GPU: reported, not required to match)"
    fi
done
if [ $status -eq 0 ]; then echo "PASS: Hugging Face loads the checkpoint and its greedy tokens are ./train sample's"; else echo "FAIL"; fi
exit $status
