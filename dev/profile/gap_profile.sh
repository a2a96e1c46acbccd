#!/usr/bin/env bash
# gap_profile.sh - one GPU: how long the GPU idles between a training step's operations. Every kernel,
# copy and memset of ./train is recorded by CUPTI (dev/profile/kernel_trace.c, injected; no Nsight
# Systems needed) and dev/profile/timeline_gaps.py sums the idle time of the last whole steps. For each
# model of MODELS ("tag|./train flags"; default GPT-2 124M at V 50304 and Qwen3-0.6B at B 16), 16
# steps on random tokens, and the same run without the probe to see what it costs.
#   [MODELS="..."] [OUT=out] bash dev/profile/gap_profile.sh
# Needs ./train and build/kernel_trace.so (make build/kernel_trace.so); CUPTI from the CUDA toolkit,
# or from LD_LIBRARY_PATH.
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/gaps.txt
[ -f build/kernel_trace.so ] || { echo "build/kernel_trace.so is missing: make build/kernel_trace.so" | tee -a $S; exit 1; }
M=/tmp/gp; mkdir -p $M
IFS=';' read -ra models <<<"${MODELS:-gpt2_124m_v50304|-e d12 -v 50304 -b 32 -t 1024;qwen3_0.6b_b16|-e qwen3-0.6b -b 16 -t 2048 --max-seq-len 2048}"
med() { grep '| loss' $1 | tail -6 | grep -oE '\| [0-9.]+ ms \|' | awk '{print $2}' | sort -n | sed -n 3p; }
for m in "${models[@]}"; do
  IFS='|' read -r tag flags <<<"$m"
  V=$(echo "$flags" | grep -oE '\-v [0-9]+' | awk '{print $2}'); V=${V:-151936}
  [ -f $M/data_$V.bin ] || python3 tests/fixtures/gen/make_shard.py $M/data_$V.bin 8000000 $V random 3 >/dev/null
  run="./train $flags -x 16 --warmup 2 --val-every 0 -s 0 -n 1000 -i $M/data_$V.bin -o $M/run"
  rm -rf $M/run; timeout 200 $run >$OUT/${tag}_plain.log 2>&1
  rm -rf $M/run
  CUDA_INJECTION64_PATH=$PWD/build/kernel_trace.so KERNEL_TRACE_OUT=$M/$tag.csv timeout 200 $run >$OUT/${tag}_traced.log 2>&1
  echo "$tag: $(med $OUT/${tag}_plain.log) ms a step, $(med $OUT/${tag}_traced.log) ms traced (medians of the last 6) $(grep -m1 -i error $OUT/${tag}_traced.log)" | tee -a $S
  python3 dev/profile/timeline_gaps.py $M/$tag.csv --steps 5 2>&1 | tee -a $S
  gzip -c $M/$tag.csv >$OUT/${tag}_trace.csv.gz
done
rm -rf $M/run
