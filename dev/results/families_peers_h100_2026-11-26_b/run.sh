#!/usr/bin/env bash
# One H100, main with RMSNorm's backward in one kernel: every GPU test, then Qwen3-0.6B and
# Llama-3.2-1B at B 16 (and Qwen3 at B 32) beside PyTorch + Liger eager in bf16 at B 16, the best
# PyTorch stack of the earlier entries, in the same call.
exec bash dev/check/families_peers.sh
