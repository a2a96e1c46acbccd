#!/usr/bin/env bash
# ZeRO-1's weight gather under the next forward (branch zero1gather), on two GPUs. Run from the root
# of a tree with that branch built (./train, build/run_gpu_tests carried), main's binary carried as
# $MAIN (main's binary). Parts, in order, each noted as it ends (a timeout keeps what ran):
#   1. dev/check/multigpu_check.sh sections "correct bitwise" on ./train (TRAIN_PREBUILT=1, G=2);
#   2. throughput A/B: GPT-2 124M, V = 262144, B = 32 per GPU, T = 1024, 40 steps (median of the
#      last 30): --zero 1 --overlap-comm 0 and --zero 1, this branch against main, two alternating
#      rounds, and each binary on one GPU for the scaling;
#   3. the same bits as main: tiny ZeRO-1 runs (evals between steps, accumulation, merged buckets,
#      the bf16 wire, a Qwen3 for the RoPE body) of both binaries, every loss line and the final
#      weights compared exactly;
#   4. the summaries, then the throughput table last.
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-out}
MG=${MG_TMP:-/tmp/mg}
mkdir -p "$OUT" $MG
MAIN=${MAIN:?the main build of ./train}
chmod +x $MAIN ./train
nvidia-smi --query-gpu=index,name --format=csv,noheader
: >$OUT/zg_summary.txt
say() { echo "$1" | tee -a $OUT/zg_summary.txt; }
left() { echo $(( 480 - $(date +%s) + START )); }

# ---- 1. correctness sections of the multi-GPU check (this branch's ./train)
SECTIONS="correct bitwise" TRAIN_PREBUILT=1 G=2 OUT=$OUT timeout 240 bash dev/check/multigpu_check.sh \
    >$OUT/mg_run.log 2>&1
say "multigpu_check correct bitwise: exit $? after $(( $(date +%s) - START )) s"
cat $OUT/summary.txt | tee -a $OUT/zg_summary.txt

# ---- 2. throughput A/B, as multigpu_check.sh's throughput section measures it
V=262144
python3 tests/fixtures/gen/make_shard.py $MG/rand_$V.bin 8000000 $V random 3 >/dev/null
rows=()
tp() { # tag binary flags...
    local tag=$1 bin=$2; shift 2
    local log=$MG/zg_tp_$tag.log
    rm -rf $MG/zg_tp
    timeout 90 $bin "$@" --step-parts 1 -e d12 -v $V -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 \
        -i $MG/rand_$V.bin -o $MG/zg_tp >$log 2>&1
    col() { grep '| loss' $log | tail -30 | grep -oE "$1" | grep -oE '[0-9.]+' | sort -n | sed -n 15p; }
    local ms=$(col '\| [0-9.]+ ms \|') tok=$(col '[0-9.]+ tok/s') comm=$(col 'comm [0-9.]+')
    local fwd=$(col 'fwd [0-9.]+')
    say "$tag: ${ms:-FAIL} ms/step, ${tok:-0} tok/s, comm ${comm:--} ms, fwd ${fwd:--} ms $(grep -m1 error $log)"
    rows+=("$tag|${tok:-0}|${ms:-0}|${comm:--}|${fwd:--}")
}
tp main_1gpu $MAIN -g 1
tp new_1gpu ./train -g 1
for round in 1 2; do
    for mode in "after|--zero 1 --overlap-comm 0" "overlap|--zero 1"; do
        IFS='|' read -r m flags <<<"$mode"
        [ "$(left)" -gt 60 ] || { say "(time: round $round $m skipped)"; continue; }
        tp main_zero1_${m}_r$round $MAIN -g 2 $flags
        tp new_zero1_${m}_r$round ./train -g 2 $flags
    done
done

# ---- 3. the same bits as main's binary (the gather copies bits; nothing else changes); the runs
#      as dev/check/same_bits.sh has them now (it also runs the all-reduce)
BASE=$MAIN NEW=./train bash dev/check/same_bits.sh | sed 's/same bits as base/same bits as main/' | tee -a $OUT/zg_summary.txt
tar -czf $OUT/zg_logs.tgz -C $MG $(cd $MG && ls zg_*.log) 2>/dev/null

# ---- 4. the table: scaling against the same binary on one GPU
echo
echo "== multi-GPU check"; cat $OUT/summary.txt
echo "== same bits as main"; grep "same bits\|skipped" $OUT/zg_summary.txt
echo "== ZeRO-1 gather under the forward: GPT-2 124M, V=$V, B=32/GPU, T=1024 ($(( $(date +%s) - START )) s)"
python3 - "${rows[@]}" <<'EOF'
import sys
rows = [r.split("|") for r in sys.argv[1:]]
one = {r[0].split("_")[0]: float(r[1]) for r in rows if r[0].endswith("1gpu") and float(r[1]) > 0}
print(f"{'run':28} {'tok/s':>9} {'ms/step':>8} {'comm ms':>8} {'fwd ms':>7} {'scaling':>8}")
for tag, tok, ms, comm, fwd in rows:
    base = one.get(tag.split("_")[0])
    scale = f"{float(tok) / base:.3f}x" if base and not tag.endswith("1gpu") else ""
    print(f"{tag:28} {tok:>9} {ms:>8} {comm:>8} {fwd:>7} {scale:>8}")
EOF
