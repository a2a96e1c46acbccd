#!/usr/bin/env bash
# Two GPUs, state version 8 and log.jsonl's resume records on two ranks: the multi-GPU GPU tests,
# resume on two GPUs and the same checkpoint on one (SECTIONS "tests resume stop"), the resume
# records each resumed run's log holds, then a two-GPU resume on another validation shard (its note
# and record). Needs ./train and build/run_gpu_tests built beforehand. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $S
G=2 TRAIN_PREBUILT=1 SECTIONS="tests resume stop" OUT=$OUT/mg timeout 420 bash dev/check/multigpu_check.sh >$OUT/multigpu.log 2>&1
echo "multigpu_check rc $?" | tee -a $S
cat $OUT/mg/summary.txt >>$S
for d in rb_zero0 rc_zero0 rb_zero1 rc_zero1; do
    echo "$d resume records: $(grep '"type":"resume"' /tmp/mg/$d/log.jsonl | tr '\n' ' ')" | tee -a $S
done
python3 tests/fixtures/gen/make_shard.py /tmp/mg/val_other.bin 90000 1000 pattern 3
./train -g 2 -e tiny -v 1000 -b 8 -t 128 -x 22 -l 2e-3 --warmup 5 --val-every 25 --val-batches 2 -s 0 \
    -i /tmp/mg/train.bin -j /tmp/mg/val_other.bin -d 2048 --zero 0 -y 1 -o /tmp/mg/rb_zero0 >$OUT/other_val.log 2>&1
echo "resume on another validation shard: rc $? $(grep -E '^(validation|schedule):' $OUT/other_val.log | tr '\n' ' ')" | tee -a $S
echo "its record: $(grep '"type":"resume","step":20' /tmp/mg/rb_zero0/log.jsonl)" | tee -a $S
cat $S
