#!/usr/bin/env bash
# One GPU, the code with --assistant-only-loss: every GPU test and transformers both ways
# (dev/results/closing_checks_2026-11-28_b/run.sh); then 2000 synthetic multi-turn conversations
# through prepare with a Qwen2-style tokenizer and a ChatML template that marks the assistant's
# turns with {% generation %}, once completion-only (every token of a messages line a target) and
# once --assistant-only-loss; a small Qwen3-shaped model fine-tuned 60 steps on each with --pack bfd
# on the GPU, and 2 steps on the CPU reference, whose step-1 losses must agree. Needs ./train and
# build/run_gpu_tests. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary_sft.txt; : >$S
OUT=$OUT bash dev/results/closing_checks_2026-11-28_b/run.sh >$OUT/closing.log 2>&1
M=/tmp/chat; rm -rf $M; mkdir -p $M/tok
cp tests/fixtures/hf_qwen2_style.json $M/tok/tokenizer.json
echo '{"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}' >$M/tok/tokenizer_config.json
python3 -c "import sys; sys.path.insert(0, 'dev/check'); from chat_template_cases import CHATML_THINKING; open('$M/tok/chat_template.jinja', 'w').write(CHATML_THINKING)"
python3 dev/check/make_pairs.py $M/chats.jsonl 1 2000 --conversations
for mode in all assistant; do
    flags=""; [ $mode = assistant ] && flags="--assistant-only-loss"
    ./train prepare --prompt-completion $flags --tokenizer $M/tok/tokenizer.json -o $M/$mode $M/chats.jsonl >$M/prep_$mode.log 2>&1
    echo "prepare $flags rc $?: $(grep -m1 'prepare: ' $M/prep_$mode.log | cut -c1-160)" | tee -a $S
    V=$(grep -o 'vocabulary [0-9]*' $M/prep_$mode.log | head -1 | cut -d' ' -f2)
    common="--family qwen3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64 -v $V -t 512 -b 4 -d 2048 -l 2e-3 --warmup 3 -s 0 --pack bfd -i $M/$mode/train.bin -j $M/$mode/val.bin --tokenizer $M/$mode/tokenizer.json"
    ./train $common -x 60 --val-every 20 --val-batches 8 -o $M/run_$mode >$M/gpu_$mode.log 2>&1
    echo "  cuda: rc $? step 1 $(grep -E '^step +1/' $M/gpu_$mode.log | cut -d'|' -f2), step 60 $(grep -E '^step +60/' $M/gpu_$mode.log | cut -d'|' -f2), last val $(grep 'val loss' $M/gpu_$mode.log | tail -1 | cut -d'|' -f2)" | tee -a $S
    ./train $common --device cpu -x 2 --val-every 0 -o $M/cpu_$mode >$M/cpu_$mode.log 2>&1
    echo "  cpu:  rc $? step 1 $(grep -E '^step +1/' $M/cpu_$mode.log | cut -d'|' -f2), step 2 $(grep -E '^step +2/' $M/cpu_$mode.log | cut -d'|' -f2)" | tee -a $S
    grep -m1 'data:' $M/gpu_$mode.log | cut -c1-200 | tee -a $S
done
cp $M/*.log $OUT/ 2>/dev/null
echo ===; cat $OUT/summary.txt $S
