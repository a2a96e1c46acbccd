#!/usr/bin/env bash
# one H100: the attention reading the value heads from the projection's rows (no copy after RoPE),
# inputs/attn/vsep, beside the parent's binaries (inputs/attn/head): every GPU test of the new build
# (its ./train at the root), then Qwen3-0.6B (B 16) in alternating rounds and Gemma-3-270M (B 16),
# loss and norm lines compared. Summary in $OUT/summary.txt.
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; t0=$SECONDS
say() { echo "$1" | tee -a $S; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $S
cp inputs/attn/vsep/train ./train
timeout 300 inputs/attn/vsep/run_gpu_tests >$OUT/gpu_tests.log 2>&1
say "gpu tests rc $?: $(grep -E '[0-9]+ passed' $OUT/gpu_tests.log | tail -1) $(grep -m5 FAIL $OUT/gpu_tests.log | tr '\n' ' ' | cut -c1-400) [$((SECONDS - t0)) s]"
M=/tmp/vs; mkdir -p $M; CK=/dev/shm; [ "$(df -k --output=avail /dev/shm | tail -1)" -gt 20000000 ] 2>/dev/null || CK=$M
python3 tests/fixtures/gen/make_shard.py $M/q.bin 6000000 151936 random 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py $M/g.bin 6000000 262144 random 3 >/dev/null
run() { # variant, tag, model, data
  rm -rf $CK/vs_o; timeout 150 inputs/attn/$1/train -e $3 -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 \
    --step-parts 1 -i $M/$4.bin -o $CK/vs_o >$OUT/$2_$1.log 2>&1
  say "$3 B16 $1 ($2): $(grep '| loss' $OUT/$2_$1.log | tail -8 | grep -oE '[0-9]+ tok/s' | sort -n | sed -n 4p), $(grep '| loss' $OUT/$2_$1.log | tail -1 | grep -oE 'fwd.*' | cut -c1-40) $(grep '| loss' $OUT/$2_$1.log | tail -1 | grep -oE '[0-9.]+ GB') $(grep -m1 -i error $OUT/$2_$1.log) [$((SECONDS - t0)) s]"
}
same() { # tag
  a=$(grep '| loss' $OUT/$1_head.log | grep -oE 'loss [0-9.]+|norm [0-9.]+' | md5sum | cut -c1-8)
  b=$(grep '| loss' $OUT/$1_vsep.log | grep -oE 'loss [0-9.]+|norm [0-9.]+' | md5sum | cut -c1-8)
  say "$1 loss and norm lines, head against vsep: $([ "$a" = "$b" ] && echo same || echo DIFFERENT)"
}
run head qwen_r1 qwen3-0.6b q; run vsep qwen_r1 qwen3-0.6b q
run head qwen_r2 qwen3-0.6b q; run vsep qwen_r2 qwen3-0.6b q
same qwen_r1
run head gemma gemma3-270m g; run vsep gemma gemma3-270m g
same gemma
rm -rf $CK/vs_o
tar -czf $OUT/logs.tar.gz -C $OUT $(cd $OUT && ls *.log) && rm -f $OUT/*.log
say "---- $((SECONDS - t0)) s"
