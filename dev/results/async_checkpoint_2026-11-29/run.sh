#!/usr/bin/env bash
# One GPU: runs that checkpoint three times (Qwen3-0.6B every 40 of 120 steps, Llama-3.2-1B every 50 of
# 150; B 16, T 2048, bf16 AdamW state, random init and tokens, --keep-checkpoints 1): ./train, whose
# writer thread writes a checkpoint while training goes on, against inputs/train_parent, which wrote
# it between steps. STEPS_Q/EVERY_Q and STEPS_L/EVERY_L change the runs (the first call: 24 and 8).
# Per run: wall seconds from start to exit, the sum of the steps' ms, and what is neither (start-up,
# the checkpoints' reads and writes); the checkpoint lines. Checkpoints go to disk (./ck) when it has
# room for two of them, else to /dev/shm. ROUNDS rounds (1), alternating.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
. dev/bench/family_rounds.sh # shard
shard q 151936; shard l 128256
df -h . /dev/shm | tee $OUT/df.txt
free_gb=$(df --output=avail -BG . | tail -1 | tr -dc 0-9)
run() { # round who preset shard room_gb steps every
  local bin=./train; [ $2 = new ] || bin=inputs/train_$2
  local dir=$PWD/ck; [ $free_gb -ge $5 ] || dir=/dev/shm/ck
  local log=$OUT/$2_$3_r$1.log
  rm -rf $PWD/ck /dev/shm/ck
  local t0=$(date +%s.%N)
  $bin -e $3 -b 16 -t 2048 --max-seq-len 2048 -x $6 -n $7 --keep-checkpoints 1 --warmup 2 --val-every 0 -s 0 \
    --optimizer-state bf16 -i /tmp/f/$4.bin -o $dir >$log 2>&1
  local rc=$? t1=$(date +%s.%N)
  python3 - $log $t0 $t1 $rc $2 $3 $dir $7 <<'PY'
import re, sys
log, t0, t1, rc, who, preset, where = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
every = int(sys.argv[8])
text = open(log).read()
ms = [float(m) for m in re.findall(r'\| ([0-9.]+) ms \|', text)]
after = [ms[i] for i in (every, every + 1, 2 * every, 2 * every + 1) if i < len(ms)]  # the two steps after a save
rest = sorted(ms[2:])
med = rest[len(rest) // 2] if rest else -1
wall = t1 - t0
cks = re.findall(r'checkpoint: \S+?(step_\d+)(?: \(state read in ([0-9.]+) s, written in ([0-9.]+) s\))?', text)
print('%s %s (%s): rc %s, wall %.1f s, steps %.1f s (median %.0f ms; after a save %s), neither %.1f s | %s%s' % (
    who, preset, where, rc, wall, sum(ms) / 1e3, med, ' '.join('%.0f' % a for a in after), wall - sum(ms) / 1e3,
    ', '.join('%s%s' % (c[0][-3:], ' read %ss write %ss' % (c[1], c[2]) if c[1] else '') for c in cks),
    (' | ' + [l for l in text.splitlines() if 'error' in l][0]) if 'error' in text else ''))
PY
}
chmod +x inputs/*
for r in $(seq 1 ${ROUNDS:-1}); do
  q="q 22 ${STEPS_Q:-120} ${EVERY_Q:-40}" l="l 45 ${STEPS_L:-150} ${EVERY_L:-50}"
  run $r parent qwen3-0.6b $q; run $r new qwen3-0.6b $q
  run $r parent llama3.2-1b $l; run $r new llama3.2-1b $l
done | tee $OUT/summary.txt
rm -rf $PWD/ck /dev/shm/ck
