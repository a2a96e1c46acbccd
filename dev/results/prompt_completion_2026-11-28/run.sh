#!/usr/bin/env bash
# One GPU, the code with prompt-completion fine-tuning (masked shards): every GPU test, transformers
# against our checkpoints both ways with the masked checks (eval of a masked shard, a masked step's
# loss and gradient norm in two micro-batches against transformers' labels of -100) on the GPU and
# the CPU (dev/results/closing_checks_2026-11-28_b/run.sh); the tiny runs' lines and final weights
# against the parent binary (BASE: unmasked data takes the same arithmetic as before); then on the
# GPU a prepare --prompt-completion of pairs, a run on it at -b 4 and at -b 2 with twice the
# accumulation (step 1's loss and norm) and eval. Needs ./train and build/run_gpu_tests. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary_masked.txt; : >$S
BASE=${BASE:-inputs/base_train}
OUT=$OUT bash dev/results/closing_checks_2026-11-28_b/run.sh >$OUT/closing.log 2>&1
BASE=$BASE TESTS=adamw THROUGHPUT=0 OUT=$OUT/ab bash dev/check/ab_one_gpu.sh >$OUT/ab.log 2>&1
M=/tmp/sft; rm -rf $M; mkdir -p $M
python3 dev/check/make_pairs.py $M/pairs.jsonl 1
./train prepare --prompt-completion --tokenizer tests/fixtures/hf_llama3_bos.json -o $M/data $M/pairs.jsonl >$M/prepare.log 2>&1
echo "prepare --prompt-completion rc $?: $(grep -m1 'prepare: ' $M/prepare.log)" | tee -a $S
common="--family llama --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64 -v $(grep -o 'vocabulary [0-9]*' $M/prepare.log | head -1 | cut -d' ' -f2) -t 128 -d 1024 -x 30 -l 2e-3 --warmup 3 -s 0 --val-every 10 --val-batches 4 -i $M/data/train.bin -j $M/data/val.bin --tokenizer $M/data/tokenizer.json"
./train $common -b 8 -o $M/b8 >$M/b8.log 2>&1; r8=$?
./train $common -b 4 -o $M/b4 >$M/b4.log 2>&1; r4=$?
line() { grep -E "^step +$2/" $1 | cut -d'|' -f2,5; }
echo "masked training on the GPU: -b 8 rc $r8, -b 4 (accumulation 2) rc $r4; $(grep -m1 '% of the tokens' $M/b8.log)" | tee -a $S
for k in 1 2 10 30; do echo "  step $k: -b 8 $(line $M/b8.log $k) | -b 4 $(line $M/b4.log $k)" | tee -a $S; done
echo "  val: -b 8 $(grep 'val loss' $M/b8.log | tail -1 | cut -d'|' -f2), -b 4 $(grep 'val loss' $M/b4.log | tail -1 | cut -d'|' -f2)" | tee -a $S
./train eval -o $M/b8 -i $M/data/val.bin >$M/eval.log 2>&1
echo "  eval of the last checkpoint on val.bin (cuda): rc $? $(tail -1 $M/eval.log)" | tee -a $S
echo ===; cat $OUT/summary.txt $OUT/ab/summary.txt $S
