#!/usr/bin/env bash
# One GPU, the attention's document path with its per-row first keys staged beside lse and D, the
# dQ chain's next count loaded a step early, the tile edge hoisted out of the forward's key loop and
# an eightfold search for a key block's last query tile, against the parent commit's binaries
# (inputs/base_train_docs, inputs/base_bench_kernels; inputs/base_train is the older parent that
# dev/check/ab_one_gpu.sh compared before, with the same bits on data without documents):
#   1. every GPU test, and the eight tiny runs of ab_one_gpu.sh (no documents) against the parent;
#   2. tiny runs on a `prepare --documents` shard (Llama at head sizes 64 and 128, GPT-2, Gemma 3's
#      windows with documents), every loss, norm and validation line and the final weights against
#      the parent's;
#   3. bench_kernels' documents section, parent and change in alternating rounds;
#   4. (throughput) the trainer's tokens/s, parent and change alternating: Qwen3-0.6B and
#      Llama-3.2-1B at B 16, T 2048 on that documents shard (about 211 tokens a document), and
#      Llama-3.2-1B on random tokens (head size 64 without documents).
# PARTS chooses among tests, bits, bench, throughput (default: the first three). Needs ./train,
# build/run_gpu_tests, build/bench_kernels and those inputs. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary_ab.txt; : >$S
say() { echo "$1" | tee -a $S; }
PARTS=${PARTS:-tests bits bench}
has() { [[ " $PARTS " == *" $1 "* ]]; }
has tests && { BASE=inputs/base_train TESTS=all THROUGHPUT=0 OUT=$OUT/ab bash dev/check/ab_one_gpu.sh >$OUT/ab.log 2>&1; }
M=/tmp/abdocs; rm -rf $M; mkdir -p $M
python3 dev/check/make_documents.py $M/text.txt "<|end_of_text|>"
./train prepare --documents --tokenizer tests/fixtures/hf_llama3_bos.json -o $M/data $M/text.txt >$M/prepare.log 2>&1
has bits && for run in "llama_hd64|--family llama --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64" \
           "llama_hd128|--family llama --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 128" \
           "gpt2|-e tiny" "gemma3_windows|--family gemma3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64 --sliding-window 64"; do
  data="-v 700 -b 8 -t 256 -x 20 -l 2e-3 --warmup 3 --val-every 7 --val-batches 2 -s 0 -i $M/data/train.bin -j $M/data/val.bin"
  IFS='|' read -r tag flags <<<"$run"
  for b in base new; do bin=$([ $b = base ] && echo inputs/base_train_docs || echo ./train); rm -rf $M/r_${tag}_$b
    timeout 60 $bin $data $flags -o $M/r_${tag}_$b >$M/r_${tag}_$b.log 2>&1; done
  l=$(diff <(grep -E '^step|val loss' $M/r_${tag}_base.log | cut -d'|' -f1-5) <(grep -E '^step|val loss' $M/r_${tag}_new.log | cut -d'|' -f1-5) >/dev/null && grep -q '^step' $M/r_${tag}_new.log && echo equal || echo DIFFERENT)
  w1=$(ls $M/r_${tag}_base/step_*/model.safetensors 2>/dev/null | tail -1); w2=${w1/r_${tag}_base/r_${tag}_new}
  say "documents, same bits as the parent, $tag: lines $l, final weights $([ -n "$w1" ] && cmp -s "$w1" "$w2" && echo equal || echo DIFFERENT) $(grep -m1 error $M/r_${tag}_new.log)"
done
has bench && for r in 1 2; do
  timeout 120 inputs/base_bench_kernels 8 documents >$OUT/bench_base_$r.txt 2>&1
  timeout 120 ./build/bench_kernels 8 documents >$OUT/bench_new_$r.txt 2>&1
done
if has throughput; then
  python3 tests/fixtures/gen/make_shard.py $M/rl.bin 2000000 128256 random 4 >/dev/null
  median() { grep '| loss' $1 | tail -8 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 4p; }
  for r in 1 2; do for b in base new; do bin=$([ $b = base ] && echo inputs/base_train_docs || echo ./train)
    tp="-b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 -n 0 --optimizer-state bf16"
    rm -rf $M/o; timeout 120 $bin -e qwen3-0.6b $tp -i $M/data/train.bin -o $M/o >$M/tq_${b}_$r.log 2>&1
    say "Qwen3-0.6B B16 documents, $b r$r: $(median $M/tq_${b}_$r.log)"
    if [ $r = 1 ]; then rm -rf $M/o; timeout 150 $bin -e llama3.2-1b $tp -i $M/data/train.bin -o $M/o >$M/tl_${b}_$r.log 2>&1
      say "Llama-3.2-1B B16 documents, $b r$r: $(median $M/tl_${b}_$r.log)"; fi
    rm -rf $M/o; timeout 150 $bin -e llama3.2-1b $tp -i $M/rl.bin -o $M/o >$M/tp_${b}_$r.log 2>&1
    say "Llama-3.2-1B B16 random tokens, $b r$r: $(median $M/tp_${b}_$r.log)"
  done; done
  for m in tq tl tp; do
    same=$(diff <(grep '^step' $M/${m}_base_1.log | cut -d'|' -f1-5) <(grep '^step' $M/${m}_new_1.log | cut -d'|' -f1-5) >/dev/null &&
      grep -q '^step' $M/${m}_new_1.log && echo equal || echo DIFFERENT)
    say "same bits as the parent at full size, $m (first round): loss, lse, lr and norm lines $same"
  done
fi
tar czf $OUT/logs.tgz -C $M $(cd $M && ls *.log) 2>/dev/null
echo ===; [ -f $OUT/ab/summary.txt ] && cat $OUT/ab/summary.txt; cat $S
for f in base_1 new_1 base_2 new_2; do [ -f $OUT/bench_$f.txt ] || continue; echo "== $f"
  grep -E "^attention|attention_(forward|backward) wgmma( \(FA2 FLOPs\))?  " $OUT/bench_$f.txt | sed -E 's/causal window=0 //; s/ +([0-9.]+ ms) +([0-9.]+ TFLOP\/s).*/ \1/' | paste - - -; done
