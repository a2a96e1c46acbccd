#!/usr/bin/env bash
# One GPU: the gated MLP's products with SwiGLU in their epilogues (kernels/gated_mlp.cu) in the
# trainer. Every GPU test; the products' bench against cuBLASLt + the separate pass; Qwen3-0.6B and
# Llama-3.2-1B at B 16, T 2048, bf16 AdamW state, this tree's ./train against inputs/train_parent
# (the parent commit's) in alternating rounds, median tokens/s of the last 8 of 14 steps on random
# tokens; transformers both ways on the GPU. Needs ./train, build/run_gpu_tests,
# build/bench_gemm_gated_sm90, inputs/train_parent. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
timeout 300 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1
echo "gpu tests rc $?: $(tail -1 $OUT/gpu_tests.log) $(grep -m5 FAILED $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
timeout 120 ./build/bench_gemm_gated_sm90 >$OUT/bench_gated.log 2>&1
echo "bench rc $?: $(grep 'checks passed' $OUT/bench_gated.log) [$((SECONDS - t0)) s]" | tee -a $S
tail -5 $OUT/bench_gated.log | tee -a $S
CK=/dev/shm/fp
python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 6000000 151936 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 6000000 128256 random 4 >/dev/null
chmod +x inputs/train_parent
for round in 1 2; do
  for m in "qwen3-0.6b q" "llama3.2-1b l"; do set -- $m
    for who in parent new; do
      bin=./train; [ $who = parent ] && bin=inputs/train_parent
      log=$OUT/${who}_$1_r$round.log; rm -rf $CK
      timeout 120 $bin -e $1 -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 \
        --optimizer-state bf16 -i /tmp/f/$2.bin -o $CK >$log 2>&1
      echo "r$round $who $1: median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB'), step 14 $(grep -E '^step +14/' $log | cut -d'|' -f2) $(grep '| loss' $log | tail -1 | grep -o 'fwd.*' | cut -c1-50) $(grep -m1 error $log) [$((SECONDS - t0)) s]" | tee -a $S
    done
  done
done
rm -rf $CK
timeout 200 python3 dev/check/hf_families_check.py --train ./train --device cuda >$OUT/hf_cuda.log 2>&1
echo "transformers both ways, --device cuda: rc $? [$((SECONDS - t0)) s]" | tee -a $S
grep -E "^[a-z0-9]+:$|ok$|FAILED|agree" $OUT/hf_cuda.log | tee -a $S
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
cat $S
