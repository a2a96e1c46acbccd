"""bench_attention_torch.py - PyTorch's scaled_dot_product_attention (flash backend, causal,
bf16) at the shapes dev/bench/bench_kernels.cu times (GPT-2's and Qwen3-0.6B's), for a side-by-side
with kernels/attention.cu.

On a GPU machine: python3 dev/bench/bench_attention_torch.py [B]. Medians of CUDA-event timings."""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, reps=20, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def bench(B, T, nh, nkv, hs):
    q = torch.randn(B, nh, T, hs, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(B, nkv, T, hs, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    dout = torch.randn(B, nh, T, hs, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * B * nh * T * T * hs  # causal forward: 4·B·NH·T²·HS / 2
    how = "MHA" if nkv == nh else "enable_gqa"
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        try:
            attn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=nkv != nh)
            out = attn()
        except RuntimeError:  # a flash backend without grouped heads: the same work with K, V per query head
            how = "MHA, K and V repeated per query head (no flash GQA here)"
            k, v = (x.detach().repeat_interleave(nh // nkv, dim=1).requires_grad_() for x in (k, v))
            attn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out = attn()
        fwd = median_ms(attn)
        bwd = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
    print(f"torch {torch.__version__} sdpa flash B={B} T={T} NH={nh} NKV={nkv} HS={hs} ({how}): "
          f"fwd {fwd:.3f} ms ({flops / fwd / 1e9:.1f} TFLOP/s), "
          f"bwd {bwd:.3f} ms ({2.5 * flops / bwd / 1e9:.1f} TFLOP/s, FA2 count)")


def main():
    B, T, C = (int(sys.argv[1]) if len(sys.argv) > 1 else 16), 1024, 768
    for hs in (64, 128):
        bench(B, T, C // hs, C // hs, hs)
    bench(8, 2048, 16, 8, 128)  # Qwen3-0.6B's attention


if __name__ == "__main__":
    main()
