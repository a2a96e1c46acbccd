#!/usr/bin/env bash
# One GPU: the trainer reading its shards mapped (this tree) against the parent's binary, which read
# them into memory (inputs/base_train, commit 42762e9): every loss, norm and validation line and the
# final weights of the tiny runs, then the throughput rounds with their full-size lines
# (dev/check/ab_one_gpu.sh; the GPU tests run in checks.sh).
set -uo pipefail
OUT=${OUT:-out} BASE=inputs/base_train TESTS=none bash dev/check/ab_one_gpu.sh
