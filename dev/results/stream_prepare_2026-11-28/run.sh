#!/usr/bin/env bash
# One GPU, the code with `prepare --shard-tokens` and eval's check of every shard of a pattern:
# every GPU test, transformers against our checkpoints both ways and the GPT-2 round trip
# (dev/results/closing_checks_2026-11-28_b/run.sh); the tiny runs' lines and final weights against
# the parent binary (BASE, default inputs/base_train; dev/check/ab_one_gpu.sh without its throughput
# rounds); then a text streamed into shards of 16384 tokens through the Llama 3-style fixture, a
# small Llama trained on their pattern on the GPU, and ./train eval over the validation pattern.
# Needs ./train and build/run_gpu_tests. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary_stream.txt; : >$S
BASE=${BASE:-inputs/base_train}
OUT=$OUT bash dev/results/closing_checks_2026-11-28_b/run.sh >$OUT/closing.log 2>&1
BASE=$BASE TESTS=adamw THROUGHPUT=0 OUT=$OUT/ab bash dev/check/ab_one_gpu.sh >$OUT/ab.log 2>&1
E=/tmp/stream; rm -rf $E; mkdir -p $E/text
for k in 0 1 2 3; do cat README.md dev/RESULTS.md data/*.c model/*/*.c > $E/text/part$k.txt; done
./train prepare --tokenizer tests/fixtures/hf_llama3_bos.json --shard-tokens 16384 --val-fraction 0.05 -o $E/set \
    $E/text/part*.txt >$OUT/prepare.log 2>&1
echo "prepare --shard-tokens 16384: rc $? $(grep -m1 'train tokens in' $OUT/prepare.log)" | tee -a $S
total=$(python3 - $E/set <<'PY'
import glob, struct, sys
print(sum(struct.unpack_from("<Q", open(p, "rb").read(32), 24)[0] for p in glob.glob(sys.argv[1] + "/train_*.bin")))
PY
)
./train --family llama --layers 2 --dim 256 --heads 4 --kv-heads 2 --head-dim 64 --ffn-dim 512 --untied-head \
    -b 8 -t 128 -x 40 -l 2e-3 --warmup 5 --val-every 20 --val-batches 4 -s 0 \
    -i "$E/set/train_*.bin" -j "$E/set/val_*.bin" --tokenizer $E/set/tokenizer.json -v 700 -o $E/run >$OUT/train.log 2>&1
rc=$?
echo "llama on the pattern: rc $rc; $(grep -m1 '^data:' $OUT/train.log); train shards' tokens by their headers: $total" | tee -a $S
grep -E "^step +(1|40)/|val loss" $OUT/train.log | tail -4 | tee -a $S
./train eval -o $E/run -i "$E/set/val_*.bin" -t 128 >$OUT/eval.log 2>&1
echo "eval over the validation pattern: rc $? $(grep -c '^shard ' $OUT/eval.log) shard line(s); $(tail -1 $OUT/eval.log)" | tee -a $S
echo ===; cat $OUT/summary.txt $OUT/ab/summary.txt $S
