#!/bin/bash
# output_layer_profile.sh - where the fused output layer's time goes (one GPU).
#   bash dev/profile/output_layer_profile.sh [d,N,V ...]     (logs in $OUT, or ./out)
# For each shape: Nsight Compute times every kernel of 4 fused forward+backward calls
# (bench_output_layer --fb-only --reps 1: 2 warm-ups, 1 sizing call, 1 timed), with the caches left alone and
# clocks as they are, and the kernels are summed by name (ms per call, launches per call, share).
# PROFILE_ARGS="--logits-mb 0" profiles the streaming path instead. The sums leave out the gaps
# between kernels.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out}
mkdir -p "$OUT" build
SHAPES=("$@")
[ ${#SHAPES[@]} -eq 0 ] && SHAPES=(768,16384,262144 4096,16384,262144)
make -j16 build/bench_output_layer >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
for s in "${SHAPES[@]}"; do
    f="$OUT/ncu_${s//,/_}.csv"
    timeout -k 10 400 ncu --csv --clock-control none --cache-control none --metrics gpu__time_duration.sum \
        ./build/bench_output_layer --fb-only --reps 1 $PROFILE_ARGS --shape "$s" >"$f" 2>"$f.err" ||
        { echo "ncu failed for $s"; tail -5 "$f.err"; continue; }
    python3 - "$f" "$s" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, body = rows[0], rows[1:]
ki, vi, ui = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
tot, cnt = collections.Counter(), collections.Counter()
for r in body:
    v = float(r[vi].replace(",", ""))
    v *= {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}[r[ui]]
    name = r[ki].split("(")[0][:60]
    tot[name] += v; cnt[name] += 1
calls = 4  # 2 warm-ups, the call that sizes the repetitions, 1 timed
all_ms = sum(tot.values()) / calls
print(f"== {sys.argv[2]}: {all_ms:.2f} ms per forward+backward (sum of kernel times)")
for name, v in tot.most_common():
    print(f"  {v / calls:9.3f} ms  {cnt[name] // calls:5d} launches  {100 * v / calls / all_ms:5.1f} %  {name}")
PY
done
