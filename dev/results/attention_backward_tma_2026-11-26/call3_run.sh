#!/bin/bash
# Final: the branch's GPU attention tests; interleaved kernel rounds (branch, branch with dQ's S and dP
# from shared memory, parent binary, base with the Llama shape) and PyTorch SDPA; then the trainer,
# branch against parent, run from the same directory.
cd "$(dirname "$0")"; C=$PWD
(cd treeF && make -j16 build/run_gpu_tests build/bench_kernels train > $OUT/build_F.log 2>&1; echo F_build=$?) &
(cd treeS && make -j16 build/bench_kernels > $OUT/build_S.log 2>&1; echo S_build=$?) &
(cd base && make -j16 build/bench_kernels > $OUT/build_base.log 2>&1; echo base_build=$?) &
wait; date
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
cd treeF
timeout 150 ./build/run_gpu_tests attention > $OUT/tests.log 2>&1; echo tests_rc=$?; date
timeout 120 ./build/run_gpu_tests backend_cuda_matches > $OUT/tests_backend.log 2>&1; echo backend_tests_rc=$?; date
for r in 1 2; do
  for B in 8 16; do
    timeout 60 ./build/bench_kernels $B attention > $OUT/F_${B}_$r.log 2>&1
    timeout 60 ../treeS/build/bench_kernels $B attention > $OUT/S_${B}_$r.log 2>&1
    timeout 60 ../bench_kernels_parent $B attention > $OUT/parent_${B}_$r.log 2>&1
    timeout 60 ../base/build/bench_kernels $B attention > $OUT/base_${B}_$r.log 2>&1
  done
done
timeout 100 python3 dev/bench/bench_attention_torch.py 8 > $OUT/torch_8.log 2>&1
timeout 100 python3 dev/bench/bench_attention_torch.py 16 > $OUT/torch_16.log 2>&1
date
mkdir -p /tmp/f
python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 6000000 151936 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 6000000 128256 random 4 >/dev/null
chmod +x ../train_parent
for r in 1 2; do for m in "qwen3-0.6b 16 q" "llama3.2-1b 8 l"; do set -- $m; for bin in ../train_parent ./train; do
  tag=$1_b$2_$(basename $bin)_$r; rm -rf /tmp/f/r
  timeout 100 $bin -e $1 -b $2 -t 2048 --max-seq-len 2048 -x 12 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i /tmp/f/$3.bin -o /tmp/f/r > $OUT/$tag.log 2>&1
  echo "$tag: median $(grep '| loss' $OUT/$tag.log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4,5p | tr '\n' ' ') | $(grep '| loss' $OUT/$tag.log | tail -1 | grep -o 'fwd.*' | cut -c1-80) $(grep -m1 error $OUT/$tag.log)"
done; done; done
date
echo "=== tests"; grep -E "passed" $OUT/tests.log $OUT/tests_backend.log | tail -2; grep -o "tests/test_kernels_gpu.cu:[0-9]*: [^|]*" $OUT/tests.log | cut -c1-150 | head -5
for r in 1 2; do for B in 8 16; do for v in F S parent base; do
  echo "=== ${v}_${B}_$r"; grep -E "^attention B=|attention_(forward|backward) wgmma" $OUT/${v}_${B}_$r.log | grep -v "bias sums" | sed 's/  */ /g' | cut -c1-62 | paste - - - | sed 's/causal window=0//; s/attention_forward wgmma/fwd/; s/attention_backward wgmma (FA2 FLOPs)/bwd/'
done; done; done
echo "=== torch"; grep -h sdpa $OUT/torch_8.log $OUT/torch_16.log | sed "s/torch [^ ]* sdpa flash //" | cut -c1-150
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
