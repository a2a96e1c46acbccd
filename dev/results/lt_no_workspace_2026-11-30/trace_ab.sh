#!/usr/bin/env bash
# Two GPUs of one host: the parent (BASE, default inputs/train_head) and this tree's ./train under the
# CUPTI probe on GPU 0 in turn, GPT-2 124M at V 50304 (B 32, T 1024, 16 steps, random tokens), twice
# each: idle time a step, memsets a step (dev/profile/timeline_gaps.py); then dev/check/same_bits.sh on
# both GPUs against BASE, and the run header's "gradient reduce" line of a ZeRO-1 run. Summary last.
set -u
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; : >$S
BASE=${BASE:-inputs/train_head}
M=/tmp/tab; mkdir -p $M
python3 tests/fixtures/gen/make_shard.py $M/r.bin 8000000 50304 random 3 >/dev/null
for r in 1 2; do for b in base new; do
  bin=$([ $b = base ] && echo $BASE || echo ./train)
  rm -rf $M/run
  CUDA_VISIBLE_DEVICES=0 CUDA_INJECTION64_PATH=$PWD/build/kernel_trace.so KERNEL_TRACE_OUT=$M/$b$r.csv timeout 200 \
    $bin -e d12 -v 50304 -b 32 -t 1024 -x 16 --warmup 2 --val-every 0 -s 0 -n 1000 -i $M/r.bin -o $M/run >$OUT/trace_$b$r.log 2>&1
  idle=$(python3 dev/profile/timeline_gaps.py $M/$b$r.csv --steps 5 2>&1 | grep -m1 'on the timeline')
  memsets=$(python3 - $M/$b$r.csv <<'PY'
import csv,sys
ops=sorted((int(r["Start (ns)"]),r["Name"]) for r in csv.DictReader(open(sys.argv[1])))
st=[s for s,n in ops if 'encoder_forward_kernel' in n]
print(sum(1 for s,n in ops if st[-7]<=s<st[-2] and n=='[memset]')/5)
PY
)
  echo "$b round $r: $idle; memsets a step $memsets" | tee -a $S
done; done
BASE=$BASE NEW=./train G=2 MG_TMP=/tmp/sb timeout 300 bash dev/check/same_bits.sh 2>&1 | grep 'same bits' | tee -a $S
rm -rf $M/z; timeout 100 ./train -g 2 -e tiny -v 1000 -b 8 -t 128 -x 3 --zero 1 --overlap-comm 0 -s 0 -i /tmp/sb/sb_train.bin -o $M/z 2>&1 | grep -E 'gradient reduce|error|note' | tee -a $S
cat $S
