#!/usr/bin/env bash
# One GPU, the code with --lr-schedule (cosine, linear, wsd) and sample --top-p: every GPU test,
# transformers against our checkpoints both ways and the GPT-2 round trip
# (dev/results/closing_checks_2026-11-28_b/run.sh); the tiny runs' lines and final weights against
# the parent binary (BASE, default inputs/base_train: the cosine schedule's bits); then on the GPU a
# wsd run stopped in its stable part and resumed with a larger -x against that run from the start
# (GPT-2 and an untied Llama: step lines and final weights), and sample --top-p 1e-6 against greedy
# decoding. Needs ./train and build/run_gpu_tests. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary_schedules.txt; : >$S
BASE=${BASE:-inputs/base_train}
OUT=$OUT bash dev/results/closing_checks_2026-11-28_b/run.sh >$OUT/closing.log 2>&1
BASE=$BASE TESTS=adamw THROUGHPUT=0 OUT=$OUT/ab bash dev/check/ab_one_gpu.sh >$OUT/ab.log 2>&1
M=/tmp/wsd; rm -rf $M; mkdir -p $M
python3 tests/fixtures/gen/make_shard.py $M/t.bin 2000000 1000 pattern 1 >/dev/null
wsd="-v 1000 -b 8 -t 128 -l 2e-3 --warmup 3 --lr-schedule wsd --decay-steps 6 --val-every 0 -s 0 -i $M/t.bin"
fam="--family llama --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64 --untied-head"
for run in "gpt2|-e tiny" "llama_untied|$fam"; do
  IFS='|' read -r tag flags <<<"$run"
  ./train $wsd $flags -x 20 -n 10 -o $M/${tag}_short >$M/${tag}_short.log 2>&1
  echo step_00000010 >$M/${tag}_short/latest
  ./train $wsd $flags -x 40 -n 40 -y 1 -o $M/${tag}_short >$M/${tag}_resumed.log 2>&1
  ./train $wsd $flags -x 40 -n 40 -o $M/${tag}_long >$M/${tag}_long.log 2>&1
  lines() { grep -E '^step +(1[1-9]|[23][0-9]|40)/' $1 | cut -d'|' -f1-4; }
  same=$(diff <(lines $M/${tag}_resumed.log) <(lines $M/${tag}_long.log) >/dev/null && [ "$(lines $M/${tag}_long.log | wc -l)" = 30 ] && echo equal || echo DIFFERENT)
  w=$(cmp -s $M/${tag}_short/step_00000040/model.safetensors $M/${tag}_long/step_00000040/model.safetensors && echo equal || echo DIFFERENT)
  echo "wsd $tag, -x 20 stopped at step 10 and resumed with -x 40, against -x 40 from the start: steps 11-40 $same, final weights $w; $(grep -m1 'schedule: changed' $M/${tag}_resumed.log); last step: $(grep -E '^step +40/' $M/${tag}_long.log | cut -d'|' -f2-4)" | tee -a $S
done
./train sample -o $M/gpt2_long -G 32 --temperature 0 --ids >$M/greedy.txt 2>&1; g=$?
./train sample -o $M/gpt2_long -G 32 --top-p 1e-6 --ids >$M/topp.txt 2>&1; p=$?
./train sample -o $M/gpt2_long -G 32 --top-p 0.9 --top-k 50 --seed 5 --ids >$M/topp09.txt 2>&1; q=$?
echo "sample on the GPU: greedy rc $g, --top-p 1e-6 rc $p, ids $(cmp -s <(grep ^ids $M/greedy.txt) <(grep ^ids $M/topp.txt) && echo equal || echo DIFFERENT); --top-p 0.9 --top-k 50 rc $q, $(grep ^ids $M/topp09.txt | wc -w) words on its ids line" | tee -a $S
echo ===; cat $OUT/summary.txt $OUT/ab/summary.txt $S
