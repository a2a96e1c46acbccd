#!/usr/bin/env bash
# One GPU: the one-kernel backward after review (closed-form first key block, a shorter copy-out
# step, start tickets; this tree) against the committed one-kernel backward ($V1_BENCH) and the two
# kernels ($BASE, $BASE_BENCH): the GPU tests of attention and the backend, the kernel bench, and
# GPT-2 124M's trainer, one round.
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; : >$S
say() { echo "$1" | tee -a $S; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $S
t0=$SECONDS
for f in attention backend; do
  timeout 120 ./build/run_gpu_tests $f >$OUT/gpu_tests_$f.log 2>&1
  say "gpu tests $f rc $?: $(grep -E '[0-9]+ passed' $OUT/gpu_tests_$f.log | tail -1) $(grep -m5 FAIL $OUT/gpu_tests_$f.log | tr '\n' ' ') [$((SECONDS-t0)) s]"
done
for b in base v1 new; do bin=$([ $b = base ] && echo $BASE_BENCH || ([ $b = v1 ] && echo $V1_BENCH || echo ./build/bench_kernels))
  timeout 100 $bin 16 attention >$OUT/bench4_$b.log 2>&1; say "bench $b rc $? [$((SECONDS-t0)) s]"
done
for f in base v1 new; do grep -E '^attention|attention_backward wgmma \(' $OUT/bench4_$f.log | awk -v f=$f '/^attention/{shape=$2" "$3" "$4" "$5" "$6} /backward/{print f, shape, $(NF-7), $(NF-6)}' ; done | tee -a $S
M=/tmp/ad; mkdir -p $M
python3 tests/fixtures/gen/make_shard.py $M/r.bin 8000000 50304 random 3 >/dev/null
for b in base new; do bin=$([ $b = base ] && echo $BASE || echo ./train)
  rm -rf $M/o; timeout 90 $bin -e d12 -v 50304 -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 -n 0 --step-parts 1 -i $M/r.bin -o $M/o >$M/g.log 2>&1
  say "GPT-2 124M V50304 B32 $b: $(grep '| loss' $M/g.log | tail -30 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 15p) $(grep '| loss' $M/g.log | tail -1 | grep -oE 'fwd [0-9.]+ out [0-9.]+ bwd [0-9.]+') $(grep -m1 error $M/g.log)"
done
say "---- elapsed $((SECONDS-t0)) s"
cat $S
