#!/bin/bash
# The merged tree on the GPU: every GPU test, the sanitizers on the attention kernels, the own
# Hopper GEMM's self-check, then the trainer before/after the attention backward.
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$SECONDS
timeout 220 ./build/run_gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $? $(grep -E 'passed' $OUT/gpu_tests.log | tail -1) $(grep -m5 -i fail $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS-t0)) s]"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for f in attention_backward_128 attention_128_row; do
  timeout 100 $CS --tool memcheck --leak-check no ./build/run_gpu_tests $f > $OUT/memcheck_$f.log 2>&1; echo "memcheck $f rc $? $(grep -E 'ERROR SUMMARY|passed' $OUT/memcheck_$f.log | tr '\n' ' ') [$((SECONDS-t0)) s]"
done
timeout 100 $CS --tool synccheck ./build/run_gpu_tests attention_backward_128 > $OUT/synccheck.log 2>&1; echo "synccheck rc $? $(grep -E 'ERROR SUMMARY|passed' $OUT/synccheck.log | tr '\n' ' ') [$((SECONDS-t0)) s]"
timeout 60 inputs/bench_gemm_sm90 --check-only > $OUT/gemm90_check.log 2>&1; rc=$?; echo "gemm90 check rc $rc [$((SECONDS-t0)) s]"; tail -12 $OUT/gemm90_check.log
if [ $rc = 0 ]; then timeout 90 inputs/bench_gemm_sm90 > $OUT/gemm90_bench.log 2>&1; echo "gemm90 bench rc $?"; tail -20 $OUT/gemm90_bench.log; fi
timeout 90 python3 dev/check/hf_families_check.py --train ./train 2>&1 | grep -v Warning | tail -2
python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 6000000 151936 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 6000000 128256 random 4 >/dev/null
for m in "qwen3-0.6b 16 q" "llama3.2-1b 8 l" "llama3.2-1b 16 l"; do set -- $m; for bin in inputs/train_main ./train; do
  log=$OUT/$1_b$2_$(basename $bin).log; rm -rf /tmp/f/r
  timeout 80 $bin -e $1 -b $2 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i /tmp/f/$3.bin -o /tmp/f/r > $log 2>&1
  echo "$1 B=$2 $(basename $bin): median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep '| loss' $log | tail -1 | grep -o 'fwd.*' | cut -c1-70) $(grep -m1 error $log) [$((SECONDS-t0)) s]"
done; done
