#!/usr/bin/env bash
# attention_variants.sh - one GPU: attention backward variants side by side. For each VARIANT dir
# (binaries bench_kernels, run_gpu_tests, train): the GPU tests of attention (and backend for the
# last), `bench_kernels 16 attention` in ROUNDS alternating rounds, then the trainer (Qwen3-0.6B B 16,
# GPT-2 124M V 50304 B 32) for the first and the last variant. Summary last.
#   VARIANTS="base v1 v2" DIR=inputs/attn [ROUNDS=2] [PARTS="tests bench train"] [OUT=out] bash dev/check/attention_variants.sh
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; : >$S
say() { echo "$1" | tee -a $S; }
DIR=${DIR:-inputs/attn}; set -- ${VARIANTS:-base v1 v2 v3 v4}; first=$1; last=${@: -1}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $S
t0=$SECONDS
has() { [[ " ${PARTS:-tests bench train} " == *" $1 "* ]]; }
has tests && for v in "$@"; do
  for f in attention $([ $v = $last ] && echo backend); do
    timeout 150 $DIR/$v/run_gpu_tests $f >$OUT/tests_${v}_$f.log 2>&1
    say "$v gpu tests $f rc $?: $(grep -E '[0-9]+ passed' $OUT/tests_${v}_$f.log | tail -1) $(grep -m3 FAIL $OUT/tests_${v}_$f.log | tr '\n' ' ') [$((SECONDS-t0)) s]"
  done
done
has bench && for r in $(seq 1 ${ROUNDS:-2}); do
  for v in "$@"; do
    timeout 100 $DIR/$v/bench_kernels 16 attention >$OUT/bench_${v}_$r.log 2>&1
    grep -E '^attention|attention_backward wgmma \(' $OUT/bench_${v}_$r.log |
      awk -v v=$v -v r=$r '/^attention/{shape=$2" "$3" "$4" "$5" "$6} /backward/{print "bench", v, "round", r, shape, $5, $6, $7, $8}' | tee -a $S
  done
done
M=/tmp/av; mkdir -p $M
python3 tests/fixtures/gen/make_shard.py $M/g.bin 8000000 50304 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/q.bin 6000000 151936 random 3 >/dev/null
has train && for v in $first $last; do
  rm -rf $M/o; timeout 120 $DIR/$v/train -e qwen3-0.6b -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 -i $M/q.bin -o $M/o >$OUT/train_qwen3_$v.log 2>&1
  say "Qwen3-0.6B B16 $v: $(grep '| loss' $OUT/train_qwen3_$v.log | tail -8 | grep -oE '[0-9]+ tok/s' | sort -n | sed -n 4p) $(grep -m1 error $OUT/train_qwen3_$v.log)"
  rm -rf $M/o; timeout 90 $DIR/$v/train -e d12 -v 50304 -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 --step-parts 1 -i $M/g.bin -o $M/o >$OUT/train_gpt2_$v.log 2>&1
  say "GPT-2 124M V50304 B32 $v: $(grep '| loss' $OUT/train_gpt2_$v.log | tail -30 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 15p) $(grep -m1 error $OUT/train_gpt2_$v.log)"
done
# the variants keep every sum's order: the loss and norm columns should be the same text
has train && for m in qwen3 gpt2; do
  a=$(grep '| loss' $OUT/train_${m}_$first.log | grep -oE 'loss [0-9.]+|norm [0-9.]+' | md5sum | cut -c1-8)
  b=$(grep '| loss' $OUT/train_${m}_$last.log | grep -oE 'loss [0-9.]+|norm [0-9.]+' | md5sum | cut -c1-8)
  say "$m loss and norm lines, $first against $last: $([ "$a" = "$b" ] && echo same || echo DIFFERENT)"
done
rm -rf $M/o
tar -czf $OUT/logs.tar.gz -C $OUT $(cd $OUT && ls *.log) && rm -f $OUT/*.log # the returned files are few
say "---- elapsed $((SECONDS-t0)) s"
