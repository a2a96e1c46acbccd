#!/usr/bin/env bash
# one H100: the GPU tests of attention and rope, Qwen3-0.6B (B 16, 32) and Llama-3.2-1B (B 16) in bf16
# optimizer state beside Liger eager bf16 at B 16 (dev/check/families_peers.sh), then both models at
# B 16 in fp32 state. Code of the commit that added this folder.
OUT=${OUT:-out}
TESTS="attention rope" EXTRA="--optimizer-state bf16" OUT=$OUT bash dev/check/families_peers.sh >/dev/null 2>&1
t0=$SECONDS; CK=/dev/shm/fp; [ "$(df -k --output=avail /dev/shm | tail -1)" -gt 30000000 ] 2>/dev/null || CK=/tmp/f/r
for m in "qwen3-0.6b q" "llama3.2-1b l"; do set -- $m
  log=$OUT/ours_$1_b16_fp32.log; rm -rf $CK
  timeout 100 ./train -e $1 -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i /tmp/f/$2.bin -o $CK > $log 2>&1
  echo "ours $1 B=16 fp32 state: median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep -m1 error $log) [$((SECONDS-t0)) s]" | tee -a $OUT/summary.txt
done
rm -rf $CK
tar -czf $OUT/logs.tar.gz -C $OUT $(cd $OUT && ls *.log) && rm -f $OUT/*.log
cat $OUT/summary.txt
