#!/usr/bin/env bash
# Second call: Gemma-3-1B (two rounds), Gemma-3-270M's and Qwen3-0.6B's second rounds, Llama-3.2-1B,
# against inputs/train_parent as run.sh does; the backward's copy issuer at C > 1024
# (inputs/bench_gated_inline_all: kernels/gated_mlp.cu with GM_INLINE_MAX_C raised past every C,
# beside this tree's bench); transformers' Llama check with the products (./train) and without them
# (inputs/train_separate: the backend's gated_products set to 0). CALL=2 (default) runs the benches and
# the Gemma and Qwen3 rounds, CALL=3 Llama and transformers.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
chmod +x inputs/*
. dev/bench/family_rounds.sh  # CK, shard, trainer
if [ "${CALL:-2}" = 2 ]; then
for b in build/bench_gemm_gated_sm90 inputs/bench_gated_inline_all; do
  timeout 100 $b --shape 32768,1152,6912 --shape 32768,2048,8192 --shape 32768,1536,8960 --gelu >$OUT/$(basename $b)_gelu.log 2>&1
  echo "$b GELU rc $?"; tail -3 $OUT/$(basename $b)_gelu.log | tee -a $S
  timeout 100 $b --shape 32768,1152,6912 --shape 32768,2048,8192 >$OUT/$(basename $b)_silu.log 2>&1
  echo "$b SiLU rc $?"; tail -2 $OUT/$(basename $b)_silu.log | tee -a $S
done
echo "[$((SECONDS - t0)) s]" | tee -a $S
shard g 262144; shard q 151936
trainer 1 parent gemma3-1b g; trainer 1 new gemma3-1b g
trainer 2 new gemma3-270m g; trainer 2 parent gemma3-270m g
trainer 2 new qwen3-0.6b q; trainer 2 parent qwen3-0.6b q
trainer 2 new gemma3-1b g; trainer 2 parent gemma3-1b g
fi
[ "${CALL:-2}" = 2 ] && { rm -rf $CK; echo "---- elapsed $((SECONDS - t0)) s"; cat $S; exit 0; }
shard l 128256
trainer 1 new llama3.2-1b l
for bin in ./train inputs/train_separate; do
  timeout 60 python3 dev/check/hf_families_check.py --train $bin --device cuda --family llama >$OUT/hf_llama_$(basename $bin).log 2>&1
  echo "transformers, llama, $bin: rc $?: $(grep -E 'gradient norm' $OUT/hf_llama_$(basename $bin).log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
done
rm -rf $CK
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
cat $S
