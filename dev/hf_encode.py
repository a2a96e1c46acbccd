"""Prints the ids Hugging Face `tokenizers` gives a text file, one per line (no post-processor
tokens): the oracle the CPU tests compare our import and export with when `tokenizers` is there.

    python3 dev/hf_encode.py TOKENIZER_JSON TEXT_FILE
"""
import sys

from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1])
with open(sys.argv[2], encoding="utf-8", newline="") as f:
    text = f.read()
print("\n".join(str(i) for i in tok.encode(text, add_special_tokens=False).ids))
