"""PyTorch peer of the trainer's throughput: GPT-2 124M (12 layers, d = 768, 12 heads, T = 1024,
tied embeddings, biases, tanh GELU) trained on random tokens with torch.compile, flash attention
(scaled_dot_product_attention), bf16 autocast over fp32 weights, fused AdamW and gradient clipping
at 1.0, as ../shared/anchors.md describes its PyTorch row. Not a dependency of the product: it only
puts the peer beside ./train in the same run on the same GPU.

    python3 dev/bench/bench_trainer_torch.py [--vocab V ...] [--batch B] [--steps S] [--warmup W]
    python3 -m torch.distributed.run --standalone --nproc_per_node G dev/bench/bench_trainer_torch.py ...

Under torch.distributed.run it is PyTorch DDP + torch.compile (the compiled DDP module, default
25 MB buckets, fp32 gradients reduced during the backward), B sequences per GPU, each rank its own
random tokens: the data-parallel peer of `./train -g G`.

Prints one line per vocabulary (rank 0 only):
    csv_torch_trainer,V,B,T,median_ms,tokens_per_s,peak_GB,gpus
tokens_per_s counts every GPU's tokens; median over the timed steps (CUDA events around each whole
step; with several GPUs, rank 0's), after the warm-up steps (which include the compilation)."""
import argparse
import math
import os
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.attn = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, T=1024, d=768, layers=12, heads=12):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(T, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2 and ./train
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight",)) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def run(vocab, B, T, steps, warmup, world, rank):
    torch.manual_seed(0)  # the same initial weights on every rank, as DDP requires
    model = GPT(vocab, T).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
    step_fn = torch.compile(model)
    torch.manual_seed(1 + rank)
    data = torch.randint(0, vocab, (steps + warmup, B, T + 1), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(warmup + steps):
        x, y = data[i, :, :-1].contiguous(), data[i, :, 1:].contiguous()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
        if rank == 0 and (i == 0 or i == warmup + steps - 1):
            print(f"V={vocab} step {i + 1}: loss {loss.item():.4f}", flush=True)
    ms = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 1e9
    if rank == 0:
        print(f"csv_torch_trainer,{vocab},{B},{T},{ms:.2f},{world * B * T / ms * 1e3:.0f},{peak:.1f},{world}",
              flush=True)
    del model, opt, step_fn, data
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, nargs="+", default=[262144, 50304])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=10)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        torch.distributed.init_process_group("nccl")
    for v in a.vocab:
        run(v, a.batch, a.seq, a.steps, a.warmup, world, rank)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
