#!/usr/bin/env bash
# one GPU (OUT=out bash <this>): --logits-mb 8256 against the default for Llama-3.2-1B at B 16 and Qwen3-0.6B at B 32 (bf16 state)
t0=$SECONDS; S=$OUT/summary.txt; M=/tmp/k; mkdir -p $M
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $S
python3 tests/fixtures/gen/make_shard.py $M/l.bin 2000000 128256 random 4 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/q.bin 2000000 151936 random 3 >/dev/null
for run in "llama3.2-1b|16|l|2064" "llama3.2-1b|16|l|8256" "qwen3-0.6b|32|q|8256"; do
  IFS='|' read -r m b d mb <<<"$run"; rm -rf $M/o
  timeout 75 ./train -e $m -b $b -t 2048 --max-seq-len 2048 -x 10 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 --optimizer-state bf16 --logits-mb $mb -i $M/$d.bin -o $M/o > $OUT/${m}_b${b}_$mb.log 2>&1
  echo "$m B$b logits-mb $mb: $(grep '| loss' $OUT/${m}_b${b}_$mb.log | tail -6 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 3p) $(grep '| loss' $OUT/${m}_b${b}_$mb.log | tail -1 | grep -oE 'out [0-9.]+ bwd [0-9.]+|[0-9.]+ GB$' | tr '\n' ' ') $(grep -m1 error $OUT/${m}_b${b}_$mb.log) [$((SECONDS-t0)) s]" >> $S
done
cat $S
