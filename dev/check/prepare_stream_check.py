"""`./train prepare --shard-tokens N` against Hugging Face `tokenizers`: the numbered shards, joined
(training then validation), must hold each document's ids as tokenizer.encode(document) gives them
(the post-processor's tokens included), with the tokenizer's separator between two documents where
those tokens do not already put it (around an empty document too: two separators in a row).
Documents are the files, and the separator inside a file ends one too. Prints one line per
tokenizer; exits 1 on any difference.

    python3 dev/check/prepare_stream_check.py N TOKENIZER_JSON... [-- TEXT_FILE...]

Without text files it writes its own: 4 files of about 6 MB, documents of 5-30 lines of English
words with a few non-ASCII ones (accents, CJK, an emoji), ended by one of <|endoftext|>,
<|end_of_text|>, <bos> or a blank line, so that each tokenizer sees its own separator inside files,
at their ends (two in a row across a join) and others' as text.
"""
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
from tokenizers import Tokenizer


def shard_ids(path):
    with open(path, "rb") as f:
        b = f.read()
    n, = struct.unpack_from("<Q", b, 24)
    width, = struct.unpack_from("<I", b, 12)
    return np.frombuffer(b, dtype=np.uint16 if width == 2 else np.uint32, count=n, offset=64)


def separator(tok):
    """The text that separates documents, as our import chooses it: for a SentencePiece-style
    tokenizer (byte fallback) the post-processor's first token (Gemma's and Llama 2's BOS), else
    an end-of-sequence token; for a byte-level one <|endoftext|>, else <|end_of_text|>, else the
    first special added token."""
    spec = json.loads(tok.to_str())
    specials = [t.content for _, t in sorted(tok.get_added_tokens_decoder().items()) if t.special]
    if spec["model"].get("byte_fallback"):
        around = tok.encode("").ids
        if around:
            return tok.id_to_token(around[0])
        return next(s for s in reversed(specials) if s in ("</s>", "<eos>"))
    for s in ("<|endoftext|>", "<|end_of_text|>"):
        if s in specials:
            return s
    return specials[0]


def expected(tok, texts):
    sep = separator(tok)
    sep_id = tok.token_to_id(sep)
    ids, before = [], []
    for k, doc in enumerate(sep.join(texts).split(sep)):
        mine = tok.encode(doc).ids
        if k and not (mine[:1] == [sep_id] or before[-1:] == [sep_id]):
            ids.append(sep_id)
        ids += mine
        before = mine
    return np.array(ids, dtype=np.int64)


def write_text(folder):
    import random
    random.seed(5)
    words = ("the of and a to in is you that it he was for on are as with his they at be this have from or one "
             "had by word but not what all were we when your can said there use an each which she do how their if "
             "will up other about out many then them these so some her would make like him into time has look two "
             "more write go see number no way could people my than first water been call who oil its now find long "
             "down day did get come made may part Über café naïve 東京 😀 123 4567").split()
    files = []
    for k in range(4):
        files.append(os.path.join(folder, f"part{k}.txt"))
        with open(files[-1], "w") as f:
            size = 0
            while size < 6_000_000:
                doc = "\n".join(" ".join(random.choices(words, k=random.randint(3, 14)))
                                for _ in range(random.randint(5, 30)))
                f.write(doc + random.choice(["<|endoftext|>", "<|end_of_text|>", "<bos>", "\n\n"]))
                size += len(doc) + 12
    return files


def main():
    args = sys.argv[1:]
    n = args[0]
    split = args.index("--") if "--" in args else len(args)
    tokenizers, files = args[1:split], args[split + 1:]
    text_dir = tempfile.TemporaryDirectory()
    if not files:
        files = write_text(text_dir.name)
    texts = []
    for path in files:
        with open(path, encoding="utf-8", newline="") as f:
            texts.append(f.read())
    failed = 0
    for tj in tokenizers:
        with tempfile.TemporaryDirectory() as out:
            run = subprocess.run(["./train", "prepare", "--tokenizer", tj, "--shard-tokens", n, "-o", out] + files,
                                 capture_output=True, text=True)
            if run.returncode:
                print(f"{tj}: prepare failed: {run.stderr.strip().splitlines()[-1]}")
                failed += 1
                continue
            train = sorted(glob.glob(os.path.join(out, "train_*.bin")))
            val = sorted(glob.glob(os.path.join(out, "val_*.bin")))
            ours = np.concatenate([shard_ids(p) for p in train + val]).astype(np.int64)
        want = expected(Tokenizer.from_file(tj), texts)
        same = ours.shape == want.shape and np.array_equal(ours, want)
        first = "" if same else f", first difference at id {int(np.argmax(ours[:len(want)] != want[:len(ours)]))}"
        print(f"{os.path.basename(tj)}: {len(ours)} ids in {len(train)} + {len(val)} shards, tokenizers gives {len(want)}: "
              f"{'the same' if same else 'DIFFERENT' + first}")
        failed += not same
    text_dir.cleanup()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
