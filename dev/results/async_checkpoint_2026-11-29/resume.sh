#!/usr/bin/env bash
# One GPU: seconds from the trainer's start to its first step's line when it resumes a checkpoint
# (-y 1) and when it starts from one as Hugging Face weights (--init-from), Qwen3-0.6B and
# Llama-3.2-1B (B 16, T 2048, bf16 AdamW state): inputs/train_WHO for each WHO but new (./train),
# alternating; WHO "parent new", WHAT "resume init-from", ROUNDS rounds (2). The checkpoint (step 4)
# is made once per model by ./train, on disk; PROBE=1 then times reading its state.bin (dd) as it
# is, and once more after dropping it from the page cache; COLD=1 drops it before every resume.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
. dev/bench/family_rounds.sh # shard, first_step
shard q 151936; shard l 128256
drop_cached() { python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" $1; }
chmod +x inputs/*
for m in ${MODELS:-qwen3-0.6b:q llama3.2-1b:l}; do set -- ${m/:/ }
  ck=$PWD/ck_$2; rm -rf $ck $PWD/init_$2
  ./train -e $1 -b 16 -t 2048 --max-seq-len 2048 -x 4 -n 4 --warmup 2 --val-every 0 -s 0 --optimizer-state bf16 \
    -i /tmp/f/$2.bin -o $ck > $OUT/make_$2.log 2>&1 || { echo "making $ck failed"; tail -3 $OUT/make_$2.log; }
  if [ "${PROBE:-0}" = 1 ]; then
    state=$ck/step_00000004/state.bin
    echo "$1 state.bin as it is: $(dd if=$state of=/dev/null bs=16M 2>&1 | tail -1)"
    drop_cached $state
    echo "$1 state.bin dropped from the cache: $(dd if=$state of=/dev/null bs=16M 2>&1 | tail -1)"
  fi
  for r in $(seq 1 ${ROUNDS:-2}); do
    for who in ${WHO:-parent new}; do
      for what in ${WHAT:-resume init-from}; do
        [ "${COLD:-0}" = 1 ] && drop_cached $ck/step_00000004/state.bin
        if [ $what = resume ]; then first_step $who $1 $2 "resume r$r" -x 5 -y 1 -o $ck
        else first_step $who $1 $2 "init-from r$r" -x 5 --init-from $ck/step_00000004 -o $PWD/init_$2; fi
      done
    done
  done
  rm -rf $ck $PWD/init_$2
done | tee $OUT/resume_summary.txt
