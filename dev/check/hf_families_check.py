#!/usr/bin/env python3
"""Outside check of the Llama, Qwen2, Qwen3 and Gemma 3 checkpoints against Hugging Face transformers, both ways.

For each family a random tiny model is built with transformers (Llama: untied head, llama3 rope
scaling, GQA and head_dim * heads != hidden; Qwen3: tied, QK-norm; Qwen2: q/k/v biases, untied;
Gemma 3: sliding layers whose window of 5 is shorter than the window of -t, layer_types mixing local
and global layers, QK-norm, sandwich norms, GQA, head_dim * heads != hidden, linear rope scaling on the
global layers, its own local base and query_pre_attn_scalar) and saved with save_pretrained. Then:
  1. `./train eval --init-from HF_DIR` and transformers give the same mean next-token
     loss on a token shard (our --init-from reads their checkpoint as they do);
  2. `./train --init-from HF_DIR` fine-tunes it a few steps (on --device), with fp32 and with bf16
     AdamW state; transformers loads each exported checkpoint (F32, and BF16 for the bf16 state,
     whose weights are all bf16s) with AutoModelForCausalLM.from_pretrained, and its loss equals
     `./train eval` of the same checkpoint (our export is their format);
  3. the untied Llama and Qwen2 set pad_token_id: transformers gives its embedding row no gradient
     from the lookups, and after our fine-tuning the row has only shrunk by weight decay;
  4. on a masked shard (tokens marked as no target, as `prepare --prompt-completion` writes prompts),
     `./train eval` gives transformers' loss with those labels at -100, and the first step of
     `./train --init-from HF_DIR` in two micro-batches of two windows each gives the loss and the
     gradient norm of transformers' one batch of the four windows (its mean over every valid label,
     as the Trainer's num_items_in_batch makes it);
  5. on a documents shard (each document's first token marked, some tokens no target, as
     `prepare --prompt-completion` writes), the same two checks against transformers' padding-free
     packing: position_ids restart at each document's first token and at each window's start, so
     that its attention stays inside a document, and no document predicts the next one's first
     token (label -100). On the CPU the same windows without position_ids must give another loss,
     so that the check can fail;
  6. on a documents shard with documents of 1 to 40 tokens, `./train eval --pack bfd` (whole
     documents packed best fit decreasing) gives transformers' loss of each document run alone, one
     longer than T + 1 tokens in consecutive windows of T of its own: which window the packing put
     a document in, and what it shares it with, must not matter.
Both at 1e-4 relative, in fp32, with transformers' eager attention (its sliding-window mask is exact
there). With --device cuda our side runs on the GPU: the tiny models take the widths the CUDA backend
computes (hidden 128, head_dim 64, MLP width 256: a multiple of 128, so that the MLPs run on the
products that carry their activation, as the released models' do), and the bounds are 1e-3 relative
for a checkpoint's loss either way, 2e-3 for the other losses and 3e-2 for the gradient norms (bf16
weights and activations against transformers' fp32). The windows are `./train eval`'s: window
w takes inputs tokens[w*T : w*T+T], each target the next token, the mean over all n - 1 targets. Gemma 3 needs transformers 4.53 or later (layer_types).

    python3 dev/check/hf_families_check.py [--train ./train] [--work DIR] [-t T] [--device cpu|cuda] [--family F]...

Exits 1 on any disagreement. Needs torch and transformers (no network): a dev tool, never a
dependency of ./train."""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, Qwen2Config, Qwen3Config

# Relative bounds: a checkpoint's loss either way (ours of theirs, theirs of ours), the other losses
# (the masked, documents and packed shards' evals and steps) and the steps' gradient norms. On the GPU
# bf16 moves the losses of these far-from-init models by up to ~1.2e-3 over a few hundred masked
# targets, 3e-4 over the plain shard, and the gradient norms by up to 2.4e-2.
TOLERANCE = {"cpu": {"checkpoint": 1e-4, "loss": 1e-4, "norm": 1e-4},
             "cuda": {"checkpoint": 1e-3, "loss": 2e-3, "norm": 3e-2}}
V = 300
PAD = 7  # the untied Llama's and Qwen2's pad_token_id, a token of the inputs


