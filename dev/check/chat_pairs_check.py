#!/usr/bin/env python3
"""`prepare --prompt-completion` of conversations against transformers and TRL: for three fixture
tokenizers (Qwen2-, Llama 3- and Gemma 3-style) each beside a tokenizer_config.json with a chat
template of dev/check/chat_template_cases.py, lines of TRL's conversational formats (prompt and
completion as lists of messages, with tools or chat_template_kwargs on some; messages alone) are
tokenized as TRL's SFTTrainer tokenizes them: apply_chat_template(prompt, add_generation_prompt=True)
and apply_chat_template(prompt + completion), the first as many ids as the prompt's no target;
messages alone all targets. With TRL's assistant_only_loss (prepare --assistant-only-loss), a token is
a target only where apply_chat_template's assistant mask (return_assistant_tokens_mask: the text of
the templates' {% generation %} blocks) and the completion mask both say so. A message's keys whose
value is null are left out, as apply_chat_template leaves them, and ShareGPT's {"from", "value"}
messages under "conversations" are read as TRL converts them. Writes the sets and their expected
ids to the fixture that tests/test_prepare.c compares ./train prepare's shards with, and with
--train checks them itself.

    python3 dev/check/chat_pairs_check.py [--out tests/fixtures/chat_pairs.json] [--train ./train]

Needs transformers (no torch, no network): a dev tool, never a dependency of ./train."""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_template_cases import CHATML_THINKING, GEMMA_TURNS, LLAMA3_HEADERS  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

SETS = [
    ("hf_qwen2_style", CHATML_THINKING, {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    ("hf_llama3_bos", LLAMA3_HEADERS, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}),
    ("spm_gemma3", GEMMA_TURNS, {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}),
]

LINES = [
    {"prompt": [{"role": "user", "content": "What is two and two?"}],
     "completion": [{"role": "assistant", "content": "Four."}]},
    {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour"}],
     "completion": [{"role": "assistant", "content": "Blue, the sky's."}], "id": 7},
    {"prompt": [{"role": "user", "content": "héllo ünïcode"}, {"role": "assistant", "content": "hi"},
                {"role": "user", "content": "again"}],
     "completion": [{"role": "assistant", "content": "<think>\nsure\n</think>\n\nAgain: hi"}],
     "chat_template_kwargs": {"enable_thinking": False, "date_string": "02 Feb 2026"}},
    {"messages": [{"role": "user", "content": "a whole conversation"}, {"role": "assistant", "content": "all of it "
                  "learned"}]},
    {"messages": [{"role": "system", "content": "Be kind.", "tool_calls": None},
                  {"role": "user", "content": "first", "reasoning_content": None},
                  {"role": "assistant", "content": "one answer", "tool_calls": None},
                  {"role": "user", "content": "second"}, {"role": "assistant", "content": "another answer"}]},
    {"conversations": [{"from": "user", "value": "ShareGPT's form"}, {"from": "assistant", "value": "read as messages"}]},
    {"prompt": [{"role": "user", "content": "list three"}],
     "completion": [{"role": "assistant", "content": "one\ntwo\nthree"}], "tools": []},
]


def as_chatml(line):
    """The line as TRL's SFTTrainer reads ShareGPT's form: from -> role, value -> content (each moved to
    the end of its message), conversations -> messages."""
    line = json.loads(json.dumps(line))
    for key in ("prompt", "completion", "messages", "conversations"):
        for m in line.get(key) or []:
            for old, new in (("from", "role"), ("value", "content")):
                if isinstance(m, dict) and old in m:
                    m[new] = m.pop(old)
    if "conversations" in line:
        line["messages"] = line.pop("conversations")
    return line


def expected(tok, line, assistant_only=False):
    """TRL's ids and target mask for one line (labels not -100 where every mask applying is 1)."""
    line = as_chatml(line)
    kwargs = dict(line.get("chat_template_kwargs", {}))
    kwargs["tools"] = line.get("tools")
    if "messages" in line:
        out = tok.apply_chat_template(line["messages"], tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=assistant_only, **kwargs)
        ids = out["input_ids"]
        return ids, out["assistant_masks"] if assistant_only else [1] * len(ids)
    head = tok.apply_chat_template(line["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True,
                                   **kwargs)["input_ids"]
    out = tok.apply_chat_template(line["prompt"] + line["completion"], tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=assistant_only, **kwargs)
    whole = out["input_ids"]
    mask = [0] * len(head) + [1] * (len(whole) - len(head))
    if assistant_only:
        mask = [m & a for m, a in zip(mask, out["assistant_masks"])]
    return whole, mask


def read_shard(path):
    with open(path, "rb") as f:
        head = f.read(64)
        n = struct.unpack("<Q", head[24:32])[0]
        words = struct.unpack(f"<{n}I", f.read(4 * n))
    return list(words)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/chat_pairs.json")
    ap.add_argument("--train", default=None, help="also run ./train prepare and compare its shards")
    a = ap.parse_args()
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures")
    out, ok = [], True
    for name, template, specials in SETS:
        work = tempfile.mkdtemp(prefix="chat_pairs_")
        with open(os.path.join(fixtures, name + ".json"), encoding="utf-8") as f:
            tokenizer_json = f.read()
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template}
        config.update({k: v for k, v in specials.items()})
        with open(os.path.join(work, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(tokenizer_json)
        with open(os.path.join(work, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
        tok = AutoTokenizer.from_pretrained(work)
        entry = {"tokenizer": name, "config": config, "lines": [json.dumps(x, ensure_ascii=False) for x in LINES]}
        for assistant_only, key in ((False, ""), (True, "assistant_")):
            words = []
            for line in LINES:
                ids, mask = expected(tok, line, assistant_only)
                words += [i | (0 if m else 1 << 31) | (1 << 30 if k == 0 else 0)
                          for k, (i, m) in enumerate(zip(ids, mask))]
            # prepare's split: the last round(7 x 0.2) = 1 example is validation
            last = expected(tok, LINES[-1])[0]
            entry[key + "train"], entry[key + "val"] = words[:len(words) - len(last)], words[len(words) - len(last):]
        out.append(entry)
        if a.train:
            with open(os.path.join(work, "pairs.jsonl"), "w", encoding="utf-8") as f:
                f.write("\n".join(out[-1]["lines"]) + "\n")
            for key, flags in (("", []), ("assistant_", ["--assistant-only-loss"])):
                r = subprocess.run([a.train, "prepare", "--prompt-completion", *flags, "--tokenizer",
                                    os.path.join(work, "tokenizer.json"), "--val-fraction", "0.2", "-o",
                                    os.path.join(work, "set"), os.path.join(work, "pairs.jsonl")],
                                   capture_output=True, text=True)
                train, val = entry[key + "train"], entry[key + "val"]
                same = r.returncode == 0 and read_shard(os.path.join(work, "set", "train.bin")) == train and \
                    read_shard(os.path.join(work, "set", "val.bin")) == val
                ok &= same
                print(f"{name}{' --assistant-only-loss' if flags else ''}: "
                      f"{'same ids and marks' if same else 'DIFFERENT'} ({len(train)} + {len(val)} tokens, "
                      f"{sum(1 for w in train + val if not w >> 31)} targets)"
                      f"{'' if r.returncode == 0 else ': ' + r.stderr.strip()}")
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print(f"{len(out)} sets -> {a.out}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
