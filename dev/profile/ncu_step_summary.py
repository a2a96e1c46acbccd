"""Sums one training step's kernel times from Nsight Compute's CSV by part of the step and by kernel.

    python3 dev/profile/ncu_step_summary.py NCU.csv TAG [STEP_MS]

NCU.csv is `ncu --csv --metrics gpu__time_duration.sum ./train ... --profile-step N` (see
dev/profile/step_profile.sh). The kernels come in launch order; the parts are told apart by the
first kernel of each: the output layer's kernels end the body's forward, the first norm backward
starts the body's backward, and the gradient norm or AdamW starts the optimizer. cuBLAS GEMMs are
also summed by grid, so each matmul shape has a line of its own. STEP_MS (the step's time without
the profiler) gives the gaps and overlap between kernels."""
import collections
import csv
import re
import sys

UNIT_MS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}
OUTPUT_LAYER = re.compile(r"tile_kernel|count_valid|canonical_loss|fused_merge|reduce_loss")


def short(name):
    """The kernel's name without `void `, its template arguments and its parameters."""
    n = name.split("(")[0]
    n = re.sub(r"<.*", "", n)
    n = re.sub(r"^void ", "", n)
    return n[:58]


def is_gemm(name):
    return bool(re.search(r"gemm|nvjet|xmma|cutlass|sm90_", name)) and not short(name).endswith("_kernel")


def read_kernels(path):
    rows = [r for r in csv.reader(l for l in open(path) if l.startswith('"'))]
    head, body = rows[0], rows[1:]
    col = {h: i for i, h in enumerate(head)}
    kernels = []
    for r in sorted(body, key=lambda r: int(r[col["ID"]])):
        ms = float(r[col["Metric Value"]].replace(",", "")) * UNIT_MS[r[col["Metric Unit"]]]
        grid = r[col["Grid Size"]] if "Grid Size" in col else ""
        kernels.append((r[col["Kernel Name"]], grid, ms))
    return kernels


def parts_of(kernels):
    part, parts = "body forward", []
    for name, _, _ in kernels:
        s = short(name)
        if part == "body forward" and OUTPUT_LAYER.search(name):
            part = "output layer"
        elif part == "output layer" and s.startswith(("layernorm_backward", "rmsnorm_backward")):
            part = "body backward"
        elif s.startswith(("sumsq", "adamw")):
            part = "optimizer"
        parts.append(part)
    return parts


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: ncu_step_summary.py NCU.csv TAG [STEP_MS]")
    kernels = read_kernels(sys.argv[1])
    if not kernels:
        sys.exit(f"error: no kernels in {sys.argv[1]} (did ncu capture the profiled step?)")
    step = float(sys.argv[3]) if len(sys.argv) > 3 else float("nan")
    total = sum(ms for _, _, ms in kernels)
    print(f"== {sys.argv[2]}: {len(kernels)} kernels, {total:.2f} ms of kernel time; step {step:.2f} ms without "
          f"the profiler (gaps and overlap: {step - total:+.2f} ms)")
    by_part = collections.OrderedDict()
    for (name, grid, ms), p in zip(kernels, parts_of(kernels)):
        by_part.setdefault(p, collections.Counter())
        by_part[p][("GEMM " + grid) if is_gemm(name) else short(name)] += ms
    for p, c in by_part.items():
        s = sum(c.values())
        print(f"  {p}: {s:.2f} ms ({100 * s / total:.1f} %)")
        for k, v in c.most_common():
            if v >= 0.02 * s or v >= 0.3:
                print(f"      {v:8.3f} ms  {100 * v / total:5.1f} %  {k}")
    fam = collections.Counter()
    for name, grid, ms in kernels:
        fam["cuBLAS GEMMs" if is_gemm(name) else short(name)] += ms
    print("  by kernel, whole step:")
    for k, v in fam.most_common(14):
        print(f"      {v:8.3f} ms  {100 * v / total:5.1f} %  {k}")


if __name__ == "__main__":
    main()
