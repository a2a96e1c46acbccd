"""PyTorch peers of the trainer's throughput on the model families: a Hugging Face model built from
its config with random weights (Qwen3-0.6B, Llama-3.2-1B, Gemma-3-270M shapes), SDPA attention, fused
AdamW, random tokens, trained with one of three stacks:

    compile        torch.compile of the transformers model
    liger          Liger-Kernel's patches (RMSNorm, RoPE, SwiGLU/GeGLU, fused linear cross-entropy), eager
    liger_compile  both

as ../shared/anchors.md describes its family rows, in one of two precisions:

    bf16           (default) parameters, gradients and AdamW's moments in bf16: 8 bytes a parameter,
                   how these peers are usually measured
    amp            fp32 parameters, gradients and moments, the forward under bf16 autocast: 16 bytes a
                   parameter, the optimizer precision ./train keeps (fp32 master weights and moments
                   beside bf16 weights, 18 bytes), for memory compared like with like

 Not a dependency of the product: it only puts the
peers beside ./train in the same run on the same GPU.

    python3 dev/bench/bench_family_torch.py --model qwen3-0.6b --stack compile liger --batch 8 16 [--seq 2048]
    python3 -m torch.distributed.run --standalone --nproc_per_node G dev/bench/bench_family_torch.py \
        --model qwen3-0.6b --row liger:16

Under torch.distributed.run one row runs as PyTorch DDP (default 25 MB buckets, gradients reduced
during the backward in the parameters' dtype, reduced into the gradients' own storage), B sequences
per GPU, each rank its own random tokens, the compile stacks compiling the DDP module: the
data-parallel peer of `./train -g G`. tokens_per_s then counts every GPU's tokens and the row's
stack reads e.g. liger/ddp2.

Each (stack, batch) runs in its own process, so that an out-of-memory error or a crashed compile
(Liger under torch.compile has died with an illegal memory access) costs that row only. Liger's wheel
is installed from .whl/ when the import fails (the GPU machine has no network). Prints one line per row:
    csv_torch_family,model,stack,B,T,median_ms,tokens_per_s,peak_GB   (or ...,failed,<reason>)
where stack reads e.g. liger/amp for the amp precision.
median over the timed steps (CUDA events around fwd + bwd + optimizer step), after the warm-up
steps, which include the compilation; peak is max_memory_allocated."""
import argparse
import glob
import os
import statistics
import subprocess
import sys

MODELS = {
    "qwen3-0.6b": dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                       rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=40960),
    "llama3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                        rope_theta=5e5, rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=131072,
                        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "gemma3-270m": dict(model_type="gemma3_text", hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                        num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144,
                        rope_theta=1e6, rope_local_base_freq=1e4, sliding_window=512, query_pre_attn_scalar=256,
                        rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=32768),
}
LIGER_PATCH = {"qwen3": "apply_liger_kernel_to_qwen3", "llama": "apply_liger_kernel_to_llama",
               "gemma3_text": "apply_liger_kernel_to_gemma3_text"}


def one_row(model_name, stack, precision, B, T, steps, warmup, mark_steps=False):
    import torch
    import transformers

    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        torch.distributed.init_process_group("nccl")

    spec = dict(MODELS[model_name])
    model_type = spec.pop("model_type")
    if stack.startswith("liger"):
        try:
            import liger_kernel.transformers as lk
        except ImportError:
            wheels = glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", ".whl", "liger_kernel-*.whl"))
            subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", *wheels], check=True)
            import liger_kernel.transformers as lk
        getattr(lk, LIGER_PATCH[model_type])()
    config = transformers.AutoConfig.for_model(model_type, **spec)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)  # the same initial weights on every rank, as DDP requires
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()],
                                                          gradient_as_bucket_view=True)
    fwd = torch.compile(model) if stack.endswith("compile") else model
    torch.manual_seed(1 + rank)
    data = torch.randint(0, spec["vocab_size"], (warmup + steps, B, T), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(warmup + steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if mark_steps:  # a kernel named spin_kernel opens the step on a traced timeline
            torch.cuda._sleep(1)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "amp"):
            loss = fwd(input_ids=data[i], labels=data[i]).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    ms = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 1e9
    if rank == 0:
        print(f"csv_torch_family,{model_name},{label(stack, precision, world)},{B},{T},{ms:.1f},"
              f"{world * B * T / ms * 1e3:.0f},{peak:.1f}", flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


def label(stack, precision, world=1):
    return stack + ("" if precision == "bf16" else f"/{precision}") + ("" if world == 1 else f"/ddp{world}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--stack", nargs="+", default=["compile", "liger"], choices=["compile", "liger", "liger_compile"])
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--precision", choices=["bf16", "amp"], default="bf16")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per row, compilation included")
    ap.add_argument("--mark-steps", action="store_true",
                    help="open each step with torch.cuda._sleep(1) (kernel spin_kernel), the step marker of "
                         "dev/profile/timeline_gaps.py --marker spin_kernel")
    ap.add_argument("--row", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.row:
        stack, B = a.row.split(":")
        one_row(a.model, stack, a.precision, int(B), a.seq, a.steps, a.warmup, a.mark_steps)
        return
    for stack in a.stack:
        for B in a.batch:
            cmd = [sys.executable, __file__, "--model", a.model, "--precision", a.precision, "--seq", str(a.seq),
                   "--steps", str(a.steps), "--warmup", str(a.warmup), "--row", f"{stack}:{B}"]
            if a.mark_steps:
                cmd.append("--mark-steps")
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
                row = [l for l in p.stdout.splitlines() if l.startswith("csv_torch_family")]
                if row:
                    print(row[-1], flush=True)
                    continue
                last = (p.stderr.strip().splitlines() or ["no output"])[-1]
                reason = "out of memory" if "OutOfMemory" in p.stderr else last[:120].replace(",", ";")
            except subprocess.TimeoutExpired:
                reason = f"did not finish in {a.timeout} s"
            print(f"csv_torch_family,{a.model},{label(stack, a.precision)},{B},{a.seq},failed,{reason}", flush=True)


if __name__ == "__main__":
    main()
