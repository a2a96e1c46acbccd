#!/usr/bin/env bash
# One H100: the one-kernel backward with dQ's product one 64-column panel a warpgroup (at HS 64 the
# warpgroups take turns; this tree) against the first try's two 32-column halves ($V1_BENCH) and the
# two-kernel backward ($BASE, $BASE_BENCH): every GPU test, the kernel bench, Llama-3.2-1B's trainer.
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; : >$S
say() { echo "$1" | tee -a $S; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $S
t0=$SECONDS
timeout 240 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1
say "gpu tests rc $?: $(grep -E '[0-9]+ passed' $OUT/gpu_tests.log | tail -1) $(grep -m5 -E 'FAIL' $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS-t0)) s]"
for b in base v1 new; do bin=$([ $b = base ] && echo $BASE_BENCH || ([ $b = v1 ] && echo $V1_BENCH || echo ./build/bench_kernels))
  timeout 120 $bin 16 attention >$OUT/bench2_$b.log 2>&1; say "bench $b rc $? [$((SECONDS-t0)) s]"
done
for f in base v1 new; do grep -E '^attention|attention_backward wgmma' $OUT/bench2_$f.log | awk -v f=$f '/^attention/{shape=$2" "$3" "$4" "$5" "$6} /backward/{print f, shape, $0}' ; done | tee -a $S
M=/tmp/ad; mkdir -p $M
python3 tests/fixtures/gen/make_shard.py $M/rl.bin 2000000 128256 random 4 >/dev/null
for r in 1 2; do for b in base new; do bin=$([ $b = base ] && echo $BASE || echo ./train)
  rm -rf $M/o; timeout 150 $bin -e llama3.2-1b -b 16 -t 2048 --max-seq-len 2048 -x 12 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 -i $M/rl.bin -o $M/o >$M/l.log 2>&1
  say "Llama-3.2-1B B16 $b r$r: $(grep '| loss' $M/l.log | tail -6 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 3p) $(grep '| loss' $M/l.log | tail -1 | grep -oE 'bwd [0-9.]+') $(grep -m1 error $M/l.log)"
done; done
say "---- elapsed $((SECONDS-t0)) s"
cat $S
