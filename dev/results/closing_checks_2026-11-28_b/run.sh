#!/usr/bin/env bash
# One GPU, the code of the day's last commits: every GPU test; transformers against our checkpoints both ways
# (Llama, Qwen2, Qwen3, Gemma 3: their save_pretrained through --init-from, our export through
# AutoModelForCausalLM) on the GPU and on the CPU reference; the GPT-2 round trip of a checkpoint
# with its tokenizer (greedy tokens against ./train sample). Needs ./train and build/run_gpu_tests.
# Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $S
t0=$SECONDS
timeout 300 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1
echo "gpu tests rc $?: $(tail -1 $OUT/gpu_tests.log) $(grep -m5 FAILED $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
for dev in cuda cpu; do
    timeout 200 python3 dev/check/hf_families_check.py --train ./train --device $dev >$OUT/hf_$dev.log 2>&1
    echo "transformers both ways, --device $dev: rc $? [$((SECONDS - t0)) s]" | tee -a $S
    grep -E "^[a-z0-9]+:$|ok$|FAILED|agree" $OUT/hf_$dev.log | tee -a $S
done
timeout 150 bash dev/check/hf_roundtrip.sh >$OUT/hf_roundtrip.log 2>&1
echo "GPT-2 round trip: rc $? $(tail -1 $OUT/hf_roundtrip.log) [$((SECONDS - t0)) s]" | tee -a $S
cat $S
