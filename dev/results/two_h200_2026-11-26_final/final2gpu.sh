#!/usr/bin/env bash
# Two GPUs, most important first: --vocab-parallel's section; every GPU test on GPU 0 beside
# Qwen3-0.6B's real-text loss curves on GPU 1; then correct / bitwise / families; Gemma on 1 and 2 GPUs.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
S=$OUT/summary_final.txt
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $S
mkdir -p .cache && tar -xJf inputs/corpus.tar.xz -C .cache
mg() { TRAIN_PREBUILT=1 SECTIONS="$1" OUT=$OUT/mg_$2 timeout $3 bash dev/check/multigpu_check.sh >$OUT/multigpu_$2.log 2>&1
  echo "== multigpu $1 (rc $?)" >>$S; sed -n '/==== summary ====/,$p' $OUT/multigpu_$2.log >>$S; }
mg vocabpar vp 200
( t0=$(date +%s); CUDA_VISIBLE_DEVICES=0 timeout 200 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1; echo "rc $?" >>$OUT/gpu_tests.log
  echo "gpu tests: $(grep -E '[0-9]+ passed' $OUT/gpu_tests.log | tail -1) ($(( $(date +%s) - t0 )) s)" >$OUT/gpu_tests_line.txt ) &
tests_pid=$!
CUDA_VISIBLE_DEVICES=1 timeout 190 bash dev/check/compare_output_layers.sh /tmp/f/cmp_qwen3 -e qwen3-0.6b -b 8 -t 2048 -x 100 --warmup 20 --val-every 50 --val-batches 4 >/tmp/f/cmp_qwen3.log 2>&1
echo "real text qwen3-0.6b B=8: $(grep 'compare fused' /tmp/f/cmp_qwen3.log) $(grep -m1 error /tmp/f/cmp_qwen3.log)" | tee -a $S
echo "    val: fused $(grep 'val loss' /tmp/f/cmp_qwen3/fused.txt | tail -1) | canonical $(grep 'val loss' /tmp/f/cmp_qwen3/canonical.txt | tail -1); memory $(grep '| loss' /tmp/f/cmp_qwen3/fused.txt | tail -1 | grep -o '[0-9.]* GB') vs $(grep '| loss' /tmp/f/cmp_qwen3/canonical.txt | tail -1 | grep -o '[0-9.]* GB')" | tee -a $S
mkdir -p $OUT/cmp_qwen3 && for k in fused canonical; do cp /tmp/f/cmp_qwen3/$k/log.jsonl $OUT/cmp_qwen3/$k.jsonl 2>/dev/null; cp /tmp/f/cmp_qwen3/$k.txt $OUT/cmp_qwen3/ 2>/dev/null; done
wait $tests_pid
cat $OUT/gpu_tests_line.txt | tee -a $S; grep -E "FAILED" $OUT/gpu_tests.log | head -8 | tee -a $S
mg "correct bitwise families" rest 200
python3 tests/fixtures/gen/make_shard.py /tmp/f/g.bin 8000000 262144 random 3 >/dev/null
for g in 1 2; do rm -rf /tmp/f/r; timeout 60 ./train -g $g -e gemma3-270m -b 32 -t 2048 -x 10 --warmup 2 --val-every 0 -s 0 -n 0 -i /tmp/f/g.bin -o /tmp/f/r >/tmp/f/gemma_g$g.log 2>&1
  echo "gemma3-270m B=32/GPU on $g GPU(s): $(grep '| loss' /tmp/f/gemma_g$g.log | tail -5 | grep -o '[0-9]* tok/s' | sort -n | sed -n 3p) $(grep '| loss' /tmp/f/gemma_g$g.log | tail -1 | grep -o '[0-9.]* GB') $(grep -m1 error /tmp/f/gemma_g$g.log)" | tee -a $S; done
cp /tmp/f/*.log $OUT/ 2>/dev/null
echo "==== final summary"; cat $S
