#!/usr/bin/env bash
# One H100, code with the one-kernel attention backward after its review fixes: the largest GPT-2
# 124M micro-batch at V 262144 with the fused layer (dQ's fp32 sums added attention scratch since the
# last measurement), then Qwen3-0.6B and Llama-3.2-1B beside Liger eager in bf16 (families_peers.sh).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
python3 tests/fixtures/gen/make_shard.py /tmp/f/v262k.bin 4000000 262144 random 5 >/dev/null
LAYERS="fused" timeout 150 bash dev/bench/memory_demo.sh /tmp/f/v262k.bin 262144 288 280 272 264 256 2>&1 | tee $OUT/memory.txt
TESTS=rmsnorm OUT=$OUT/families timeout 420 bash dev/check/families_peers.sh >$OUT/families.log 2>&1
tar -czf $OUT/families_logs.tar.gz -C $OUT families families.log; rm -rf $OUT/families $OUT/families.log
echo "==== memory"; cat $OUT/memory.txt
echo "==== families"; tar -xzOf $OUT/families_logs.tar.gz families/summary.txt
