#!/usr/bin/env bash
# Two GPUs, the code with mapped shards and patterns of shards (-i 'dir/*.bin'). PARTS picks parts
# (default "mg shards tp"):
#   mg: the multi-GPU GPU tests, one GPU against two at the same global batch in every mode, two
#       identical runs bitwise, resume on two GPUs (SECTIONS "tests correct bitwise resume" of
#       dev/check/multigpu_check.sh);
#   shards: on two ranks, the parent's binary (BASE, default inputs/base_train) against ./train on
#       one file (loss lines and final weights), then GPT-2 124M over a pattern of three shards:
#       20 steps in one run against a resume of its step 10;
#   tp: GPT-2 124M tokens/s, one GPU alone on each GPU and the default on two, beside PyTorch
#       torch.compile and DDP in the same call, at V 262144 and 50304.
# Needs ./train and build/run_gpu_tests built beforehand. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; : >$S
BASE=${BASE:-inputs/base_train}
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee -a $S
t0=$SECONDS
PARTS=${PARTS:-mg shards tp}; has() { [[ " $PARTS " == *" $1 "* ]]; }
if has mg; then
  G=2 TRAIN_PREBUILT=1 SECTIONS="tests correct bitwise resume" OUT=$OUT/mg timeout 560 bash dev/check/multigpu_check.sh >$OUT/multigpu.log 2>&1
  echo "multigpu_check (tests correct bitwise resume): rc $? [$((SECONDS - t0)) s]" | tee -a $S
  cat $OUT/mg/summary.txt >>$S
fi
if has shards; then
  M=/tmp/ms2; rm -rf $M; mkdir -p $M
  python3 tests/fixtures/gen/make_shard.py $M/one.bin 400000 1000 pattern 1 >/dev/null
  tiny="-g 2 -e tiny -v 1000 -b 8 -t 128 -l 2e-3 --warmup 5 --val-every 0 -s 0 -n 20 -x 20 -i $M/one.bin -d 2048"
  $BASE $tiny -o $M/base >$OUT/tiny_base.log 2>&1; rb=$?
  ./train $tiny -o $M/new >$OUT/tiny_new.log 2>&1; rn=$?
  lines=$(diff <(grep -E '^step ' $OUT/tiny_base.log | cut -d'|' -f1-5) <(grep -E '^step ' $OUT/tiny_new.log | cut -d'|' -f1-5) >/dev/null \
          && [ $(grep -cE '^step ' $OUT/tiny_new.log) = 20 ] && echo equal || echo DIFFERENT)
  echo "tiny GPT-2 on two ranks, parent against this code: rc $rb/$rn, 20 loss lines $lines, final weights $(cmp -s $M/base/step_00000020/model.safetensors $M/new/step_00000020/model.safetensors && echo equal || echo DIFFERENT)" | tee -a $S
  for k in 1 2 3; do python3 tests/fixtures/gen/make_shard.py $M/part_$k.bin 1500000 50304 random $k >/dev/null; done
  run() { timeout 150 ./train -g 2 -e d12 -v 50304 -b 16 -t 1024 --warmup 5 --val-every 0 -s 0 -n 10 -i "$M/part_*.bin" "$@"; }
  run -x 20 -o $M/full >$OUT/shards_full.log 2>&1; echo "three shards, two ranks, 20 steps: rc $?" | tee -a $S
  mkdir -p $M/cut && cp -r $M/full/step_00000010 $M/cut/ && echo step_00000010 >$M/cut/latest
  run -x 20 -y 1 -o $M/cut >$OUT/shards_resumed.log 2>&1; echo "resumed at step 10: rc $?" | tee -a $S
  same=$(diff <(grep -E '^step +(1[1-9]|20)/' $OUT/shards_full.log | cut -d'|' -f1-5) \
              <(grep -E '^step +(1[1-9]|20)/' $OUT/shards_resumed.log | cut -d'|' -f1-5) >/dev/null &&
         [ $(grep -cE '^step +(1[1-9]|20)/' $OUT/shards_resumed.log) = 10 ] && echo equal || echo DIFFERENT)
  echo "GPT-2 124M on three shards and two ranks, steps 11-20 resumed against one run: loss lines $same, final weights $(cmp -s $M/full/step_00000020/model.safetensors $M/cut/step_00000020/model.safetensors && echo equal || echo DIFFERENT)" | tee -a $S
  grep -m1 '^data:' $OUT/shards_full.log | tee -a $S
  grep -E '^step +20/' $OUT/shards_full.log | tee -a $S
  echo "[$((SECONDS - t0)) s]" | tee -a $S
fi
if has tp; then
  G=2 TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="262144 50304" TP_MODES="default|" OUT=$OUT/tp timeout 560 bash dev/check/multigpu_check.sh >$OUT/throughput.log 2>&1
  echo "multigpu_check (throughput peers): rc $? [$((SECONDS - t0)) s]" | tee -a $S
  cat $OUT/tp/summary.txt >>$S
fi
echo ===; cat $S
