"""unicode_is_word (tokenizer/unicode_table.c) against Hugging Face's tokenizers on every code point:
an added token "XX" with single_word, after and before each character, is matched only where the
character is no word character. Exact agreement expected.

    pip install tokenizers
    python3 dev/check/word_chars_check.py
"""
import os
import subprocess
import sys
import tempfile

from tokenizers import AddedToken, Tokenizer, models

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PROBE = r"""
#include <stdio.h>
#include "tokenizer/unicode_table.h"
int main(void) {
    for (unsigned cp = 0; cp < 0x110000; cp++)
        if (unicode_is_word(cp)) printf("%x\n", cp);
    return 0;
}
"""


def ours():
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "probe.c"), os.path.join(d, "probe")
        with open(src, "w") as f:
            f.write(PROBE)
        subprocess.run(["cc", "-O1", "-I", ROOT, src, os.path.join(ROOT, "tokenizer", "unicode_table.c"), "-o", exe],
                       check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return {int(x, 16) for x in out.split()}


def theirs(side):
    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.add_tokens([AddedToken("XX", single_word=True, normalized=False)])
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    word = set()
    for i in range(0, len(cps), 50000):
        part = cps[i:i + 50000]
        texts = [chr(cp) + "XX" if side == "before" else "XX" + chr(cp) for cp in part]
        for cp, enc in zip(part, tok.encode_batch(texts, add_special_tokens=False)):
            if "XX" not in enc.tokens:
                word.add(cp)
    return word


def main():
    a = ours()
    failed = 0
    for side in ("before", "after"):
        b = theirs(side)
        only_ours, only_theirs = sorted(a - b), sorted(b - a)
        print(f"the character {side} the token: {len(a)} word characters here, {len(b)} in tokenizers; "
              f"{len(only_ours)} only here {[hex(c) for c in only_ours[:8]]}, "
              f"{len(only_theirs)} only there {[hex(c) for c in only_theirs[:8]]}")
        failed |= bool(only_ours or only_theirs)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
