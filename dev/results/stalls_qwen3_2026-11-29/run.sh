#!/usr/bin/env bash
# One GPU: Nsight Compute's warp-stall sampling of three of Qwen3-0.6B's kernels inside the trainer
# (B 16, T 2048, bf16 AdamW state, random tokens): the attention forward and backward at head size
# 128 and the output layer's tile kernel (scaled exponentials); one
# launch each, past the first step's. Needs ./train. Prints each kernel's summary
# (dev/profile/ncu_stalls.sh); the per-instruction tables land in $OUT.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $S
t0=$SECONDS
[ -f /tmp/f/q.bin ] || python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 6000000 151936 random 3 >/dev/null
run="./train -e qwen3-0.6b -b 16 -t 2048 --max-seq-len 2048 -x 3 --warmup 1 --val-every 0 -s 0 --optimizer-state bf16 -i /tmp/f/q.bin -o /dev/shm/st"
# a step launches each of these 28 times (the tile kernel once a chunk): skip the first step's
for k in "attention_forward_tma_kernelILi128 40" "attention_backward_tma_kernelILi128 40" \
         "tile_kernelILi2 10"; do set -- $k
  echo "==== $1 [$((SECONDS - t0)) s]" | tee -a $S
  rm -rf /dev/shm/st
  KERNEL=$1 SKIP=$2 OUT=$OUT timeout 90 bash dev/profile/ncu_stalls.sh $run 2>&1 | tee -a $S
done
rm -rf /dev/shm/st
echo "---- elapsed $((SECONDS - t0)) s" | tee -a $S
