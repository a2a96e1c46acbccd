#!/bin/bash
# Ours and Liger at B 32 (the largest batch the families' comparison names), main's binary, one H100.
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $S
t0=$SECONDS
python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 8000000 151936 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 8000000 128256 random 4 >/dev/null
for m in "qwen3-0.6b 32 q" "llama3.2-1b 32 l" "qwen3-0.6b 16 q"; do set -- $m
  log=$OUT/ours_$1_b$2.log; rm -rf /tmp/f/r
  timeout 150 ./train -e $1 -b $2 -t 2048 --max-seq-len 2048 -x 12 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i /tmp/f/$3.bin -o /tmp/f/r > $log 2>&1
  echo "ours $1 B=$2: median $(grep '| loss' $log | tail -6 | grep -o '[0-9]* tok/s' | sort -n | sed -n 3p), $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep '| loss' $log | tail -1 | grep -o 'fwd.*' | cut -c1-40) $(grep -m2 -i 'recompute\|error' $log | tr '\n' ' ' | cut -c1-200) [$((SECONDS-t0)) s]" | tee -a $S
done
for m in qwen3-0.6b llama3.2-1b; do
  PYTHONUNBUFFERED=1 timeout 120 python3 dev/bench/bench_family_torch.py --model $m --stack liger --batch 32 --steps 4 --warmup 2 > $OUT/peer_${m}_liger_b32.log 2>&1
  grep csv_ $OUT/peer_${m}_liger_b32.log | tee -a $S; echo "[$((SECONDS-t0)) s]"
done
echo "---- $((SECONDS-t0)) s"; cat $S
