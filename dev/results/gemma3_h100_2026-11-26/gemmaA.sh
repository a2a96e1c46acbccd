#!/usr/bin/env bash
# GPU tests, the transformers check, Gemma-3-270M throughput, real-text loss curves fused vs canonical.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $S
t0=$(date +%s)
timeout 240 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1; echo "rc $?" >>$OUT/gpu_tests.log
echo "gpu tests: $(grep -E '[0-9]+ passed' $OUT/gpu_tests.log | tail -1) ($(( $(date +%s) - t0 )) s)" | tee -a $S
grep -E "FAIL" $OUT/gpu_tests.log | head -10 | tee -a $S
timeout 120 python3 dev/check/hf_families_check.py --train ./train --device cuda >$OUT/hf.log 2>&1; echo "hf rc $?" >>$OUT/hf.log
grep -E "relative|agree|rc|error" $OUT/hf.log | tail -12 | tee -a $S
python3 tests/fixtures/gen/make_shard.py /tmp/f/g.bin 6000000 262144 random 3 >/dev/null
med() { grep '| loss' $1 | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p; }
for b in 8 16 32; do
  rm -rf /tmp/f/r; timeout 100 ./train -e gemma3-270m -b $b -t 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i /tmp/f/g.bin -o /tmp/f/r >/tmp/f/gemma_b$b.log 2>&1
  echo "gemma3-270m B=$b T=2048: median $(med /tmp/f/gemma_b$b.log), $(grep '| loss' /tmp/f/gemma_b$b.log | tail -1 | grep -o 'MFU.*') $(grep -m1 error /tmp/f/gemma_b$b.log)" | tee -a $S
done
rm -rf /tmp/f/r; timeout 60 ./train -e gemma3-270m -b 32 -t 2048 -x 6 --warmup 2 --val-every 0 -s 0 --output canonical -i /tmp/f/g.bin -o /tmp/f/r >/tmp/f/gemma_canon_b32.log 2>&1
echo "gemma3-270m canonical B=32: $(grep '| loss' /tmp/f/gemma_canon_b32.log | tail -1 | grep -o '[0-9]* tok/s.*') $(grep -m1 error /tmp/f/gemma_canon_b32.log)" | tee -a $S
for b in 16 8; do rm -rf /tmp/f/r; timeout 60 ./train -e gemma3-270m -b $b -t 2048 -x 6 --warmup 2 --val-every 0 -s 0 --output canonical -i /tmp/f/g.bin -o /tmp/f/r >/tmp/f/gemma_canon_b$b.log 2>&1
echo "gemma3-270m canonical B=$b: $(grep '| loss' /tmp/f/gemma_canon_b$b.log | tail -1 | grep -o '[0-9]* tok/s.*') $(grep -m1 error /tmp/f/gemma_canon_b$b.log)" | tee -a $S; done
for b in 64 96; do rm -rf /tmp/f/r; timeout 60 ./train -e gemma3-270m -b $b -t 2048 -x 4 --warmup 2 --val-every 0 -s 0 -i /tmp/f/g.bin -o /tmp/f/r >/tmp/f/gemma_b$b.log 2>&1
echo "gemma3-270m fused B=$b: $(grep '| loss' /tmp/f/gemma_b$b.log | tail -1 | grep -o '[0-9]* tok/s.*') $(grep -m1 -E 'error|recompute' /tmp/f/gemma_b$b.log)" | tee -a $S; done
# Llama-3.2-1B at B=16 dropping the gate/up rows (memory against Liger's 48.5 GB)
python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 3000000 128256 random 4 >/dev/null
rm -rf /tmp/f/r; timeout 90 ./train -e llama3.2-1b -b 16 -t 2048 -x 8 --warmup 2 --val-every 0 -s 0 --recompute-gelu 2 -i /tmp/f/l.bin -o /tmp/f/r >/tmp/f/llama_b16_rg2.log 2>&1
echo "llama3.2-1b B=16 --recompute-gelu 2: $(med /tmp/f/llama_b16_rg2.log) $(grep '| loss' /tmp/f/llama_b16_rg2.log | tail -1 | grep -o 'MFU.*') $(grep -m1 error /tmp/f/llama_b16_rg2.log)" | tee -a $S
# real text: the default corpus (extended for 262144), fused against canonical
mkdir -p .cache && tar -xJf inputs/corpus.tar.xz -C .cache
for m in "gemma3-270m 16 150" "qwen3-0.6b 8 100"; do set -- $m
  timeout 200 bash dev/check/compare_output_layers.sh /tmp/f/cmp_$1 -e $1 -b $2 -t 2048 -x $3 --warmup 20 --val-every 50 --val-batches 4 >/tmp/f/cmp_$1.log 2>&1
  echo "real text $1 B=$2: $(grep 'compare fused' /tmp/f/cmp_$1.log) $(grep -m1 error /tmp/f/cmp_$1.log)" | tee -a $S
  echo "    val: fused $(grep 'val' /tmp/f/cmp_$1/fused.txt | tail -1) | canonical $(grep 'val' /tmp/f/cmp_$1/canonical.txt | tail -1)" | tee -a $S
  mkdir -p $OUT/cmp_$1; cp /tmp/f/cmp_$1/*/log.jsonl /tmp/f/cmp_$1/*.txt $OUT/cmp_$1/ 2>/dev/null; for k in fused canonical; do cp /tmp/f/cmp_$1/$k/log.jsonl $OUT/cmp_$1/$k.jsonl 2>/dev/null; done
done
cp /tmp/f/*.log $OUT/ 2>/dev/null
echo "==== summary"; cat $S
