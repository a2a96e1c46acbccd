#!/usr/bin/env bash
# One H100, the attention backward in one kernel: the GPU tests of attention and the backend, then
# Qwen3-0.6B and Llama-3.2-1B beside PyTorch + Liger eager in bf16 at B 16, in the same call.
TESTS="attention backend" exec bash dev/check/families_peers.sh
