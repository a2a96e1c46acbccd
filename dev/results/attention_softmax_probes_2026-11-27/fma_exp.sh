#!/usr/bin/env bash
# The attention forward with a share of its softmax exponentials on the FMA pipe: tests, the kernel
# bench against the parent (1 in 8, 4, 3, 2 octets on FMA; and no softmax at all, a bound), the
# trainer against the parent. Summary last.
P=inputs/probe; M=/tmp/fz; mkdir -p $M; S=$OUT/summary.txt; : > $S
say() { echo "$1" | tee -a $S; }
t0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a $S
for f in attention backend; do timeout 150 ./build/run_gpu_tests $f > $OUT/tests_$f.log 2>&1
  say "gpu tests $f rc $?: $(grep -E '[0-9]+ passed' $OUT/tests_$f.log | tail -1) $(grep -m3 FAIL $OUT/tests_$f.log | tr '\n' ' ') [$((SECONDS-t0)) s]"; done
for r in 1 2; do for v in base fma4 fma3 $([ $r = 1 ] && echo "fma8 fma2 nosoftmax"); do
  timeout 60 $P/bench_kernels_$v 16 attention > $M/b.log 2>&1
  say "r$r $v: $(grep -A1 -E '^attention' $M/b.log | grep -E 'forward wgmma' | awk '{print $3}' | tr '\n' ' ') (fwd ms: gpt2-hd64 hd128-T1024 qwen3-B8 qwen3-B16 llama-B8 llama-B16)"
done; done
python3 tests/fixtures/gen/make_shard.py $M/r.bin 8000000 50304 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/rl.bin 2000000 128256 random 4 >/dev/null
for b in base new; do bin=$([ $b = base ] && echo inputs/train_base || echo ./train)
  rm -rf $M/o; timeout 90 $bin -e d12 -v 50304 -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 -n 0 --step-parts 1 -i $M/r.bin -o $M/o >$M/g_$b.log 2>&1
  say "GPT-2 V50304 B32 $b: $(grep '| loss' $M/g_$b.log | tail -30 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 15p) $(grep '| loss' $M/g_$b.log | tail -1 | grep -oE 'fwd [0-9.]+ out [0-9.]+ bwd [0-9.]+') last: $(grep '^step' $M/g_$b.log | tail -1 | cut -d'|' -f1-2)"
  rm -rf $M/o; timeout 150 $bin -e llama3.2-1b -b 16 -t 2048 --max-seq-len 2048 -x 12 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 --optimizer-state bf16 -i $M/rl.bin -o $M/o >$M/l_$b.log 2>&1
  say "Llama-3.2-1B B16 $b: $(grep '| loss' $M/l_$b.log | tail -6 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 3p) $(grep '| loss' $M/l_$b.log | tail -1 | grep -oE 'fwd [0-9.]+ out [0-9.]+ bwd [0-9.]+') last: $(grep '^step' $M/l_$b.log | tail -1 | cut -d'|' -f1-2)"
done
cp $M/*_base.log $M/*_new.log $OUT/ 2>/dev/null
say "[$((SECONDS-t0)) s]"
