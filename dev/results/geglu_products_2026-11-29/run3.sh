#!/usr/bin/env bash
# Third call, with the backward's inline copy issuer up to C = 1536 (was 1024): the GPU tests of the
# products, the activations, the backend and the memory estimate; the products' bench; Gemma-3-1B
# against inputs/train_parent; Llama-3.2-1B; transformers' Llama check with the products (./train)
# and without them (inputs/train_separate, the backend's gated_products set to 0; built at 507caa1).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
chmod +x inputs/*
. dev/bench/family_rounds.sh  # CK, shard, trainer
for f in gated backend_cuda memory_estimate; do
  timeout 200 ./build/run_gpu_tests $f >$OUT/gpu_tests_$f.log 2>&1
  echo "gpu tests $f rc $?: $(tail -1 $OUT/gpu_tests_$f.log) $(grep -m5 FAILED $OUT/gpu_tests_$f.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
done
timeout 120 ./build/bench_gemm_gated_sm90 >$OUT/bench_gated.log 2>&1
echo "bench rc $?: $(grep 'checks passed' $OUT/bench_gated.log) [$((SECONDS - t0)) s]" | tee -a $S
tail -6 $OUT/bench_gated.log | tee -a $S
shard g 262144; shard l 128256
trainer 1 new gemma3-1b g; trainer 1 parent gemma3-1b g
trainer 1 new llama3.2-1b l
for bin in ./train inputs/train_separate; do
  timeout 60 python3 dev/check/hf_families_check.py --train $bin --device cuda --family llama >$OUT/hf_llama_$(basename $bin).log 2>&1
  echo "transformers, llama, $bin: rc $?: $(grep -E 'gradient norm' $OUT/hf_llama_$(basename $bin).log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
done
rm -rf $CK
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
cat $S
