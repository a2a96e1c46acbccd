#!/usr/bin/env bash
# One GPU: the SM clock and board power while bench_gemm_gated_sm90 times one shape, sampled by
# nvidia-smi every 20 ms (each sample printed, from the bench's start). The bench's timed sections run in this order,
# each `reps` launches: trainer forward (cuBLASLt product + pass), cuBLASLt product, ours forward,
# trainer backward, cuBLASLt product, ours backward.
#   SHAPES="32768,2048,8192" REPS=64 OUT=out bash clocks.sh
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
for shape in ${SHAPES:-32768,2048,8192 32768,1024,3072}; do
  tag=$(echo $shape | tr , _)
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader -lms 20 \
    > $OUT/smi_$tag.csv & P=$!
  sleep 1
  t0=$(date +%s.%N)
  build/bench_gemm_gated_sm90 --shape $shape --reps ${REPS:-64} > $OUT/bench_$tag.log 2>&1
  t1=$(date +%s.%N)
  sleep 0.5; kill $P; wait $P 2>/dev/null
  echo "== $shape: bench from $t0 to $t1"; grep -E '^\| [0-9]' $OUT/bench_$tag.log
  python3 - $OUT/smi_$tag.csv $t0 $t1 <<'PY'
import sys, datetime
rows = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(',')]
    if len(f) < 4: continue
    try:
        t = datetime.datetime.strptime(f[0], '%Y/%m/%d %H:%M:%S.%f').timestamp()
        rows.append((t, float(f[1].split()[0]), float(f[2].split()[0]), f[3]))
    except ValueError:
        pass
t0, t1 = float(sys.argv[2]), float(sys.argv[3])
for t, clk, pw, why in rows:
    if t0 - 0.05 <= t <= t1 + 0.05:
        print('%6.3f s  SM %4.0f MHz  %4.0f W  %s' % (t - t0, clk, pw, why[-4:]))
PY
done
