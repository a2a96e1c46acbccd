#!/usr/bin/env bash
# One GPU: the assistant-only fine-tuning of run.sh (2000 synthetic conversations, a 2-layer
# Qwen3-shaped model, 200 steps), then `./train sample --chat` of its checkpoint greedily on the GPU
# and on the CPU reference: the reply must end at <|im_end|> (the tokenizer_config.json's eos_token).
# Needs ./train. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary_chat.txt; : >$S
M=/tmp/chat2; rm -rf $M; mkdir -p $M/tok
cp tests/fixtures/hf_qwen2_style.json $M/tok/tokenizer.json
echo '{"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}' >$M/tok/tokenizer_config.json
python3 -c "import sys; sys.path.insert(0, 'dev/check'); from chat_template_cases import CHATML_THINKING; open('$M/tok/chat_template.jinja', 'w').write(CHATML_THINKING)"
python3 dev/check/make_pairs.py $M/chats.jsonl 1 2000 --conversations
./train prepare --prompt-completion --assistant-only-loss --tokenizer $M/tok/tokenizer.json -o $M/data $M/chats.jsonl >$M/prep.log 2>&1
echo "prepare rc $?: $(grep -m1 'prepare: ' $M/prep.log | cut -c1-150)" | tee -a $S
./train --family qwen3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64 -v 700 -t 512 -b 8 -d 4096 -l 3e-3 --warmup 10 -s 0 --pack bfd -x 200 --val-every 100 --val-batches 8 -i $M/data/train.bin -j $M/data/val.bin --tokenizer $M/data/tokenizer.json -o $M/run >$M/train.log 2>&1
echo "train rc $?: $(grep -E '^step +200/' $M/train.log | cut -d'|' -f2) $(grep 'val loss' $M/train.log | tail -1 | cut -d'|' -f2)" | tee -a $S
for dev in cuda cpu; do
    ./train sample -o $M/run --device $dev --chat "Question 7.0: the answer is green and blue" -G 80 --temperature 0 --ids >$M/sample_$dev.log 2>&1
    echo "sample --chat --device $dev rc $?: $(tr '\n' ' ' <$M/sample_$dev.log | cut -c1-400)" | tee -a $S
done
cp $M/*.log $OUT/ 2>/dev/null
echo ===; cat $S
