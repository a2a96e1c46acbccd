#!/usr/bin/env bash
# Gemma-3-270M beside PyTorch (torch.compile, Liger eager) in the same warm machine.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $S
timeout 60 ./build/run_gpu_tests tiny_gemma3 >$OUT/gpu_tests_gemma.log 2>&1
echo "gemma gpu tests: $(grep -E '[0-9]+ passed' $OUT/gpu_tests_gemma.log | tail -1) $(grep -o 'worst gradient error [0-9.e-]* in [a-z_.0-9]*' $OUT/gpu_tests_gemma.log | tr '\n' ';')" | tee -a $S
python3 tests/fixtures/gen/make_shard.py /tmp/f/g.bin 6000000 262144 random 3 >/dev/null
med() { grep '| loss' $1 | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p; }
for b in 16 32; do
  rm -rf /tmp/f/r; timeout 100 ./train -e gemma3-270m -b $b -t 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i /tmp/f/g.bin -o /tmp/f/r >/tmp/f/gemma_b$b.log 2>&1
  echo "fusedgpt gemma3-270m B=$b T=2048: median $(med /tmp/f/gemma_b$b.log), $(grep '| loss' /tmp/f/gemma_b$b.log | tail -1 | grep -o 'MFU.*') $(grep -m1 error /tmp/f/gemma_b$b.log)" | tee -a $S
done
for sb in "liger 32 120" "liger 16 100" "compile 8 200" "compile 16 200"; do set -- $sb
  PYTHONUNBUFFERED=1 timeout $(( $3 + 20 )) python3 dev/bench/bench_family_torch.py --model gemma3-270m --stack $1 --batch $2 --steps 6 --warmup 3 --timeout $3 2>&1 | grep csv_ | tee -a $S
done
cp /tmp/f/*.log $OUT/ 2>/dev/null
echo "==== summary"; cat $S
