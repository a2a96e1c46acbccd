#!/usr/bin/env bash
# One H100: the attention backward in one kernel (dQ's shares added over key blocks in a fixed
# order) against the two-kernel backward ($BASE, $BASE_BENCH: the parent's ./train and
# build/bench_kernels): the GPU tests of attention, the kernel bench, then the trainer A/B.
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; : >$S
say() { echo "$1" | tee -a $S; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $S
t0=$SECONDS
timeout 200 ./build/run_gpu_tests attention >$OUT/gpu_tests_attention.log 2>&1
rc=$?
say "gpu tests attention rc $rc: $(grep -E '[0-9]+ passed' $OUT/gpu_tests_attention.log | tail -1) $(grep -m5 -E 'FAIL|error' $OUT/gpu_tests_attention.log | tr '\n' ' ') [$((SECONDS-t0)) s]"
for b in base new; do bin=$([ $b = base ] && echo $BASE_BENCH || echo ./build/bench_kernels)
  timeout 120 $bin 16 attention >$OUT/bench_$b.log 2>&1; say "bench $b rc $? [$((SECONDS-t0)) s]"
done
paste <(grep -E '^attention|attention_backward' $OUT/bench_base.log | cut -c1-80) <(grep -E '^attention|attention_backward' $OUT/bench_new.log | awk '{print $(NF-6), $(NF-5), $(NF-4)}') | tee -a $S
[ $rc = 0 ] || { cat $S; exit 1; }
M=/tmp/ad; mkdir -p $M
python3 tests/fixtures/gen/make_shard.py $M/r.bin 8000000 50304 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/rq.bin 2000000 151936 random 3 >/dev/null
for r in 1 2; do for b in base new; do bin=$([ $b = base ] && echo $BASE || echo ./train)
  rm -rf $M/o; timeout 90 $bin -e d12 -v 50304 -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 -n 0 --step-parts 1 -i $M/r.bin -o $M/o >$M/g.log 2>&1
  say "GPT-2 124M V50304 B32 $b r$r: $(grep '| loss' $M/g.log | tail -30 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 15p) $(grep '| loss' $M/g.log | tail -1 | grep -oE 'fwd [0-9.]+ out [0-9.]+ bwd [0-9.]+') $(grep -m1 error $M/g.log)"
  rm -rf $M/o; timeout 120 $bin -e qwen3-0.6b -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 -i $M/rq.bin -o $M/o >$M/q.log 2>&1
  say "Qwen3-0.6B B16 $b r$r: $(grep '| loss' $M/q.log | tail -8 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 4p) $(grep '| loss' $M/q.log | tail -1 | grep -oE 'bwd [0-9.]+') $(grep -m1 error $M/q.log)"
done; done
say "---- elapsed $((SECONDS-t0)) s"
cat $S
