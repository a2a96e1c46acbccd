#!/usr/bin/env bash
# G GPUs of one host (default 4), the current code: the same parts as
# dev/results/two_h200_2026-11-29/run.sh on G ranks. PARTS picks parts (default "gpu mg vp ckpt"):
#   gpu: the host-transfer GPU tests, on GPU 0;
#   suite: every GPU test, on GPU 0;
#   mg: SECTIONS (MG_SECTIONS, default) "tests correct bitwise nodes resume kill stop families" of dev/check/multigpu_check.sh;
#   vp: its section vocabpar (with the V 262144 runs);
#   ckpt: Qwen3-0.6B on G ranks with a checkpoint every 10 steps, then resumed from step 20: the
#     checkpoint lines (state read, written), the steps around a write, the resume's start and its
#     steps 21-30 against the uninterrupted run's;
#   tp: GPT-2 124M tokens/s, one GPU alone on each GPU and the default on G (and the modes of
#     TP_MODES, default "default|"), beside PyTorch torch.compile and DDP in the same call, at V 262144
#     and 50304;
#   fam: Qwen3-0.6B, B 16 a GPU, on one GPU and on G beside transformers + Liger eager bf16 alone
#     and under PyTorch DDP (dev/check/families_ddp.sh; Liger's wheel in .whl/).
# MG_S, VP_S, TP_S, FAM_S: the parts' time limits in seconds. Needs ./train and build/run_gpu_tests built beforehand. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; : >$S
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee -a $S
nproc | sed 's/^/host cores: /' | tee -a $S
t0=$SECONDS
G=${G:-4}
PARTS=${PARTS:-gpu mg vp ckpt}; has() { [[ " $PARTS " == *" $1 "* ]]; }
if has gpu; then
  CUDA_VISIBLE_DEVICES=0 timeout 120 ./build/run_gpu_tests copy_to_ >$OUT/gpu_tests.log 2>&1
  echo "gpu tests host_transfer rc $?: $(tail -1 $OUT/gpu_tests.log) $(grep -A3 -m3 FAILED $OUT/gpu_tests.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
fi
if has suite; then
  CUDA_VISIBLE_DEVICES=0 timeout 300 ./build/run_gpu_tests >$OUT/gpu_suite.log 2>&1
  echo "every GPU test rc $?: $(tail -1 $OUT/gpu_suite.log) $(grep -m5 FAILED $OUT/gpu_suite.log | tr '\n' ' ') [$((SECONDS - t0)) s]" | tee -a $S
fi
if has mg; then
  G=$G TRAIN_PREBUILT=1 SECTIONS="${MG_SECTIONS:-tests correct bitwise nodes resume kill stop families}" OUT=$OUT/mg timeout ${MG_S:-400} bash dev/check/multigpu_check.sh >$OUT/multigpu.log 2>&1
  echo "multigpu_check (${MG_SECTIONS:-tests correct bitwise nodes resume kill stop families}): rc $? [$((SECONDS - t0)) s]" | tee -a $S
  cat $OUT/mg/summary.txt >>$S
fi
if has vp; then
  G=$G TRAIN_PREBUILT=1 SECTIONS="vocabpar" OUT=$OUT/vp MG_TMP=/tmp/mgvp timeout ${VP_S:-300} bash dev/check/multigpu_check.sh >$OUT/vocabpar.log 2>&1
  echo "multigpu_check (vocabpar): rc $? [$((SECONDS - t0)) s]" | tee -a $S
  cat $OUT/vp/summary.txt >>$S
fi
if has ckpt; then
  C=/tmp/ck; rm -rf $C; mkdir -p $C
  python3 tests/fixtures/gen/make_shard.py $C/rand.bin 1500000 151936 random 1 >/dev/null
  run() { timeout 200 ./train -g $G -e qwen3-0.6b -b 8 -t 2048 --max-seq-len 2048 --warmup 2 --val-every 0 -s 0 -n 10 -i $C/rand.bin "$@"; }
  run -x 30 -o $C/full >$OUT/ckpt_full.log 2>&1; echo "Qwen3-0.6B, $G ranks, 30 steps, a checkpoint every 10: rc $? [$((SECONDS - t0)) s]" | tee -a $S
  grep -E '^checkpoint:' $OUT/ckpt_full.log | tee -a $S
  grep -E '^step +(9|1[0-3]|29|30)/' $OUT/ckpt_full.log | cut -c1-120 | tee -a $S
  mkdir -p $C/cut && cp -r $C/full/step_00000020 $C/cut/ && echo step_00000020 >$C/cut/latest
  s1=$SECONDS; run -x 30 -y 1 -o $C/cut >$OUT/ckpt_resumed.log 2>&1; echo "resumed at step 20: rc $? in $((SECONDS - s1)) s" | tee -a $S
  grep -E 'resum|^checkpoint:' $OUT/ckpt_resumed.log | head -5 | tee -a $S
  same=$(diff <(grep -E '^step +(2[1-9]|30)/' $OUT/ckpt_full.log | cut -d'|' -f1-5) \
              <(grep -E '^step +(2[1-9]|30)/' $OUT/ckpt_resumed.log | cut -d'|' -f1-5) >/dev/null &&
         [ $(grep -cE '^step +(2[1-9]|30)/' $OUT/ckpt_resumed.log) = 10 ] && echo equal || echo DIFFERENT)
  echo "steps 21-30 resumed against one run: loss lines $same, final weights $(cmp -s $C/full/step_00000030/model.safetensors $C/cut/step_00000030/model.safetensors && echo equal || echo DIFFERENT) [$((SECONDS - t0)) s]" | tee -a $S
  rm -rf $C
fi
if has tp; then
  G=$G TRAIN_PREBUILT=1 SECTIONS="throughput peers" TP_VOCABS="262144 50304" TP_MODES="${TP_MODES:-default|}" OUT=$OUT/tp timeout ${TP_S:-560} bash dev/check/multigpu_check.sh >$OUT/throughput.log 2>&1
  echo "multigpu_check (throughput peers): rc $? [$((SECONDS - t0)) s]" | tee -a $S
  cat $OUT/tp/summary.txt >>$S
fi
if has fam; then
  MODEL=qwen3-0.6b B=16 G=$G STATES=bf16 BUDGET_S=300 OUT=$OUT/fam timeout ${FAM_S:-400} bash dev/check/families_ddp.sh >$OUT/families_ddp.log 2>&1
  echo "families_ddp (qwen3-0.6b, B 16): rc $? [$((SECONDS - t0)) s]" | tee -a $S
  cat $OUT/fam/summary.txt >>$S
fi
echo ===; cat $S
