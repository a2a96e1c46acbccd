#!/usr/bin/env bash
# One GPU: the SM clock and power while the trainer runs Qwen3-0.6B and Llama-3.2-1B (B 16, T 2048,
# bf16 AdamW state, 30 steps on random tokens), by dev/profile/power_clocks.sh, samples after 20 s.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
. dev/bench/family_rounds.sh  # CK, shard
shard q 151936; shard l 128256
for m in "qwen3-0.6b q" "llama3.2-1b l"; do set -- $m
  echo "== $1"
  rm -rf $CK
  SKIP=${SKIP:-20} OUT=$OUT/$1 bash dev/profile/power_clocks.sh ./train -e $1 -b 16 -t 2048 --max-seq-len 2048 -x 30 \
    --warmup 2 --val-every 0 -s 0 --optimizer-state bf16 -i /tmp/f/$2.bin -o $CK
  grep '| loss' $OUT/$1/power_clocks_cmd.log | tail -2 | cut -c1-160
done
rm -rf $CK
