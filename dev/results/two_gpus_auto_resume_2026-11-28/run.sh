#!/usr/bin/env bash
# Two GPUs, the code with -y auto and the ranks' agreement on resuming at start-up: the multi-GPU
# GPU tests, two "hosts" over loopback, resume, a killed worker and a stop (SECTIONS of
# multigpu_check.sh); then -y auto on two GPUs: a first start that finds no checkpoint, a second that
# resumes it with a longer -x, their final weights against the same two commands with -y 0 and
# -y 1 (a longer -x changes the schedule, so an uninterrupted run is no reference). Then, on GPU 0:
# every GPU test and transformers against our checkpoints both ways. Needs ./train and
# build/run_gpu_tests built beforehand. PARTS picks "mg auto gpu" (default all). Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $S
t0=$SECONDS
PARTS=${PARTS:-mg auto gpu}; has() { [[ " $PARTS " == *" $1 "* ]]; }
if has mg; then
G=2 TRAIN_PREBUILT=1 SECTIONS="tests nodes resume kill stop" OUT=$OUT/mg timeout 420 bash dev/check/multigpu_check.sh >$OUT/multigpu.log 2>&1
echo "multigpu_check rc $? [$((SECONDS - t0)) s]" | tee -a $S
cat $OUT/mg/summary.txt >>$S
fi
if has auto; then
A=/tmp/auto; rm -rf $A; mkdir -p $A
python3 tests/fixtures/gen/make_shard.py $A/train.bin 400000 1000 pattern 1
RUN="-g 2 -e tiny -v 1000 -b 8 -t 128 -l 2e-3 --warmup 5 --val-every 0 -s 0 -n 10 -i $A/train.bin -d 2048"
./train $RUN -x 10 -o $A/ref >$OUT/ref1.log 2>&1 && ./train $RUN -x 20 -y 1 -o $A/ref >$OUT/ref2.log 2>&1
echo "reference, -y 0 then -y 1: rc $?" | tee -a $S
./train $RUN -x 10 -y auto -o $A/auto >$OUT/auto1.log 2>&1
echo "-y auto, first start: rc $? $(grep -E 'note: .*-y auto|resumed from' $OUT/auto1.log | tr '\n' ' ')" | tee -a $S
./train $RUN -x 20 -y auto -o $A/auto >$OUT/auto2.log 2>&1
echo "-y auto, second start: rc $? $(grep -E 'note: .*-y auto|resumed from' $OUT/auto2.log | tr '\n' ' ')" | tee -a $S
cmp $A/ref/step_00000020/model.safetensors $A/auto/step_00000020/model.safetensors \
    && echo "final weights: equal to the reference's" | tee -a $S || echo "final weights: DIFFER" | tee -a $S
echo "last step lines: $(grep -m1 'step    20/20' $OUT/ref2.log | cut -c1-40) | $(grep -m1 'step    20/20' $OUT/auto2.log | cut -c1-40)" | tee -a $S
fi
if has gpu; then
export CUDA_VISIBLE_DEVICES=0
timeout 300 ./build/run_gpu_tests >$OUT/gpu_tests.log 2>&1
echo "gpu tests rc $?: $(tail -1 $OUT/gpu_tests.log) $(grep -m5 FAILED $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
timeout 200 python3 dev/check/hf_families_check.py --train ./train --device cuda >$OUT/hf_cuda.log 2>&1
echo "transformers both ways, --device cuda: rc $? [$((SECONDS - t0)) s]" | tee -a $S
grep -E "^[a-z0-9]+:$|ok$|FAILED|agree" $OUT/hf_cuda.log | tee -a $S
fi
cat $S
