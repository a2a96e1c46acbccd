#!/usr/bin/env bash
# One GPU, the code of 2026-11-28 (evening): every GPU test; transformers against our
# checkpoints both ways on the GPU and the CPU reference (the exported bos/eos ids now); the GPT-2
# round trip; then GPU resumes (fp32 and bf16 AdamW state, a Qwen3 and GPT-2) whose checkpoints'
# model.safetensors must compare equal to their state.bin (no "holds other weights" note) and whose
# losses must equal the uninterrupted run's, one of them through -y auto. Needs ./train and
# build/run_gpu_tests. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt
# the GPU tests, transformers both ways and the GPT-2 round trip: the earlier closing checks, as they are
OUT=$OUT bash dev/results/closing_checks_2026-11-28_b/run.sh >/dev/null
R=/tmp/resumes; rm -rf $R; mkdir -p $R
python3 tests/fixtures/gen/make_shard.py $R/train.bin 400000 1000 pattern 1
for model in "gpt2|-e tiny" "qwen3|--family qwen3 --layers 2 --dim 128 --heads 4 --kv-heads 2 --head-dim 64 --ffn-dim 256"; do
    tag=${model%%|*}; flags=${model#*|}
    for state in fp32 bf16; do
        RUN="$flags -v 1000 -b 8 -t 128 --max-seq-len 128 -l 2e-3 --warmup 5 --val-every 0 -s 0 -n 10 -x 20 --optimizer-state $state -i $R/train.bin"
        ./train $RUN -o $R/${tag}_${state}_full >$OUT/${tag}_${state}_full.log 2>&1
        ./train $RUN -o $R/${tag}_${state}_cut >/dev/null 2>&1 && rm -rf $R/${tag}_${state}_cut/step_00000020 && echo step_00000010 >$R/${tag}_${state}_cut/latest
        ./train $RUN -y auto -o $R/${tag}_${state}_cut >$OUT/${tag}_${state}_resumed.log 2>&1; rc=$?
        a=$(grep -E '^step +(1[1-9]|20)/' $OUT/${tag}_${state}_full.log | cut -d'|' -f1-2 | md5sum | cut -c1-8)
        b=$(grep -E '^step +(1[1-9]|20)/' $OUT/${tag}_${state}_resumed.log | cut -d'|' -f1-2 | md5sum | cut -c1-8)
        cmp -s $R/${tag}_${state}_full/step_00000020/model.safetensors $R/${tag}_${state}_cut/step_00000020/model.safetensors && w=equal || w=DIFFER
        echo "$tag $state: resumed rc $rc, $(grep -c 'resumed from' $OUT/${tag}_${state}_resumed.log) resume line, $(grep -c 'holds other weights\|cannot read that checkpoint' $OUT/${tag}_${state}_resumed.log) export notes, losses 11-20 $a vs $b, final weights $w" | tee -a $S
    done
done
cat $S
