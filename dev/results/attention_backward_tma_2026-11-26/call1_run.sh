#!/bin/bash
# Build the branch and the base (with the Llama shape in the bench), test, then interleaved A/B rounds.
cd "$(dirname "$0")"
(cd tree3 && make -j16 build/run_gpu_tests build/bench_kernels > $OUT/build_tree3.log 2>&1; echo tree3_build=$?) &
(cd tree2 && make -j16 build/run_gpu_tests build/bench_kernels > $OUT/build_tree2.log 2>&1; echo tree2_build=$?) &
(cd base && make -j16 build/bench_kernels > $OUT/build_base.log 2>&1; echo base_build=$?) &
wait
date
cd tree2
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
timeout 240 ../tree3/build/run_gpu_tests attention > $OUT/tests3.log 2>&1 &
timeout 240 ./build/run_gpu_tests attention > $OUT/tests2.log 2>&1; trc=$?
wait; echo tests_rc=$trc; date
if [ $trc -ne 124 ]; then
  for r in 1 2; do
    timeout 60 ./build/bench_kernels 8 attention > $OUT/v2_$r.log 2>&1
    timeout 60 ../tree3/build/bench_kernels 8 attention > $OUT/v3_$r.log 2>&1
    timeout 60 ../base/build/bench_kernels 8 attention > $OUT/base_$r.log 2>&1
    timeout 60 ../bench_kernels_parent 8 attention > $OUT/parent_$r.log 2>&1
  done
  timeout 120 python3 dev/bench/bench_attention_torch.py 8 > $OUT/torch.log 2>&1
fi
for t in tests2 tests3; do echo "=== $t"; grep -E "FAIL|fail|passed|error" $OUT/$t.log | tail -8; done
for f in v2_1 v3_1 base_1 parent_1 v2_2 v3_2 base_2 parent_2; do
  echo "=== $f"; grep -E "^attention B=|attention_(forward|backward) wgmma" $OUT/$f.log | grep -v "bias sums" | sed 's/  */ /g' | cut -c1-90
done
echo "=== torch"; grep sdpa $OUT/torch.log | sed "s/torch [^ ]* sdpa flash //" | cut -c1-160
