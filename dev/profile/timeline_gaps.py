"""Idle time on the GPU's timeline between a training step's kernels, from Nsight Systems' trace.

    python3 dev/profile/timeline_gaps.py TRACE.csv [--steps 5] [--top 12]

TRACE.csv is `nsys stats --report cuda_gpu_trace --format csv` of a ./train run, or
the CSV of dev/profile/kernel_trace.c (the same columns). A step starts at an
encoder_forward_kernel; the last STEPS whole steps before the run's last one are the window. Prints
the window's length per step, the time some kernel, copy or set ran (their union), the idle rest,
the operations a step, the idle time summed by the operation that ended it (what the GPU waited to
start), and the TOP kernels by their time a step at the clocks of training (cuBLAS's GEMMs summed
as one line)."""
import argparse
import collections
import csv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    ops = []
    with open(a.trace) as f:
        for row in csv.DictReader(f):
            start, dur = int(row["Start (ns)"]), int(row["Duration (ns)"])
            ops.append((start, start + dur, row["Name"]))
    ops.sort()
    starts = [s for s, _, n in ops if "encoder_forward_kernel" in n]
    if len(starts) < a.steps + 2:
        raise SystemExit(f"error: {len(starts)} steps in the trace, need {a.steps + 2}")
    w0, w1 = starts[-a.steps - 1], starts[-1]
    window = [o for o in ops if w0 <= o[0] < w1]
    busy, idle_by, time_by = 0, collections.Counter(), collections.Counter()
    end = w0
    for s, e, n in window:
        if s > end:
            idle_by[short(n)] += s - end
        time_by[short(n)] += e - s
        busy += max(0, e - max(s, end))
        end = max(end, e)
    closing = next(n for s, _, n in ops if s == w1)
    if w1 > end:  # before the next step's first kernel, which closes the window
        idle_by[short(closing)] += w1 - end
    span = w1 - w0
    per = lambda ns: ns / a.steps / 1e6
    print(f"step {per(span):.2f} ms on the timeline, busy {per(busy):.2f}, idle {per(span - busy):.2f} "
          f"({100 * (span - busy) / span:.1f} %), {len(window) / a.steps:.0f} operations a step")
    for name, ns in idle_by.most_common(8):
        print(f"    idle before {name}: {per(ns):.3f} ms a step")
    print("time a step by kernel:")
    for name, ns in time_by.most_common(a.top):
        print(f"    {per(ns):7.2f} ms  {name}")


def short(name):
    """A kernel's name without its parameters; cuBLAS's GEMM kernels as one."""
    if any(k in name for k in ("nvjet", "gemm", "splitKreduce")):
        return "cuBLAS GEMMs (and their split-K reductions)"
    name = name.strip('"')
    if name.startswith("_Z"):  # Itanium mangling: _Z <length> <name>
        i = 2
        while i < len(name) and name[i].isdigit():
            i += 1
        if i > 2:
            return name[i:i + int(name[2:i])]
    return name.split("(")[0].split("<")[0][:60]


if __name__ == "__main__":
    main()
