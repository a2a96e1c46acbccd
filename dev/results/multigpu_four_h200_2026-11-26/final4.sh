#!/usr/bin/env bash
# Four GPUs, two phases. Phase 1: the bf16 wire's correctness and real-text run on GPUs 0,1 beside
# --vocab-parallel (tied and untied) on GPUs 2,3. Phase 2: the wire's throughput on GPUs 0,1 alone
# as a pair, every GPU test on GPU 2, Qwen3/Llama tokens/s (new attention forward against the one
# before) on GPU 3.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
S=$OUT/summary_final4.txt
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $S
t0=$(date +%s)
mg() { # gpus name timeout sections [env...]
  local gpus=$1 name=$2 to=$3 sec=$4; shift 4
  env "$@" CUDA_VISIBLE_DEVICES=$gpus MG_TMP=/tmp/mg_$name G=2 TRAIN_PREBUILT=1 SECTIONS="$sec" OUT=$OUT/mg_$name \
    timeout $to bash dev/check/multigpu_check.sh >$OUT/multigpu_$name.log 2>&1
  echo "rc $?" >>$OUT/multigpu_$name.log; }
mg 0,1 wire1 340 wire WIRE_PARTS="step1 rounds real" WIRE_TIMEOUT=200 &
a=$!
mg 2,3 vp 340 vocabpar &
b=$!
wait $a $b
echo "phase 1: $(( $(date +%s) - t0 )) s" | tee -a $S
mg 0,1 wire2 215 wire WIRE_PARTS=throughput TP_VOCABS=262144 &
a=$!
( CUDA_VISIBLE_DEVICES=2 timeout 210 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1; echo "rc $?" >>$OUT/gpu_tests.log ) &
b=$!
(
  export CUDA_VISIBLE_DEVICES=3
  python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 6000000 151936 random 3 >/dev/null
  python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 6000000 128256 random 4 >/dev/null
  chmod +x inputs/train_before_attn
  for r in "qwen3-0.6b q ./train after" "qwen3-0.6b q inputs/train_before_attn before" "llama3.2-1b l ./train after"; do
    set -- $r; rm -rf /tmp/f/r
    timeout 70 $3 -e $1 -b 16 -t 2048 -x 12 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i /tmp/f/$2.bin -o /tmp/f/r >/tmp/f/${1}_$4.log 2>&1
    echo "$1 B=16 T=2048 $4: median $(grep '| loss' /tmp/f/${1}_$4.log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' /tmp/f/${1}_$4.log | tail -1 | grep -oE 'MFU.*|fwd.*' | head -1) $(grep -m1 error /tmp/f/${1}_$4.log)" >>$OUT/families.txt
  done ) &
c=$!
wait $a $b $c
echo "phase 2: $(( $(date +%s) - t0 )) s" | tee -a $S
for n in wire1 vp wire2; do echo "== $n ($(tail -1 $OUT/multigpu_$n.log))" >>$S; cat $OUT/mg_$n/summary.txt >>$S 2>/dev/null; sed -n '/==== wire:/,$p' $OUT/multigpu_$n.log >>$S; done
echo "== gpu tests: $(grep -E '[0-9]+ passed' $OUT/gpu_tests.log | tail -1) $(tail -1 $OUT/gpu_tests.log)" >>$S
grep -E "FAILED" $OUT/gpu_tests.log | head -8 >>$S
echo "== families (GPU 3)" >>$S; cat $OUT/families.txt >>$S
for d in /tmp/mg_wire1 /tmp/mg_vp /tmp/mg_wire2 /tmp/f; do tar -czf $OUT/logs_$(basename $d).tar.gz -C $d $(cd $d && ls *.log 2>/dev/null) 2>/dev/null; done
echo "==== summary"; cat $S
