#!/usr/bin/env bash
# One H100: the host-side changes since the last GPU run (eval --per-token's refusals, leftovers of
# unfinished checkpoints, prepare's checks and staged writes, state.bin version 7 and the resume's
# settings line) against the parent's binary: every GPU test, the eight tiny runs' bits, sampling
# from a GPU run; then a GPU resume that changes the optimizer's settings, and a prepare into a
# used folder trained on at once. Needs ./train, build/run_gpu_tests and inputs/train_base (the
# parent's ./train) built beforehand. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
OUT=$OUT bash dev/results/input_checks_2026-11-27/run.sh >$OUT/input_checks.log 2>&1
M=/tmp/ad; R=$M/settings_run
tiny="-e tiny -v 1000 -b 8 -t 128 --warmup 2 -s 0 --val-every 0 -i $M/t.bin"
rm -rf $R
timeout 60 ./train $tiny -x 6 -n 3 -o $R >$OUT/settings_first.log 2>&1
echo "first run rc $?: $(grep -c '^step' $OUT/settings_first.log) step lines" >>$OUT/summary.txt
echo step_00000003 >$R/latest
timeout 60 ./train $tiny -x 6 -n 3 -y 1 --optimizer-state bf16 --weight-decay 0 --z-loss 1e-4 -o $R \
    >$OUT/settings_resume.log 2>&1
echo "resume with other settings rc $?: $(grep -m1 '^settings:' $OUT/settings_resume.log)" >>$OUT/summary.txt
echo "  its steps: $(grep -c '^step' $OUT/settings_resume.log), $(grep -m1 -i 'error' $OUT/settings_resume.log)" >>$OUT/summary.txt
P=$M/prep; rm -rf $P; mkdir -p $P
for i in 1 2 3; do cat README.md dev/RESULTS.md; done >$M/text.txt
timeout 120 ./train prepare -v 2000 -o $P $M/text.txt >$OUT/prepare1.log 2>&1
echo "prepare rc $?: $(ls $P | tr '\n' ' ')" >>$OUT/summary.txt
timeout 120 ./train prepare -v 3000 -o $P $M/text.txt >$OUT/prepare2.log 2>&1
echo "prepare again into the used folder rc $?: $(ls $P | tr '\n' ' ')" >>$OUT/summary.txt
timeout 60 ./train -e tiny -b 8 -t 128 -x 20 --warmup 2 -s 10 -G 16 --val-every 10 -i $P/train.bin -j $P/val.bin \
    --tokenizer $P/tokenizer.bin -v 3000 -o $M/prep_run >$OUT/prep_train.log 2>&1
echo "train on it rc $?: $(grep -m1 'val loss' $OUT/prep_train.log), $(grep -c '^sample at step' $OUT/prep_train.log) samples" >>$OUT/summary.txt
cat $OUT/summary.txt
