"""bench_output_layer_torch.py - PyTorch reference timings (torch.compile and eager) for the
output layer, run on the same GPU right after build/bench_output_layer so that the ratios are
same-run.

    python3 dev/bench/bench_output_layer_torch.py [--no-fwd] [--no-eager] [--peers] [--quack-chunk R] [--reps R]
                                                  [d,N,V ...]

Same inputs and method as the C benchmark and ../shared/anchors.md: H ~ N(0,1), W ~ N(0, 0.02^2)
bf16, uniform targets, mean loss; logits = nn.Linear-style H W^T in bf16, F.cross_entropy on the
fp32 upcast, gradients for H and W. torch.compile with static shapes (dynamic=False: one graph per
shape, as a training run with a fixed shape gets). CUDA events, 3 warm-up calls (the first compiles),
median of R timed calls. Extra memory = peak allocated during the call beyond the inputs (dH and dW
included, as in anchors.md). Eager fwd+bwd is "OOM" where it does not fit. Needs no network.
Development only: PyTorch is never a dependency of the product.

Prints one line per shape and CSV lines:
    csv_torch,d,N,V,compile_fwd_ms,compile_fwdbwd_ms,compile_extra_GB,eager_fwdbwd_ms,eager_extra_GB
(nan where not measured or out of memory).

--peers also times the fused peers of anchors.md whose packages import (a GPU machine without
network needs their wheels copied there and installed with pip --no-index): Liger-Kernel's
liger_fused_linear_cross_entropy (its defaults), Apple's Cut Cross-Entropy with filter_eps=None
(dense: no gradient block skipped, the fair figure for pretraining), and quack's
chunked_linear_cross_entropy (chunks of 4096 rows, or --quack-chunk R; its scaled-exp pipeline
where it supports the shape). Each peer's loss is checked against torch.compile's (relative difference printed). One line
per shape:
    csv_peer,d,N,V,liger_fwdbwd_ms,liger_extra_GB,cce_fwdbwd_ms,cce_extra_GB,quack_fwdbwd_ms,quack_extra_GB"""
import gc
import math
import statistics
import sys

import torch
import torch.nn.functional as F

QUACK_CHUNK = 4096  # rows per chunk for quack (--quack-chunk)


def loss_fn(h, w, t):
    return F.cross_entropy(F.linear(h, w).float(), t)


# one static graph per shape and mode; allow enough of them for every shape of one run
for name in ("recompile_limit", "cache_size_limit"):
    if hasattr(torch._dynamo.config, name):
        setattr(torch._dynamo.config, name, 64)
compiled = torch.compile(loss_fn, dynamic=False)


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def measure(fn, reps):
    """(median ms, extra GB beyond what was allocated before), or (nan, nan) when out of memory"""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    try:
        ms = median_ms(fn, reps)
    except torch.cuda.OutOfMemoryError:
        return math.nan, math.nan
    return ms, (torch.cuda.max_memory_allocated() - base) / 1e9


def peer_losses():
    """{name: loss_fn(h, w, t)} for the peers that import"""
    found = {}
    try:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        found["liger"] = lambda h, w, t: liger_fused_linear_cross_entropy(h, w, t)
    except Exception as e:  # a missing or broken package: say so, measure the rest
        print(f"peer liger unavailable: {e!r}", flush=True)
    try:
        from cut_cross_entropy import linear_cross_entropy

        found["cce"] = lambda h, w, t: linear_cross_entropy(h, w, t, filter_eps=None, impl="cce")
    except Exception as e:
        print(f"peer cce unavailable: {e!r}", flush=True)
    try:
        from quack.linear_cross_entropy import chunked_linear_cross_entropy

        found["quack"] = lambda h, w, t: chunked_linear_cross_entropy(h, w, t, chunk_size=QUACK_CHUNK)
    except Exception as e:
        print(f"peer quack unavailable: {e!r}", flush=True)
    return found


def quack_path(h, w):
    """which of quack's pipelines chunked_linear_cross_entropy takes at this shape"""
    try:
        from quack.linear_cross_entropy import scaled_exp_lce_supported

        path = "scaled-exp" if scaled_exp_lce_supported(h, w, QUACK_CHUNK, "mean") else "chunked (not scaled-exp)"
        return f", {path}, chunks of {QUACK_CHUNK}"
    except Exception as e:
        return f", path unknown ({e!r})"[:120]


