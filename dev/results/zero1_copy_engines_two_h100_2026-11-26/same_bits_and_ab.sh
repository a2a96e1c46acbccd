#!/usr/bin/env bash
# ZeRO-1 through the copy engines against the base binary, on two GPUs.
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-out}
MG=${MG_TMP:-/tmp/mg}
mkdir -p "$OUT" $MG
BASE=${BASE:?base ./train}
chmod +x $BASE ./train
nvidia-smi --query-gpu=index,name --format=csv,noheader
: >$OUT/ce_summary.txt
say() { echo "$1" | tee -a $OUT/ce_summary.txt; }
left() { echo $(( 570 - $(date +%s) + START )); }

./build/run_gpu_tests grad_ >$OUT/gpu_tests_grad.log 2>&1
say "gpu tests grad_: $(grep -E 'passed|failed' $OUT/gpu_tests_grad.log | tail -1)"

# ---- same bits as base (two ranks: the rank-order sum is the reduce-scatter's)
python3 tests/fixtures/gen/make_shard.py $MG/ce_train.bin 2000000 1000 pattern 1 >/dev/null
python3 tests/fixtures/gen/make_shard.py $MG/ce_val.bin 100000 1000 pattern 2 >/dev/null
data="-v 1000 -b 8 -t 128 -x 30 -l 2e-3 --warmup 5 --val-every 7 --val-batches 2 -s 0 -i $MG/ce_train.bin -j $MG/ce_val.bin"
qwen3="--family qwen3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --head-dim 64 --ffn-dim 256"
for run in "zero1|-e tiny --zero 1" "after_accum|-e tiny --zero 1 --overlap-comm 0 -d 4096" \
    "merged|-e tiny --zero 1 --bucket-mb 1" "wire|-e tiny --zero 1 --grad-reduce bf16" "qwen3|$qwen3 --zero 1" \
    "allreduce|-e tiny"; do
    IFS='|' read -r tag flags <<<"$run"
    for b in base new; do
        bin=$([ $b = base ] && echo $BASE || echo ./train)
        rm -rf $MG/ce_bit_${tag}_$b
        timeout 60 $bin -g 2 $flags $data -o $MG/ce_bit_${tag}_$b >$MG/ce_bit_${tag}_$b.log 2>&1
    done
    losses=$(diff <(grep -E '^step|val loss' $MG/ce_bit_${tag}_base.log | cut -d'|' -f1-5) \
        <(grep -E '^step|val loss' $MG/ce_bit_${tag}_new.log | cut -d'|' -f1-5) >/dev/null && grep -q '^step' $MG/ce_bit_${tag}_new.log && echo equal || echo DIFFERENT)
    w1=$(ls $MG/ce_bit_${tag}_base/step_*/model.safetensors 2>/dev/null | tail -1)
    w2=${w1/_base/_new}
    weights=$([ -n "$w1" ] && cmp -s "$w1" "$w2" && echo equal || echo DIFFERENT)
    say "same bits as base, -g 2 $flags: losses/norms/val $losses ($(grep -cE '^step|val loss' $MG/ce_bit_${tag}_new.log) lines), final weights $weights $(grep -m1 -iE 'error|note' $MG/ce_bit_${tag}_new.log)"
done

# ---- throughput A/B
rows=()
tp() { # tag V binary flags...
    local tag=$1 V=$2 bin=$3; shift 3
    local log=$MG/ce_tp_$tag.log
    rm -rf $MG/ce_tp
    timeout 90 $bin "$@" --step-parts 1 -e d12 -v $V -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 \
        -i $MG/rand_$V.bin -o $MG/ce_tp >$log 2>&1
    col() { grep '| loss' $log | tail -30 | grep -oE "$1" | grep -oE '[0-9.]+' | sort -n | sed -n 15p; }
    local ms=$(col '\| [0-9.]+ ms \|') tok=$(col '[0-9.]+ tok/s') comm=$(col 'comm [0-9.]+')
    local bwd=$(col 'bwd [0-9.]+') mem=$(grep -oE 'GPU memory[^|]*' $log | tail -1)
    say "$tag: ${ms:-FAIL} ms/step, ${tok:-0} tok/s, comm ${comm:--} ms, bwd ${bwd:--} ms, $mem $(grep -m1 error $log)"
    rows+=("$tag|${tok:-0}|${ms:-0}|${comm:--}|${bwd:--}")
}
for V in 50304 262144; do
    python3 tests/fixtures/gen/make_shard.py $MG/rand_$V.bin 8000000 $V random 3 >/dev/null
    tp V${V}_1gpu $V ./train -g 1
    for round in 1 2; do
        for mode in "after|--zero 1 --overlap-comm 0" "overlap|--zero 1"; do
            IFS='|' read -r m flags <<<"$mode"
            [ "$(left)" -gt 40 ] || { say "(time: V$V round $round $m skipped)"; continue; }
            tp V${V}_base_${m}_r$round $V $BASE -g 2 $flags
            tp V${V}_new_${m}_r$round $V ./train -g 2 $flags
        done
    done
done
tar -czf $OUT/ce_logs.tgz -C $MG $(cd $MG && ls ce_*.log) 2>/dev/null
echo "== same bits"; grep "same bits\|gpu tests" $OUT/ce_summary.txt
echo "== throughput, GPT-2 124M, B=32/GPU, T=1024 ($(( $(date +%s) - START )) s)"
python3 - "${rows[@]}" <<'PY'
import sys
rows = [r.split("|") for r in sys.argv[1:]]
one = {r[0].split("_")[0]: float(r[1]) for r in rows if r[0].endswith("1gpu") and float(r[1]) > 0}
print(f"{'run':24} {'tok/s':>9} {'ms/step':>8} {'comm ms':>8} {'bwd ms':>7} {'scaling':>8}")
for tag, tok, ms, comm, bwd in rows:
    base = one.get(tag.split("_")[0])
    scale = f"{float(tok) / base:.3f}x" if base and not tag.endswith("1gpu") else ""
    print(f"{tag:24} {tok:>9} {ms:>8} {comm:>8} {bwd:>7} {scale:>8}")
PY
