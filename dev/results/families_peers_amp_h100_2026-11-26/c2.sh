#!/bin/bash
# Second part, same warm H100: torch.compile at B 16 (never measured), then Qwen3's kernel profile at B 16.
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
t0=$SECONDS
for m in qwen3-0.6b llama3.2-1b; do
  PYTHONUNBUFFERED=1 timeout 200 python3 dev/bench/bench_family_torch.py --model $m --stack compile --batch 16 --steps 6 --warmup 3 --timeout 190 > $OUT/peer_${m}_compile_b16.log 2>&1
  grep csv_ $OUT/peer_${m}_compile_b16.log | tee -a $OUT/summary.txt; tail -2 $OUT/peer_${m}_compile_b16.log; echo "[$((SECONDS-t0)) s]"
done
OUT=$OUT bash dev/results/families_peers_amp_h100_2026-11-26/prof.sh > $OUT/prof.txt 2>&1; tail -45 $OUT/prof.txt
echo "---- elapsed $((SECONDS-t0)) s"
cat $OUT/summary.txt
