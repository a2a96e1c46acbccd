#!/usr/bin/env python3
"""Outside check of a fusedgpt checkpoint: load it with Hugging Face transformers as a
GPT2LMHeadModel and compute the mean loss on the first B windows of T+1 tokens of a token shard,
the same windows `./train --val-batches 1` evaluates (the validation loader does not shuffle).

    python3 dev/check/hf_crosscheck.py RUN/step_00000080 VAL.bin B T [EXPECTED_LOSS]

Prints the loss; with EXPECTED_LOSS (the trainer's final "val loss"), exits 1 unless they agree
within 1e-2 relative. Needs torch and transformers: a dev tool, never a dependency of ./train."""
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel


def read_shard(path):
    with open(path, "rb") as f:
        header = f.read(64)
        assert header[:8] == b"FGPTTOK1", f"{path}: not a token shard"
        _version, width, _vocab = struct.unpack("<III", header[8:20])
        (count,) = struct.unpack("<Q", header[24:32])
        dtype = np.uint16 if width == 2 else np.uint32
        return np.frombuffer(f.read(count * width), dtype=dtype).astype(np.int64)


def main():
    ckpt, shard, B, T = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    expected = float(sys.argv[5]) if len(sys.argv) > 5 else None
    tokens = read_shard(shard)
    windows = np.stack([tokens[b * T : b * T + T + 1] for b in range(B)])
    x = torch.from_numpy(windows[:, :T])
    y = torch.from_numpy(windows[:, 1:])
    model = GPT2LMHeadModel.from_pretrained(ckpt, torch_dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(x).logits.float()
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).item()
    print(f"hf_crosscheck: transformers GPT2LMHeadModel loss {loss:.6f}", end="")
    if expected is None:
        print()
        return 0
    rel = abs(loss - expected) / abs(expected)
    print(f", fusedgpt {expected:.6f}, relative difference {rel:.2e}")
    return 0 if rel <= 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
