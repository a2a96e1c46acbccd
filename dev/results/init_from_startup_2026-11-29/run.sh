#!/usr/bin/env bash
# One GPU: seconds from the trainer's start to its first step when it starts from Hugging Face
# weights (--init-from), Qwen3-0.6B and Llama-3.2-1B (B 16, T 2048, bf16 AdamW state), the parent's
# binary (inputs/train_parent: the seed's weights drawn, then overwritten; the file read by one
# thread) against ./train (the weights given to the backend at creation; read on every core),
# alternating, ROUNDS rounds (2). Two sources per model: a checkpoint of ours made here (step 4, fp32
# model.safetensors) and the same weights rounded to bf16 in a folder of their own, as the hub's
# files are. Beside them, a fresh start from the seed. First the GPU tests of the backend (the
# weights given at creation among them). PARTS (default "tests init"): tests, init (the above), and
# resume: the checkpoint of step 4 of a 6-step run (-n 4) resumed (-y 1) by each binary, timed to
# step 5 as above, then ./train's resume run to step 6 against the uninterrupted run: steps 5-6 and
# the final weights (EQUAL: the models checked so, default q: Qwen3-0.6B). Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
S=$OUT/summary.txt; : >$S
. dev/bench/family_rounds.sh # shard, first_step
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee -a $S
nproc | sed 's/^/host cores: /' | tee -a $S
PARTS=${PARTS:-tests init}; has() { [[ " $PARTS " == *" $1 "* ]]; }
if has tests; then
  timeout 200 ./build/run_gpu_tests backend >$OUT/gpu_tests.log 2>&1
  echo "GPU tests backend: $(tail -1 $OUT/gpu_tests.log) $(grep -A2 -m3 FAILED $OUT/gpu_tests.log | tr '\n' ' ')" | tee -a $S
fi
shard q 151936; shard l 128256
chmod +x inputs/*
if has resume; then
  for m in ${MODELS:-qwen3-0.6b:q llama3.2-1b:l}; do set -- ${m/:/ }
    ck=$PWD/ck_$2; cut=$PWD/cut_$2; rm -rf $ck $cut
    run() { ./train -e $1 -b 16 -t 2048 --max-seq-len 2048 -x 6 -n 4 --warmup 2 --val-every 0 -s 0 --optimizer-state bf16 \
      -i /tmp/f/$2.bin "${@:3}"; }
    run $1 $2 -o $ck > $OUT/full_$2.log 2>&1 || { echo "making $ck failed"; tail -3 $OUT/full_$2.log; }
    mkdir -p $cut && mv $ck/step_00000004 $cut/ && echo step_00000004 >$cut/latest
    [[ " ${EQUAL:-q} " == *" $2 "* ]] || rm -rf $ck # disk: Llama-3.2-1B's checkpoints are 20 GB each
    for r in $(seq 1 ${ROUNDS:-2}); do
      for who in parent new; do first_step $who $1 $2 "resume r$r" -x 6 -y 1 -o $cut; done
    done | tee -a $S
    if [ -d $ck ]; then
    run $1 $2 -y 1 -o $cut > $OUT/resumed_$2.log 2>&1
    same=$(diff <(grep -E '^step +[56]/' $OUT/full_$2.log | cut -d'|' -f1-5) <(grep -E '^step +[56]/' $OUT/resumed_$2.log | cut -d'|' -f1-5) >/dev/null &&
           [ $(grep -cE '^step +[56]/' $OUT/resumed_$2.log) = 2 ] && echo equal || echo DIFFERENT)
    echo "$1 resumed at step 4 by ./train: steps 5-6 $same, final weights $(cmp -s $ck/step_00000006/model.safetensors $cut/step_00000006/model.safetensors && echo equal || echo DIFFERENT)" | tee -a $S
    fi
    rm -rf $ck $cut
  done
fi
has init && for m in ${MODELS:-qwen3-0.6b:q llama3.2-1b:l}; do set -- ${m/:/ }
  ck=$PWD/ck_$2; rm -rf $ck $PWD/hf_$2
  ./train -e $1 -b 16 -t 2048 --max-seq-len 2048 -x 4 -n 4 --warmup 2 --val-every 0 -s 0 --optimizer-state bf16 \
    -i /tmp/f/$2.bin -o $ck > $OUT/make_$2.log 2>&1 || { echo "making $ck failed"; tail -3 $OUT/make_$2.log; }
  mkdir -p $PWD/hf_$2 && cp $ck/step_00000004/config.json $PWD/hf_$2/
  python3 - $ck/step_00000004/model.safetensors $PWD/hf_$2/model.safetensors <<'PY'
import sys, torch
from safetensors.torch import load_file, save_file
save_file({k: v.to(torch.bfloat16).contiguous() for k, v in load_file(sys.argv[1]).items()}, sys.argv[2],
          metadata={"format": "pt"})
PY
  ls -la $ck/step_00000004/model.safetensors $PWD/hf_$2/model.safetensors | awk '{print $5, $9}' | tee -a $S
  for r in $(seq 1 ${ROUNDS:-2}); do
    for who in parent new; do
      first_step $who $1 $2 "init-from fp32 r$r" -x 5 --init-from $ck/step_00000004 -o $PWD/init_$2
      first_step $who $1 $2 "init-from bf16 r$r" -x 5 --init-from $PWD/hf_$2 -o $PWD/init_$2
      first_step $who $1 $2 "seed r$r" -x 5 -o $PWD/init_$2
    done
  done | tee -a $S
  rm -rf $ck $PWD/hf_$2 $PWD/init_$2
done
echo ===; cat $S
