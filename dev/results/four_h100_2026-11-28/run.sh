#!/usr/bin/env bash
# One four-GPU host, the code of this folder's commit, in two parts (PART=gpt2, then PART=qwen3):
#   gpt2: the GPU tests adamw and backend, then GPT-2 124M in the default mode at V 262144 and
#         50304 beside PyTorch torch.compile and DDP + torch.compile in the same call;
#   qwen3: one GPU against four at the same global batch and two identical four-GPU runs (sections
#         correct and bitwise), then Qwen3-0.6B on one GPU and on four (bf16 AdamW state, B 16 a GPU)
#         beside PyTorch DDP with Liger eager (dev/check/families_ddp.sh).
# Needs ./train and build/run_gpu_tests built beforehand, Liger's wheel in .whl/. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee $OUT/gpus.txt
case ${PART:-gpt2} in
gpt2)
  G=4 TRAIN_PREBUILT=1 SECTIONS="tests throughput peers" TP_VOCABS="262144 50304" TP_MODES="default|" \
      OUT=$OUT/g4 timeout 480 bash dev/check/multigpu_check.sh >$OUT/multigpu_g4.log 2>&1
  echo "rc $?"
  mkdir -p $OUT/g4_torch; cp /tmp/mg/torch_*.log $OUT/g4_torch/ 2>/dev/null
  cp $OUT/g4/summary.txt $OUT/summary_gpt2.txt
  tar -czf $OUT/logs_gpt2.tar.gz -C $OUT g4 g4_torch multigpu_g4.log && rm -rf $OUT/g4 $OUT/g4_torch $OUT/multigpu_g4.log
  cat $OUT/summary_gpt2.txt ;;
qwen3)
  G=4 TRAIN_PREBUILT=1 SECTIONS="correct bitwise" OUT=$OUT/cb timeout 170 bash dev/check/multigpu_check.sh \
      >$OUT/multigpu_cb.log 2>&1
  echo "rc $?"
  cp $OUT/cb/summary.txt $OUT/summary_correct_bitwise.txt
  tar -czf $OUT/logs_correct_bitwise.tar.gz -C $OUT cb multigpu_cb.log && rm -rf $OUT/cb $OUT/multigpu_cb.log
  MODEL=qwen3-0.6b B=16 G=4 STATES=bf16 BUDGET_S=300 OUT=$OUT/q4 timeout 420 bash dev/check/families_ddp.sh \
      >$OUT/families_ddp.log 2>&1
  echo "rc $?"
  cp $OUT/q4/summary.txt $OUT/summary_qwen3.txt; mv $OUT/q4/logs.tar.gz $OUT/logs_qwen3.tar.gz 2>/dev/null
  rm -rf $OUT/q4
  cat $OUT/summary_correct_bitwise.txt $OUT/summary_qwen3.txt ;;
esac