def cuda_widths(cfg):
    """The family's tiny model at widths the CUDA backend computes: hidden a multiple of 64, heads of
    64, the MLP's width a multiple of 128 (the products that carry the activation take it, as they
    take every released model's). Each family keeps its trap: Llama's, Gemma's and Qwen3's
    heads * head_dim != hidden."""
    cfg.hidden_size, cfg.head_dim, cfg.intermediate_size = 128, 64, 256
    if cfg.model_type == "qwen2":  # head_dim follows from hidden / heads
        cfg.num_attention_heads, cfg.num_key_value_heads = 2, 1
    return cfg

def gemma3_config():
    """Gemma3TextConfig with transformers 4's rope fields, which transformers 5 turns into its
    rope_parameters per layer type (set here as well, where that conversion kept other values)."""
    cfg = Gemma3TextConfig(
        vocab_size=V, hidden_size=20, intermediate_size=28, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, query_pre_attn_scalar=12, sliding_window=5,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], rope_theta=1000000.0,
        rope_local_base_freq=20000.0, rope_scaling={"rope_type": "linear", "factor": 4.0}, tie_word_embeddings=True)
    per_type = getattr(cfg, "rope_parameters", None)
    if isinstance(per_type, dict) and "full_attention" in per_type:
        cfg.rope_parameters = {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}}
    return cfg


FAMILIES = {
    "llama": lambda: LlamaConfig(
        vocab_size=V, hidden_size=20, intermediate_size=36, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=6, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16},
        tie_word_embeddings=False, pad_token_id=PAD),
    "qwen3": lambda: Qwen3Config(
        vocab_size=V, hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, rope_theta=1000000.0,
        tie_word_embeddings=True),
    "qwen2": lambda: Qwen2Config(
        vocab_size=V, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, max_position_embeddings=64, rope_theta=1000000.0, tie_word_embeddings=False,
        pad_token_id=PAD),
    "gemma3": gemma3_config,
}


def write_shard(path, tokens, vocab):
    header = b"FGPTTOK1" + struct.pack("<IIII", 1, 2, vocab, 0) + struct.pack("<Q", len(tokens))
    with open(path, "wb") as f:
        f.write(header.ljust(64, b"\0"))
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def write_masked_shard(path, tokens, marked, vocab, starts=None):
    """Version 3 with the loss-mask flag: 4-byte tokens, bit 31 on each token that is no target; with
    `starts` also the documents flag, bit 30 on each document's first token."""
    flags = 1 if starts is None else 3
    header = b"FGPTTOK1" + struct.pack("<IIII", 3, 4, vocab, flags) + struct.pack("<Q", len(tokens))
    words = np.asarray(tokens, dtype=np.uint32) | (np.asarray(marked, dtype=np.uint32) << np.uint32(31))
    if starts is not None:
        words |= np.asarray(starts, dtype=np.uint32) << np.uint32(30)
    with open(path, "wb") as f:
        f.write(header.ljust(64, b"\0"))
        f.write(words.astype("<u4").tobytes())


def masked_labels(tokens, marked, starts=None):
    """Each token as a target: -100 where it is marked, or where it starts a document."""
    return [-100 if (marked is not None and marked[i]) or (starts is not None and starts[i]) else t
            for i, t in enumerate(tokens)]


def window_positions(starts, begin, end):
    """position_ids of the window tokens[begin:end]: 0 at its start and at each document's first token."""
    positions, at = [], 0
    for i in range(begin, end):
        at = 0 if i == begin or starts[i] else at + 1
        positions.append(at)
    return positions


