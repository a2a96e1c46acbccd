#!/usr/bin/env bash
# step_profile.sh - where one training step's GPU time goes (one GPU).
#   bash dev/profile/step_profile.sh            (from the repository root; output in $OUT, or ./out)
# For each vocabulary in VOCABS (default "50304 262144") and output layer in OUTPUTS (default
# "fused"): GPT-2 124M (d12), B=32 (B_PROFILE), T=1024 on random tokens,
#   1. the step time without a profiler: median of steps 11-30, with the GPU time of its parts
#      (--step-parts 1: events between body forward, output layer, body backward) and the SM
#      clock and power nvidia-smi reads meanwhile;
#   2. Nsight Compute times every kernel of step 3 alone (--profile-step 3 opens the capture
#      range, ncu --profile-from-start off; clocks and caches left alone), and the kernels are summed
#      by part of the step (body forward, output layer, body backward, optimizer) and by name, the
#      cuBLAS GEMMs also by grid so each matmul shape has its own line.
# MODEL (default "-e d12 -t 1024") picks another model, e.g. MODEL="-e qwen3-0.6b -t 2048 --max-seq-len 2048"
# VOCABS="151936" B_PROFILE=8 for Qwen3-0.6B. NCU=0 skips part 2; TRAIN_PREBUILT=1 runs ./train as it is.
# dev/profile/ncu_step_summary.py sums part 2's kernels. The sum of kernel times leaves out the gaps between kernels; step time minus that sum is what the
# GPU spent idle or overlapping (memsets and copies are not kernels and are not counted).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out}
VOCABS=${VOCABS:-50304 262144}
OUTPUTS=${OUTPUTS:-fused}
B=${B_PROFILE:-32}
mkdir -p "$OUT" /tmp/sp
[ "${TRAIN_PREBUILT:-0}" = 1 ] ||
    make -j16 train >"$OUT/step_profile_build.log" 2>&1 || { tail -20 "$OUT/step_profile_build.log"; exit 1; }
for V in $VOCABS; do
    python3 tests/fixtures/gen/make_shard.py /tmp/sp/rand_$V.bin 20000000 $V random 3 >/dev/null
    for output in $OUTPUTS; do
        MODEL=${MODEL:--e d12 -t 1024}
        tag=$(echo "$MODEL" | awk '{print $2}')_V${V}_B${B}_$output
        args="$MODEL -v $V -b $B --warmup 10 --val-every 0 -s 0 --output $output -i /tmp/sp/rand_$V.bin -o /tmp/sp/run"
        # clocks and power while it trains: is a slow part slow or throttled?
        nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 250 \
            >"$OUT/${tag}_clocks.csv" 2>/dev/null &
        smi=$!
        rm -rf /tmp/sp/run # a new run sets an earlier one aside whole: GBs of checkpoints each
        ./train $args --step-parts 1 -x 30 >"$OUT/${tag}_steps.log" 2>&1
        kill $smi 2>/dev/null
        step_ms=$(grep '| loss' "$OUT/${tag}_steps.log" | tail -20 | grep -oE '\| [0-9.]+ ms \|' | awk '{print $2}' |
            sort -n | sed -n 10p)
        python3 - "$OUT/${tag}_steps.log" "$OUT/${tag}_clocks.csv" <<'PY' | tee "$OUT/${tag}_parts.txt"
import re, sys, statistics as st
lines = [l for l in open(sys.argv[1]) if "| loss" in l][-20:]
parts = [tuple(map(float, m.groups())) for l in lines
         for m in [re.search(r"fwd ([0-9.]+) out ([0-9.]+) bwd ([0-9.]+) ms", l)] if m]
if parts:
    print("GPU time per part without the profiler (events, median of steps 11-30): body forward %.2f, "
          "output layer %.2f, body backward %.2f ms" % tuple(st.median(p[i] for p in parts) for i in range(3)))
busy = [tuple(map(float, l.split(","))) for l in open(sys.argv[2]) if l.count(",") == 2]
busy = [b for b in busy if b[1] > 200]  # samples while it computes
if busy:
    print("while training: SM clock median %.0f MHz (min %.0f), power median %.0f W, temperature max %.0f C"
          % (st.median(b[0] for b in busy), min(b[0] for b in busy), st.median(b[1] for b in busy), max(b[2] for b in busy)))
PY
        [ "${NCU:-1}" = 0 ] && continue
        rm -rf /tmp/sp/run
        timeout -k 10 500 ncu --csv --profile-from-start off --clock-control none \
            --cache-control none --metrics gpu__time_duration.sum ./train $args --profile-step 3 -x 3 \
            >"$OUT/${tag}_ncu.csv" 2>"$OUT/${tag}_ncu.err" || { echo "ncu failed: $tag"; tail -5 "$OUT/${tag}_ncu.err"; continue; }
        python3 dev/profile/ncu_step_summary.py "$OUT/${tag}_ncu.csv" "$tag" "${step_ms:-nan}" | tee "$OUT/${tag}_profile.txt"
    done
done
