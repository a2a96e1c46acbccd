#!/bin/bash
# Nsight Compute's kernel times of one Qwen3-0.6B step at B 16, T 2048 (step 3).
OUT=${OUT:-out}; mkdir -p $OUT /tmp/sp
python3 tests/fixtures/gen/make_shard.py /tmp/sp/q.bin 3000000 151936 random 3 >/dev/null
t0=$SECONDS
timeout -k 5 150 ncu --csv --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum \
  ./train -e qwen3-0.6b -t 2048 --max-seq-len 2048 -b 16 --warmup 2 --val-every 0 -s 0 -i /tmp/sp/q.bin -o /tmp/sp/run --profile-step 3 -x 3 > $OUT/qwen3_b16_ncu.csv 2> $OUT/qwen3_b16_ncu.err
echo "ncu rc $? [$((SECONDS-t0)) s] $(grep -c '^"' $OUT/qwen3_b16_ncu.csv) lines"; tail -3 $OUT/qwen3_b16_ncu.err
gzip -k $OUT/qwen3_b16_ncu.csv
python3 dev/profile/ncu_step_summary.py $OUT/qwen3_b16_ncu.csv qwen3-0.6b_B16 322 2>&1 | head -60
