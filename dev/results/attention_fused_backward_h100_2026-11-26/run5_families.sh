#!/usr/bin/env bash
# One H100 (warm after run4.sh): Llama-3.2-1B and Qwen3-0.6B at B 16, the two-kernel backward
# ($BASE: the parent's ./train) against this tree's ./train, one round; prints one line a run.
M=/tmp/ad; mkdir -p $M
python3 tests/fixtures/gen/make_shard.py $M/rl.bin 2000000 128256 random 4 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/rq.bin 2000000 151936 random 3 >/dev/null
for b in base new; do bin=$([ $b = base ] && echo $BASE || echo ./train)
  rm -rf $M/o; timeout 150 $bin -e llama3.2-1b -b 16 -t 2048 --max-seq-len 2048 -x 12 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 -i $M/rl.bin -o $M/o >$M/l.log 2>&1
  echo "Llama-3.2-1B B16 $b: $(grep '| loss' $M/l.log | tail -6 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 3p) $(grep '| loss' $M/l.log | tail -1 | grep -oE 'bwd [0-9.]+') $(grep -m1 error $M/l.log)"
  rm -rf $M/o; timeout 120 $bin -e qwen3-0.6b -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 -i $M/rq.bin -o $M/o >$M/q.log 2>&1
  echo "Qwen3-0.6B B16 $b: $(grep '| loss' $M/q.log | tail -8 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 4p) $(grep '| loss' $M/q.log | tail -1 | grep -oE 'bwd [0-9.]+') $(grep -m1 error $M/q.log)"
done
