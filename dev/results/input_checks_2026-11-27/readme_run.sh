#!/usr/bin/env bash
# One H100: the README's run command on the code after the input-handling fixes, with the extended
# corpus text packed here (dev/check/pack_corpus.sh, carried as inputs/ext.tar.xz: no network there),
# stopped after 150 s; then a micro-batch larger than the extended corpus's validation shard, whose
# validation turns off with a note. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
mkdir -p .cache && tar -xJf inputs/ext.tar.xz -C .cache
timeout 150 ./train -v 262144 >$OUT/readme_run.log 2>&1
echo "./train -v 262144: rc $? (124: stopped by the timeout), $(grep -c '^step ' $OUT/readme_run.log) step lines" >$OUT/summary.txt
grep -E "val loss" $OUT/readme_run.log | head -3 >>$OUT/summary.txt
grep -E "^step +[0-9]+/" $OUT/readme_run.log | tail -2 >>$OUT/summary.txt
timeout 120 ./train -v 262144 -b 200 -x 2 --warmup 0 --val-every 1 -s 0 -o runs/val_off >$OUT/val_off.log 2>&1
echo "-b 200 --val-every 1: rc $?" >>$OUT/summary.txt
grep -E "^validation|^error|^step" $OUT/val_off.log >>$OUT/summary.txt
cat $OUT/summary.txt
