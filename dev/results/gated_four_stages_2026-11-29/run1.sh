#!/usr/bin/env bash
# One GPU: the gated MLP's products with a fourth ring stage (half a tile staged, the other half held
# in registers through the next tile's products). GPU tests of the products, then
# `bench_gemm_gated_sm90` of this tree against inputs/bench_parent (the parent's gated_mlp.cu linked
# the same way), alternating rounds, then Qwen3-0.6B and Llama-3.2-1B in the trainer against
# inputs/train_parent (dev/bench/family_rounds.sh). VARIANTS: other inputs/bench_NAME to time beside
# them; TESTS, ROUNDS and TRAINER=0 trim the call.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
chmod +x inputs/*
. dev/bench/family_rounds.sh  # CK, shard, trainer
for f in ${TESTS-gated swiglu}; do
  timeout 200 ./build/run_gpu_tests $f >$OUT/gpu_tests_$f.log 2>&1
  echo "gpu tests $f rc $?: $(tail -1 $OUT/gpu_tests_$f.log) $(grep -m5 -E 'FAIL' $OUT/gpu_tests_$f.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
done
for r in $(seq 1 ${ROUNDS:-2}); do for v in ${VARIANTS:-parent new}; do
  bin=build/bench_gemm_gated_sm90; [ $v = new ] || bin=inputs/bench_$v
  timeout 90 $bin >$OUT/bench_${v}_r$r.log 2>&1
  echo "r$r $v: $(grep -m1 'checks passed' $OUT/bench_${v}_r$r.log) [$((SECONDS - t0)) s]" | tee -a $S
  grep -E '^\| [0-9]' $OUT/bench_${v}_r$r.log | sed "s|^|r$r $v |" | tee -a $S
done; done
if [ "${TRAINER:-1}" = 1 ]; then
  shard q 151936; shard l 128256
  trainer 1 parent qwen3-0.6b q; trainer 1 new qwen3-0.6b q
  trainer 1 new llama3.2-1b l; trainer 1 parent llama3.2-1b l
  rm -rf $CK
fi
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
cat $S
