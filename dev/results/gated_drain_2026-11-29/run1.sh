#!/usr/bin/env bash
# One GPU: the gated MLP backward's drain with g and u loaded a batch ahead (kernels/gated_mlp.cu).
# GPU tests of the products and the backend; `bench_gemm_gated_sm90` linked with the parent's
# gated_mlp.cu, this tree's, and four variants of it (build/tmp/gd/, made by build.sh here), two
# alternating rounds; Qwen3-0.6B and Llama-3.2-1B against inputs/train_parent (B 16, T 2048, bf16
# AdamW state, median tokens/s of the last 8 of 14 steps on random tokens).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
chmod +x inputs/train_parent build/tmp/gd/bench_*
. dev/bench/family_rounds.sh  # CK, shard, trainer
for f in gated swiglu backend; do
  timeout 120 ./build/run_gpu_tests $f >$OUT/gpu_tests_$f.log 2>&1
  echo "gpu tests $f rc $?: $(tail -1 $OUT/gpu_tests_$f.log) $(grep -m5 -E 'FAIL' $OUT/gpu_tests_$f.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
done
for r in 1 2; do for v in ${VARIANTS:-parent new noinline inlineall group4 group16}; do
  timeout 60 build/tmp/gd/bench_$v >$OUT/bench_${v}_r$r.log 2>&1
  echo "r$r $v: $(grep -m1 'checks passed' $OUT/bench_${v}_r$r.log) [$((SECONDS - t0)) s]" | tee -a $S
  grep -E '^\| [0-9]' $OUT/bench_${v}_r$r.log | sed "s|^|r$r $v |" | tee -a $S
done; done
shard q 151936; shard l 128256
trainer 1 parent qwen3-0.6b q; trainer 1 new qwen3-0.6b q
trainer 1 new llama3.2-1b l; trainer 1 parent llama3.2-1b l
rm -rf $CK
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
cat $S
