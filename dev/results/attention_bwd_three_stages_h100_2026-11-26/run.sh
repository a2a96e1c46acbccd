#!/usr/bin/env bash
# One H100: the attention backward's ring of streamed tiles three deep instead of two (this tree's
# ./train and build/run_gpu_tests) against a ./train of two ($BASE): the GPU tests of attention and of
# the backend, the same bits in tiny runs, the trainer's throughput.
TESTS="attention backend" exec bash dev/check/ab_one_gpu.sh
