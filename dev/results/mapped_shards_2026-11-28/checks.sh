#!/usr/bin/env bash
# One GPU: every GPU test, transformers both ways and the GPT-2 round trip
# (dev/results/closing_checks_2026-11-28_b/run.sh), then GPT-2 124M on a pattern of three shards:
# 20 steps in one run, and a resume from its step 10 to step 20, loss lines and final weights compared
# (SHARDS_ONLY=1: this part alone).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; M=/tmp/ms; mkdir -p $M
[ "${SHARDS_ONLY:-0}" = 1 ] || OUT=$OUT bash dev/results/closing_checks_2026-11-28_b/run.sh
S=$OUT/summary_shards.txt; : >$S
for k in 1 2 3; do python3 tests/fixtures/gen/make_shard.py $M/part_$k.bin 1500000 50304 random $k >/dev/null; done
run() { timeout 120 ./train -e d12 -v 50304 -b 16 -t 1024 --warmup 5 --val-every 0 -s 0 -n 10 -i "$M/part_*.bin" "$@"; }
rm -rf $M/full $M/cut
run -x 20 -o $M/full >$OUT/shards_full.log 2>&1; echo "full rc $?" | tee -a $S
# the resume starts from a copy of the same run's step 10 (a run of -x 10 would have another schedule)
mkdir -p $M/cut && cp -r $M/full/step_00000010 $M/cut/ && echo step_00000010 >$M/cut/latest
run -x 20 -y 1 -o $M/cut >$OUT/shards_resumed.log 2>&1; echo "resumed rc $?" | tee -a $S
same=$(diff <(grep -E '^step +(1[1-9]|20)/' $OUT/shards_full.log | cut -d'|' -f1-5) \
            <(grep -E '^step +(1[1-9]|20)/' $OUT/shards_resumed.log | cut -d'|' -f1-5) >/dev/null &&
       [ $(grep -cE '^step +(1[1-9]|20)/' $OUT/shards_resumed.log) = 10 ] && echo equal || echo DIFFERENT)
echo "GPT-2 124M on three shards, steps 11-20 resumed against one run: loss lines $same, final weights $(cmp -s $M/full/step_00000020/model.safetensors $M/cut/step_00000020/model.safetensors && echo equal || echo DIFFERENT)" | tee -a $S
grep -m1 '^data:' $OUT/shards_full.log | tee -a $S
grep '| loss' $OUT/shards_full.log | tail -1 | tee -a $S
cat $OUT/summary.txt $S 2>/dev/null
