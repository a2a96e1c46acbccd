#!/usr/bin/env bash
# ncu_stalls.sh - where one kernel's warps wait, instruction by instruction (one GPU, Nsight Compute).
# Profiles one launch of the kernels whose mangled name matches KERNEL in COMMAND with the warp-state
# sampling and source counters, then writes the per-instruction table (SASS, samples by stall reason)
# and sums it with dev/profile/ncu_source_stalls.py:
#   KERNEL=ILi1ELi1ELi0E [SKIP=10] [OUT=out] bash dev/profile/ncu_stalls.sh build/bench_gemm_gated_sm90 --shape 32768,1024,3072
# SKIP launches of the kernel are let through first (past a bench's checks and warm-ups). ncu locks the
# clocks at base (its default), so durations run longer than at training clocks; the shares hold.
# Output: $OUT/ncu_<tag>_details.txt (the sections), $OUT/ncu_<tag>_source.csv, and the summary on stdout.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: KERNEL=regex bash $0 COMMAND [ARGS...]" >&2; exit 1; }
: "${KERNEL:?set KERNEL to a regex of the mangled kernel name}"
OUT=${OUT:-out}; mkdir -p "$OUT"
command -v ncu >/dev/null || { echo "error: no ncu on PATH (Nsight Compute: /usr/local/cuda/bin)" >&2; exit 1; }
tag=$(echo "$KERNEL" | tr -c 'A-Za-z0-9_\n' '_')
rep=$OUT/ncu_$tag
timeout 300 ncu --kernel-name-base mangled -k "regex:$KERNEL" --launch-skip "${SKIP:-10}" --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section SourceCounters -f -o "$rep" "$@" >"$rep.log" 2>&1 ||
  { echo "error: ncu failed (rc $?): $(tail -3 "$rep.log")" >&2; exit 1; }
ncu -i "$rep.ncu-rep" --page details >"${rep}_details.txt" 2>&1
ncu -i "$rep.ncu-rep" --page source --csv --print-source sass >"${rep}_source.csv" 2>&1
rm -f "$rep.ncu-rep"
grep -E "Duration|Issue Slots Busy|No Eligible|Eligible Warps|L2 Cache Throughput|DRAM Throughput" "${rep}_details.txt"
python3 dev/profile/ncu_source_stalls.py "${rep}_source.csv"
