#!/usr/bin/env bash
# one H100: every GPU test, the tiny runs against the parent's binary, transformers both ways
t0=$SECONDS
BASE=inputs/train_base THROUGHPUT=0 OUT=$OUT/ab bash dev/check/ab_one_gpu.sh > $OUT/ab.log 2>&1
timeout 200 python3 dev/check/hf_families_check.py --train ./train --device cuda > $OUT/hf_cuda.log 2>&1; echo "hf cuda rc $? [$((SECONDS-t0)) s]" >> $OUT/ab/summary.txt
grep -v Warning $OUT/hf_cuda.log | tail -8 >> $OUT/ab/summary.txt
cat $OUT/ab/summary.txt
