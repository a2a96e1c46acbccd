#!/usr/bin/env bash
# One GPU: the QKV projection with QK-norm and RoPE in its epilogue (kernels/qkv_rope.cu) and the
# products' skeleton shared with the gated MLP (kernels/staged_gemm.cuh). CALL=1: the GPU tests of
# the kernels it touches, the gated products' bench (the skeleton moved), Qwen3-0.6B (two rounds) and
# Llama-3.2-1B against inputs/train_parent. CALL=2: every GPU test, transformers both ways on the GPU,
# Gemma-3-1B and Llama-3.2-1B's second round. Trainer runs: B 16, T 2048, bf16 AdamW state, median
# tokens/s of the last 8 of 14 steps on random tokens, this tree's ./train and the parent's binary
# alternating. Needs ./train, build/run_gpu_tests, build/bench_gemm_gated_sm90, inputs/train_parent.
set -uo pipefail
OUT=${OUT:-out}; CALL=${CALL:-1}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
chmod +x inputs/train_parent
. dev/bench/family_rounds.sh  # CK, shard, trainer
tests() { # filters...
  timeout 300 ./build/run_gpu_tests "$@" >>$OUT/gpu_tests.log 2>&1
  echo "gpu tests $* rc $?: $(tail -1 $OUT/gpu_tests.log) $(grep -m5 -E 'FAIL|error' $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
}
if [ $CALL = 1 ]; then
  for f in qkv rope gated backend_cuda memory_estimate; do tests $f; done
  timeout 120 ./build/bench_gemm_gated_sm90 >$OUT/bench_gated.log 2>&1
  echo "bench rc $?: $(grep 'checks passed' $OUT/bench_gated.log) [$((SECONDS - t0)) s]" | tee -a $S
  tail -7 $OUT/bench_gated.log | tee -a $S
  shard q 151936; shard l 128256
  trainer 1 parent qwen3-0.6b q; trainer 1 new qwen3-0.6b q
  trainer 2 new qwen3-0.6b q; trainer 2 parent qwen3-0.6b q
  trainer 1 parent llama3.2-1b l; trainer 1 new llama3.2-1b l
else
  tests
  timeout 200 python3 dev/check/hf_families_check.py --train ./train --device cuda >$OUT/hf_cuda.log 2>&1
  echo "transformers both ways, --device cuda: rc $? [$((SECONDS - t0)) s]" | tee -a $S
  grep -E "^[a-z0-9]+:$|ok$|FAILED|agree" $OUT/hf_cuda.log | tee -a $S
  shard g 262144; shard l 128256
  trainer 1 new gemma3-1b g; trainer 1 parent gemma3-1b g
  trainer 2 new llama3.2-1b l; trainer 2 parent llama3.2-1b l
fi
rm -rf $CK
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
cat $S
