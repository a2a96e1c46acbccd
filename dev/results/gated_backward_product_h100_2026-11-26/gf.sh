#!/bin/bash
# The gated backward that re-forms the product (commit c2b2658) on one H100: every GPU test, the
# kernel bench's swiglu rows, then the trainer against the parent's binary in alternating rounds, the
# loss lines of both compared exactly (the change should keep every bit). Binaries built beforehand:
#   NEW=<c2b2658's tree>  PARENT=<03c2e0a's ./train>
NEW=${NEW:-.}; PARENT=${PARENT:?the parent commit's ./train}
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $S
t0=$SECONDS
timeout 200 $NEW/build/run_gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $? $(grep -E 'passed' $OUT/gpu_tests.log | tail -1 | cut -c1-60) $(grep -m5 -i 'FAIL' $OUT/gpu_tests.log | cut -c1-200 | tr '\n' ' ') [$((SECONDS-t0)) s]" | tee -a $S
grep -A2 "swiglu_and_geglu" $OUT/gpu_tests.log | head -3 | cut -c1-300 | tee -a $S
timeout 60 $NEW/build/bench_kernels 16 families > $OUT/bench_kernels.log 2>&1; grep -i "swiglu" $OUT/bench_kernels.log | tee -a $S
python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 6000000 151936 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 6000000 128256 random 4 >/dev/null
run() { # model B data bin tag
  log=$OUT/$1_b$2_$5.log; rm -rf /tmp/f/r
  timeout 100 $4 -e $1 -b $2 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i /tmp/f/$3.bin -o /tmp/f/r > $log 2>&1
  echo "$1 B=$2 $5: median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep '| loss' $log | tail -1 | grep -o 'fwd.*' | cut -c1-40) $(grep -m1 error $log) [$((SECONDS-t0)) s]" | tee -a $S
}
same() { a=$(grep '| loss' $OUT/$1_main_r1.log | cut -d'|' -f1-5); b=$(grep '| loss' $OUT/$1_new_r1.log | cut -d'|' -f1-5)
  [ -n "$a" ] && [ "$a" = "$b" ] && echo "$1: loss and norm lines of main and new identical ($(echo "$a" | wc -l) steps)" | tee -a $S || { echo "$1: loss lines DIFFER" | tee -a $S; diff <(echo "$a") <(echo "$b") | head -6 | tee -a $S; }; }
for r in 1 2; do run qwen3-0.6b 16 q $PARENT main_r$r; run qwen3-0.6b 16 q $NEW/train new_r$r; done
same qwen3-0.6b_b16
run llama3.2-1b 16 l $PARENT main_r1; run llama3.2-1b 16 l $NEW/train new_r1
same llama3.2-1b_b16
echo "---- $((SECONDS-t0)) s"; cat $S
