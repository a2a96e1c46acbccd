#!/usr/bin/env bash
# The two calls behind ab_summary.txt and tests_and_tiny_runs_summary.txt, on one H100, against the
# parent's ./train built in a worktree of commit b7396b3 (inputs/train_base):
#   TESTS=all THROUGHPUT=0 BASE=inputs/train_base OUT=out bash dev/check/ab_one_gpu.sh
#   TESTS=none EXTRA="--optimizer-state bf16" BASE=inputs/train_base OUT=out bash dev/check/ab_one_gpu.sh
# ab_first_try_summary.txt is the second command on the first version (each offer timed in five
# calls of its own, one offer after the other, instead of in turns).
