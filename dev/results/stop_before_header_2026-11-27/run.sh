#!/usr/bin/env bash
# One GPU: the code with the stop handler in place before the header and the loss-option notes.
# Every GPU test; a SIGINT to a one-GPU run after step 20, resumed with -y 1 and compared with an
# uninterrupted run bit for bit; the header's notes for a cap of 1 and a z-loss of 1 on the GPU.
# Needs ./train and build/run_gpu_tests. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $S
t0=$(date +%s)
timeout 300 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1; rc=$?
echo "gpu tests rc $rc: $(tail -1 $OUT/gpu_tests.log)  [$(( $(date +%s) - t0 )) s]" | tee -a $S
M=/tmp/ad; mkdir -p $M
python3 tests/fixtures/gen/make_shard.py $M/t.bin 2000000 1000 pattern 1 >/dev/null
set -m
base="-e tiny -v 1000 -b 8 -t 128 -x 120 --warmup 5 -s 0 --val-every 0 -i $M/t.bin"
timeout 120 ./train $base -o $M/straight >$OUT/straight.log 2>&1
./train $base -o $M/stopped >$OUT/stopped.log 2>&1 &
pid=$!
for i in $(seq 600); do grep -q 'step    20/120' $OUT/stopped.log && break; sleep 0.05; done
kill -INT $pid; wait $pid; rc=$?
said=$(grep -m1 '^stopped by' $OUT/stopped.log)
timeout 120 ./train $base -y 1 -o $M/stopped >$OUT/resumed.log 2>&1; rc2=$?
same=$(cmp -s $M/straight/step_00000120/model.safetensors $M/stopped/step_00000120/model.safetensors && echo equal || echo DIFFERENT)
echo "one GPU: stopped rc $rc ($said), resumed rc $rc2, final weights against the uninterrupted run: $same $(grep -m1 -h '^error:' $OUT/straight.log $OUT/stopped.log $OUT/resumed.log)" | tee -a $S
timeout 60 ./train $base -x 2 --logit-softcap 1 --z-loss 1 -o $M/notes >$OUT/notes.log 2>&1
echo "notes (rc $?):" | tee -a $S; grep '^note: --' $OUT/notes.log | tee -a $S
cat $S
