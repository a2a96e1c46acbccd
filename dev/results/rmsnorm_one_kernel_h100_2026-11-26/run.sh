#!/usr/bin/env bash
# One GPU: RMSNorm's backward in one kernel for C <= 2048 (commit 3d96588) against its parent a5fdd9e:
# the GPU tests rmsnorm and backend, bench_kernels three alternating rounds, Qwen3-0.6B and Llama-3.2-1B at B 16.
set -uo pipefail
OUT=${OUT:-out}; M=/tmp/r9; mkdir -p $OUT $M
S=$OUT/summary_rms.txt; : >$S
say() { echo "$1" | tee -a $S; }
BASE=${BASE:?the parent's ./train}; NEW=${NEW:?this change's ./train}
TESTS=${TESTS:?this change's build/run_gpu_tests}; BENCH_BASE=${BENCH_BASE:?the parent's build/bench_kernels}; BENCH_NEW=${BENCH_NEW:?this change's build/bench_kernels}

$TESTS rmsnorm >$OUT/rms_tests.log 2>&1; say "tests rmsnorm: $(grep -E 'passed' $OUT/rms_tests.log | tail -1)"
$TESTS backend >$OUT/rms_backend.log 2>&1; say "tests backend: $(grep -E 'passed' $OUT/rms_backend.log | tail -1)"
for r in 1 2 3; do for b in main rms; do
  $([ $b = main ] && echo $BENCH_BASE || echo $BENCH_NEW) 16 families >$M/bk.log 2>&1
  say "bench $b r$r: $(grep -E 'rmsnorm_backward' $M/bk.log | tr -s ' ' | cut -c1-90 | tr '\n' ';')"; done; done
python3 tests/fixtures/gen/make_shard.py $M/rq.bin 2000000 151936 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/rl.bin 2000000 128256 random 3 >/dev/null
for r in 1 2; do for b in main rms; do bin=$([ $b = main ] && echo $BASE || echo $NEW)
  rm -rf $M/o; timeout 120 $bin -e qwen3-0.6b -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i $M/rq.bin -o $M/o >$M/q.log 2>&1
  say "Qwen3-0.6B B16 $b r$r: $(grep '| loss' $M/q.log | tail -8 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 4p) $(grep '| loss' $M/q.log | tail -1 | grep -oE 'bwd [0-9.]+') $(grep -m1 error $M/q.log)"
done; done
for b in main rms; do bin=$([ $b = main ] && echo $BASE || echo $NEW)
  rm -rf $M/o; timeout 150 $bin -e llama3.2-1b -b 16 -t 2048 --max-seq-len 2048 -x 12 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i $M/rl.bin -o $M/o >$M/l.log 2>&1
  say "Llama-3.2-1B B16 $b: $(grep '| loss' $M/l.log | tail -6 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 3p) $(grep -m1 error $M/l.log)"
done
echo "==== rms summary"; cat $S
