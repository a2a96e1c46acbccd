#!/usr/bin/env bash
# Fourth call, the code of this entry's last commit: every GPU test, and transformers both ways on the
# GPU with the split bounds (a checkpoint's loss 1e-3, other losses 2e-3, gradient norms 3e-2).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
timeout 300 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1
echo "gpu tests rc $?: $(tail -1 $OUT/gpu_tests.log) $(grep -m5 FAILED $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
timeout 200 python3 dev/check/hf_families_check.py --train ./train --device cuda >$OUT/hf_cuda.log 2>&1
echo "transformers both ways, --device cuda: rc $? [$((SECONDS - t0)) s]" | tee -a $S
grep -E "^[a-z0-9]+:$|ok$|FAILED|agree" $OUT/hf_cuda.log >>$S
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
tail -3 $S
