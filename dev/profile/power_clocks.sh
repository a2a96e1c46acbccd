#!/usr/bin/env bash
# power_clocks.sh - the GPU's SM clock and board power while a command runs (one GPU), from
# nvidia-smi sampled every 100 ms (about its refresh rate; its power is a running average):
#   SKIP=20 bash dev/profile/power_clocks.sh ./train -e qwen3-0.6b -b 16 ...
# Prints the command's own output's last line, then for the samples after the first SKIP seconds
# (the default 10: start-up, compiles, warm-up steps): the SM clock's quartiles, the power's, the
# power limit, and the share of samples whose clock-event reasons include the software power cap
# (0x4). The GPU is CUDA_VISIBLE_DEVICES's first, or 0. Samples go to $OUT/power_clocks.csv.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: [SKIP=s] [OUT=dir] bash $0 COMMAND [ARGS...]" >&2; exit 1; }
command -v nvidia-smi >/dev/null || { echo "error: no nvidia-smi on PATH" >&2; exit 1; }
OUT=${OUT:-out}; mkdir -p "$OUT"
gpu=${CUDA_VISIBLE_DEVICES:-0}; gpu=${gpu%%,*}
csv=$OUT/power_clocks.csv
nvidia-smi -i "$gpu" --query-gpu=timestamp,clocks.sm,power.draw,power.limit,clocks_event_reasons.active \
  --format=csv,noheader,nounits -lms 100 >"$csv" &
sampler=$!
trap 'kill $sampler 2>/dev/null' EXIT
"$@" >"$OUT/power_clocks_cmd.log" 2>&1
rc=$?
kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
echo "command rc $rc: $(tail -1 "$OUT/power_clocks_cmd.log")"
python3 - "$csv" "${SKIP:-10}" <<'PY'
import datetime, sys
rows = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(',')]
    try:
        t = datetime.datetime.strptime(f[0], '%Y/%m/%d %H:%M:%S.%f').timestamp()
        rows.append((t, float(f[1]), float(f[2]), float(f[3]), int(f[4], 16)))
    except (ValueError, IndexError):
        pass
if not rows:
    sys.exit('error: nvidia-smi gave no samples')
kept = [r for r in rows if r[0] - rows[0][0] >= float(sys.argv[2])]
if not kept:
    sys.exit('error: the command ended within the skipped %s s; lower SKIP' % sys.argv[2])
def quartiles(v):
    v = sorted(v)
    return '/'.join('%.0f' % v[int(q * (len(v) - 1))] for q in (0.25, 0.5, 0.75))
print('%d samples after %s s: SM clock %s MHz (quartiles), power %s W of %.0f, power cap in %.0f %% of samples'
      % (len(kept), sys.argv[2], quartiles([r[1] for r in kept]), quartiles([r[2] for r in kept]), kept[-1][3],
         100.0 * sum(1 for r in kept if r[4] & 0x4) / len(kept)))
PY
