#!/usr/bin/env bash
# Upper bounds by removal (timing probes, wrong results): the tile kernel without its E stores
# (nostore) and without any epilogue (noepi); the attention forward without its softmax.
P=inputs/probe; S="--shape 1024,6554,151936 --shape 2048,8192,128256 --shape 768,4096,262144 --shape 640,8192,262144"
nvidia-smi --query-gpu=name --format=csv,noheader
for r in 1 2; do
  for v in base nostore noepi; do echo "== output layer $v r$r"; timeout 100 $P/bench_output_layer_$v --no-canonical --no-streaming --reps 10 $S 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ "; done
  for v in base nosoftmax; do echo "== attention $v r$r"; timeout 100 $P/bench_kernels_$v 16 attention 2>&1 | grep -E "^attention|forward"; done
done
