#!/usr/bin/env bash
# One H100: D = rowsum(dO∘O) formed inside the attention backward's dQ kernel (dsum_in_dq.patch: this
# tree's ./train and build/run_gpu_tests with it) against the parent's ./train ($BASE): every GPU test,
# the same bits in tiny runs, the trainer's throughput.
TESTS=all exec bash dev/check/ab_one_gpu.sh
