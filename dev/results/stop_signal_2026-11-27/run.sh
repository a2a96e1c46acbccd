#!/usr/bin/env bash
# Two GPUs of one host: the stop on a signal (Ctrl-C, SIGTERM) and the step's means in one collective,
# against the parent's binary: every GPU test and the eight tiny runs' bits on GPU 0, the two-GPU
# runs' bits (same_bits.sh), then a SIGINT to one GPU's run and to the launcher of a two-GPU run, each
# resumed with -y 1 and compared with an uninterrupted run bit for bit. Needs ./train,
# build/run_gpu_tests and inputs/train_base (the parent's ./train). Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $S
OUT=$OUT/ab BASE=inputs/train_base TESTS=all THROUGHPUT=0 timeout 420 bash dev/check/ab_one_gpu.sh >$OUT/ab.log 2>&1
grep -E 'gpu tests|same bits' $OUT/ab/summary.txt >>$S
BASE=inputs/train_base NEW=./train G=2 timeout 400 bash dev/check/same_bits.sh >>$S 2>&1
M=/tmp/ad
set -m # background jobs in their own process groups, with SIGINT not ignored (as from a terminal)
# stop_and_resume TAG FLAGS: an uninterrupted run, a run stopped by SIGINT after step 20, its resume
stop_and_resume() {
  local tag=$1 flags=$2 base="-e tiny -v 1000 -b 8 -t 128 -x 120 --warmup 5 -s 0 --val-every 0 -i $M/t.bin"
  rm -rf $M/${tag}_straight $M/${tag}_stopped
  timeout 120 ./train $flags $base -o $M/${tag}_straight >$OUT/${tag}_straight.log 2>&1
  ./train $flags $base -o $M/${tag}_stopped >$OUT/${tag}_stopped.log 2>&1 &
  local pid=$!
  for i in $(seq 600); do grep -q 'step    20/120' $OUT/${tag}_stopped.log && break; sleep 0.05; done
  kill -INT $pid; wait $pid; local rc=$?
  local said=$(grep -m1 '^stopped by' $OUT/${tag}_stopped.log)
  timeout 120 ./train $flags $base -y 1 -o $M/${tag}_stopped >$OUT/${tag}_resumed.log 2>&1; local rc2=$?
  local same=$(cmp -s $M/${tag}_straight/step_00000120/model.safetensors $M/${tag}_stopped/step_00000120/model.safetensors && echo equal || echo DIFFERENT)
  echo "$tag: stopped rc $rc ($said), resumed rc $rc2, final weights against the uninterrupted run: $same $(grep -m1 error $OUT/${tag}_*.log)" | tee -a $S
}
stop_and_resume one_gpu ""
stop_and_resume two_gpus "-g 2"
stop_and_resume two_gpus_zero1_overlap "-g 2 --zero 1 --overlap-comm 1"
cat $S
