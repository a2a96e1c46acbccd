"""nfc_is_normal (tokenizer/nfc.c) against an NFC of Python's, on every code point alone and on random
short strings of combining marks, composites, the pairs' firsts and seconds, Hangul jamo and
letters. The reference is unicodedata2 at the tables' Unicode version (16.0.0: exact agreement
expected), or, with --tokenizers, Hugging Face's NFC normalizer (older: ours may refuse more, never
accept what it rewrites).

    pip install unicodedata2==16.0.0
    python3 dev/check/nfc_check.py [--tokenizers] [--cases 200000] [--seed 1]
"""
import argparse
import os
import random
import subprocess
import tempfile

import unicodedata2

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizers", action="store_true")
    ap.add_argument("--cases", type=int, default=200000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.tokenizers:
        import tokenizers
        nfc = tokenizers.normalizers.NFC().normalize_str
    else:
        nfc = lambda s: unicodedata2.normalize("NFC", s)
    driver = os.path.join(tempfile.mkdtemp(), "nfc_check")
    subprocess.run(["cc", "-O2", "-I", ROOT, os.path.join(ROOT, "dev/check/nfc_check.c"),
                    os.path.join(ROOT, "tokenizer/nfc.c"), os.path.join(ROOT, "tokenizer/nfc_table.c"), "-o", driver],
                   check=True)
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    marks = [c for c in cps if unicodedata2.combining(chr(c))]
    composites, firsts, seconds = [], set(), set()
    for c in cps:
        d = unicodedata2.decomposition(chr(c))
        if d and not d.startswith("<"):
            composites.append(c)
            parts = d.split()
            if len(parts) == 2:
                firsts.add(int(parts[0], 16))
                seconds.add(int(parts[1], 16))
    jamo = list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) + list(range(0x11A8, 0x11C3)) + [0xAC00, 0xAC1C]
    pools = [marks, composites, sorted(firsts), sorted(seconds), jamo, [ord(x) for x in "aeiouAEIOU "]]
    rng = random.Random(a.seed)
    texts = ["".join(chr(rng.choice(rng.choice(pools))) for _ in range(rng.randint(1, 8))) for _ in range(a.cases)]
    texts += [chr(c) for c in cps]
    texts = [t for t in texts if not any(ch in t for ch in "\n\r\x00\x85\u2028\u2029")]
    out = subprocess.run([driver], input="\n".join(texts).encode() + b"\n", capture_output=True, check=True).stdout.split()
    ours_only, theirs_only = [], []
    for t, o in zip(texts, out):
        normal = nfc(t) == t
        if o == b"1" and not normal:
            theirs_only.append(t)
        elif o == b"0" and normal:
            ours_only.append(t)
    print(f"{len(texts)} texts: {len(theirs_only)} accepted that the reference rewrites, "
          f"{len(ours_only)} refused that it leaves alone")
    for t in (theirs_only + ours_only)[:10]:
        print("   ", [hex(ord(ch)) for ch in t])
    bad = theirs_only or (ours_only and not a.tokenizers)
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
