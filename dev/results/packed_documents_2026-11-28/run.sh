#!/usr/bin/env bash
# One GPU, the code with --pack bfd (whole documents packed best fit decreasing): every GPU test and
# transformers both ways on the GPU and the CPU, with the new check of `eval --pack bfd` against each
# document run alone (dev/results/closing_checks_2026-11-28_b/run.sh); then 3000 prompt-completion
# pairs through prepare, and a small Llama fine-tuned 60 steps on them with --pack wrapped and with
# --pack bfd (windows, padding, step time, losses), each final checkpoint evaluated on the
# validation shard both ways. Needs ./train and build/run_gpu_tests. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary_packed.txt; : >$S
OUT=$OUT bash dev/results/closing_checks_2026-11-28_b/run.sh >$OUT/closing.log 2>&1
M=/tmp/sft; rm -rf $M; mkdir -p $M
python3 dev/check/make_pairs.py $M/pairs.jsonl 1
./train prepare --prompt-completion --tokenizer tests/fixtures/hf_llama3_bos.json -o $M/data $M/pairs.jsonl >$M/prepare.log 2>&1
echo "prepare --prompt-completion rc $?: $(grep -m1 'prepare: ' $M/prepare.log)" | tee -a $S
V=$(grep -o 'vocabulary [0-9]*' $M/prepare.log | head -1 | cut -d' ' -f2)
common="--family llama --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64 -v $V -t 512 -b 4 -d 2048 -x 60 -l 2e-3 --warmup 3 -s 0 --val-every 20 --val-batches 8 -i $M/data/train.bin -j $M/data/val.bin --tokenizer $M/data/tokenizer.json"
for pack in wrapped bfd; do
    ./train $common --pack $pack -o $M/$pack >$M/$pack.log 2>&1
    r=$?
    ms=$(grep -E '^step +[0-9]+/60' $M/$pack.log | tail -40 | awk -F'|' '{gsub(/ ms/,"",$6); s+=$6; n++} END {printf "%.2f", s/n}')
    echo "--pack $pack: rc $r; $(grep -m1 'steps an epoch' $M/$pack.log); $(grep -m1 'packed best fit' $M/$pack.log)" | tee -a $S
    echo "  step 1 $(grep -E '^step +1/' $M/$pack.log | cut -d'|' -f2), step 60 $(grep -E '^step +60/' $M/$pack.log | cut -d'|' -f2), mean of steps 21-60 $ms ms, last val $(grep 'val loss' $M/$pack.log | tail -1 | cut -d'|' -f2)" | tee -a $S
    for how in wrapped bfd; do
        ./train eval -o $M/$pack -i $M/data/val.bin --pack $how -t 512 >$M/eval_${pack}_$how.log 2>&1
        echo "  eval --pack $how on val.bin (cuda): rc $? $(tail -1 $M/eval_${pack}_$how.log)" | tee -a $S
    done
done
cp $M/*.log $OUT/ 2>/dev/null
echo ===; cat $OUT/summary.txt $S
