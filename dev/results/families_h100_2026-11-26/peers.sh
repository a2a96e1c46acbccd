#!/usr/bin/env bash
# The PyTorch peers of the families in the same warm machine (dev/bench/bench_family_torch.py).
OUT=${OUT:-out}; mkdir -p $OUT
for m in ${PEER_MODELS:-qwen3-0.6b llama3.2-1b}; do
  PYTHONUNBUFFERED=1 python3 dev/bench/bench_family_torch.py --model $m --stack liger --batch 16 --steps 6 --warmup 3 2>&1 | grep csv_ | tee -a $OUT/peers.txt
  PYTHONUNBUFFERED=1 python3 dev/bench/bench_family_torch.py --model $m --stack compile --batch 8 --steps 6 --warmup 3 --timeout 200 2>&1 | grep csv_ | tee -a $OUT/peers.txt
done
cat $OUT/peers.txt
