#!/bin/bash
# The families' best PyTorch stack (Liger eager, B 16) and ours in the same warm machine.
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$SECONDS
python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 6000000 151936 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 6000000 128256 random 4 >/dev/null
for m in "qwen3-0.6b 16 q" "llama3.2-1b 16 l"; do set -- $m; log=$OUT/$1_b$2.log; rm -rf /tmp/f/r
  timeout 120 ./train -e $1 -b $2 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i /tmp/f/$3.bin -o /tmp/f/r > $log 2>&1
  echo "ours $1 B=$2: median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o 'fwd.*' | cut -c1-90) $(grep -m1 error $log) [$((SECONDS-t0)) s]"
done
for m in qwen3-0.6b llama3.2-1b; do
  PYTHONUNBUFFERED=1 timeout 150 python3 dev/bench/bench_family_torch.py --model $m --stack liger --batch 16 --steps 6 --warmup 3 2>&1 | grep csv_ | tee -a $OUT/peers.txt
  echo "[$((SECONDS-t0)) s]"
done
