#!/usr/bin/env bash
# Two H100s: ZeRO-1's weight gather by the copy engines under the next forward (commit 51af77e's
# ./train) against the binary of its parent 6765b78 ($BASE), in these calls on one warm machine:
#   1. GPU tests grad_, dev/check/same_bits.sh (six tiny two-GPU runs, every line and the final weights),
#      the throughput A/B (dev/check/ab_throughput.sh, two alternating rounds);
#   2. multigpu_check.sh sections bitwise resume kill nodes; 3. section peers (PyTorch DDP);
#   4. section families; 5. Qwen3-0.6B under ZeRO-1, base against new, two alternating rounds.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
BASE=${BASE:?the parent's ./train}
CUDA_VISIBLE_DEVICES=0 timeout 60 ./build/run_gpu_tests grad_ >$OUT/gpu_tests_grad.log 2>&1
BASE=$BASE NEW=./train MG_TMP=/tmp/sb bash dev/check/same_bits.sh | tee $OUT/same_bits_and_ab.txt
BASE=$BASE ROUNDS=2 MODES="after|--zero 1 --overlap-comm 0;overlap|--zero 1" OUT=$OUT MG_TMP=/tmp/ab \
    bash dev/check/ab_throughput.sh | tail -30 | tee -a $OUT/same_bits_and_ab.txt
for s in "bitwise resume kill nodes" peers families; do
    TRAIN_PREBUILT=1 G=2 SECTIONS="$s" OUT=$OUT/mg MG_TMP=/tmp/mg bash dev/check/multigpu_check.sh >$OUT/multigpu.log 2>&1
    cat $OUT/mg/summary.txt
done
M=/tmp/q; mkdir -p $M
python3 tests/fixtures/gen/make_shard.py $M/r.bin 1000000 151936 random 3 >/dev/null
for r in 1 2; do for b in $BASE ./train; do
    rm -rf $M/o
    timeout 60 $b -g 2 --zero 1 -e qwen3-0.6b -b 8 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 -n 0 \
        --step-parts 1 -i $M/r.bin -o $M/o >$M/l.log 2>&1
    echo "$b r$r: $(grep '| loss' $M/l.log | tail -8 | grep -o '[0-9.]* tok/s' | awk '{print $1}' | sort -n | sed -n 4p) tok/s;" \
        "$(grep '| loss' $M/l.log | tail -1 | grep -oE 'comm [0-9.]+ ms|fwd [0-9.]+|bwd [0-9.]+' | tr '\n' ' ')"
done; done
