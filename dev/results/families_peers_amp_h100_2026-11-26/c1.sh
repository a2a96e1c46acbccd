#!/bin/bash
# Main (03c2e0a) on one H100: every GPU test, the families at B 16, the peers (Liger bf16 and amp,
# torch.compile at B 16) in the same call, then Qwen3's kernel profile at B 16.
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/summary.txt
t0=$SECONDS
timeout 230 ./build/run_gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc $? $(grep -E 'passed' $OUT/gpu_tests.log | tail -1) $(grep -m5 -i 'FAIL' $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS-t0)) s]" | tee -a $OUT/summary.txt
python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 6000000 151936 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 6000000 128256 random 4 >/dev/null
for m in "qwen3-0.6b 16 q" "llama3.2-1b 16 l" "llama3.2-1b 16 l --recompute-gelu 2"; do set -- $m; extra="${4:-} ${5:-}"
  log=$OUT/ours_$1_b$2$(echo $extra | tr -d ' -').log; rm -rf /tmp/f/r
  timeout 80 ./train -e $1 -b $2 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 $extra -i /tmp/f/$3.bin -o /tmp/f/r > $log 2>&1
  echo "ours $1 B=$2 $extra: median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep '| loss' $log | tail -1 | grep -o 'fwd.*' | cut -c1-60) $(grep -m1 error $log) [$((SECONDS-t0)) s]" | tee -a $OUT/summary.txt
done
for m in qwen3-0.6b llama3.2-1b; do
  for p in bf16 amp; do
    PYTHONUNBUFFERED=1 timeout 150 python3 dev/bench/bench_family_torch.py --model $m --stack liger --batch 16 --precision $p --steps 6 --warmup 3 > $OUT/peer_${m}_liger_$p.log 2>&1
    grep csv_ $OUT/peer_${m}_liger_$p.log | tee -a $OUT/summary.txt; echo "[$((SECONDS-t0)) s]"
  done
done
echo "---- elapsed $((SECONDS-t0)) s" | tee -a $OUT/summary.txt
cat $OUT/summary.txt
