#!/usr/bin/env python3
"""Per-step training losses of two runs (their log.jsonl), compared step by step.
    python3 dev/check/compare_losses.py A/log.jsonl B/log.jsonl [NAME_A NAME_B]
Prints one line: the largest |A - B| / B over the steps both logged, where it is, how many steps
differ by more than 1 %, the signed mean difference over the last 40 % of the steps (a bias would
show there; noise averages out), and both final losses. Standard library only."""
import json
import sys


def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r.get("type") == "step"}


def main():
    if len(sys.argv) not in (3, 5):
        sys.exit(__doc__)
    a, b = losses(sys.argv[1]), losses(sys.argv[2])
    na, nb = (sys.argv[3], sys.argv[4]) if len(sys.argv) == 5 else ("A", "B")
    steps = sorted(set(a) & set(b))
    if not steps:
        sys.exit(f"compare: no step logged by both {sys.argv[1]} and {sys.argv[2]}")
    rel = {s: (a[s] - b[s]) / abs(b[s]) for s in steps}
    worst = max(steps, key=lambda s: abs(rel[s]))
    over = sum(abs(r) > 0.01 for r in rel.values())
    late = steps[int(len(steps) * 0.6):]
    bias = sum(rel[s] for s in late) / len(late)
    print(f"compare {na} vs {nb}: {len(steps)} steps, largest |{na} - {nb}| / {nb} = {abs(rel[worst]):.3e} at step "
          f"{worst} ({na} {a[worst]:.6f}, {nb} {b[worst]:.6f}); steps over 1 %: {over}; mean of ({na} - {nb}) / {nb} "
          f"over steps {late[0]}-{late[-1]}: {bias * 100:+.3f} %; final {na} {a[steps[-1]]:.6f} {nb} {b[steps[-1]]:.6f}")


if __name__ == "__main__":
    main()
