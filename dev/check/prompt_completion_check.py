"""`./train prepare --prompt-completion` against Hugging Face `tokenizers` and TRL's way of
tokenizing a prompt-completion pair (SFTTrainer with completion_only_loss): the completion gets
eos_token unless it ends with it, the ids are tokenizer(prompt + completion) with the
post-processor's tokens, and the first len(tokenizer(prompt)) of them are the prompt's. The shards,
train.bin then val.bin, must hold exactly those ids, the prompt's with bit 31 set. eos_token is
tokenizer_config.json's beside TOKENIZER_JSON when there is one, else the separator prepare uses
(our import's choice, as prepare_stream_check.py spells it out). Prints one line per tokenizer;
exits 1 on any difference.

    python3 dev/check/prompt_completion_check.py TOKENIZER_JSON...

The pairs are its own: 300 of them, prompts and completions of English words, a few non-ASCII
ones (accents, CJK, an emoji), newlines, leading and trailing spaces, an empty completion, and
some completions that already end with the eos text.
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

import numpy as np
from tokenizers import Tokenizer

from prepare_stream_check import separator

WORDS = ["the", "answer", "is", "green", "Paris", "café", "naïve", "東京", "🙂", "42", "x", "question:", "because"]


def shard_words(path):
    with open(path, "rb") as f:
        b = f.read()
    version, width, _, flags = struct.unpack_from("<IIII", b, 8)
    n, = struct.unpack_from("<Q", b, 24)
    assert version == 3 and width == 4 and flags == 1, (path, version, width, flags)
    return np.frombuffer(b, dtype="<u4", count=n, offset=64)


def eos_text(tok_path, tok):
    config = os.path.join(os.path.dirname(tok_path), "tokenizer_config.json")
    if os.path.exists(config):
        eos = json.load(open(config)).get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        if eos:
            return eos
    return separator(tok)


def pairs(rng, eos):
    out = []
    for i in range(300):
        p = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        c = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12)))
        if i % 7 == 0:
            p += "\n"
        if i % 5 == 0:
            c = " " + c
        if i % 11 == 0:
            c += eos
        out.append({"prompt": p, "completion": c})
    return out


def expected(tok, examples, eos):
    words = []
    for e in examples:
        completion = e["completion"] if e["completion"].endswith(eos) else e["completion"] + eos
        prompt_ids = tok.encode(e["prompt"]).ids
        whole = tok.encode(e["prompt"] + completion).ids
        words += [t | (1 << 31) if i < len(prompt_ids) else t for i, t in enumerate(whole)]
    return np.asarray(words, dtype=np.uint32)


def main():
    paths = sys.argv[1:]
    if not paths:
        sys.exit(__doc__)
    ok = True
    work = tempfile.mkdtemp(prefix="prompt_completion_")
    for k, tok_path in enumerate(paths):
        tok = Tokenizer.from_file(tok_path)
        eos = eos_text(tok_path, tok)
        examples = pairs(random.Random(k), eos)
        data = os.path.join(work, f"pairs{k}.jsonl")
        with open(data, "w") as f:
            for e in examples:
                f.write(json.dumps(e, ensure_ascii=k % 2 == 0) + "\n")
        out = os.path.join(work, f"out{k}")
        run = subprocess.run(["./train", "prepare", "--prompt-completion", "--tokenizer", tok_path, "-o", out,
                              "--val-fraction", "0.1", data], capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{tok_path}: prepare failed: {run.stderr}")
            ok = False
            continue
        got = np.concatenate([shard_words(os.path.join(out, "train.bin")), shard_words(os.path.join(out, "val.bin"))])
        want = expected(tok, examples, eos)
        val = len(shard_words(os.path.join(out, "val.bin")))
        want_val = len(expected(tok, examples[270:], eos))
        same = len(got) == len(want) and bool((got == want).all()) and val == want_val
        marked = int((want >> 31).sum())
        print(f"{tok_path}: {len(want)} ids, {marked} marked, eos {eos!r}: {'same' if same else 'DIFFERENT'}")
        if not same:
            first = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
            print(f"  first difference at {first}: ours {got[first:first + 8]}, theirs {want[first:first + 8]}")
        ok &= same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
