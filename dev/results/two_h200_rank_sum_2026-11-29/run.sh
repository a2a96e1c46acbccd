#!/usr/bin/env bash
# Two GPUs: ZeRO-1's reduce-scatter after the backward as loads of every rank's gradients over
# NVLink (kernels/rank_sum.cu) against NCCL's reduce-scatter (the parent's binary, inputs/train_parent).
# PARTS picks parts (default "tests same ab"):
#   tests: the rank sum's GPU test and the gradient-wire, AdamW and backend tests, on GPU 0;
#   bench: build/bench_nccl_copy_engine 496 1148 2384 (the exchanges alone and beside GEMMs);
#   same: dev/check/same_bits.sh, parent against new on two GPUs (a sum of two is the same bits
#     either way round, so every line and the final weights must be equal);
#   ab: GPT-2 124M, B 32 a GPU, T 1024, the default mode on two GPUs, base and new alternating
#     AB_ROUNDS times (default 3) at AB_VOCABS (default 50304 262144), median ms of steps 11-40, and the comm wait;
#   qab: Qwen3-0.6B, B 16 a GPU, T 2048, bf16 state, the default on two GPUs, parent and new
#     alternating twice, median ms of the last 10 of 20 steps;
#   mg: SECTIONS "correct bitwise resume" of dev/check/multigpu_check.sh;
#   tp: its throughput and peers sections (one GPU alone on each GPU, the default on two, PyTorch DDP).
# Needs ./train, build/run_gpu_tests (and build/bench_nccl_copy_engine) built beforehand. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; : >$S
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee -a $S
t0=$SECONDS
PARTS=${PARTS:-tests same ab}; has() { [[ " $PARTS " == *" $1 "* ]]; }
P=${BASE:-inputs/train_parent} # the base binary: the parent, or BASE
if has tests; then
  CUDA_VISIBLE_DEVICES=0 timeout 200 ./build/run_gpu_tests rank_sum >$OUT/gpu_tests.log 2>&1
  CUDA_VISIBLE_DEVICES=0 timeout 200 ./build/run_gpu_tests grad_ >>$OUT/gpu_tests.log 2>&1
  CUDA_VISIBLE_DEVICES=0 timeout 200 ./build/run_gpu_tests adamw >>$OUT/gpu_tests.log 2>&1
  CUDA_VISIBLE_DEVICES=0 timeout 200 ./build/run_gpu_tests backend >>$OUT/gpu_tests.log 2>&1
  echo "gpu tests: $(grep -E 'passed, [0-9]+ failed' $OUT/gpu_tests.log | tr '\n' ' ') $(grep -m5 FAILED $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
fi
if has bench; then
  timeout 200 ./build/bench_nccl_copy_engine 496 1148 2384 >$OUT/bench_nccl.log 2>&1
  echo "bench_nccl_copy_engine rc $?: [$((SECONDS - t0)) s]" | tee -a $S
  grep -E 'rank 0 (reduce-scatter|all-to-all)|gradients' $OUT/bench_nccl.log | tee -a $S
fi
if has same; then
  BASE=$P NEW=./train G=2 MG_TMP=/tmp/sb timeout 400 bash dev/check/same_bits.sh >$OUT/same_bits.log 2>&1
  echo "same_bits rc $? [$((SECONDS - t0)) s]" | tee -a $S
  cat $OUT/same_bits.log | grep 'same bits' | tee -a $S
fi
if has ab; then
  mkdir -p /tmp/ab
  for V in ${AB_VOCABS:-50304 262144}; do
    python3 tests/fixtures/gen/make_shard.py /tmp/ab/rand_$V.bin 40000000 $V random 3 >/dev/null
    for r in $(seq ${AB_ROUNDS:-3}); do
      for b in parent new; do
        bin=$([ $b = parent ] && echo $P || echo ./train)
        log=$OUT/ab_${V}_${b}_$r.log
        rm -rf /tmp/ab/run
        timeout 120 $bin -g 2 -e d12 -v $V -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 \
          -i /tmp/ab/rand_$V.bin -o /tmp/ab/run >$log 2>&1
        ms=$(grep '| loss' $log | tail -30 | grep -oE '\| [0-9.]+ ms \|' | grep -oE '[0-9.]+' | sort -n | sed -n 15p)
        comm=$(grep '| loss' $log | tail -30 | grep -o 'comm [0-9.]*' | awk '{print $2}' | sort -n | sed -n 15p)
        echo "V $V round $r $b: ${ms:-FAILED} ms/step, comm wait ${comm:-?} ms $(grep -m1 'gradient reduce' $log) $(grep -m1 -i error $log)" | tee -a $S
      done
    done
  done
  rm -rf /tmp/ab
fi
if has qab; then
  mkdir -p /tmp/qab
  python3 tests/fixtures/gen/make_shard.py /tmp/qab/rand.bin 3000000 151936 random 1 >/dev/null
  for r in 1 2; do
    for b in parent new; do
      bin=$([ $b = parent ] && echo $P || echo ./train)
      log=$OUT/qab_${b}_$r.log
      rm -rf /tmp/qab/run
      timeout 200 $bin -g 2 -e qwen3-0.6b -b 16 -t 2048 --max-seq-len 2048 --optimizer-state bf16 -x 20 --warmup 2 \
        --val-every 0 -s 0 -i /tmp/qab/rand.bin -o /tmp/qab/run >$log 2>&1
      ms=$(grep '| loss' $log | tail -10 | grep -oE '\| [0-9.]+ ms \|' | grep -oE '[0-9.]+' | sort -n | sed -n 5p)
      comm=$(grep '| loss' $log | tail -10 | grep -o 'comm [0-9.]*' | awk '{print $2}' | sort -n | sed -n 5p)
      tok=$(grep '| loss' $log | tail -10 | grep -oE '[0-9.]+ tok/s' | grep -oE '[0-9.]+' | sort -n | sed -n 5p)
      echo "Qwen3-0.6B round $r $b: ${ms:-FAILED} ms/step, $tok tok/s, comm wait ${comm:-?} ms $(grep -m1 -i error $log)" | tee -a $S
    done
  done
  rm -rf /tmp/qab
fi
if has mg; then
  G=2 TRAIN_PREBUILT=1 SECTIONS="correct bitwise resume" OUT=$OUT/mg timeout 450 bash dev/check/multigpu_check.sh >$OUT/multigpu.log 2>&1
  echo "multigpu_check (correct bitwise resume): rc $? [$((SECONDS - t0)) s]" | tee -a $S
  cat $OUT/mg/summary.txt >>$S
fi
if has tp; then
  G=2 TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="50304 262144" TP_MODES="default|" OUT=$OUT/tp timeout 560 bash dev/check/multigpu_check.sh >$OUT/throughput.log 2>&1
  echo "multigpu_check (throughput peers): rc $? [$((SECONDS - t0)) s]" | tee -a $S
  cat $OUT/tp/summary.txt >>$S
fi
echo ===; cat $S
