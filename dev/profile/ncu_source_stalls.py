#!/usr/bin/env python3
"""ncu_source_stalls.py - a kernel's warp-state samples summed from Nsight Compute's source page.

    python3 dev/profile/ncu_source_stalls.py SOURCE_CSV [--range LO:HI]... [--top N]

SOURCE_CSV: `ncu -i REPORT --page source --csv --print-source sass` (dev/profile/ncu_stalls.sh writes
one; gzip'd files are read too). Prints the samples by stall reason over the whole kernel and over
each --range of SASS offsets from the kernel's start (hex, e.g. 0x40a0:0x9a20: a drain loop found
with dev/profile/sass.sh), then the N instructions with the most samples. A warp waiting on a
barrier's phase shows as long_sb at the branch after its SYNCS.PHASECHK; a wait for loaded data as
long_sb at the data's first use; dispatch and math as issue contention. Some samples fall in no
reason the page breaks out (most of those at HGMMA instructions): they count in the samples only."""
import csv
import gzip
import sys


def load(path):
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rt') as f:
        rows = list(csv.reader(f))
    k = next((i for i, r in enumerate(rows) if r and r[0] == 'Address'), None)
    if k is None:
        sys.exit(f'error: {path} has no "Address" header row (is it ncu --page source --csv output?)')
    hdr, data = rows[k], [r for r in rows[k + 1:] if r and r[0].startswith('0x')]
    if not data:
        sys.exit(f'error: {path} has no instruction rows')
    return hdr, data


def main(argv):
    args = argv[1:]
    if not args:
        sys.exit('usage: ncu_source_stalls.py SOURCE_CSV [--range LO:HI]... [--top N]')
    ranges, top = [], 15
    path = None
    i = 0
    while i < len(args):
        if args[i] == '--range' and i + 1 < len(args):
            try:
                lo, hi = (int(x, 16) for x in args[i + 1].split(':'))
            except ValueError:
                sys.exit(f'error: --range takes LO:HI in hex, got "{args[i + 1]}"')
            ranges.append((lo, hi))
            i += 2
        elif args[i] == '--top' and i + 1 < len(args):
            top = int(args[i + 1])
            i += 2
        else:
            path = args[i]
            i += 1
    if path is None:
        sys.exit('error: no SOURCE_CSV given')
    hdr, data = load(path)
    reasons = [h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
    col = {h: hdr.index(h) for h in reasons}
    samples = hdr.index('Warp Stall Sampling (All Samples)')
    base = int(data[0][0], 16)

    def num(s):
        return int(s) if s and s.lstrip('-').isdigit() else 0

    def summary(name, sel):
        tot = {r: 0 for r in reasons}
        n = 0
        for d in data:
            if sel(int(d[0], 16) - base):
                n += num(d[samples])
                for r in reasons:
                    tot[r] += num(d[col[r]])
        s = sum(tot.values()) or 1
        parts = ', '.join(f'{r[6:]} {100 * v / s:.1f}%' for r, v in sorted(tot.items(), key=lambda x: -x[1]) if v)
        print(f'{name}: {n} samples; {parts}')

    summary('kernel', lambda a: True)
    for lo, hi in ranges:
        summary(f'{lo:#x}-{hi:#x}', lambda a, lo=lo, hi=hi: lo <= a <= hi)
        summary(f'outside {lo:#x}-{hi:#x}', lambda a, lo=lo, hi=hi: not lo <= a <= hi)
    print(f'the {top} instructions with the most samples (offset, samples, top reasons, SASS):')
    for d in sorted(data, key=lambda d: -num(d[samples]))[:top]:
        why = sorted(((num(d[col[r]]), r[6:]) for r in reasons), reverse=True)[:2]
        print(f'  {int(d[0], 16) - base:#07x} {num(d[samples]):7d}  '
              f'{", ".join(f"{r} {v}" for v, r in why if v):32s} {d[1].strip()[:70]}')


if __name__ == '__main__':
    try:
        main(sys.argv)
    except BrokenPipeError:
        sys.stderr.close()
