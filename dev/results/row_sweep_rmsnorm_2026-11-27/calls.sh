#!/usr/bin/env bash
# One GPU, two calls against the parent's binaries (in inputs/base: bench_kernels, bench_output_layer;
# inputs/train_base: train):
#   CALL=1 OUT=out bash calls.sh   the output layer's row-sweep grid and the RMSNorm backward's one wave
#   CALL=2 OUT=out bash calls.sh   the RoPE backward's four blocks an SM, the RMSNorm backward's two kinds
#                                  of sums; the fused layer's chunk budget in the bench and the trainer
# Summaries: first_call_summary.txt, second_call_summary.txt (logs beside them).
t0=$SECONDS; S=$OUT/summary.txt; L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $S
for f in $([ "$CALL" = 1 ] && echo fused_output || echo rope) rmsnorm backend; do
  timeout 200 ./build/run_gpu_tests $f > $L/tests_$f.log 2>&1
  echo "gpu tests $f rc $?: $(grep -E '[0-9]+ passed' $L/tests_$f.log | tail -1) $(grep -m3 FAIL $L/tests_$f.log | tr '\n' ' ') [$((SECONDS-t0)) s]" >> $S
done
if [ "$CALL" = 1 ]; then
for r in 1 2; do for b in base new; do bin=$([ $b = base ] && echo inputs/base || echo ./build)
  timeout 120 $bin/bench_output_layer --no-canonical --no-streaming --shape 1024,32768,151936 --shape 1024,6554,151936 --shape 2048,32768,128256 --shape 768,32768,262144 > $L/bol_${b}_$r.log 2>&1
  grep -E '^csv,[0-9]' $L/bol_${b}_$r.log | sed "s/^/bol $b r$r /" >> $S
  timeout 60 $bin/bench_kernels 32 families > $L/bk_${b}_$r.log 2>&1
  grep -E 'rmsnorm_backward|rope' $L/bk_${b}_$r.log | sed "s/^/bk $b r$r /" >> $S
done; done
echo "[$((SECONDS-t0)) s]" >> $S
EXTRA="--optimizer-state bf16" TESTS=none BASE=inputs/train_base OUT=$OUT/ab timeout 420 bash dev/check/ab_one_gpu.sh > $L/ab.log 2>&1
cat $OUT/ab/summary.txt >> $S
echo "[$((SECONDS-t0)) s]" >> $S
tar -czf $OUT/logs.tgz -C $OUT logs ab && rm -rf $L $OUT/ab
cat $S
else
for r in 1 2; do for b in base new; do bin=$([ $b = base ] && echo inputs/base || echo ./build)
  timeout 60 $bin/bench_kernels 32 families > $L/bk_${b}_$r.log 2>&1
  grep -E 'rmsnorm_backward|rope' $L/bk_${b}_$r.log | sed "s/^/bk $b r$r /" >> $S
done; done
for mb in 2064 4128 8256; do
  timeout 150 ./build/bench_output_layer --no-canonical --no-streaming --logits-mb $mb --shape 1024,32768,151936 --shape 768,32768,262144 --shape 2048,32768,128256 > $L/bol_$mb.log 2>&1
  grep -E '^csv,[0-9]' $L/bol_$mb.log | sed "s/^/bol mb $mb /" >> $S
done
echo "[$((SECONDS-t0)) s]" >> $S
THROUGHPUT=0 TESTS=none BASE=inputs/train_base OUT=$OUT/ab timeout 120 bash dev/check/ab_one_gpu.sh > $L/ab.log 2>&1
grep 'same bits' $OUT/ab/summary.txt >> $S
M=/tmp/ad
python3 tests/fixtures/gen/make_shard.py $M/r.bin 8000000 262144 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/rq.bin 2000000 151936 random 3 >/dev/null
for r in 1 2; do runs="base|2064 new|2064"; [ $r = 1 ] && runs="$runs new|4128 new|8256"; for run in $runs; do
  IFS='|' read -r b mb <<<"$run"; bin=$([ $b = base ] && echo inputs/train_base || echo ./train)
  rm -rf $M/o; timeout 120 $bin -e qwen3-0.6b -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 --optimizer-state bf16 --logits-mb $mb -i $M/rq.bin -o $M/o > $L/q_${b}_${mb}_$r.log 2>&1
  echo "Qwen3-0.6B B16 bf16 state $b logits-mb $mb r$r: $(grep '| loss' $L/q_${b}_${mb}_$r.log | tail -8 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 4p) $(grep '| loss' $L/q_${b}_${mb}_$r.log | tail -1 | grep -oE 'out [0-9.]+ bwd [0-9.]+') $(grep '| loss' $L/q_${b}_${mb}_$r.log | tail -1 | grep -oE '[0-9.]+ GB$') $(grep -m1 error $L/q_${b}_${mb}_$r.log)" >> $S
  [ $r = 1 ] && [ $b = new ] && { rm -rf $M/o; timeout 100 $bin -e d12 -v 262144 -b 32 -t 1024 -x 30 --warmup 5 --val-every 0 -s 0 -n 0 --step-parts 1 --logits-mb $mb -i $M/r.bin -o $M/o > $L/g_${b}_${mb}_$r.log 2>&1
  echo "GPT-2 124M V262144 B32 $b logits-mb $mb r$r: $(grep '| loss' $L/g_${b}_${mb}_$r.log | tail -20 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 10p) $(grep '| loss' $L/g_${b}_${mb}_$r.log | tail -1 | grep -oE 'out [0-9.]+ bwd [0-9.]+')" >> $S; }
done; done
echo "[$((SECONDS-t0)) s]" >> $S
tar -czf $OUT/logs.tgz -C $OUT logs ab && rm -rf $L $OUT/ab
cat $S
fi