def bench(d, n, v, fwd_too, eager_too, reps, peers):
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(n, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    w = (torch.randn(v, d, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02).requires_grad_()
    t = torch.randint(0, v, (n,), device="cuda", generator=g)

    def fwd():
        with torch.no_grad():
            compiled(h, w, t)

    def fwd_bwd(f):
        def run():
            h.grad = None
            w.grad = None
            f(h, w, t).backward()

        return run

    gemm_g = 2.0 * n * v * d
    fwd_ms = measure(fwd, reps)[0] if fwd_too else math.nan
    fb_ms, fb_gb = measure(fwd_bwd(compiled), reps)
    h.grad = w.grad = None
    eager_ms, eager_gb = math.nan, math.nan
    if eager_too:
        eager_ms, eager_gb = measure(fwd_bwd(loss_fn), reps)
        h.grad = w.grad = None
        gc.collect()
        torch.cuda.empty_cache()

    def ms(x):
        return "     OOM" if math.isnan(x) else f"{x:8.2f}"

    if peers:
        with torch.no_grad():
            ref = compiled(h, w, t).item()
        got, said = {}, []
        for name in ("liger", "cce", "quack"):
            got[name] = (math.nan, math.nan)
            if name in peers:
                try:
                    with torch.no_grad():
                        rel = abs(peers[name](h, w, t).float().item() - ref) / ref
                    got[name] = measure(fwd_bwd(peers[name]), max(3, reps // 2))
                    said.append(f"{name} fwd+bwd {ms(got[name][0])} ms, extra {got[name][1]:6.2f} GB, loss rel {rel:.1e}"
                                + quack_path(h, w) * (name == "quack"))
                except Exception as e:  # a peer that imports but fails at a shape: say so, go on
                    said.append(f"{name} failed: {e!r}"[:300])
            h.grad = w.grad = None
            gc.collect()
            torch.cuda.empty_cache()
        print(f"peers {d:5d} {n:6d} {v:7d} | " + " | ".join(said), flush=True)
        print(f"csv_peer,{d},{n},{v}," + ",".join(f"{got[k][0]:.3f},{got[k][1]:.3f}" for k in ("liger", "cce", "quack")),
              flush=True)

    print(f"torch {d:5d} {n:6d} {v:7d} | compile fwd {ms(fwd_ms)} ms | compile fwd+bwd {ms(fb_ms)} ms "
          f"({3 * gemm_g / fb_ms / 1e9 if fb_ms == fb_ms else 0:5.0f} TF at 3G), extra {fb_gb:6.2f} GB | "
          f"eager fwd+bwd {ms(eager_ms)} ms, extra {eager_gb:6.2f} GB", flush=True)
    print(f"csv_torch,{d},{n},{v},{fwd_ms:.3f},{fb_ms:.3f},{fb_gb:.3f},{eager_ms:.3f},{eager_gb:.3f}", flush=True)
    del h, w, t
    gc.collect()
    torch.cuda.empty_cache()


if __name__ == "__main__":
    fwd_too, eager_too, reps, shapes, peers = True, True, 10, [], {}
    args = iter(sys.argv[1:])
    for a in args:
        if a == "--no-fwd":
            fwd_too = False
        elif a == "--no-eager":
            eager_too = False
        elif a == "--peers":
            peers = peer_losses()
        elif a == "--reps":
            reps = int(next(args))
        elif a == "--quack-chunk":
            QUACK_CHUNK = int(next(args))
        elif not a.startswith("--") and a.count(",") == 2:
            shapes.append(a)
        else:
            sys.exit(f"usage: {sys.argv[0]} [--no-fwd] [--no-eager] [--peers] [--quack-chunk R] [--reps R] [d,N,V ...]"
                     f"  (got {a!r})")
    shapes = shapes or ["768,16384,50304", "768,65536,262144", "4096,16384,262144"]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    print("csv_torch,d,N,V,compile_fwd_ms,compile_fwdbwd_ms,compile_extra_GB,eager_fwdbwd_ms,eager_extra_GB",
          flush=True)
    for s in shapes:
        bench(*map(int, s.split(",")), fwd_too, eager_too, reps, peers)
