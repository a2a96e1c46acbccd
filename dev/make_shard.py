#!/usr/bin/env python3
"""Writes a token shard (data/shard.h format) of synthetic tokens, for throughput runs and GPU checks
on machines without the prepared corpus.

    python3 dev/make_shard.py OUT.bin NUM_TOKENS VOCAB [random|pattern] [SEED]

random: uniform tokens (the loss stays at ln V: for timing only). pattern: t[i+1] = (5 t[i] + 3) mod V
with a random restart every 16 tokens (learnable; the CPU tests use the same rule)."""
import struct
import sys

import numpy as np


def main():
    out, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    kind = sys.argv[4] if len(sys.argv) > 4 else "random"
    rng = np.random.default_rng(int(sys.argv[5]) if len(sys.argv) > 5 else 1)
    if kind == "random":
        toks = rng.integers(0, vocab, size=n, dtype=np.int64)
    else:
        toks = np.empty(n, dtype=np.int64)
        restarts = rng.integers(0, vocab, size=(n + 15) // 16)
        for i in range(n):
            toks[i] = restarts[i // 16] if i % 16 == 0 else (5 * toks[i - 1] + 3) % vocab
    width = 2 if vocab <= 65536 else 4
    header = b"FGPTTOK1" + struct.pack("<IIII", 1, width, vocab, 0) + struct.pack("<Q", n) + b"\0" * 32
    with open(out, "wb") as f:
        f.write(header)
        f.write(toks.astype(np.uint16 if width == 2 else np.uint32).tobytes())


if __name__ == "__main__":
    main()
