#!/usr/bin/env bash
# ZeRO-1 with the early token embedding and piecewise weight gather: correctness, then A/B against main's binary
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=index,name --format=csv,noheader
MG=/tmp/mg; mkdir -p $MG
# correctness (the new ./train): every data-parallel mode against one GPU
SECTIONS="correct" TRAIN_PREBUILT=1 timeout 330 bash dev/check/multigpu_check.sh > $MG/check.log 2>&1
echo "== correct: exit $?"; cat $OUT/summary.txt 2>/dev/null | grep -E "step 1|gradient|FAIL" | head -30
tp() { # V tag binary flags...
    local V=$1 tag=$2 bin=$3; shift 3
    local log=$MG/tp_${V}_$tag.log
    rm -rf $MG/tp
    $bin "$@" -e d12 -v $V -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 -i $MG/rand_$V.bin -o $MG/tp >$log 2>&1
    local ms=$(grep '| loss' $log | tail -30 | grep -oE '\| [0-9.]+ ms \|' | grep -oE '[0-9.]+' | sort -n | sed -n 15p)
    local comm=$(grep '| loss' $log | tail -30 | grep -o 'comm [0-9.]*' | awk '{print $2}' | sort -n | sed -n 15p)
    echo "V=$V $tag: ${ms:-FAIL} ms, comm ${comm:-0} ms, $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep -m1 error $log)" | tee -a $OUT/ab.txt
}
for V in 262144 50304; do
    python3 tests/fixtures/gen/make_shard.py $MG/rand_$V.bin 40000000 $V random 3 >/dev/null
    tp $V 1gpu_gpu0 ./train -g 1
    CUDA_VISIBLE_DEVICES=1 tp $V 1gpu_gpu1 ./train -g 1
    for round in 1 2; do
        tp $V main_zero1_r$round inputs/train_main -g 2 --zero 1
        tp $V new_zero1_r$round ./train -g 2 --zero 1
        [ $round = 1 ] && tp $V new_overlap ./train -g 2
    done
done
tar -czf $OUT/logs.tgz -C $MG $(cd $MG && ls *.log) 2>/dev/null
echo "== summary"; cat $OUT/summary.txt | cut -c1-220; echo; cat $OUT/ab.txt