def hf_masked_step(model_dir, tokens, marked, T, windows, starts=None):
    """transformers' loss over `windows` windows of T + 1 tokens in one batch, labels of marked tokens
    at -100 (the mean over every other), and the norm of its gradient; with `starts`, packed documents."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    x = torch.tensor([tokens[w * T:w * T + T] for w in range(windows)], dtype=torch.long)
    labels = masked_labels(tokens, marked, starts)
    y = torch.tensor([labels[w * T + 1:w * T + T + 1] for w in range(windows)], dtype=torch.long)
    kwargs = {"use_cache": False}
    if starts is not None:
        kwargs["position_ids"] = torch.tensor([window_positions(starts, w * T, w * T + T) for w in range(windows)])
    logits = model(x, **kwargs).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
    loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))
    return loss.item(), norm.item()


def hf_loss(model_dir, tokens, T, marked=None, starts=None, positions=True):
    """The mean next-token loss over ./train eval's windows, computed by transformers. With `starts`
    the documents are packed as its padding-free path takes them (position_ids, no cache), unless
    `positions` is false: the same labels, attention across documents."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    total, count = 0.0, 0
    n = len(tokens)
    labels = masked_labels(tokens, marked, starts)
    with torch.no_grad():
        for start in range(0, n - 1, T):
            end = min(start + T, n - 1)
            x = torch.tensor(tokens[start:end], dtype=torch.long)[None]
            y = torch.tensor(labels[start + 1:end + 1], dtype=torch.long)
            kwargs = {"use_cache": False}
            if starts is not None and positions:
                kwargs["position_ids"] = torch.tensor(window_positions(starts, start, end))[None]
            logits = model(x, **kwargs).logits[0].double()
            total += F.cross_entropy(logits, y, reduction="sum", ignore_index=-100).item()
            count += int((y != -100).sum())
    return total / count, type(model).__name__


def hf_documents_alone(model_dir, tokens, T, marked, starts):
    """transformers' mean loss over every document run alone (from its first token, in windows of T
    of its own when longer), labels -100 where marked."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    bounds = [i for i, s in enumerate(starts) if s] + [len(tokens)]
    total, count = 0.0, 0
    with torch.no_grad():
        for a, b in zip(bounds, bounds[1:]):
            doc, labels = tokens[a:b], masked_labels(tokens[a:b], marked[a:b])
            for start in range(0, len(doc) - 1, T):
                end = min(start + T, len(doc) - 1)
                x = torch.tensor(doc[start:end], dtype=torch.long)[None]
                y = torch.tensor(labels[start + 1:end + 1], dtype=torch.long)
                if int((y != -100).sum()) == 0:
                    continue
                logits = model(x, use_cache=False).logits[0].double()
                total += F.cross_entropy(logits, y, reduction="sum", ignore_index=-100).item()
                count += int((y != -100).sum())
    return total / count


def safetensors_dtypes(path):
    """The dtypes of a safetensors file's tensors, from its JSON header."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return {v["dtype"] for k, v in header.items() if k != "__metadata__"}


def train_cmd(train, args):
    out = subprocess.run([train] + args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"error: {train} {' '.join(args)} failed ({out.returncode}):\n{out.stdout}{out.stderr}")
    return out.stdout


def our_loss(train, model_dir, shard, T, device, pack="wrapped"):
    out = train_cmd(train, ["eval", "--init-from", model_dir, "-i", shard, "-t", str(T), "--device", device,
                            "--pack", pack])
    m = re.search(r"^loss (\S+) ppl", out, re.M)
    if not m:
        sys.exit(f"error: no loss line in ./train eval's output:\n{out}")
    return float(m.group(1))


def our_first_step(train, model_dir, shard, T, device, run):
    """Step 1's loss and gradient norm of a run of two micro-batches of two windows."""
    out = train_cmd(train, ["--device", device, "--init-from", model_dir, "-i", shard, "-b", "2", "-t", str(T), "-d",
                            str(4 * T), "-x", "1", "-s", "0", "--val-every", "0", "-o", run])
    m = re.search(r"\| loss (\S+) .*\| norm (\S+) ", out)
    if not m:
        sys.exit(f"error: no step line in ./train's output:\n{out}")
    return float(m.group(1)), float(m.group(2))


def eval_and_step_checks(what, train, hf_dir, shard, tokens, marked, starts, T, device, run, tolerance):
    """./train eval of the shard, and the first step of two micro-batches of two windows, against
    transformers' loss and its one batch of the four windows (labels -100 where marked, and with
    starts, documents packed by position_ids). Whether all agree, and transformers' eval loss."""
    theirs, _ = hf_loss(hf_dir, tokens, T, marked, starts)
    ok = compare(f"eval of {what}", our_loss(train, hf_dir, shard, T, device), theirs, tolerance["loss"])
    loss, norm = our_first_step(train, hf_dir, shard, T, device, run)
    their_loss, their_norm = hf_masked_step(hf_dir, tokens, marked, T, 4, starts)
    ok &= compare(f"{what}: step's loss, two micro-batches", loss, their_loss, tolerance["loss"])
    ok &= compare(f"{what}: step's gradient norm", norm, their_norm, tolerance["norm"])
    return ok, theirs


