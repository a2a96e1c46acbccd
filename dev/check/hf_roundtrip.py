"""Loads a fusedgpt checkpoint with Hugging Face (AutoTokenizer + AutoModelForCausalLM, local files
only), generates greedily and compares token for token with `./train sample`'s greedy ids.

    python3 dev/check/hf_roundtrip.py CHECKPOINT_DIR PROMPT N "PROMPT_IDS" "IDS" [--device cuda|cpu]

PROMPT_IDS and IDS are the `prompt ids:` and `ids:` lines of `./train sample --ids` (space-separated
numbers). Prints PASS or FAIL (with where they part and Hugging Face's margin between its two
likeliest tokens there) and exits 1 on a mismatch. dev/check/hf_roundtrip.sh runs it.
"""
import argparse
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ap = argparse.ArgumentParser()
ap.add_argument("ckpt")
ap.add_argument("prompt")
ap.add_argument("n", type=int)
ap.add_argument("prompt_ids")
ap.add_argument("ids")
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
a = ap.parse_args()

torch.backends.cuda.matmul.allow_tf32 = False  # fp32 as ours: no TF32 rounding in the matmuls
tok = AutoTokenizer.from_pretrained(a.ckpt, local_files_only=True)
model = AutoModelForCausalLM.from_pretrained(a.ckpt, local_files_only=True).float()  # the fp32 checkpoint
model.to(a.device).eval()
ours_prompt = [int(x) for x in a.prompt_ids.split()]
ours = [int(x) for x in a.ids.split()]

ok = True
hf_prompt = tok(a.prompt, add_special_tokens=False)["input_ids"]
if hf_prompt != ours_prompt:
    print(f"FAIL: the prompt encodes as {hf_prompt} in Hugging Face, {ours_prompt} in ./train sample")
    ok = False

ids = torch.tensor([ours_prompt], device=a.device)
model.generation_config.eos_token_id = None  # no early stop: ./train sample generates all N
model.generation_config.pad_token_id = tok.eos_token_id
with torch.no_grad():
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.n, do_sample=False)
hf = out[0, len(ours_prompt):].tolist()
same = 0
while same < min(len(hf), len(ours)) and hf[same] == ours[same]:
    same += 1
print(f"hf:   {hf}")
print(f"ours: {ours}")
print(f"text: {tok.decode(ours_prompt + hf)!r}")
if same < a.n or len(ours) < a.n:
    with torch.no_grad():
        logits = model(torch.tensor([ours_prompt + hf[:same]], device=a.device)).logits[0, -1]
    top = torch.topk(logits, 2)
    print(f"FAIL: {same} of {a.n} tokens agree; at token {same} Hugging Face's two likeliest differ by "
          f"{(top.values[0] - top.values[1]).item():.3g} (ours {ours[same] if same < len(ours) else None}, "
          f"HF {hf[same] if same < len(hf) else None})")
    ok = False
else:
    print(f"{same} of {a.n} greedy tokens agree")
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
