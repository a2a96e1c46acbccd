#!/usr/bin/env bash
# One GPU, the code with per-document attention and positions (shards with SHARD_DOCUMENTS): every
# GPU test (the attention's, RoPE's and the position table's document cases among them), transformers
# against our checkpoints both ways (dev/results/closing_checks_2026-11-28_b/run.sh), the tiny runs'
# lines and final weights against the parent binary (BASE: data without documents takes the same
# arithmetic as before); then a prepare --prompt-completion of pairs (documents), a Llama and a GPT-2
# trained on it on the GPU, and each one's last checkpoint evaluated on val.bin by the GPU and by the
# CPU reference. Needs ./train and build/run_gpu_tests. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary_documents.txt; : >$S
BASE=${BASE:-inputs/base_train}
OUT=$OUT bash dev/results/closing_checks_2026-11-28_b/run.sh >$OUT/closing.log 2>&1
BASE=$BASE TESTS=adamw THROUGHPUT=0 OUT=$OUT/ab bash dev/check/ab_one_gpu.sh >$OUT/ab.log 2>&1
M=/tmp/sft; rm -rf $M; mkdir -p $M
python3 dev/check/make_pairs.py $M/pairs.jsonl 1
./train prepare --prompt-completion --tokenizer tests/fixtures/hf_llama3_bos.json -o $M/data $M/pairs.jsonl >$M/prepare.log 2>&1
echo "prepare --prompt-completion rc $?: $(grep -m1 'prepare: ' $M/prepare.log)" | tee -a $S
V=$(grep -o 'vocabulary [0-9]*' $M/prepare.log | head -1 | cut -d' ' -f2)
data="-t 128 -d 1024 -x 30 -l 2e-3 --warmup 3 -s 0 --val-every 10 --val-batches 4 -i $M/data/train.bin -j $M/data/val.bin --tokenizer $M/data/tokenizer.json -v $V"
line() { grep -E "^step +$2/" $1 | cut -d'|' -f2,5; }
for fam in llama gpt2; do
  if [ $fam = llama ]; then shape="--family llama --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64"
  else shape="--layers 2 --dim 128 --heads 2"; fi
  ./train $shape $data -b 8 -o $M/$fam >$M/$fam.log 2>&1; rc=$?
  echo "$fam on documents, GPU: rc $rc; $(grep -m1 '% of the tokens' $M/$fam.log)" | tee -a $S
  for k in 1 10 30; do echo "  step $k: $(line $M/$fam.log $k)" | tee -a $S; done
  echo "  val: $(grep 'val loss' $M/$fam.log | tail -1 | cut -d'|' -f2)" | tee -a $S
  for dev in cuda cpu; do
    ./train eval -o $M/$fam -i $M/data/val.bin -t 128 --device $dev >$M/eval_${fam}_$dev.log 2>&1
    echo "  eval of the last checkpoint on val.bin ($dev): rc $? $(tail -1 $M/eval_${fam}_$dev.log)" | tee -a $S
  done
done
echo ===; cat $OUT/summary.txt $OUT/ab/summary.txt $S
