#!/usr/bin/env bash
# One H100: the code after the input-handling fixes (CPU memory check, sampling at non-finite logits,
# the step-1 message, validation shard opened only when validation runs, --help beside a bad flag,
# the softcap note, the tokenizer beside weights) against the parent's binary: every GPU test, the
# eight tiny runs' bits, and sampling from a GPU run. Needs ./train, build/run_gpu_tests and
# inputs/train_base (the parent's ./train) built beforehand. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
BASE=inputs/train_base TESTS=all THROUGHPUT=0 timeout 420 bash dev/check/ab_one_gpu.sh >$OUT/ab.log 2>&1
echo "ab rc $?" >>$OUT/summary.txt
M=/tmp/ad
timeout 60 ./train -e tiny -v 1000 -b 8 -t 128 -x 20 --warmup 2 -s 10 -G 16 --val-every 10 -i $M/t.bin -j $M/v.bin \
    -o $M/sample_run >$OUT/sample_train.log 2>&1
echo "train with samples rc $?: $(grep -c '^sample at step' $OUT/sample_train.log) sample lines" >>$OUT/summary.txt
timeout 60 ./train sample -o $M/sample_run -G 32 --ids >$OUT/sample_cmd.log 2>&1
echo "./train sample rc $?: $(grep -m1 '^ids:' $OUT/sample_cmd.log | wc -w) words on the ids line" >>$OUT/summary.txt
cat $OUT/summary.txt
