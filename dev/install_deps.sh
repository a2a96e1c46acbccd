#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks for `make test`: only the PCRE2 headers and
# library, the tokenizer tests' oracle for the pre-tokenizer split (never linked into ./train).
# The CUDA toolkit (nvcc, cuBLAS, NCCL) is assumed installed. Does nothing when all is present.
set -euo pipefail
need=()
[ -f /usr/include/pcre2.h ] || need+=(libpcre2-dev)
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing ${need[*]} (test dependency)"
if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${need[@]}" >/dev/null
