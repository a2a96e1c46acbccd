#!/usr/bin/env bash
# Two H100s, on the code of commit 6765b78: NCCL channel probes (the bench, and the trainer in ZeRO-1
# after the backward), our Hopper GEMM (dev/bench/gemm_sm90.cu) at the body's backward shapes against
# cuBLAS, every GPU test, and multigpu_check correct/bitwise/families with the --zero auto default.
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-out}; MG=/tmp/s7; mkdir -p $OUT $MG
S=$OUT/summary.txt; : >$S
say() { echo "$1" | tee -a $S; }
left() { echo $(( 585 - $(date +%s) + START )); }
chmod +x ./train build/* 2>/dev/null
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $S

# ---- 1. NCCL channels: reduce-scatter and all-gather alone (and beside GEMMs) at 496 MB
for env in "" "NCCL_MIN_CTAS=32 NCCL_MAX_CTAS=32" "NCCL_MIN_CTAS=32 NCCL_MAX_CTAS=32 NCCL_BUFFSIZE=16777216"; do
  tag=$(echo "${env:-default}" | tr ' =' '_-')
  env $env NCCL_DEBUG=WARN timeout 60 ./build/bench_nccl_copy_engine 496 >$OUT/nccl_$tag.txt 2>&1
  say "nccl [${env:-default}]:"; grep -E 'reduce-scatter fp32, kernels|all-gather bf16, kernels|all-gather bf16, copy|error' $OUT/nccl_$tag.txt | cut -c1-60 | tee -a $S
done

# ---- 2. trainer, ZeRO-1 after the backward, default channels vs 32 CTAs, GPT-2 124M B 32
rows=()
tp() { # tag V env flags...
  local tag=$1 V=$2 envs=$3; shift 3
  local log=$MG/tp_$tag.log
  rm -rf $MG/tp
  env $envs timeout 90 ./train "$@" --step-parts 1 -e d12 -v $V -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 \
      -i $MG/rand_$V.bin -o $MG/tp >$log 2>&1
  col() { grep '| loss' $log | tail -30 | grep -oE "$1" | grep -oE '[0-9.]+' | sort -n | sed -n 15p; }
  local ms=$(col '\| [0-9.]+ ms \|') tok=$(col '[0-9.]+ tok/s') comm=$(col 'comm [0-9.]+') bwd=$(col 'bwd [0-9.]+')
  say "$tag: ${ms:-FAIL} ms/step, ${tok:-0} tok/s, comm ${comm:--} ms, bwd ${bwd:--} ms $(grep -m1 -E 'error|data parallel' $log)"
  rows+=("$tag|${tok:-0}|${ms:-0}|${comm:--}|${bwd:--}")
}
for V in 50304 262144; do
  python3 tests/fixtures/gen/make_shard.py $MG/rand_$V.bin 8000000 $V random 3 >/dev/null
  tp V${V}_1gpu $V "" -g 1
  for round in 1 2; do
    [ "$(left)" -gt 360 ] || { say "(time: V$V round $round skipped)"; continue; }
    tp V${V}_after_r$round $V "" -g 2 --zero 1 --overlap-comm 0
    tp V${V}_after32_r$round $V "NCCL_MIN_CTAS=32 NCCL_MAX_CTAS=32" -g 2 --zero 1 --overlap-comm 0
  done
done
python3 - "${rows[@]}" <<'PY' | tee -a $S
import sys
rows = [r.split("|") for r in sys.argv[1:]]
one = {r[0].split("_")[0]: float(r[1]) for r in rows if r[0].endswith("1gpu") and float(r[1]) > 0}
for tag, tok, ms, comm, bwd in rows:
    base = one.get(tag.split("_")[0])
    scale = f"{float(tok) / base:.3f}x" if base and not tag.endswith("1gpu") else ""
    print(f"{tag:22} {tok:>9} {ms:>8} {comm:>6} {bwd:>6} {scale:>8}")
PY

# ---- 3. every GPU test on GPU 0, beside the body-GEMM probe on GPU 1
( t0=$(date +%s); CUDA_VISIBLE_DEVICES=0 timeout 240 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1; echo "rc $?" >>$OUT/gpu_tests.log
  echo "gpu tests: $(grep -E '[0-9]+ passed' $OUT/gpu_tests.log | tail -1) ($(( $(date +%s) - t0 )) s)" >$OUT/gpu_tests_line.txt ) &
tests_pid=$!
CUDA_VISIBLE_DEVICES=1 timeout 150 ./build/bench_gemm_sm90 --reps 10 \
  --shape dh:32768,768,2304 --shape dh:32768,768,3072 --shape dh:32768,3072,768 --shape dh:32768,768,768 \
  --shape dw:2304,768,32768 --shape dw:3072,768,32768 --shape dw:768,3072,32768 --shape dw:768,768,32768 \
  --shape dh:32768,1024,4096 --shape dh:32768,2048,1024 --shape dh:32768,1024,6144 --shape dh:32768,3072,1024 \
  --shape dw:4096,1024,32768 --shape dw:1024,2048,32768 --shape dw:6144,1024,32768 --shape dw:1024,3072,32768 \
  >$OUT/gemm_body_probe.txt 2>&1
say "gemm body probe (rc $?):"; grep -E '^\|' $OUT/gemm_body_probe.txt | tee -a $S
wait $tests_pid
cat $OUT/gpu_tests_line.txt | tee -a $S; grep -E "FAIL" $OUT/gpu_tests.log | head -8 | tee -a $S

# ---- 4. multi-GPU correctness with the --zero auto default
L=$(( $(left) - 10 ))
TRAIN_PREBUILT=1 G=2 SECTIONS="correct bitwise families" OUT=$OUT/mg MG_TMP=/tmp/mg timeout $L \
  bash dev/check/multigpu_check.sh >$OUT/multigpu.log 2>&1
say "== multigpu correct bitwise families (rc $?, $(( $(date +%s) - START )) s)"
cat $OUT/mg/summary.txt >>$S 2>/dev/null
tar -czf $OUT/logs.tgz -C $MG . 2>/dev/null
echo "==== summary"; cat $S
