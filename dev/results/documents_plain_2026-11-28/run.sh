#!/usr/bin/env bash
# One GPU, the code with `prepare --documents` and transformers' padding-free packing in
# dev/check/hf_families_check.py (its point 5): every GPU test and transformers against our
# checkpoints both ways, documents included (dev/results/closing_checks_2026-11-28_b/run.sh); the
# attention with packed documents against plain causal rows (bench_kernels' documents section);
# then plain text prepared with --documents for Llama 3's tokenizer (BOS before each document) and
# for a tokenizer of our own (the separator ends each), a Llama and a GPT-2 trained on each on the
# GPU, and each one's last checkpoint evaluated on val.bin by the GPU and by the CPU reference.
# Needs ./train, build/run_gpu_tests and build/bench_kernels. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary_documents.txt; : >$S
OUT=$OUT bash dev/results/closing_checks_2026-11-28_b/run.sh >$OUT/closing.log 2>&1
grep -h "without position_ids" $OUT/hf_cuda.log $OUT/hf_cpu.log >>$OUT/summary.txt
timeout 200 ./build/bench_kernels 8 documents >$OUT/bench_documents.txt 2>&1
echo "bench_kernels 8 documents: rc $?" | tee -a $S
M=/tmp/documents; rm -rf $M; mkdir -p $M
python3 dev/check/make_documents.py $M/text_llama.txt "<|end_of_text|>"
python3 dev/check/make_documents.py $M/text_ours.txt "<|endoftext|>"
./train prepare --documents --tokenizer tests/fixtures/hf_llama3_bos.json -o $M/llama_data $M/text_llama.txt >$M/prepare_llama.log 2>&1
echo "prepare --documents, Llama 3's tokenizer: rc $?: $(grep -m1 'train + ' $M/prepare_llama.log)" | tee -a $S
./train prepare --documents -v 400 -o $M/ours_data $M/text_ours.txt >$M/prepare_ours.log 2>&1
echo "prepare --documents, our tokenizer: rc $?: $(grep -m1 'train + ' $M/prepare_ours.log)" | tee -a $S
line() { grep -E "^step +$2/" $1 | cut -d'|' -f2,5; }
for run in llama:llama gpt2:ours; do
  fam=${run%%:*}; data_dir=$M/${run##*:}_data
  if [ $fam = llama ]; then shape="--family llama --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64"; tok=tokenizer.json
  else shape="--layers 2 --dim 128 --heads 2"; tok=tokenizer.bin; fi
  V=$(grep -o 'vocabulary [0-9]*' $M/prepare_${run##*:}.log | head -1 | cut -d' ' -f2)
  data="-t 256 -d 2048 -x 30 -l 2e-3 --warmup 3 -s 0 --val-every 10 --val-batches 4 -i $data_dir/train.bin -j $data_dir/val.bin --tokenizer $data_dir/$tok -v $V"
  ./train $shape $data -b 8 -o $M/$fam >$M/$fam.log 2>&1; rc=$?
  echo "$fam on plain-text documents, GPU: rc $rc; $(grep -m1 'mark .* documents' $M/$fam.log | cut -c1-80)" | tee -a $S
  for k in 1 10 30; do echo "  step $k: $(line $M/$fam.log $k)" | tee -a $S; done
  echo "  val: $(grep 'val loss' $M/$fam.log | tail -1 | cut -d'|' -f2)" | tee -a $S
  for dev in cuda cpu; do
    ./train eval -o $M/$fam -i $data_dir/val.bin -t 256 --device $dev >$M/eval_${fam}_$dev.log 2>&1
    echo "  eval of the last checkpoint on val.bin ($dev): rc $? $(tail -1 $M/eval_${fam}_$dev.log)" | tee -a $S
  done
done
cp $M/*.log $OUT/ 2>/dev/null
echo ===; cat $OUT/summary.txt $S; grep -E "^attention|attention_(forward|backward) (wgmma|mma.sync)( \(FA2 FLOPs\))?  " $OUT/bench_documents.txt
