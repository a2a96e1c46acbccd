#!/usr/bin/env bash
# Two GPUs: --vocab-parallel on a documents shard (a prepare --prompt-completion shard). A tied GPT-2
# head must be refused at start with one line naming the shard and the fix (its slice adds the
# position table, which documents restart); an untied Llama and a tied Qwen3 run, and their step 1
# must be data parallelism's (same loss, gradient norm within rounding) with 20 steps close to it.
# Then every GPU test on GPU 0. Needs ./train and build/run_gpu_tests. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; : >$S
M=/tmp/vpdocs; rm -rf $M; mkdir -p $M
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee -a $S
python3 dev/check/make_pairs.py $M/pairs.jsonl 2
./train prepare --prompt-completion --tokenizer tests/fixtures/hf_llama3_bos.json -o $M/data $M/pairs.jsonl >$M/prepare.log 2>&1
V=$(grep -o 'vocabulary [0-9]*' $M/prepare.log | head -1 | cut -d' ' -f2)
data="-t 128 -b 8 -x 20 -l 2e-3 --warmup 3 -s 0 --val-every 0 -i $M/data/train.bin --tokenizer $M/data/tokenizer.json -v $V"
line() { grep -E "^step +$2/" $1 | cut -d'|' -f2,5; }
./train -g 2 --layers 2 --dim 128 --heads 2 $data --vocab-parallel -o $M/gpt2_vp >$M/gpt2_vp.log 2>&1; rc=$?
echo "GPT-2 (tied, learned positions) --vocab-parallel on documents: rc $rc; $(grep -m1 -i 'error' $M/gpt2_vp.log)" | tee -a $S
[ $rc -ne 0 ] && [ "$(grep -ci 'error' $M/gpt2_vp.log)" -ge 1 ] && ! grep -q 'step +1/' $M/gpt2_vp.log \
  && echo "  verdict: refused before a step, as it should" | tee -a $S || echo "  verdict: FAIL" | tee -a $S
for fam in llama qwen3; do
  if [ $fam = llama ]; then shape="--family llama --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64 --untied-head"
  else shape="--family qwen3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64"; fi
  ./train -g 2 $shape $data -o $M/${fam}_dp >$M/${fam}_dp.log 2>&1; r1=$?
  ./train -g 2 $shape $data --vocab-parallel -o $M/${fam}_vp >$M/${fam}_vp.log 2>&1; r2=$?
  echo "$fam on documents, two GPUs: data parallel rc $r1, step 1 $(line $M/${fam}_dp.log 1), step 20 $(line $M/${fam}_dp.log 20)" | tee -a $S
  echo "  --vocab-parallel rc $r2, step 1 $(line $M/${fam}_vp.log 1), step 20 $(line $M/${fam}_vp.log 20); $(grep -m1 'head slice\|output layer' $M/${fam}_vp.log | cut -c1-120) $(grep -m1 -i error $M/${fam}_vp.log)" | tee -a $S
done
cp $M/*.log $OUT/ 2>/dev/null
CUDA_VISIBLE_DEVICES=0 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1
echo "GPU tests on GPU 0: $(tail -1 $OUT/gpu_tests.log)" | tee -a $S
echo ===; cat $S
