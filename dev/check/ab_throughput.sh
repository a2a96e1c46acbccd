#!/usr/bin/env bash
# Throughput A/B on two GPUs: this tree's ./train against $BASE (another build), GPT-2 124M, B = 32 per
# GPU, T = 1024, random tokens, median of steps 11-40, the data-parallel modes in alternating rounds,
# with one GPU alone first for the scaling; a table last.
# usage: BASE=path/to/base/train [MODES="tag|flags;tag|flags"] [ROUNDS=1] [VOCABS="50304 262144"]
#        [BUDGET=seconds] [OUT=out] [MG_TMP=/tmp/mg] bash dev/check/ab_throughput.sh
# (default MODES: ZeRO-1 overlapped and after the backward, the all-reduce overlapped)
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-out}
MG=${MG_TMP:-/tmp/mg}
mkdir -p "$OUT" $MG
BASE=${BASE:?base ./train}
chmod +x $BASE ./train
nvidia-smi --query-gpu=index,name --format=csv,noheader
: >$OUT/ab_summary.txt
say() { echo "$1" | tee -a $OUT/ab_summary.txt; }
left() { echo $(( ${BUDGET:-560} - $(date +%s) + START )); }
rows=()
tp() { # tag V binary flags...
    local tag=$1 V=$2 bin=$3; shift 3
    local log=$MG/ab_tp_$tag.log
    rm -rf $MG/ab_tp
    NCCL_DEBUG=WARN timeout 90 $bin "$@" --step-parts 1 -e d12 -v $V -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 \
        -i $MG/rand_$V.bin -o $MG/ab_tp >$log 2>&1
    col() { grep '| loss' $log | tail -30 | grep -oE "$1" | grep -oE '[0-9.]+' | sort -n | sed -n 15p; }
    local ms=$(col '\| [0-9.]+ ms \|') tok=$(col '[0-9.]+ tok/s') comm=$(col 'comm [0-9.]+')
    local fwd=$(col 'fwd [0-9.]+') bwd=$(col 'bwd [0-9.]+')
    say "$tag: ${ms:-FAIL} ms/step, ${tok:-0} tok/s, comm ${comm:--} ms, fwd ${fwd:--} bwd ${bwd:--} ms $(grep -m1 -E 'error|note: NCCL|WARN' $log)"
    rows+=("$tag|${tok:-0}|${ms:-0}|${comm:--}|${fwd:--}|${bwd:--}")
}
for V in ${VOCABS:-50304 262144}; do
    python3 tests/fixtures/gen/make_shard.py $MG/rand_$V.bin 8000000 $V random 3 >/dev/null
    tp V${V}_1gpu $V ./train -g 1
    for round in $(seq 1 ${ROUNDS:-1}); do
        IFS=';' read -ra modes <<<"${MODES:-zero1|--zero 1 --overlap-comm 1;zero1after|--zero 1 --overlap-comm 0;overlap|--zero 0 --overlap-comm 1}"
        for mode in "${modes[@]}"; do
            IFS='|' read -r m flags <<<"$mode"
            [ "$(left)" -gt 40 ] || { say "(time: V$V round $round $m skipped)"; continue; }
            tp V${V}_base_${m}_r$round $V $BASE -g 2 $flags
            tp V${V}_new_${m}_r$round $V ./train -g 2 $flags
        done
    done
done
tar -czf $OUT/ab_logs.tgz -C $MG $(cd $MG && ls ab_tp_*.log) 2>/dev/null
echo "== throughput, GPT-2 124M, B=32/GPU, T=1024 ($(( $(date +%s) - START )) s)"
python3 - "${rows[@]}" <<'PY'
import sys
rows = [r.split("|") for r in sys.argv[1:]]
one = {r[0].split("_")[0]: float(r[1]) for r in rows if r[0].endswith("1gpu") and float(r[1]) > 0}
print(f"{'run':26} {'tok/s':>9} {'ms/step':>8} {'comm ms':>8} {'fwd ms':>7} {'bwd ms':>7} {'scaling':>8}")
for tag, tok, ms, comm, fwd, bwd in rows:
    base = one.get(tag.split("_")[0])
    scale = f"{float(tok) / base:.3f}x" if base and not tag.endswith("1gpu") else ""
    print(f"{tag:26} {tok:>9} {ms:>8} {comm:>8} {fwd:>7} {bwd:>7} {scale:>8}")
PY
