#!/usr/bin/env bash
# One GPU: seconds from the trainer's start to its first step's line, Qwen3-0.6B and Llama-3.2-1B
# (B 16, T 2048, bf16 AdamW state, random init; killed once step 1 is printed), inputs/train_parent
# against ./train, alternating, ROUNDS rounds (2).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
. dev/bench/family_rounds.sh  # CK, shard
shard q 151936; shard l 128256
first_step() { # who preset shard
  local bin=./train; [ $1 = new ] || bin=inputs/train_$1
  rm -rf $CK
  python3 - $1 $2 $bin -e $2 -b 16 -t 2048 --max-seq-len 2048 -x 3 --warmup 2 --val-every 0 -s 0 \
    --optimizer-state bf16 -i /tmp/f/$3.bin -o $CK <<'PY'
import subprocess, sys, time
t0 = time.time()
p = subprocess.Popen(sys.argv[3:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
first = None
for line in p.stdout:
    if first is None and line.startswith('step     1/'):
        first = time.time() - t0
        step1 = line.strip()
        p.kill()  # the start is what is timed: no end-of-run checkpoint
        break
p.wait()
print('%s %s: first step after %.1f s | %s' % (sys.argv[1], sys.argv[2], first or -1, (step1 if first else 'no step')[:90]))
PY
}
chmod +x inputs/*
for r in $(seq 1 ${ROUNDS:-2}); do
  for m in "qwen3-0.6b q" "llama3.2-1b l"; do set -- $m
    first_step parent $1 $2; first_step new $1 $2
  done
done
rm -rf $CK
