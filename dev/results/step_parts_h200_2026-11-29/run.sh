#!/usr/bin/env bash
# One H200: the families beside Liger eager in bf16 (code of this tree), where Qwen3-0.6B's and
# Llama-3.2-1B's B 16 steps go kernel by kernel, and the output layer at their chunk shapes.
#   OUT=out bash dev/results/step_parts_h200_2026-11-29/run.sh   (Liger's wheel in .whl/)
OUT=${OUT:-out}; mkdir -p $OUT; t0=$SECONDS
pip install --no-deps -q .whl/liger_kernel-*.whl > $OUT/pip.log 2>&1
TESTS=none EXTRA="--optimizer-state bf16" OUT=$OUT/peers bash dev/check/families_peers.sh > /dev/null 2>&1
echo "peers done [$((SECONDS-t0)) s]"
PEERS=0 MODELS="qwen3-0.6b llama3.2-1b" B=16 OUT=$OUT/parts bash dev/profile/parts_vs_peers.sh > /dev/null 2>&1
echo "parts done [$((SECONDS-t0)) s]"
timeout 120 ./build/bench_output_layer --no-canonical --no-streaming --shape 1024,32768,151936 --shape 2048,32768,128256 > $OUT/outl.txt 2>&1
echo "---- peers"; cat $OUT/peers/summary.txt
echo "---- parts"; grep -v '^csv_' $OUT/parts/parts.txt | head -120
echo "---- output layer"; tail -25 $OUT/outl.txt
echo "elapsed $((SECONDS-t0)) s"
