"""Synthetic prompt-completion pairs for the fine-tuning checks on the GPU: JSON Lines of
{"prompt": "Question i: ...\\nAnswer:", "completion": " ..."}, prompts of 5-60 words and completions
of 1-30, drawn from a small word list by a seeded generator (the same seed, the same file). With
--conversations, lines {"messages": [...]} of 1-4 user and assistant turns (a system turn in some)
of the same words instead.

    python3 dev/check/make_pairs.py OUT.jsonl [SEED] [COUNT] [--conversations]
"""
import json
import random
import sys

WORDS = ["the", "answer", "is", "green", "red", "blue", "because", "one", "two", "three", "and", "it"]


def main():
    path = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
    r = random.Random(seed)
    words = lambda lo, hi: " ".join(r.choice(WORDS) for _ in range(r.randint(lo, hi)))  # noqa: E731
    if "--conversations" in sys.argv:
        with open(path, "w") as f:
            for i in range(count):
                turns = [{"role": "system", "content": "Be " + words(1, 3)}] if r.random() < 0.3 else []
                for t in range(r.randint(1, 4)):
                    turns.append({"role": "user", "content": "Question %d.%d: %s" % (i, t, words(5, 40))})
                    turns.append({"role": "assistant", "content": words(1, 30)})
                f.write(json.dumps({"messages": turns}) + "\n")
        return
    with open(path, "w") as f:
        for i in range(count):
            p = "Question %d: " % i + " ".join(r.choice(WORDS) for _ in range(r.randint(5, 60))) + "\nAnswer:"
            c = " " + " ".join(r.choice(WORDS) for _ in range(r.randint(1, 30)))
            f.write(json.dumps({"prompt": p, "completion": c}) + "\n")


if __name__ == "__main__":
    main()
