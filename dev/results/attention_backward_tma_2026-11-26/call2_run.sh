#!/bin/bash
# Variant A (dK,dV reads K, V from shared memory at HS 64) and B (K, V register fragments reloaded every
# step): tests, then interleaved rounds against the base.
cd "$(dirname "$0")"
(cd treeA && make -j16 build/run_gpu_tests build/bench_kernels > $OUT/build_A.log 2>&1; echo A_build=$?) &
(cd treeB && make -j16 build/run_gpu_tests build/bench_kernels > $OUT/build_B.log 2>&1; echo B_build=$?) &
(cd base && make -j16 build/bench_kernels > $OUT/build_base.log 2>&1; echo base_build=$?) &
wait
date
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
timeout 200 treeB/build/run_gpu_tests head64 > $OUT/testsB.log 2>&1 &
timeout 200 treeA/build/run_gpu_tests attention > $OUT/testsA.log 2>&1; trc=$?
wait; echo tests_rc=$trc; date
if [ $trc -ne 124 ]; then
  for r in 1 2; do
    for v in A B base; do
      b=tree$v/build/bench_kernels; [ $v = base ] && b=base/build/bench_kernels
      timeout 60 $b 8 attention > $OUT/${v}_$r.log 2>&1
    done
  done
fi
if command -v nsys > /dev/null; then
  for v in A base; do
    b=tree$v/build/bench_kernels; [ $v = base ] && b=base/build/bench_kernels
    timeout 100 nsys profile -o /tmp/p_$v --force-overwrite true $b 8 attention > /dev/null 2>&1
    timeout 60 nsys stats -r cuda_gpu_trace -f csv -o /tmp/t_$v /tmp/p_$v.nsys-rep > /dev/null 2>&1
    echo "=== split $v"; python3 kern_split.py /tmp/t_${v}_cuda_gpu_trace.csv 2>&1 | tail -30
  done
else echo "no nsys"; fi
for t in testsA testsB; do echo "=== $t"; grep -E "passed" $OUT/$t.log | tail -2; grep -o "tests/test_kernels_gpu.cu:[0-9]*: [^|]*" $OUT/$t.log | cut -c1-150 | head -5; done
for f in A_1 B_1 base_1 A_2 B_2 base_2; do
  echo "=== $f"; grep -E "^attention B=|attention_backward wgmma" $OUT/$f.log | grep -v "bias sums" | sed 's/  */ /g' | cut -c1-75 | paste - - | grep "T=2048"
done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
