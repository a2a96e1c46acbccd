#!/usr/bin/env bash
# One GPU: the RoPE kernels on 32-bit task indices (kernels/rope.cu). Every GPU test; `bench_kernels
# 32 families` with this tree's kernels and with the parent's rope.cu (build/tmp/rp/bench_parent,
# linked beside the tree) in two alternating rounds; Qwen3-0.6B against inputs/train_parent (B 16,
# T 2048, bf16 AdamW state, median tokens/s of the last 8 of 14 steps on random tokens), its second
# round after transformers both ways on the GPU. Needs ./train, build/run_gpu_tests,
# build/bench_kernels, build/tmp/rp/bench_parent, inputs/train_parent.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
chmod +x inputs/train_parent build/tmp/rp/bench_parent
. dev/bench/family_rounds.sh  # CK, shard, trainer
timeout 240 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1
echo "gpu tests rc $?: $(tail -1 $OUT/gpu_tests.log) $(grep -m5 -E 'FAIL' $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
for r in 1 2; do for b in build/tmp/rp/bench_parent build/bench_kernels; do
  timeout 60 $b 32 families 2>&1 | grep -E 'rope' | sed "s|^|r$r $(basename $b): |" | tee -a $S
done; done
shard q 151936
trainer 1 parent qwen3-0.6b q; trainer 1 new qwen3-0.6b q
timeout 150 python3 dev/check/hf_families_check.py --train ./train --device cuda >$OUT/hf_cuda.log 2>&1
echo "transformers both ways, --device cuda: rc $? [$((SECONDS - t0)) s]" | tee -a $S
grep -E "^[a-z0-9]+:$|ok$|FAILED|agree" $OUT/hf_cuda.log | tee -a $S
trainer 2 new qwen3-0.6b q; trainer 2 parent qwen3-0.6b q
rm -rf $CK
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
cat $S
