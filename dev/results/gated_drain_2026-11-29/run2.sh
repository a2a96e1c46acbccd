#!/usr/bin/env bash
# One GPU: the gated MLP backward's drain asking L2 for g and u ahead of its loads (kernels/gated_mlp.cu,
# GM_PF 1: each tile's before it is staged; 2: the next tile's as one starts). GPU tests of the
# products; `bench_gemm_gated_sm90` with the parent's gated_mlp.cu and the variants (build2.sh), two
# alternating rounds; the trainer (B 16, T 2048, bf16 AdamW state) against inputs/train_parent:
# Qwen3-0.6B with GM_PF 2 (./train) and 1, Llama-3.2-1B with GM_PF 2 and with the copies issued inline.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
chmod +x inputs/train_parent build/tmp/gd/bench_* build/tmp/gd/train_*
. dev/bench/family_rounds.sh  # CK, shard, trainer
timeout 120 ./build/run_gpu_tests gated >$OUT/gpu_tests_gated.log 2>&1
echo "gpu tests gated rc $?: $(tail -1 $OUT/gpu_tests_gated.log) [$((SECONDS - t0)) s]" | tee -a $S
for r in 1 2; do for v in parent pf1 pf2 pf1inl pf2inl; do
  timeout 60 build/tmp/gd/bench_$v >$OUT/bench_${v}_r$r.log 2>&1
  echo "r$r $v: $(grep -m1 'checks passed' $OUT/bench_${v}_r$r.log)" | tee -a $S
  grep -E '^\| [0-9]' $OUT/bench_${v}_r$r.log | sed "s|^|r$r $v |" | tee -a $S
done; done
shard q 151936; shard l 128256
# variants' trainers: family_rounds.sh's WHO names inputs/train_WHO, here a link
ln -sf ../build/tmp/gd/train_pf1 inputs/train_pf1; ln -sf ../build/tmp/gd/train_pf2inl inputs/train_pf2inl
trainer 1 new qwen3-0.6b q; trainer 1 parent qwen3-0.6b q; trainer 1 pf1 qwen3-0.6b q
trainer 1 new llama3.2-1b l; trainer 1 parent llama3.2-1b l; trainer 1 pf2inl llama3.2-1b l
rm -rf $CK
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
cat $S
