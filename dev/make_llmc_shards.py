"""Writes the llm.c-format token shards the CPU tests read (tests/fixtures/llmc_*.bin), laid out
exactly as llm.c's dev/data/data_common.py write_datafile lays them out: a 256 x int32 header
(magic, version, token count, zeros), then the tokens as uint16 (GPT-2) or uint32 (Llama 3).

    python3 dev/make_llmc_shards.py [OUT_DIR]      (default tests/fixtures; needs numpy)
"""
import os
import sys

import numpy as np

HEADERS_INFO = {  # as in llm.c's data_common.py
    "gpt-2": {"magic": 20240520, "version": 1, "token_dtype": np.uint16},
    "llama-3": {"magic": 20240801, "version": 7, "token_dtype": np.uint32},
}


def write_datafile(filename, toks, model_desc):
    info = HEADERS_INFO[model_desc]
    header = np.zeros(256, dtype=np.int32)
    header[0] = info["magic"]
    header[1] = info["version"]
    header[2] = len(toks)
    toks_np = np.array(toks, dtype=info["token_dtype"])
    with open(filename, "wb") as f:
        f.write(header.tobytes())
        f.write(toks_np.tobytes())


def tokens(n, vocab, seed):
    # a fixed pattern reaching the top of the vocabulary: the tests check every value read back
    return [(i * seed * 7919 + i * i) % vocab if i % 50 else vocab - 1 for i in range(n)]


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    os.makedirs(out, exist_ok=True)
    write_datafile(os.path.join(out, "llmc_gpt2.bin"), tokens(2000, 50257, 3), "gpt-2")
    write_datafile(os.path.join(out, "llmc_llama3.bin"), tokens(2000, 128256, 5), "llama-3")
    print("wrote", out + "/llmc_gpt2.bin", out + "/llmc_llama3.bin")
