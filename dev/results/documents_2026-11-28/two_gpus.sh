#!/usr/bin/env bash
# Two GPUs on documents (a prepare --prompt-completion shard): one GPU accumulating two micro-batches
# against two GPUs taking one each, GPT-2 (the position table's gradient over every rank's rows, whose
# positions are gathered too when the exchange owns the embeddings' backward: ZeRO-1, and the
# all-reduce overlapped) and a Llama; step 1's loss and gradient norm, and the loss at step 20. Needs
# ./train. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary_two_gpus.txt; : >$S
M=/tmp/sft2; rm -rf $M; mkdir -p $M
python3 dev/check/make_pairs.py $M/pairs.jsonl 2
./train prepare --prompt-completion --tokenizer tests/fixtures/hf_llama3_bos.json -o $M/data $M/pairs.jsonl >$M/prepare.log 2>&1
V=$(grep -o 'vocabulary [0-9]*' $M/prepare.log | head -1 | cut -d' ' -f2)
data="-t 128 -b 8 -d 2048 -x 20 -l 2e-3 --warmup 3 -s 0 --val-every 0 -i $M/data/train.bin --tokenizer $M/data/tokenizer.json -v $V"
line() { grep -E "^step +$2/" $1 | cut -d'|' -f2,5; }
for fam in gpt2 llama; do
  if [ $fam = llama ]; then shape="--family llama --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64"
  else shape="--layers 2 --dim 128 --heads 2"; fi
  ./train $shape $data -o $M/${fam}_one >$M/${fam}_one.log 2>&1; r1=$?
  echo "$fam, one GPU, accumulation 2: rc $r1; step 1: $(line $M/${fam}_one.log 1); step 20: $(line $M/${fam}_one.log 20)" | tee -a $S
  for mode in "--zero 1 --overlap-comm 0" "--zero 1 --overlap-comm 1" "--zero 0 --overlap-comm 1"; do
    tag=$(echo $mode | tr -d ' -')
    ./train -g 2 $shape $data $mode -o $M/${fam}_$tag >$M/${fam}_$tag.log 2>&1; r2=$?
    echo "  two GPUs ($mode): rc $r2; step 1: $(line $M/${fam}_$tag.log 1); step 20: $(line $M/${fam}_$tag.log 20)" | tee -a $S
  done
done
cp $M/*.log $OUT/ 2>/dev/null
echo ===; cat $S
