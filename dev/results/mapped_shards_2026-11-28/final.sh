#!/usr/bin/env bash
# One GPU, the final code of the mapped shards (the review's fixes: the bound checked as batches are
# made, the shards' cuts in a pattern's fingerprint): the tiny runs against the parent's binary
# (inputs/base_train, commit 42762e9) and the GPU tests of the backend, then the pattern of three
# shards resumed (checks.sh, SHARDS_ONLY=1).
set -uo pipefail
OUT=${OUT:-out}
OUT=$OUT/ab BASE=inputs/base_train TESTS=backend THROUGHPUT=0 bash dev/check/ab_one_gpu.sh
SHARDS_ONLY=1 OUT=$OUT/shards bash dev/results/mapped_shards_2026-11-28/checks.sh
