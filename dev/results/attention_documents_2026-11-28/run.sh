#!/usr/bin/env bash
# One GPU: the attention over packed documents, ours (bench_kernels' documents section, twice)
# beside flex_attention with a document block mask and flash's causal SDPA (bench_attention_torch.py
# documents) in the same call. Needs build/bench_kernels. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 120 ./build/bench_kernels 8 documents >$OUT/ours_1.txt 2>&1; echo "ours 1: rc $?"
timeout 400 python3 dev/bench/bench_attention_torch.py documents >$OUT/torch.txt 2>&1; echo "torch: rc $?"
timeout 120 ./build/bench_kernels 8 documents >$OUT/ours_2.txt 2>&1; echo "ours 2: rc $?"
for f in ours_1 ours_2; do echo "== $f"; grep -E "^attention|attention_(forward|backward) wgmma( \(FA2 FLOPs\))?  " $OUT/$f.txt; done
echo "== torch"; grep -vE "^\s*$|Warning|warn" $OUT/torch.txt | tail -40
