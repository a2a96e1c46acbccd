#!/usr/bin/env bash
# The pair's step under the CUPTI probe (build/kernel_trace.so) for the parent's binary (NCCL's
# reduce-scatter, gradients in cudaMalloc memory) and the new one (the rank sum, gradients in an NCCL
# symmetric window), twice each alternating, and GPU 0 alone: do the kernels that write the
# gradients (the weight-gradient GEMMs) run slower on window memory? GPT-2 124M, V 50304, B 32 a GPU.
# BASE: the base binary instead of the parent's (its runs are still tagged parent1, parent2).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT/traces; S=$OUT/summary.txt; : >$S
T=/tmp/tr; mkdir -p $T
python3 tests/fixtures/gen/make_shard.py $T/r.bin 20000000 50304 random 3 >/dev/null
a="--step-parts 1 -e d12 -v 50304 -b 32 -t 1024 -x 24 --warmup 5 --val-every 0 -s 0 -i $T/r.bin"
for run in "alone|./train -g 1" "parent1|${BASE:-inputs/train_parent} -g 2" "new1|./train -g 2" "parent2|${BASE:-inputs/train_parent} -g 2" "new2|./train -g 2"; do
  IFS='|' read -r tag cmd <<<"$run"
  rm -rf $T/o
  CUDA_VISIBLE_DEVICES=$([ $tag = alone ] && echo 0 || echo 0,1) CUDA_INJECTION64_PATH=$PWD/build/kernel_trace.so \
    KERNEL_TRACE_OUT=$T/${tag}_%p.csv $cmd $a -o $T/o >$OUT/$tag.log 2>&1
  echo "$tag: $(grep '| loss' $OUT/$tag.log | tail -8 | grep -oE '\| [0-9.]+ ms \|' | grep -oE '[0-9.]+' | sort -n | sed -n 4p) ms a step traced (median of the last 8)" | tee -a $S
  for f in $T/${tag}_*.csv; do
    [ -s "$f" ] || continue
    python3 dev/profile/timeline_gaps.py "$f" --steps 5 --top 0 --categories --gemms 14 >$f.txt 2>&1 || continue
    echo "  $(basename $f):" | tee -a $S; sed 's/^/    /' $f.txt | tee -a $S
  done
done
tar -czf $OUT/traces/traces.tar.gz -C $T $(cd $T && ls *.csv) 2>/dev/null
