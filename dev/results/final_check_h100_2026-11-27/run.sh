#!/usr/bin/env bash
# one H100: every GPU test of the final code, then the Hugging Face families check with our side on the GPU.
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; t0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a $S
timeout 240 ./build/run_gpu_tests > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $?: $(grep -E '[0-9]+ passed' $OUT/gpu_tests.log | tail -1) $(grep -m5 FAIL $OUT/gpu_tests.log | tr '\n' ' ' | cut -c1-300) [$((SECONDS-t0)) s]" | tee -a $S
timeout 200 python3 dev/check/hf_families_check.py --device cuda > $OUT/hf_families_cuda.log 2>&1
echo "hf_families_check --device cuda rc $?: $(tail -3 $OUT/hf_families_cuda.log | tr '\n' ' ' | cut -c1-400) [$((SECONDS-t0)) s]" | tee -a $S
tar -czf $OUT/logs.tar.gz -C $OUT gpu_tests.log hf_families_cuda.log && rm -f $OUT/*.log
