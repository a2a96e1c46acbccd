#!/usr/bin/env bash
# One GPU, after a review of kernels/gated_mlp.cu: the products' tests (now with more tiles than
# clusters, both copy issuers), the backend against the CPU reference (a tiny Llama whose MLP takes
# the products, at recompute levels 0 and 2), the bench's checks; and Qwen3-0.6B at recompute level
# 2 against level 0 (the backward re-forms the gate/up rows with the forward's products: every loss
# and norm line the same). Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt; : >$S
t0=$SECONDS
for f in gated swiglu backend_cuda; do
  timeout 200 ./build/run_gpu_tests $f >$OUT/gpu_tests_$f.log 2>&1
  echo "gpu tests $f rc $?: $(tail -1 $OUT/gpu_tests_$f.log) $(grep -m5 FAILED $OUT/gpu_tests_$f.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
done
timeout 60 ./build/bench_gemm_gated_sm90 --check-only >$OUT/bench_check.log 2>&1
echo "bench checks rc $?: $(tail -1 $OUT/bench_check.log) [$((SECONDS - t0)) s]" | tee -a $S
python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 2000000 151936 random 3 >/dev/null
for lvl in 0 2; do
  timeout 90 ./train -e qwen3-0.6b -b 4 -t 512 --max-seq-len 512 -x 5 --warmup 1 --val-every 0 -s 0 --recompute-gelu $lvl \
    -i /tmp/f/q.bin -o /dev/shm/rg$lvl >$OUT/qwen3_recompute$lvl.log 2>&1
  echo "qwen3 recompute $lvl rc $?: $(grep -m1 'activations' $OUT/qwen3_recompute$lvl.log | cut -c1-120)" | tee -a $S
  grep -E '^step ' $OUT/qwen3_recompute$lvl.log | cut -d'|' -f2,5 >$OUT/lines$lvl.txt
  rm -rf /dev/shm/rg$lvl
done
if [ -s $OUT/lines0.txt ] && cmp -s $OUT/lines0.txt $OUT/lines2.txt; then echo "recompute 2 = recompute 0: $(wc -l <$OUT/lines0.txt) loss and norm lines the same" | tee -a $S
else echo "recompute 2 differs from 0:"; paste $OUT/lines0.txt $OUT/lines2.txt | tee -a $S; fi
echo "---- $((SECONDS - t0)) s"; cat $S
