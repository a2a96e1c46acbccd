#!/usr/bin/env bash
# one call: the committed code's GPU tests and Llama beside Liger; then the persistent variant's attention tests and bench
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f; S=$OUT/summary.txt; t0=$SECONDS
H=inputs/attn/head P=inputs/attn/pers
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a $S
timeout 220 $H/run_gpu_tests > $OUT/gpu_tests_head.log 2>&1
echo "head gpu tests rc $? $(grep -E '[0-9]+ passed' $OUT/gpu_tests_head.log | tail -1) $(grep -m5 -E 'FAIL' $OUT/gpu_tests_head.log | tr '\n' ' ' | cut -c1-300) [$((SECONDS-t0)) s]" | tee -a $S
python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 6000000 128256 random 4 >/dev/null
for st in fp32 bf16; do
  log=$OUT/llama_$st.log; rm -rf /tmp/f/r
  timeout 80 $H/train -e llama3.2-1b -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 --optimizer-state $st -i /tmp/f/l.bin -o /tmp/f/r > $log 2>&1
  echo "llama3.2-1b B16 $st: median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep '| loss' $log | tail -1 | grep -o 'fwd.*' | cut -c1-40) $(grep -m1 error $log) [$((SECONDS-t0)) s]" | tee -a $S
done
PYTHONUNBUFFERED=1 timeout 100 python3 dev/bench/bench_family_torch.py --model llama3.2-1b --stack liger --batch 16 --precision bf16 --steps 6 --warmup 3 > $OUT/peer_llama.log 2>&1
echo "$(grep csv_ $OUT/peer_llama.log) [$((SECONDS-t0)) s]" | tee -a $S
timeout 45 $P/run_gpu_tests attention > $OUT/tests_pers.log 2>&1
echo "pers attention tests rc $? $(grep -E '[0-9]+ passed' $OUT/tests_pers.log | tail -1) [$((SECONDS-t0)) s]" | tee -a $S
if grep -q ' 0 failed' $OUT/tests_pers.log; then
  for v in head pers head pers; do
    timeout 40 inputs/attn/$v/bench_kernels 16 attention > $OUT/b.log 2>&1
    awk -v v=$v '/^attention/{sh=$2" "$4" "$6} /attention_backward wgmma \(FA2/{print "bench", v, sh, $5}' $OUT/b.log | tee -a $S
  done
fi
echo "---- $((SECONDS-t0)) s" | tee -a $S
tar czf $OUT/logs.tar.gz -C $OUT $(cd $OUT && ls *.log) && (cd $OUT && rm -f *.log)
