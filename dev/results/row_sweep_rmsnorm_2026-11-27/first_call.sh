#!/usr/bin/env bash
# one GPU (run as OUT=out bash <this>, with the parent's binaries in .carry/base and .carry/train_base): the output layer's row-sweep grid and the RMSNorm backward's one wave, against the parent
t0=$SECONDS; S=$OUT/summary.txt; L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $S
for f in fused_output rmsnorm backend; do
  timeout 200 ./build/run_gpu_tests $f > $L/tests_$f.log 2>&1
  echo "gpu tests $f rc $?: $(grep -E '[0-9]+ passed' $L/tests_$f.log | tail -1) $(grep -m3 FAIL $L/tests_$f.log | tr '\n' ' ') [$((SECONDS-t0)) s]" >> $S
done
for r in 1 2; do for b in base new; do bin=$([ $b = base ] && echo .carry/base || echo ./build)
  timeout 120 $bin/bench_output_layer --no-canonical --no-streaming --shape 1024,32768,151936 --shape 1024,6554,151936 --shape 2048,32768,128256 --shape 768,32768,262144 > $L/bol_${b}_$r.log 2>&1
  grep -E '^csv,[0-9]' $L/bol_${b}_$r.log | sed "s/^/bol $b r$r /" >> $S
  timeout 60 $bin/bench_kernels 32 families > $L/bk_${b}_$r.log 2>&1
  grep -E 'rmsnorm_backward|rope' $L/bk_${b}_$r.log | sed "s/^/bk $b r$r /" >> $S
done; done
echo "[$((SECONDS-t0)) s]" >> $S
EXTRA="--optimizer-state bf16" TESTS=none BASE=.carry/train_base OUT=$OUT/ab timeout 420 bash dev/check/ab_one_gpu.sh > $L/ab.log 2>&1
cat $OUT/ab/summary.txt >> $S
echo "[$((SECONDS-t0)) s]" >> $S
tar -czf $OUT/logs.tgz -C $OUT logs ab && rm -rf $L $OUT/ab
cat $S
