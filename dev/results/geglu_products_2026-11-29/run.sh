#!/usr/bin/env bash
# One GPU: GeGLU inside the gated MLP's products (kernels/gated_mlp.cu), and the backward without the
# [N, F] buffer those products never write. CALL=1: every GPU test, the products' bench (both
# activations against cuBLASLt + the separate pass), Gemma-3-270M and Qwen3-0.6B against
# inputs/train_parent, transformers both ways on the GPU. CALL=2: Gemma-3-1B (two rounds),
# Gemma-3-270M's second round, Llama-3.2-1B. Trainer runs: B 16, T 2048, bf16 AdamW state, median
# tokens/s of the last 8 of 14 steps on random tokens, this tree's ./train and the parent's binary
# alternating. Needs ./train, build/run_gpu_tests, build/bench_gemm_gated_sm90, inputs/train_parent.
set -uo pipefail
OUT=${OUT:-out}; CALL=${CALL:-1}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
chmod +x inputs/train_parent
. dev/bench/family_rounds.sh  # CK, shard, trainer
if [ $CALL = 1 ]; then
  timeout 300 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1
  echo "gpu tests rc $?: $(tail -1 $OUT/gpu_tests.log) $(grep -m5 FAILED $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
  timeout 120 ./build/bench_gemm_gated_sm90 >$OUT/bench_gated.log 2>&1
  echo "bench rc $?: $(grep 'checks passed' $OUT/bench_gated.log) [$((SECONDS - t0)) s]" | tee -a $S
  grep -E 'FAIL' $OUT/bench_gated.log | head -5 | tee -a $S
  tail -7 $OUT/bench_gated.log | tee -a $S
  shard g 262144; shard q 151936
  trainer 1 parent gemma3-270m g; trainer 1 new gemma3-270m g
  trainer 1 new qwen3-0.6b q
  timeout 200 python3 dev/check/hf_families_check.py --train ./train --device cuda >$OUT/hf_cuda.log 2>&1
  echo "transformers both ways, --device cuda: rc $? [$((SECONDS - t0)) s]" | tee -a $S
  grep -E "^[a-z0-9]+:$|ok$|FAILED|agree" $OUT/hf_cuda.log | tee -a $S
else
  shard g 262144; shard l 128256
  trainer 1 parent gemma3-1b g; trainer 1 new gemma3-1b g
  trainer 2 new gemma3-270m g; trainer 2 parent gemma3-270m g
  trainer 2 new gemma3-1b g; trainer 2 parent gemma3-1b g
  trainer 1 new llama3.2-1b l
fi
rm -rf $CK
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
cat $S
