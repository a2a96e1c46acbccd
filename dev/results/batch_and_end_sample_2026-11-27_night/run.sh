#!/usr/bin/env bash
# One GPU: the sample after the last step on the CUDA backend (a tiny run, -x 4 -s 2: samples at
# steps 2 and 4, in the output and the log), then Llama-3.2-1B at B 32 in bf16 AdamW state beside
# B 16 (does the larger batch pay, as it does for Qwen3-0.6B?), our runs as dev/check/families_peers.sh
# times them: median tokens/s of the last 8 of 14 steps, T 2048, random tokens. Needs ./train.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/bs; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $S
t0=$SECONDS
python3 tests/fixtures/gen/make_shard.py /tmp/bs/t.bin 2000000 1000 pattern 1 >/dev/null
timeout 120 ./train -e tiny -v 1000 -b 8 -t 128 -x 4 -s 2 -G 8 --warmup 1 --val-every 0 -i /tmp/bs/t.bin -o /tmp/bs/s >$OUT/end_sample.log 2>&1
echo "end sample (rc $?): $(grep -c '^sample at step' $OUT/end_sample.log) samples, steps $(grep -o '^sample at step [0-9]*' $OUT/end_sample.log | awk '{print $4}' | tr '\n' ' '); log records at steps $(grep -o '"type":"sample","step":[0-9]*' /tmp/bs/s/log.jsonl | grep -o '[0-9]*$' | tr '\n' ' ') $(grep -m1 error $OUT/end_sample.log)" | tee -a $S
python3 tests/fixtures/gen/make_shard.py /tmp/bs/l.bin 6000000 128256 random 4 >/dev/null
CK=/dev/shm/bs; [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)" -gt 30000000 ] 2>/dev/null || CK=/tmp/bs/r
for m in "llama3.2-1b 16" "llama3.2-1b 32" "llama3.2-1b 16" "llama3.2-1b 32"; do set -- $m
  log=$OUT/ours_$1_b$2_$((SECONDS)).log; rm -rf $CK
  timeout 150 ./train -e $1 -b $2 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 --optimizer-state bf16 -i /tmp/bs/l.bin -o $CK > $log 2>&1
  echo "ours $1 B=$2: median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep -m1 -i 'recompute\|activations' $log | cut -c1-120) $(grep -m1 error $log) [$((SECONDS-t0)) s]" | tee -a $S
done
rm -rf $CK
cat $S
