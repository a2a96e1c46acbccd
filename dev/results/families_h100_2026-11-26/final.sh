#!/usr/bin/env bash
# Final call: GPU tests, GPT-2 before/after, the families' throughput (then peers.sh in a second call).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $OUT/summary.txt
make -j16 train build/run_gpu_tests build/bench_output_layer >/tmp/f/build.log 2>&1 || { tail -40 /tmp/f/build.log; exit 1; }
t0=$(date +%s)
timeout 240 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1; echo "rc $?" >>$OUT/gpu_tests.log
echo "gpu tests: $(grep -E '[0-9]+ passed' $OUT/gpu_tests.log | tail -1) ($(( $(date +%s) - t0 )) s)" | tee -a $OUT/summary.txt
grep -E "FAILED" $OUT/gpu_tests.log | head -10 | tee -a $OUT/summary.txt
timeout 90 python3 dev/check/hf_families_check.py --train ./train 2>&1 | grep -v Warning | tail -1 | tee -a $OUT/summary.txt
timeout 90 ./build/bench_output_layer --no-canonical --slices 2 --shape 768,16384,262144 > $OUT/slices.txt 2>&1; tail -8 $OUT/slices.txt | tee -a $OUT/summary.txt
python3 tests/fixtures/gen/make_shard.py /tmp/f/g.bin 20000000 50304 random 3 >/dev/null
chmod +x inputs/train_before
med() { grep '| loss' $1 | tail -20 | awk -F'|' -v c=$2 '{print $c}' | awk '{print $1}' | sort -n | sed -n 10p; }
for round in 1 2; do for bin in inputs/train_before ./train; do
  tag=$(basename $bin)_$round; rm -rf /tmp/f/r
  $bin -e d12 -v 50304 -b 32 -t 1024 -x 30 --warmup 5 --val-every 0 -s 0 -i /tmp/f/g.bin -o /tmp/f/r >/tmp/f/gpt2_$tag.log 2>&1
  echo "gpt2 d12 V=50304 B=32 $tag: median $(med /tmp/f/gpt2_$tag.log 5) ms, $(grep '| loss' /tmp/f/gpt2_$tag.log | tail -1 | grep -o '[0-9]* tok/s') last, $(grep '| loss' /tmp/f/gpt2_$tag.log | tail -1 | grep -o '[0-9.]* GB')" | tee -a $OUT/summary.txt
done; done
python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 6000000 151936 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 6000000 128256 random 4 >/dev/null
for m in "qwen3-0.6b q" "llama3.2-1b l"; do set -- $m; for b in 8 16; do
  rm -rf /tmp/f/r; timeout 150 ./train -e $1 -b $b -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i /tmp/f/$2.bin -o /tmp/f/r >/tmp/f/${1}_b$b.log 2>&1
  echo "$1 B=$b T=2048: median $(grep '| loss' /tmp/f/${1}_b$b.log | tail -8 | awk -F'|' '{print $0}' | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' /tmp/f/${1}_b$b.log | tail -1 | grep -o 'fwd.*') $(grep -m1 error /tmp/f/${1}_b$b.log)" | tee -a $OUT/summary.txt
done; done
cp /tmp/f/*.log $OUT/ 2>/dev/null
echo "==== summary"; cat $OUT/summary.txt
