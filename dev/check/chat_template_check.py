#!/usr/bin/env python3
"""Renders dev/check/chat_template_cases.py's templates and conversations with transformers' own
chat-template renderer (render_jinja_template: the Jinja environment, filters and globals of
apply_chat_template) and writes what it gives, or its error, to the fixture that
tests/test_chat_template.c compares tokenizer/chat_template.c against.

    python3 dev/check/chat_template_check.py [--out tests/fixtures/chat_templates.json]

With --templates DIR it renders instead every DIR/*.jinja (models' own templates, such as those TRL
keeps in trl/chat_templates/) on the conversations of chat_template_cases.REAL_CONVERSATIONS (tool
calls, reasoning, typed parts, enable_thinking), to a file the C test then reads:

    python3 dev/check/chat_template_check.py --templates trl/chat_templates --out /tmp/real.json
    FGPT_CHAT_TEMPLATES=/tmp/real.json ./build/run_tests chat_templates_render

Needs transformers and jinja2 (no torch, no network): a dev tool, never a dependency of ./train."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_template_cases import cases, real_cases  # noqa: E402
from transformers.utils.chat_template_utils import render_jinja_template  # noqa: E402


def render(case):
    kwargs = {k: json.loads(v) for k, v in case["vars"].items()}
    try:
        rendered, indices = render_jinja_template(conversations=[case["messages"]], chat_template=case["template"],
                                                  add_generation_prompt=case["add_generation_prompt"],
                                                  return_assistant_tokens_mask=True, **kwargs)
        text = rendered[0]
        # the {% generation %} blocks' text, as bytes of the UTF-8 text (transformers counts characters)
        spans = [[len(text[:a].encode()), len(text[:b].encode())] for a, b in indices[0]]
        return {"text": text, "spans": spans}
    except Exception as e:  # the C side must fail too: the kind of error is not compared
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/chat_templates.json")
    ap.add_argument("--templates", help="a folder of .jinja templates to render on real conversations")
    a = ap.parse_args()
    if a.templates and a.out == ap.get_default("out"):
        ap.error("--templates writes elsewhere than the fixture: give --out")
    templates, out = {}, []
    for case in real_cases(a.templates) if a.templates else cases():
        templates[case["name"]] = case["template"]
        result = {k: v for k, v in case.items() if k != "template"}  # the template once, by name
        result.update(render(case))
        out.append(result)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"templates": templates, "cases": out}, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    errors = sum("error" in c for c in out)
    print(f"{len(out)} renders ({errors} errors) -> {a.out}")


if __name__ == "__main__":
    main()
