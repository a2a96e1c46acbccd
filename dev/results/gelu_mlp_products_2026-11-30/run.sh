#!/usr/bin/env bash
# GPT-2's MLP on kernels/gated_mlp.cu's products (the bias and GELU in the forward's epilogue, GELU's
# slope in the input gradient's) against the parent's cuBLAS GELU epilogues (BASE, default
# inputs/train_head), on one GPU. PARTS (default "tests tiny curves ab"):
#   tests:  every GPU test (GPU_TESTS: filters instead);
#   tiny:   the eight tiny runs of dev/check/ab_one_gpu.sh, parent and new: the RoPE families must
#           give the parent's bits (their path is unchanged), GPT-2's only its losses' neighbourhood;
#   curves: GPT-2 124M on real text (the default corpus, inputs/corpus.tar.xz, V 50304), 300 steps,
#           parent and new at -b 16 and -b 8 -d 16384: new against parent at each batching beside the
#           noise floor, parent against parent across batchings (dev/check/compare_losses.py);
#   ab:     GPT-2 124M, B 32, T 1024, at V 50304 and 262144, parent and new alternating AB_ROUNDS
#           (default 3) times: median tokens/s of steps 11-40 and the forward and backward ms.
# Needs ./train and build/run_gpu_tests built beforehand. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; : >$S
say() { echo "$1" | tee -a $S; }
P=${BASE:-inputs/train_head}
PARTS=${PARTS:-tests tiny curves ab}; has() { [[ " $PARTS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee -a $S
t0=$SECONDS
if has tests; then
  for f in ${GPU_TESTS:-all}; do
    timeout 300 ./build/run_gpu_tests $([ "$f" = all ] || echo $f) >$OUT/gpu_tests_$f.log 2>&1
    say "gpu tests $f rc $?: $(grep -E '[0-9]+ passed' $OUT/gpu_tests_$f.log | tail -1) $(grep -m5 FAIL $OUT/gpu_tests_$f.log | tr '\n' ' ') [$((SECONDS - t0)) s]"
  done
fi
if has tiny; then
  BASE=$P TESTS=none THROUGHPUT=0 OUT=$OUT/tiny timeout 200 bash dev/check/ab_one_gpu.sh >/dev/null 2>&1
  grep 'same bits' $OUT/tiny/summary.txt | tee -a $S
  for tag in gpt2 gpt2_t100 accum; do
    say "  $tag: parent's last step $(grep '^step' /tmp/ad/sb_${tag}_base.log | tail -1 | cut -d'|' -f1-2), new $(grep '^step' /tmp/ad/sb_${tag}_new.log | tail -1 | cut -d'|' -f2); val $(grep 'val loss' /tmp/ad/sb_${tag}_base.log | tail -1 | grep -oE 'val loss [0-9.]+') against $(grep 'val loss' /tmp/ad/sb_${tag}_new.log | tail -1 | grep -oE 'val loss [0-9.]+')"
  done
fi
if has curves; then
  mkdir -p .cache && tar -xJf inputs/corpus.tar.xz -C .cache
  ./train prepare --default-corpus -v 50304 >$OUT/prepare.log 2>&1
  d=$(ls -d .cache/default-v1-*-v50304 | head -1)
  for run in "parent b16" "new b16" "parent b8x2" "new b8x2"; do
    read -r who batching <<<"$run"
    bin=$([ $who = parent ] && echo $P || echo ./train)
    [ $batching = b16 ] && bargs="-b 16" || bargs="-b 8 -d 16384"
    rm -rf /tmp/curve
    timeout 200 $bin -e d12 -v 50304 $bargs -t 1024 -x 300 --val-every 100 -s 0 --seed 1337 -i $d/train.bin -j $d/val.bin \
      -o /tmp/curve >$OUT/curve_${who}_$batching.log 2>&1
    cp /tmp/curve/log.jsonl $OUT/curve_${who}_$batching.jsonl 2>/dev/null
    say "curve $who $batching: $(grep '^step' $OUT/curve_${who}_$batching.log | tail -1 | cut -d'|' -f1-2) $(grep 'val loss' $OUT/curve_${who}_$batching.log | tail -1 | grep -oE 'val loss [0-9.]+') $(grep -m1 -i error $OUT/curve_${who}_$batching.log)"
  done
  c() { python3 dev/check/compare_losses.py $OUT/curve_$1.jsonl $OUT/curve_$2.jsonl $1 $2; }
  say "$(c new_b16 parent_b16)"
  say "$(c new_b8x2 parent_b8x2)"
  say "noise floor: $(c parent_b8x2 parent_b16)"
  say "[$((SECONDS - t0)) s]"
fi
if has ab; then
  mkdir -p /tmp/ab
  for V in 50304 262144; do
    python3 tests/fixtures/gen/make_shard.py /tmp/ab/rand_$V.bin 40000000 $V random 3 >/dev/null
  done
  for r in $(seq ${AB_ROUNDS:-3}); do
    for V in 50304 262144; do
      for b in parent new; do
        bin=$([ $b = parent ] && echo $P || echo ./train)
        log=$OUT/ab_${V}_${b}_$r.log
        rm -rf /tmp/ab/run
        timeout 120 $bin -e d12 -v $V -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 -n 0 --step-parts 1 \
          -i /tmp/ab/rand_$V.bin -o /tmp/ab/run >$log 2>&1
        tok=$(grep '| loss' $log | tail -30 | grep -oE '[0-9.]+ tok/s' | grep -oE '[0-9.]+' | sort -n | sed -n 15p)
        parts=$(grep '| loss' $log | tail -30 | grep -oE 'fwd [0-9.]+ out [0-9.]+ bwd [0-9.]+' | sort -t' ' -k2n | sed -n 15p)
        say "V $V round $r $b: ${tok:-FAILED} tok/s, $parts $(grep -m1 -i error $log)"
      done
    done
  done
  rm -rf /tmp/ab
fi
say "---- elapsed $((SECONDS - t0)) s"
