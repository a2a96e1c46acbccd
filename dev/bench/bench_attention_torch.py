"""bench_attention_torch.py - PyTorch's scaled_dot_product_attention (flash backend, causal,
bf16) at the shapes dev/bench/bench_kernels.cu times (GPT-2's, Qwen3-0.6B's and Llama-3.2-1B's),
for a side-by-side with kernels/attention.cu.

With `gemma`: Gemma-3-270M's attention (B 8 and 16, T 2048, NH 4, NKV 1, HS 256, scale 256^-1/2)
with its local layers' sliding window of 512 keys and its global layers, against
`./build/bench_kernels 8 gemma-attention`. Flash takes no sliding window, so each shape is timed on
every path PyTorch offers: flash (global only), the memory-efficient and math kernels of SDPA with
an explicit boolean mask, and flex_attention (compiled) with a block mask; the best is PyTorch's
figure. TFLOP/s count only the visible (query, key) pairs: 4·B·NH·HS per pair forward, 2.5× that
backward (FA2's count), as bench_kernels does.

With `documents`: Qwen3-0.6B's and Llama-3.2-1B's attention (B 8, T 2048) over documents packed
end to end in each sequence, the same positions `./build/bench_kernels 8 documents` draws (one
document of 2048, documents of 512, lengths uniform in 1-512 and in 1-2048), against
flex_attention (compiled) with a document block mask, the way PyTorch trainers mask packed
documents, and flash's causal SDPA over the whole rows for reference. The block mask is built once
per shape, outside the timing (a trainer builds one per batch). TFLOP/s count the pairs inside
documents only.

On a GPU machine: python3 dev/bench/bench_attention_torch.py [B | gemma | documents]. Medians of
CUDA-event timings."""
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


def visible_pairs(T, W):
    """(query, key) pairs of a causal attention with a sliding window of W keys (0: none)."""
    if W <= 0 or W >= T:
        return T * (T + 1) / 2
    return W * (W + 1) / 2 + (T - W) * W


def timed_fwd_bwd(attn, q, k, v, dout):
    """Median forward and backward ms of attn(q, k, v), or the error that stopped it."""
    try:
        out = attn(q, k, v)
        fwd = median_ms(lambda: attn(q, k, v))
        bwd = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
        return fwd, bwd
    except Exception as e:  # a path that does not take this shape: say why, time the others
        return f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


def print_timed(name, attn, q, k, v, dout, flops):
    """One line of a path's forward and backward ms and TFLOP/s; (fwd, bwd), or None where it failed."""
    r = timed_fwd_bwd(attn, q, k, v, dout)
    if isinstance(r, str):
        print(f"  {name:52s} failed: {r}")
        return None
    fwd, bwd = r
    print(f"  {name:52s} fwd {fwd:8.3f} ms ({flops / fwd / 1e9:6.1f} TFLOP/s)  "
          f"bwd {bwd:8.3f} ms ({2.5 * flops / bwd / 1e9:6.1f} TFLOP/s)")
    return r


