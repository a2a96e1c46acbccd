#!/usr/bin/env bash
# optimizer_state_check.sh - one GPU: --optimizer-state bf16 (bf16 AdamW moments, no fp32 master copy)
# against the fp32 default. PARTS picks (default all):
#   tests  the GPU tests (TESTS: filters, default all)
#   speed  Llama-3.2-1B and Qwen3-0.6B at B 16, T 2048 in each state, and Llama at B 24 in bf16 state
#          (RUNS picks others): median tokens/s of the last 8 of 14 steps and the memory in use, random tokens
#   peers  PyTorch + Liger eager in bf16 at B 16 (8 bytes a parameter: bf16 weights, gradients and
#          AdamW moments), the best PyTorch stack of dev/RESULTS.md's family entries (wheel from .whl/)
#   curves Qwen3-0.6B on the default corpus (inputs/corpus.tar.xz) in each state, same seed and data:
#          the per-step loss difference (dev/check/compare_losses.py) and both validation losses
# A summary last.   [PARTS="tests speed"] [OUT=out] bash dev/check/optimizer_state_check.sh
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
PARTS=${PARTS:-tests speed peers curves}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $OUT/summary.txt
t0=$SECONDS
if has tests; then
  for f in ${TESTS:-all}; do
    timeout 300 ./build/run_gpu_tests $([ "$f" = all ] || echo $f) >> $OUT/gpu_tests.log 2>&1
    echo "gpu tests $f rc $? $(grep -E 'passed' $OUT/gpu_tests.log | tail -1 | grep -o '[0-9]* passed, [0-9]* failed') $(grep -m5 -iE 'FAIL|error' $OUT/gpu_tests.log | tr '\n' ' ' | cut -c1-400) [$((SECONDS-t0)) s]" | tee -a $OUT/summary.txt
  done
fi
if has speed; then
  python3 tests/fixtures/gen/make_shard.py /tmp/f/q.bin 6000000 151936 random 3 >/dev/null
  python3 tests/fixtures/gen/make_shard.py /tmp/f/l.bin 6000000 128256 random 4 >/dev/null
  # RUNS: "model B shard state;..." (default: both models at B 16 in each state, Llama at B 24 in bf16)
  IFS=';' read -ra runs <<<"${RUNS:-llama3.2-1b 16 l fp32;llama3.2-1b 16 l bf16;qwen3-0.6b 16 q fp32;qwen3-0.6b 16 q bf16;llama3.2-1b 24 l bf16}"
  for m in "${runs[@]}"; do set -- $m
    log=$OUT/ours_$1_b$2_$4.log; rm -rf /tmp/f/r
    timeout 90 ./train -e $1 -b $2 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 \
      --optimizer-state $4 -i /tmp/f/$3.bin -o /tmp/f/r > $log 2>&1
    echo "ours $1 B=$2 $4: median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep '| loss' $log | tail -1 | grep -o 'fwd.*' | cut -c1-40) $(grep -m1 -i 'output layer:' $log | cut -c1-60) $(grep -m1 error $log) [$((SECONDS-t0)) s]" | tee -a $OUT/summary.txt
  done
fi
if has peers; then
  for m in llama3.2-1b qwen3-0.6b; do
    PYTHONUNBUFFERED=1 timeout 150 python3 dev/bench/bench_family_torch.py --model $m --stack liger --batch 16 --precision bf16 --steps 6 --warmup 3 > $OUT/peer_${m}_liger_bf16.log 2>&1
    echo "$(grep csv_ $OUT/peer_${m}_liger_bf16.log) $(grep -m1 -iE 'error|Traceback' $OUT/peer_${m}_liger_bf16.log) [$((SECONDS-t0)) s]" | tee -a $OUT/summary.txt
  done
fi
if has curves; then
  mkdir -p .cache && tar -xJf inputs/corpus.tar.xz -C .cache
  r="-e qwen3-0.6b -b 8 -t 2048 -x 150 --warmup 20 --val-every 50 --val-batches 4 -s 0 --seed 0"
  for st in fp32 bf16; do
    timeout 200 ./train $r --optimizer-state $st -o /tmp/f/curve_$st > $OUT/curve_$st.log 2>&1
    echo "curve $st: rc $? $(grep '| loss' $OUT/curve_$st.log | tail -1 | cut -c1-120) [$((SECONDS-t0)) s]" | tee -a $OUT/summary.txt
    echo "    val: $(grep 'val loss' $OUT/curve_$st.log | tr '\n' ' ' | cut -c1-200)" | tee -a $OUT/summary.txt
    cp /tmp/f/curve_$st/log.jsonl $OUT/curve_$st.jsonl 2>/dev/null
  done
  python3 dev/check/compare_losses.py $OUT/curve_bf16.jsonl $OUT/curve_fp32.jsonl bf16 fp32 | tee -a $OUT/summary.txt
fi
echo "---- elapsed $((SECONDS-t0)) s" | tee -a $OUT/summary.txt
tar czf $OUT/logs.tar.gz -C $OUT $(cd $OUT && ls *.log *.jsonl 2>/dev/null) && (cd $OUT && rm -f *.log *.jsonl)
cat $OUT/summary.txt
