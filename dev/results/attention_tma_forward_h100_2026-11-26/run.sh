#!/bin/bash
# tests, then interleaved A/B rounds of the attention bench against the base kernel, then PyTorch;
# the summary last
C=inputs/attnfwd
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader > $S
T_ARG=${TESTS:-attention}; [ "$T_ARG" = all ] && T_ARG=
timeout ${TESTT:-300} $C/build/run_gpu_tests $T_ARG > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $S
tail -2 $OUT/tests.log >> $S; grep -i "fail" $OUT/tests.log | head -20 >> $S
for v in $TESTVARIANTS; do timeout 300 $C/build/run_gpu_tests_$v ${TESTS:-attention} > $OUT/tests_$v.log 2>&1; echo "tests $v rc=$?" >> $S; tail -1 $OUT/tests_$v.log >> $S; grep -i "fail" $OUT/tests_$v.log | head >> $S; done
for BB in ${BBS:-8}; do
echo "B $BB; shapes (fwd / bwd ms): GPT-2 HS64 B $BB, GPT-2 HS128 B $BB, Qwen B8, Qwen B16" >> $S
for r in $(seq 1 ${ROUNDS:-3}); do
  for bin in bench_kernels $(for v in $VARIANTS; do echo bench_kernels_$v; done) bench_kernels_base; do
    L=$OUT/${bin}_b${BB}_r$r.log
    timeout 60 $C/build/$bin $BB attention > $L 2>&1
    echo "$bin r$r fwd: $(grep 'attention_forward wgmma' $L | awk '{print $3}' | tr '\n' ' ') bwd: $(grep 'attention_backward wgmma (' $L | awk '{print $5}' | tr '\n' ' ')" >> $S
  done
done
python3 $C/bench_attention_torch.py $BB > $OUT/torch_b$BB.log 2>&1; sed 's/torch 2.11.0+cu130 sdpa flash //' $OUT/torch_b$BB.log >> $S
done
L=$OUT/main_b8.log; timeout 60 $C/build/bench_kernels_main 8 attention > $L 2>&1
echo "bench_kernels_main (B 8; GPT-2 HS64, HS128, Qwen B8) fwd: $(grep 'attention_forward wgmma' $L | awk '{print $3}' | tr '\n' ' ') bwd: $(grep 'attention_backward wgmma (' $L | awk '{print $5}' | tr '\n' ' ')" >> $S
if [ -n "$SAN" ]; then timeout ${SANT:-150} /usr/local/cuda/bin/compute-sanitizer --tool memcheck $C/build/run_gpu_tests $SAN > $OUT/san.log 2>&1; echo "memcheck $SAN rc=$?" >> $S; tail -3 $OUT/san.log >> $S; fi
if [ -n "$SYNC" ]; then timeout ${SANT:-150} /usr/local/cuda/bin/compute-sanitizer --tool synccheck $C/build/run_gpu_tests $SYNC > $OUT/sync.log 2>&1; echo "synccheck $SYNC rc=$?" >> $S; tail -3 $OUT/sync.log >> $S; fi
cat $S
