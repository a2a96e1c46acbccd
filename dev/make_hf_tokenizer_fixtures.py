"""Trains the small Hugging Face tokenizers the CPU tests import (tests/fixtures/hf_*.json) with the
`tokenizers` library, and records the ids `tokenizers` gives for tests/fixtures/hf_document.txt
(tests/fixtures/hf_*.ids, one id per line), so `make test` checks our import against the real
tool without needing Python:

    pip install tokenizers && python3 dev/make_hf_tokenizer_fixtures.py

Styles: GPT-2 (ByteLevel pre-tokenizer with its regex; merges written in the "a b" string form
GPT-2's own file uses), Llama 3 (Split on Llama 3's pattern, then ByteLevel without its regex,
ignore_merges; merges in the [a, b] pair form) and Qwen 2 (the same with Qwen 2's pattern, one
digit per number, and Qwen 2's NFC normalizer).
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

FIX = "tests/fixtures"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus():
    # the document itself and the README: text with the document's words, numbers and symbols
    with open(os.path.join(FIX, "hf_document.txt"), encoding="utf-8", newline="") as f:
        doc = f.read()
    with open("README.md", encoding="utf-8") as f:
        readme = f.read()
    return [doc, readme, doc.upper()]


def train(pre, specials, vocab, ignore_merges=False, normalizer=None):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return tok


def split_then_bytes(pattern):
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def save(tok, name, string_merges=False):
    path = os.path.join(FIX, name + ".json")
    tok.save(path)
    if string_merges:  # the older "a b" form (GPT-2's own tokenizer.json has it)
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        j["model"]["merges"] = [m if isinstance(m, str) else m[0] + " " + m[1] for m in j["model"]["merges"]]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, indent=1)
        tok = Tokenizer.from_file(path)
    with open(os.path.join(FIX, "hf_document.txt"), encoding="utf-8", newline="") as f:
        doc = f.read()
    ids = tok.encode(doc, add_special_tokens=False).ids
    with open(os.path.join(FIX, name + ".ids"), "w") as f:
        f.write("\n".join(str(i) for i in ids) + "\n")
    print(f"{path}: {tok.get_vocab_size()} tokens, the document is {len(ids)} ids")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        FIX = sys.argv[1]
    save(train(pre_tokenizers.ByteLevel(add_prefix_space=False), ["<|endoftext|>"], 700), "hf_gpt2_style",
         string_merges=True)
    save(train(split_then_bytes(LLAMA3), ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>"],
               700, ignore_merges=True), "hf_llama3_style")
    save(train(split_then_bytes(QWEN2), ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 700,
               normalizer=normalizers.NFC()), "hf_qwen2_style")
