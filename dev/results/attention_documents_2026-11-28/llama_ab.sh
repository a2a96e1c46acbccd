#!/usr/bin/env bash
# One GPU: Llama-3.2-1B (head size 64, no documents) at B 16, T 2048, bf16 AdamW state on random
# tokens, the parent's ./train (inputs/base_train_docs) and the change's in alternating rounds:
# median tokens/s of the last 6 of 12 steps, and the step's backward GPU ms (--step-parts).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; M=/tmp/llama_ab; mkdir -p $M
python3 tests/fixtures/gen/make_shard.py $M/rl.bin 2000000 128256 random 4 >/dev/null
for r in 1 2; do for b in base new; do bin=$([ $b = base ] && echo inputs/base_train_docs || echo ./train)
  rm -rf $M/o; timeout 100 $bin -e llama3.2-1b -b 16 -t 2048 --max-seq-len 2048 -x 12 --warmup 2 --val-every 0 -s 0 -n 0 \
    --optimizer-state bf16 --step-parts 1 -i $M/rl.bin -o $M/o >$M/l_${b}_$r.log 2>&1
  echo "Llama-3.2-1B B16 random tokens, $b r$r: $(grep '| loss' $M/l_${b}_$r.log | tail -6 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 3p) $(grep '| loss' $M/l_${b}_$r.log | tail -1 | grep -oE 'fwd [0-9.]+ out [0-9.]+ bwd [0-9.]+')" | tee -a $OUT/summary.txt
done; done
diff <(grep '^step' $M/l_base_1.log | cut -d'|' -f1-5) <(grep '^step' $M/l_new_1.log | cut -d'|' -f1-5) >/dev/null && echo "loss, lse, lr, norm lines of round 1: equal" | tee -a $OUT/summary.txt || echo "lines DIFFERENT" | tee -a $OUT/summary.txt
