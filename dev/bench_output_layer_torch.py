"""dev/bench_output_layer_torch.py - PyTorch torch.compile reference timings for the output layer,
run on the device in the same call as dev/bench_output_layer so that the ratios are same-run.

    python3 dev/bench_output_layer_torch.py [d,N,V ...]

Same inputs and method as the C benchmark and ../shared/anchors.md: H ~ N(0,1), W ~ N(0, 0.02^2)
bf16, uniform targets, mean loss; logits = nn.Linear-style H W^T in bf16, F.cross_entropy on the
fp32 upcast, gradients for H and W. CUDA events, warm-up, median. Extra memory = peak allocated
during the call beyond the inputs (dH and dW included, as in anchors.md). Development only: PyTorch
is never a dependency of the product."""
import statistics
import sys

import torch
import torch.nn.functional as F


def loss_fn(h, w, t):
    return F.cross_entropy(F.linear(h, w).float(), t)


compiled = torch.compile(loss_fn)


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


def bench(d, n, v):
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(n, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    w = (torch.randn(v, d, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02).requires_grad_()
    t = torch.randint(0, v, (n,), device="cuda", generator=g)

    def fwd():
        with torch.no_grad():
            compiled(h, w, t)

    def fwd_bwd():
        h.grad = None
        w.grad = None
        compiled(h, w, t).backward()

    gemm_g = 2.0 * n * v * d
    fwd_ms = median_ms(fwd, 10)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fb_ms = median_ms(fwd_bwd, 10)
    extra_gb = (torch.cuda.max_memory_allocated() - base) / 1e9
    print(f"torch {d:5d} {n:6d} {v:7d} | compile fwd {fwd_ms:8.2f} ms ({gemm_g / fwd_ms / 1e9:5.0f} TF) | "
          f"fwd+bwd {fb_ms:8.2f} ms ({3 * gemm_g / fb_ms / 1e9:5.0f} TF at 3G) | extra {extra_gb:6.2f} GB",
          flush=True)
    print(f"csv_torch,{d},{n},{v},{fwd_ms:.3f},{fb_ms:.3f},{extra_gb:.3f}", flush=True)
    del h, w, t
    torch.cuda.empty_cache()


if __name__ == "__main__":
    shapes = sys.argv[1:] or ["768,16384,50304", "768,65536,262144", "4096,16384,262144"]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for s in shapes:
        bench(*map(int, s.split(",")))
