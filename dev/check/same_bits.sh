#!/usr/bin/env bash
# Two builds of ./train that must compute the same bits on G GPUs (a change that only moves bytes or
# work around): tiny runs of both (evaluations between steps, accumulation, merged buckets, the bf16
# wire, a Qwen3 for the RoPE body overlapped and after the backward, the all-reduce), every loss, gradient-norm and validation line
# and the final weights compared exactly. One line a run on stdout:
#   same bits as base, -g G FLAGS: losses/norms/val equal|DIFFERENT (N lines), final weights equal|DIFFERENT
# usage: BASE=path/to/base/train NEW=path/to/new/train [G=2] [MG_TMP=/tmp/mg] bash dev/check/same_bits.sh
set -uo pipefail
BASE=${BASE:?the base ./train}
NEW=${NEW:?the new ./train}
G=${G:-2}
MG=${MG_TMP:-/tmp/mg}
mkdir -p $MG
python3 tests/fixtures/gen/make_shard.py $MG/sb_train.bin 2000000 1000 pattern 1 >/dev/null
python3 tests/fixtures/gen/make_shard.py $MG/sb_val.bin 100000 1000 pattern 2 >/dev/null
data="-v 1000 -b 8 -t 128 -x 30 -l 2e-3 --warmup 5 --val-every 7 --val-batches 2 -s 0 -i $MG/sb_train.bin -j $MG/sb_val.bin"
qwen3="--family qwen3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --head-dim 64 --ffn-dim 256"
for run in "zero1|-e tiny --zero 1 --overlap-comm 1" "after_accum|-e tiny --zero 1 --overlap-comm 0 -d 4096" \
    "qwen3_after|$qwen3 --zero 1 --overlap-comm 0" \
    "merged|-e tiny --zero 1 --overlap-comm 1 --bucket-mb 1" "wire|-e tiny --zero 1 --overlap-comm 1 --grad-reduce bf16" \
    "qwen3|$qwen3 --zero 1 --overlap-comm 1" "allreduce|-e tiny --zero 0 --overlap-comm 1"; do
    IFS='|' read -r tag flags <<<"$run"
    for b in base new; do
        bin=$([ $b = base ] && echo $BASE || echo $NEW)
        rm -rf $MG/sb_${tag}_$b
        timeout 60 $bin -g $G $flags $data -o $MG/sb_${tag}_$b >$MG/sb_${tag}_$b.log 2>&1
    done
    losses=$(diff <(grep -E '^step|val loss' $MG/sb_${tag}_base.log | cut -d'|' -f1-5) \
        <(grep -E '^step|val loss' $MG/sb_${tag}_new.log | cut -d'|' -f1-5) >/dev/null &&
        grep -q '^step' $MG/sb_${tag}_new.log && echo equal || echo DIFFERENT)
    w1=$(ls $MG/sb_${tag}_base/step_*/model.safetensors 2>/dev/null | tail -1)
    w2=${w1/sb_${tag}_base/sb_${tag}_new}
    weights=$([ -n "$w1" ] && cmp -s "$w1" "$w2" && echo equal || echo DIFFERENT)
    echo "same bits as base, -g $G $flags: losses/norms/val $losses ($(grep -cE '^step|val loss' $MG/sb_${tag}_new.log) lines), final weights $weights $(grep -m1 error $MG/sb_${tag}_new.log)"
done
