#!/usr/bin/env bash
# cuBLASLt offers taken under no workspace where they give the same bits (kernels/lt_plans.cu), on one
# GPU against the parent (inputs/train_head): the matmul, timed-plan, backend and output GPU tests, the
# tiny runs and full-size first rounds for the same bits, tokens/s in alternating rounds
# (dev/check/ab_one_gpu.sh), then a CUPTI trace of GPT-2 124M (dev/profile/gap_profile.sh) and the
# memsets left in one of its steps. Summary last.
set -u
OUT=${OUT:-out}; mkdir -p $OUT/ab $OUT/gaps
BASE=inputs/train_head TESTS="timed_matmul matmul lt_ backend output" GPT2_VOCABS="50304 262144" OUT=$OUT/ab timeout 420 bash dev/check/ab_one_gpu.sh > $OUT/ab.log 2>&1
MODELS="gpt2_124m_v50304|-e d12 -v 50304 -b 32 -t 1024" OUT=$OUT/gaps timeout 120 bash dev/profile/gap_profile.sh > $OUT/gaps.log 2>&1
cat $OUT/ab/summary.txt; grep -E 'step|idle|memset' $OUT/gaps/gaps.txt | head -12
python3 - $OUT/gaps/gpt2_124m_v50304_trace.csv.gz <<'PY'
import csv,gzip,sys
ops=sorted((int(r["Start (ns)"]),r["Name"]) for r in csv.DictReader(gzip.open(sys.argv[1],'rt')))
st=[s for s,n in ops if 'encoder_forward_kernel' in n]
a,b=st[-4],st[-3]
print("memsets in one step:", sum(1 for s,n in ops if a<=s<b and n=='[memset]'), "operations:", sum(1 for s,n in ops if a<=s<b))
PY
