#!/usr/bin/env bash
# One H100, the closing code: every GPU test, then Qwen3-0.6B at B 16 and 32 (bf16 state):
#   OUT=out bash final.sh
t0=$SECONDS; M=/tmp/fz; mkdir -p $M $OUT
timeout 240 ./build/run_gpu_tests > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $?: $(grep -E '[0-9]+ passed' $OUT/gpu_tests.log | tail -1) $(grep -m3 FAIL $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS-t0)) s]"
grep -E "MB free:|timed_matmul|fused_chunk" $OUT/gpu_tests.log | cut -c1-200
python3 tests/fixtures/gen/make_shard.py $M/rq.bin 2000000 151936 random 3 >/dev/null
for b in 16 32; do rm -rf $M/o
  timeout 120 ./train -e qwen3-0.6b -b $b -t 2048 --max-seq-len 2048 -x 10 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 --optimizer-state bf16 -i $M/rq.bin -o $M/o > $OUT/q$b.log 2>&1
  echo "Qwen3 B$b: $(grep '| loss' $OUT/q$b.log | tail -6 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 3p) $(grep '| loss' $OUT/q$b.log | tail -1 | grep -oE '[0-9.]+ GB$') $(grep -m1 -oE 'activations and scratch[^:]*' $OUT/q$b.log) | $(grep -m1 -oE 'output layer workspace: fused[^0-9]*[0-9]+ rows' $OUT/q$b.log) $(grep -m1 error $OUT/q$b.log) [$((SECONDS-t0)) s]"
done
