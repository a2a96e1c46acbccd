#!/usr/bin/env bash
# Correctness on two GPUs: the exchange's GPU tests, then dev/check/multigpu_check.sh's default
# sections and the families on this tree's ./train.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
chmod +x ./train
./build/run_gpu_tests grad_ >$OUT/gpu_tests_grad.log 2>&1
echo "gpu tests grad_: $(grep -E 'passed|failed' $OUT/gpu_tests_grad.log | tail -1)"
SECTIONS="${SECTIONS:-tests correct bitwise families nodes resume kill}" TRAIN_PREBUILT=1 G=2 OUT=$OUT \
    timeout ${LIMIT:-500} bash dev/check/multigpu_check.sh >$OUT/mg_run.log 2>&1
echo "multigpu_check: exit $?"
tar -czf $OUT/mg_logs.tgz -C ${MG_TMP:-/tmp/mg} $(cd ${MG_TMP:-/tmp/mg} && ls *.log) 2>/dev/null
cat $OUT/summary.txt
