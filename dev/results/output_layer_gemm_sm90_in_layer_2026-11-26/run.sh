#!/bin/bash
# The final tree (our Hopper GEMM in the fused layer's backward): every GPU test, the GEMM's checks
# and times, the layer against the tree before it, and the trainer before/after.
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$SECONDS
timeout 200 ./build/run_gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $? $(grep -E 'passed, ' $OUT/gpu_tests.log | tail -1) $(grep -m6 FAILED $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS-t0)) s]"
grep -E "sm90_gemm" $OUT/gpu_tests.log | cut -c1-150
timeout 40 ./build/bench_gemm_sm90 --check-only > $OUT/gemm_check.log 2>&1; echo "gemm check rc $? $(grep -E 'checks passed' $OUT/gemm_check.log) [$((SECONDS-t0)) s]"
timeout 60 ./build/bench_gemm_sm90 > $OUT/gemm_bench.log 2>&1; echo "gemm bench rc $?"; grep -E "^\|" $OUT/gemm_bench.log
for s in 768,16384,262144 4096,4096,128256 768,16384,50304; do for b in inputs/bench_output_layer_pre ./build/bench_output_layer; do
  timeout 40 $b --no-canonical --no-streaming --reps 5 --shape $s > $OUT/layer_$(basename $b)_$s.log 2>&1
  echo "layer $s $(basename $b): rc $? $(grep -E '^csv,' $OUT/layer_$(basename $b)_$s.log | tail -1)"
done; done; echo "[$((SECONDS-t0)) s]"
python3 tests/fixtures/gen/make_shard.py /tmp/f/g.bin 20000000 262144 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 6000000 151936 random 3 >/dev/null
for m in "-e d12 -v 262144 -b 32 -t 1024 -x 30 --warmup 5|g|gpt2_v262144" "-e qwen3-0.6b -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2|q|qwen3_b16"; do
  IFS='|' read args shard tag <<< "$m"
  for bin in inputs/train_pre_gemm ./train; do log=$OUT/${tag}_$(basename $bin).log; rm -rf /tmp/f/r
    timeout 100 $bin $args --val-every 0 -s 0 --step-parts 1 -i /tmp/f/$shard.bin -o /tmp/f/r > $log 2>&1
    echo "$tag $(basename $bin): median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o 'fwd.*' | cut -c1-90) $(grep -m1 error $log) [$((SECONDS-t0)) s]"
  done; done
