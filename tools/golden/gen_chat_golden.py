#!/usr/bin/env python3
"""Golden data for chat templates from transformers' own apply_chat_template
(tests/data/chat_template_golden.json; tests/engine/test_chat.c compares
engine/chat/chat.c's chat_render with it, byte for byte).

Templates: SmolLM2-135M-Instruct's own (.models/, from tools/setup), Laguna's
(what mkckpt ships, written by tok_tool), and tests/data/chat_templates/*.jinja
applied with SmolLM2's tokenizer (its bos/eos tokens). Conversations: the
messages chat_render can carry (role, content, reasoning_content and any
other fields, e.g. tool_calls, as JSON), with the
generation prompt and thinking on and off, tool calls and tool schemas.

Needs transformers (no torch): e.g. a venv with `pip install transformers`.
usage: gen_chat_golden.py BUILD_DIR     (BUILD_DIR/tests/engine/tok_tool)
"""
import json
import os
import subprocess
import sys
import tempfile

import transformers
from transformers import AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SMOL = os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct")
OUT = os.path.join(ROOT, "tests", "data", "chat_template_golden.json")

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a concise assistant."},
     {"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."},
     {"role": "user", "content": "Quote: 'single' \"double\" \\backslash\\ and {{ braces }}"}],
    [{"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4", "reasoning_content": "Two and two make four.\n"},
     {"role": "user", "content": "and 3+3?"}],
    [{"role": "system", "content": "  spaces around, a tab\t, newlines\n\n"},
     {"role": "user", "content": "日本語 🙂 e\u0301 Ünïcödé שלום"},
     {"role": "assistant", "content": "<think>hmm</think>ok"}],
    [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Let me look."},
     {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
     {"role": "assistant", "content": "21 °C, clear."}],
    [{"role": "user", "content": "line one\r\nline two\n"}, {"role": "assistant", "content": ""},
     {"role": "user", "content": ""}],
    [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "Weather in Zürich, 2 days?"},
     {"role": "assistant", "content": "", "tool_calls": [
         {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}}]},
     {"role": "tool", "name": "get_weather", "content": "{\"temp\": 21}"},
     {"role": "assistant", "content": "21 °C."}],
    [{"role": "user", "content": "Both, please."},
     {"role": "assistant", "content": "Looking.", "reasoning_content": "Two calls.", "tool_calls": [
         {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
         {"type": "function", "function": {"name": "search", "arguments": {"q": "Oslo \"fjords\"", "weight": 0.5}}}]},
     {"role": "tool", "content": "cold"}, {"role": "tool", "content": "pretty"}],
]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city — in °C",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "e.g. \"Paris\""},
            "days": {"type": "integer", "minimum": 1},
            "unit": {"type": ["string", "null"], "default": None, "enum": ["C", "F"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web\nfor pages",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"},
                                                         "weight": {"type": "number", "default": 0.5}}}}},
]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_chat_golden.py BUILD_DIR")
    tok_tool = os.path.join(sys.argv[1], "tests", "engine", "tok_tool")
    smol = AutoTokenizer.from_pretrained(SMOL)
    cases = []
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([tok_tool, "write", d], check=True, capture_output=True)
        laguna = AutoTokenizer.from_pretrained(d)
        sources = [("smollm2", None, smol), ("laguna", None, laguna)]
        tdir = os.path.join(ROOT, "tests", "data", "chat_templates")
        for name in sorted(os.listdir(tdir)):
            if name.endswith(".jinja"):
                sources.append(("smollm2", name, smol))
        for model, tname, tok in sources:
            template = open(os.path.join(tdir, tname), encoding="utf-8").read() if tname else None
            for msgs in CONVERSATIONS:
                for gen, think, tools in ((True, True, None), (True, False, None), (False, True, None),
                                          (False, False, None), (True, True, TOOLS), (False, False, TOOLS)):
                    try:
                        text = tok.apply_chat_template(msgs, chat_template=template, tokenize=False,
                                                       add_generation_prompt=gen, enable_thinking=think,
                                                       tools=tools, date_string="26 Jul 2024")
                    except Exception as e:   # the template refuses: chat_render must fail too
                        text = None
                        print("refused: %s %s %s" % (model, tname, e), file=sys.stderr)
                    cases.append({"model": model, "template": tname, "messages": msgs,
                                  "add_generation_prompt": gen, "enable_thinking": think,
                                  "tools": tools, "rendered": text})
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"transformers": transformers.__version__, "note": "made by tools/golden/gen_chat_golden.py",
                   "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("%s: %d cases (transformers %s)" % (OUT, len(cases), transformers.__version__))


if __name__ == "__main__":
    main()
