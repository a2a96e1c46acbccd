"""Idle time on the GPU's timeline between a training step's kernels, from Nsight Systems' trace.

    python3 dev/profile/timeline_gaps.py TRACE.csv [--steps 5] [--top 12] [--marker NAME]
                                         [--categories] [--gemms N] [--csv-tag TAG]

TRACE.csv is `nsys stats --report cuda_gpu_trace --format csv` of a ./train run, or
the CSV of dev/profile/kernel_trace.c (the same columns). Every kernel whose name holds MARKER
starts a step (encoder_forward_kernel, ./train's first kernel, once a micro-batch: run without
gradient accumulation; a PyTorch peer marks its steps with torch.cuda._sleep, kernel spin_kernel); the last STEPS whole steps before the run's
last one are the window. Prints the window's length per step, the time some kernel, copy or set ran
(their union), the idle rest, the operations a step, the idle time summed by the operation that
ended it (what the GPU waited to start), and the TOP kernels by their time a step at the clocks of
training (cuBLAS's GEMMs summed as one line). --categories adds the time a step by the step's parts
(GEMMs, attention, norms, ...), the same names for ./train and for PyTorch's kernels, and with
--csv-tag one line per part, `csv_part,TAG,PART,ms`; --gemms N lists the N GEMM kernels (name and
grid) that take longest, so that two runs' choices for the same products can be compared."""
import argparse
import collections
import csv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--marker", default="encoder_forward_kernel")
    ap.add_argument("--categories", action="store_true")
    ap.add_argument("--gemms", type=int, default=0)
    ap.add_argument("--csv-tag")
    a = ap.parse_args()
    ops = []
    with open(a.trace) as f:
        for row in csv.DictReader(f):
            start, dur = int(row["Start (ns)"]), int(row["Duration (ns)"])
            grid = "x".join(row.get(k) or "?" for k in ("GrdX", "GrdY", "GrdZ"))
            ops.append((start, start + dur, row["Name"], grid))
    ops.sort()
    starts = [o[0] for o in ops if a.marker in o[2]]
    if len(starts) < a.steps + 2:
        raise SystemExit(f"error: {len(starts)} steps in the trace, need {a.steps + 2}")
    w0, w1 = starts[-a.steps - 1], starts[-1]
    window = [o for o in ops if w0 <= o[0] < w1]
    busy, idle_by, time_by = 0, collections.Counter(), collections.Counter()
    by_part, by_gemm, gemm_calls = collections.Counter(), collections.Counter(), collections.Counter()
    end = w0
    for s, e, n, grid in window:
        if s > end:
            idle_by[short(n)] += s - end
        time_by[short(n)] += e - s
        by_part[part(n)] += e - s
        if part(n) == "GEMMs (cuBLAS)":
            by_gemm[(n.strip('"')[:90], grid)] += e - s
            gemm_calls[(n.strip('"')[:90], grid)] += 1
        busy += max(0, e - max(s, end))
        end = max(end, e)
    closing = next(o[2] for o in ops if o[0] == w1)
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
    if a.categories:
        print("time a step by part:")
        for name, ns in by_part.most_common():
            print(f"    {per(ns):7.2f} ms  {name}")
            if a.csv_tag:
                print(f"csv_part,{a.csv_tag},{name},{per(ns):.3f}")
        if a.csv_tag:
            print(f"csv_part,{a.csv_tag},step,{per(span):.3f}")
            print(f"csv_part,{a.csv_tag},idle,{per(span - busy):.3f}")
    if a.gemms:
        print(f"the {a.gemms} longest GEMM kernels (name, grid): ms a step, calls a step")
        for (name, grid), ns in by_gemm.most_common(a.gemms):
            print(f"    {per(ns):7.2f} ms  {gemm_calls[(name, grid)] / a.steps:5.1f}  {grid:>12}  {name}")


# the parts of a step, first match wins: ./train's kernels and PyTorch's (ATen, flash attention,
# Liger's Triton kernels) under the same names
PARTS = [
    ("communication (NCCL's kernels)", ("nccl",)),
    ("attention", ("attention", "flash", "fmha", "attn", "dot_do_o", "convert_dq")),  # before GEMMs: flash names hold "cutlass"
    ("GEMMs (cuBLAS)", ("nvjet", "gemm", "splitkreduce", "xmma", "cutlass")),
    ("output layer (softmax, loss)", ("tile_kernel", "merge_kernel", "exp_dh", "onehot_dw", "reference_logit",
                                      "canonical_loss", "cross_entropy", "radixsort", "smoothing_dw", "stream_dh",
                                      "peak_columns", "slices_combine", "iota_kernel", "count_valid", "reduce_loss")),
    ("norms", ("rmsnorm", "rms_norm", "layernorm", "layer_norm")),
    ("RoPE (with QK-norm)", ("rope",)),
    ("gated/GELU activation", ("gated_", "swiglu", "geglu", "gelu", "silu")),
    ("embedding", ("encoder_", "embedding", "indexselect", "index_select")),
    ("optimizer and gradient norm", ("adam", "multi_tensor", "sumsq")),
    ("copies and sets", ("[memcpy]", "[memset]", "copy", "catarraybatched")),
]


def part(name):
    low = name.lower()
    for label, keys in PARTS:
        if any(k in low for k in keys):
            return label
    return "other elementwise and reductions"


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
