#!/usr/bin/env bash
# families_peers.sh - one GPU: the GPU tests (TESTS: filters, default all), then Qwen3-0.6B and
# Llama-3.2-1B at B 16 (and Qwen3 at B 32) beside PyTorch + Liger eager in bf16 at B 16, the best
# PyTorch stack of dev/RESULTS.md's family entries, in the same call (Liger's wheel from .whl/).
# Ours: median tokens/s of the last 8 of 14 steps, T 2048, random tokens. A summary last.
# EXTRA adds ./train flags to our runs (e.g. "--optimizer-state bf16").
#   [TESTS="attention backend"] [EXTRA="..."] [OUT=out] bash dev/check/families_peers.sh
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
# the end-of-run checkpoint is not what is measured: to memory where /dev/shm has room
CK=/dev/shm/fp; [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)" -gt 30000000 ] 2>/dev/null || CK=/tmp/f/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/summary.txt
t0=$SECONDS
for f in ${TESTS:-all}; do
  timeout 230 ./build/run_gpu_tests $([ "$f" = all ] || echo $f) >> $OUT/gpu_tests.log 2>&1
  echo "gpu tests $f rc $? $(grep -E 'passed' $OUT/gpu_tests.log | tail -1) $(grep -m5 -i 'FAIL' $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS-t0)) s]" | tee -a $OUT/summary.txt
done
python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 6000000 151936 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 6000000 128256 random 4 >/dev/null
for m in "qwen3-0.6b 16 q" "llama3.2-1b 16 l" "qwen3-0.6b 32 q"; do set -- $m
  log=$OUT/ours_$1_b$2.log; rm -rf $CK
  timeout 100 ./train -e $1 -b $2 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 $EXTRA -i /tmp/f/$3.bin -o $CK > $log 2>&1
  echo "ours $1 B=$2: median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep '| loss' $log | tail -1 | grep -o 'fwd.*' | cut -c1-60) $(grep -m1 error $log) [$((SECONDS-t0)) s]" | tee -a $OUT/summary.txt
done
for m in qwen3-0.6b llama3.2-1b; do
  PYTHONUNBUFFERED=1 timeout 150 python3 dev/bench/bench_family_torch.py --model $m --stack liger --batch 16 --precision bf16 --steps 6 --warmup 3 > $OUT/peer_${m}_liger_bf16.log 2>&1
  grep csv_ $OUT/peer_${m}_liger_bf16.log | tee -a $OUT/summary.txt; echo "[$((SECONDS-t0)) s]"
done
rm -rf $CK
echo "---- elapsed $((SECONDS-t0)) s" | tee -a $OUT/summary.txt
cat $OUT/summary.txt