def masked_checks(train, hf_dir, T, device, work, tolerance, rng):
    """Point 4 of the module's text: eval on a masked shard, and a masked step in micro-batches."""
    os.makedirs(work, exist_ok=True)
    n = 4 * T + 1
    tokens = rng.integers(0, V, size=n).tolist()
    marked = (rng.random(n) < 0.4).tolist()
    marked[T + 1:2 * T + 1] = [True] * T  # window 1 holds no target: micro-batches of very different counts
    marked[2 * T + 1:2 * T + 4] = [False] * 3
    shard = os.path.join(work, "masked.bin")
    write_masked_shard(shard, tokens, marked, V)
    return eval_and_step_checks("a masked shard", train, hf_dir, shard, tokens, marked, None, T, device,
                                os.path.join(work, "masked-run"), tolerance)[0]


def documents_checks(train, hf_dir, T, device, work, tolerance, rng):
    """Point 5 of the module's text: eval and a first step on packed documents."""
    os.makedirs(work, exist_ok=True)
    n = 4 * T + 1
    tokens = rng.integers(0, V, size=n).tolist()
    marked = (rng.random(n) < 0.2).tolist()
    starts, at = [False] * n, 0
    while at < n:  # documents of 1 to 12 tokens, some crossing a window's end
        starts[at] = True
        at += int(rng.integers(1, 13))
    shard = os.path.join(work, "documents.bin")
    write_masked_shard(shard, tokens, marked, V, starts)
    ok, theirs = eval_and_step_checks("packed documents", train, hf_dir, shard, tokens, marked, starts, T, device,
                                      os.path.join(work, "documents-run"), tolerance)
    across, _ = hf_loss(hf_dir, tokens, T, marked, starts, positions=False)
    apart = abs(across - theirs) / abs(theirs)
    if device == "cpu":
        ok &= apart > 10 * tolerance["loss"]
    print(f"  transformers without position_ids (attention across documents): {across:.6f}, {apart:.2e} away"
          f"{' (must exceed ' + format(10 * tolerance['loss'], '.0e') + ')' if device == 'cpu' else ''}")
    return ok


def packed_checks(train, hf_dir, T, device, work, tolerance, rng):
    """Point 6 of the module's text: eval of whole documents packed best fit decreasing."""
    os.makedirs(work, exist_ok=True)
    n = 6 * T + 1
    tokens = rng.integers(0, V, size=n).tolist()
    marked = (rng.random(n) < 0.2).tolist()
    starts, at = [False] * n, 0
    while at < n:  # some documents longer than a window
        starts[at] = True
        at += int(rng.integers(1, 41))
    shard = os.path.join(work, "packed.bin")
    write_masked_shard(shard, tokens, marked, V, starts)
    theirs = hf_documents_alone(hf_dir, tokens, T, marked, starts)
    return compare("eval --pack bfd of whole documents", our_loss(train, hf_dir, shard, T, device, "bfd"), theirs,
                   tolerance["loss"])


def compare(what, ours, theirs, tolerance):
    rel = abs(ours - theirs) / abs(theirs)
    ok = rel <= tolerance
    print(f"  {what}: fusedgpt {ours:.6f}, transformers {theirs:.6f}, relative {rel:.2e} {'ok' if ok else 'FAILED'}")
    return ok


