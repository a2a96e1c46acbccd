#!/usr/bin/env bash
# one H100: the persistent attention backward (inputs/attn/pers) beside the committed code (inputs/attn/head):
# attention_variants.sh (tests, three bench rounds, Qwen3 and GPT-2 in the trainer), then a second GPT-2
# round each and Llama-3.2-1B (B 16, bf16 state) each. Summary in out/summary.txt.
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt
VARIANTS="head pers" DIR=inputs/attn ROUNDS=3 OUT=$OUT bash dev/check/attention_variants.sh
t0=$SECONDS; M=/tmp/pv; mkdir -p $M
python3 tests/fixtures/gen/make_shard.py $M/g.bin 8000000 50304 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/l.bin 6000000 128256 random 4 >/dev/null
for v in pers head; do
  rm -rf $M/o; timeout 90 inputs/attn/$v/train -e d12 -v 50304 -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 --step-parts 1 -i $M/g.bin -o $M/o >$OUT/gpt2_r2_$v.log 2>&1
  echo "GPT-2 124M V50304 B32 round 2 $v: $(grep '| loss' $OUT/gpt2_r2_$v.log | tail -30 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 15p) $(grep -m1 error $OUT/gpt2_r2_$v.log) [$((SECONDS-t0)) s]" | tee -a $S
done
for v in head pers; do
  rm -rf $M/o; timeout 90 inputs/attn/$v/train -e llama3.2-1b -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 --optimizer-state bf16 -i $M/l.bin -o $M/o >$OUT/llama_$v.log 2>&1
  echo "Llama-3.2-1B B16 bf16 state $v: $(grep '| loss' $OUT/llama_$v.log | tail -8 | grep -oE '[0-9]+ tok/s' | sort -n | sed -n 4p) $(grep '| loss' $OUT/llama_$v.log | tail -1 | grep -oE '[0-9.]+ GB') $(grep -m1 error $OUT/llama_$v.log) [$((SECONDS-t0)) s]" | tee -a $S
done
a=$(grep '| loss' $OUT/llama_head.log | grep -oE 'loss [0-9.]+|norm [0-9.]+' | md5sum | cut -c1-8)
b=$(grep '| loss' $OUT/llama_pers.log | grep -oE 'loss [0-9.]+|norm [0-9.]+' | md5sum | cut -c1-8)
echo "llama loss and norm lines, head against pers: $([ "$a" = "$b" ] && echo same || echo DIFFERENT)" | tee -a $S
tar -czf $OUT/logs2.tar.gz -C $OUT $(cd $OUT && ls *.log) && rm -f $OUT/*.log
