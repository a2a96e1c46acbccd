#!/usr/bin/env python3
"""sass_controls.py - a kernel's SASS with each instruction's scheduling controls decoded.

cuobjdump -sass prints every sm_90 instruction as two 64-bit words and leaves the controls ptxas set
in the high word's bits 41-61 unread: the stall count, the yield flag, the scoreboard (barrier) an
instruction of variable latency sets when its result is written (wb) or its operands read (rb), and
the mask of scoreboards it waits on before issuing (wait). Loads that share a scoreboard are waited
on together: an instruction whose mask holds that scoreboard waits for every load on it, the last
issued included (how a ring of loads a batch ahead can end up waiting out each load in turn).

    python3 dev/profile/sass_controls.py SASS_FILE [FUNCTION_SUBSTRING] [--only LDG,STG,...]

SASS_FILE is `cuobjdump -sass OBJECT` output (dev/profile/sass.sh writes one). Prints, per
instruction: address, stall, wb, rb, wait mask (bit i: scoreboard i), instruction."""
import re
import sys

LOW = re.compile(r'/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]{16}) \*/')
HIGH = re.compile(r'^\s*/\* (0x[0-9a-f]{16}) \*/')


def instructions(lines):
    """(function, address, text, controls) for every instruction of the listing"""
    func = ''
    i = 0
    while i < len(lines):
        if 'Function :' in lines[i]:
            func = lines[i].split('Function :', 1)[1].strip()
        m = LOW.search(lines[i])
        if m and i + 1 < len(lines):
            h = HIGH.search(lines[i + 1])
            if h:
                c = int(h.group(1), 16) >> 41
                yield func, m.group(1), m.group(2), {
                    'stall': c & 15, 'yield': (c >> 4) & 1, 'wb': (c >> 5) & 7, 'rb': (c >> 8) & 7,
                    'wait': (c >> 11) & 63}
                i += 2
                continue
        i += 1


def main(argv):
    if len(argv) < 2:
        sys.exit('usage: sass_controls.py SASS_FILE [FUNCTION_SUBSTRING] [--only OP,OP]')
    args = argv[1:]
    only = None
    if '--only' in args:
        k = args.index('--only')
        if k + 1 >= len(args):
            sys.exit('error: --only takes a comma-separated list of opcodes (LDG,STG,MUFU)')
        only = args[k + 1].split(',')
        del args[k:k + 2]
    try:
        lines = open(args[0]).read().split('\n')
    except OSError as e:
        sys.exit(f'error: cannot read {args[0]}: {e.strerror} (make one with dev/profile/sass.sh)')
    want = args[1] if len(args) > 1 else ''
    shown = 0
    for func, addr, text, c in instructions(lines):
        if want not in func:
            continue
        op = text.split()[0] if not text.startswith('@') else text.split()[1]
        if only and not any(op.startswith(o) for o in only):
            continue
        bar = lambda b: '-' if b == 7 else str(b)
        print(f"{addr} stall {c['stall']:2d} wb {bar(c['wb'])} rb {bar(c['rb'])} wait {c['wait']:06b}  {text}")
        shown += 1
    if not shown:
        sys.exit(f'error: no instruction of a function matching "{want}" in {args[0]}')


if __name__ == '__main__':
    try:
        main(sys.argv)
    except BrokenPipeError:  # piped into head
        sys.stderr.close()