def padding_row_kept(model, exported, pad):
    """nn.Embedding(padding_idx) gives the pad token's row no gradient from its lookups: transformers'
    gradient of the row is zero, and after our fine-tuning steps the row of the (untied) embedding has
    only shrunk by weight decay, a scalar multiple of what it was, while the next row moved."""
    x = torch.tensor([[pad, 3, pad, 5, 11, pad]], dtype=torch.long)
    model.zero_grad()
    model(x, labels=x).loss.backward()
    theirs_zero = model.get_input_embeddings().weight.grad[pad].abs().max().item() == 0.0
    before = model.get_input_embeddings().weight.detach().double()
    after = AutoModelForCausalLM.from_pretrained(exported, torch_dtype=torch.float32)
    after = after.get_input_embeddings().weight.detach().double()
    scale = (after[pad] @ before[pad] / (before[pad] @ before[pad])).item()
    off = (after[pad] - scale * before[pad]).abs().max().item() / before[pad].abs().max().item()
    moved = (after[pad + 1] - before[pad + 1]).abs().max().item()
    ok = theirs_zero and off <= 1e-5 and 0.9 < scale <= 1.0 and moved > 1e-3
    print(f"  pad token {pad}: transformers' gradient of its row {'zero' if theirs_zero else 'NOT zero'}; ours after "
          f"fine-tuning {scale:.6f} x the row (off by {off:.1e} relative), the next row moved {moved:.1e} "
          f"{'ok' if ok else 'FAILED'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default="./train")
    ap.add_argument("--work", default=None, help="where the checkpoints go (default: a temporary directory)")
    ap.add_argument("-t", type=int, default=16, help="window length of the evaluation")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where ./train runs (default cpu)")
    ap.add_argument("--family", choices=tuple(FAMILIES), action="append", help="only this family (repeatable)")
    a = ap.parse_args()
    tolerance = TOLERANCE[a.device]
    configs = {f: (lambda m=m: cuda_widths(m())) if a.device == "cuda" else m for f, m in FAMILIES.items()
               if not a.family or f in a.family}
    work = a.work or tempfile.mkdtemp(prefix="hf_families_")
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, V, size=600)
    tokens[::37] = PAD  # the padding row is looked up
    tokens = tokens.tolist()
    shard = os.path.join(work, "tokens.bin")
    write_shard(shard, tokens, V)
    ok = True
    for family, make_config in configs.items():
        print(f"{family}:")
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(make_config(), torch_dtype=torch.float32, attn_implementation="eager")
        with torch.no_grad():  # far from the init, so that every weight matters to the loss
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.2)
        hf_dir = os.path.join(work, f"{family}-hf")
        model.save_pretrained(hf_dir, safe_serialization=True)
        theirs, _ = hf_loss(hf_dir, tokens, a.t)
        ok &= compare("--init-from of their checkpoint", our_loss(a.train, hf_dir, shard, a.t, a.device), theirs,
                      tolerance["checkpoint"])
        ok &= masked_checks(a.train, hf_dir, a.t, a.device, os.path.join(work, family), tolerance, rng)
        ok &= documents_checks(a.train, hf_dir, a.t, a.device, os.path.join(work, family), tolerance, rng)
        ok &= packed_checks(a.train, hf_dir, a.t, a.device, os.path.join(work, family), tolerance, rng)
        for state in ("fp32", "bf16"):
            run = os.path.join(work, f"{family}-run-{state}")
            train_cmd(a.train, ["--device", a.device, "--init-from", hf_dir, "-i", shard, "-b", "2", "-t", str(a.t),
                                "-x", "3", "--warmup", "0", "-l", "1e-2", "-s", "0", "--val-every", "0",
                                "--optimizer-state", state, "-o", run])
            exported = os.path.join(run, "step_00000003")
            dtypes = safetensors_dtypes(os.path.join(exported, "model.safetensors"))
            want_dtype = "BF16" if state == "bf16" else "F32"  # bf16 state's weights are all bf16: stored so
            if dtypes != {want_dtype}:
                print(f"  --optimizer-state {state}: model.safetensors holds {sorted(dtypes)}, expected {want_dtype} FAILED")
                ok = False
            theirs, cls = hf_loss(exported, tokens, a.t)
            ok &= compare(f"our export ({want_dtype}) loaded as {cls}", our_loss(a.train, exported, shard, a.t, a.device),
                          theirs, tolerance["checkpoint"])
        exported = os.path.join(work, f"{family}-run-fp32", "step_00000003")
        if getattr(make_config(), "pad_token_id", None) == PAD and not make_config().tie_word_embeddings:
            ok &= padding_row_kept(model, exported, PAD)
        with open(os.path.join(exported, "config.json")) as f:
            cfg = json.load(f)
        want = make_config().to_dict()
        for key in ("pad_token_id", "num_key_value_heads", "head_dim", "tie_word_embeddings", "rope_scaling", "rope_theta",
                    "layer_types", "sliding_window", "query_pre_attn_scalar", "rope_local_base_freq"):
            if key in want and key in cfg and cfg[key] != want[key]:
                print(f"  config.json {key}: ours {cfg[key]!r}, transformers {want[key]!r} FAILED")
                ok = False
    print("hf_families_check: all agree" if ok else "hf_families_check: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