def bench_gemma(B, window, T=2048, nh=4, nkv=1, hs=256):
    scale = hs ** -0.5
    q = torch.randn(B, nh, T, hs, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(B, nkv, T, hs, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    dout = torch.randn(B, nh, T, hs, device="cuda", dtype=torch.bfloat16)
    flops = 4.0 * B * nh * hs * visible_pairs(T, window)
    i, j = torch.arange(T, device="cuda")[:, None], torch.arange(T, device="cuda")[None, :]
    mask = (j <= i) & (j > i - window) if window > 0 else j <= i
    # The masked SDPA kernels take K, V per query head (no grouped heads there): repeat them.
    kr, vr = (x.detach().repeat_interleave(nh // nkv, dim=1).requires_grad_() for x in (k, v))

    def sdpa(backend, **kw):
        def attn(q_, k_, v_):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q_, k_, v_, scale=scale, **kw)
        return attn

    paths = []
    if window == 0:
        paths.append(("sdpa flash, causal, enable_gqa", sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True,
                                                              enable_gqa=True), (q, k, v)))
        paths.append(("sdpa flash, causal, K and V repeated", sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True),
                      (q, kr, vr)))
    paths.append(("sdpa mem-efficient, mask", sdpa(SDPBackend.EFFICIENT_ATTENTION, attn_mask=mask), (q, kr, vr)))
    paths.append(("sdpa math, mask", sdpa(SDPBackend.MATH, attn_mask=mask), (q, kr, vr)))
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def visible(b, h, qi, kj):
            causal = kj <= qi
            return causal & (qi - kj < window) if window > 0 else causal
        block_mask = create_block_mask(visible, None, None, T, T, device="cuda")
        flex = torch.compile(flex_attention, dynamic=False)
        paths.append(("flex_attention (compiled), block mask, enable_gqa",
                      lambda q_, k_, v_: flex(q_, k_, v_, block_mask=block_mask, scale=scale, enable_gqa=True),
                      (q, k, v)))
    except Exception as e:
        print(f"  flex_attention unavailable: {type(e).__name__}: {e}")
    what = f"window={window}" if window else "global"
    print(f"torch {torch.__version__} B={B} T={T} NH={nh} NKV={nkv} HS={hs} {what}")
    best = None
    for name, attn, (q_, k_, v_) in paths:
        r = print_timed(name, attn, q_, k_, v_, dout, flops)
        if r is None:
            continue
        fwd, bwd = r
        if best is None or fwd + bwd < best[1] + best[2]:
            best = (name, fwd, bwd)
    if best:
        print(f"  best: {best[0]}: fwd {best[1]:.3f} ms, bwd {best[2]:.3f} ms")


def document_positions(B, T, doc):
    """bench_kernels.cu's document_positions: each row's place in its document, all of length doc, or
    (doc < 0) of lengths uniform in 1..2|doc| from its xorshift32; and the visible pairs."""
    h, pos = 2463534242, []
    for _ in range(B):
        row, left, at = [], 0, 0
        for _ in range(T):
            if left == 0:
                h ^= (h << 13) & 0xFFFFFFFF
                h ^= h >> 17
                h ^= (h << 5) & 0xFFFFFFFF
                left, at = (doc if doc > 0 else 1 + h % (-2 * doc)), 0
            row.append(at)
            at, left = at + 1, left - 1
        pos.append(row)
    pos = torch.tensor(pos, dtype=torch.int32)
    return pos, float((pos + 1).sum())


def bench_documents(B, T, nh, nkv, hs, doc):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    q = torch.randn(B, nh, T, hs, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(B, nkv, T, hs, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    dout = torch.randn(B, nh, T, hs, device="cuda", dtype=torch.bfloat16)
    if doc:
        pos, pairs = document_positions(B, T, doc)
        what = f"documents of {doc}" if doc > 0 else f"documents of 1-{-2 * doc} (uniform)"
    else:
        pos, pairs, what = torch.arange(T).repeat(B, 1), B * T * (T + 1) / 2, "causal rows"
    document = torch.cumsum((pos == 0).int(), dim=1).cuda()  # each row's document, by sequence

    def visible(b, h, qi, kj):
        return (kj <= qi) & (document[b, qi] == document[b, kj])
    block_mask = create_block_mask(visible, B, None, T, T, device="cuda")
    flex = torch.compile(flex_attention, dynamic=False)
    flops = 4.0 * nh * hs * pairs
    print(f"torch {torch.__version__} B={B} T={T} NH={nh} NKV={nkv} HS={hs} {what} ({pairs:.3g} visible pairs)")
    paths = [("flex_attention (compiled), document block mask",
              lambda q_, k_, v_: flex(q_, k_, v_, block_mask=block_mask, enable_gqa=True))]
    if doc in (0, T):
        paths.append(("sdpa flash, causal (the whole rows)", lambda q_, k_, v_: F.scaled_dot_product_attention(
            q_, k_, v_, is_causal=True, enable_gqa=True)))
    for name, attn in paths:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            print_timed(name, attn, q, k, v, dout, flops)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "documents":
        for nh, hs in ((16, 128), (32, 64)):
            for doc in (0, 2048, 512, -256, -1024):
                bench_documents(8, 2048, nh, 8, hs, doc)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "gemma":
        for B in (8, 16):
            for window in (512, 0):
                bench_gemma(B, window)
        return
    B, T, C = (int(sys.argv[1]) if len(sys.argv) > 1 else 16), 1024, 768
    for hs in (64, 128):
        bench(B, T, C // hs, C // hs, hs)
    for qwen_b in (8, 16):  # Qwen3-0.6B's attention
        bench(qwen_b, 2048, 16, 8, 128)
    for llama_b in (8, 16):  # Llama-3.2-1B's
        bench(llama_b, 2048, 32, 8, 64)


if __name__ == "__main__":
    main()
