"""Synthetic plain text of many documents for the `prepare --documents` checks on the GPU: 2500
documents of 3 to 120 counting words ("Count 17 by 3: 17 20 23 ..."), whose text depends on its own
start only, joined by a separator, drawn by a seeded generator (the same seed, the same file).

    python3 dev/check/make_documents.py OUT.txt SEPARATOR [SEED]
"""
import random
import sys


def main():
    path, sep = sys.argv[1], sys.argv[2]
    r = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 3)
    docs = []
    for _ in range(2500):
        start, step = r.randint(0, 50), r.randint(1, 4)
        words = " ".join(str(start + step * k) for k in range(r.randint(3, 120)))
        docs.append("Count %d by %d: %s." % (start, step, words))
    with open(path, "w") as f:
        f.write(sep.join(docs))


if __name__ == "__main__":
    main()
