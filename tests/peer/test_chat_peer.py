#!/usr/bin/env python3
"""Peer test: engine/chat/chat.c (through tests/engine/tok_tool) against jinja2
rendering the chat template that mkckpt ships, the way transformers renders
it (sandboxed, trim_blocks, lstrip_blocks), on random conversations: every
role, reasoning or not, <think> inside contents, white-space-only system
prompts, Unicode, generation prompt and thinking on / off / default.

usage: test_chat_peer.py PATH/TO/tok_tool     (RQ_CHAT_SEED=n picks the seed)
Prints TAP.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

SEED = int(os.environ.get("RQ_CHAT_SEED", "20260802"))
N = int(os.environ.get("RQ_CHAT_N", "2000"))

PIECES = ["Hello", " world", "", " ", "  ", "\n", "\n\n", "\t", "\r\n", "\u3000", "\x1c", "\x85",
          "\u2028", "<think>", "</think>", "<assistant>", "</user>", "〈|EOS|〉", "{{ x }}", "{% if %}",
          "'", "\"", "\\", "日本語", "🙂", "e\u0301", "שלום", "2+2=4", "def f():\n    pass\n"]


def text(rng):
    return "".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 6)))


def conversation(rng):
    msgs = []
    for i in range(rng.randrange(0, 7)):
        role = rng.choice(["system", "user", "user", "assistant", "assistant", "tool"])
        if rng.random() < 0.01:
            role = "robot"
        m = {"role": role, "content": text(rng)}
        if role == "assistant" and rng.random() < 0.5:
            m["reasoning_content"] = text(rng)
        if role == "assistant" and rng.random() < 0.2:
            m["content"] = rng.choice(["<think>", "</think>"]) + m["content"]
        msgs.append(m)
    case = {"messages": msgs, "add_generation_prompt": rng.random() < 0.7}
    r = rng.random()
    if r < 0.4:
        case["enable_thinking"] = True
    elif r < 0.8:
        case["enable_thinking"] = False
    return case


def compile_template(template):
    def raise_exception(msg):
        raise TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)


def render(compiled, case):
    try:
        return compiled.render(**case).encode().hex()
    except TemplateError:
        return "error"


def main():
    if len(sys.argv) != 2:
        print("1..0 # SKIP usage: test_chat_peer.py PATH/TO/tok_tool")
        return 77
    tok_tool = sys.argv[1]
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([tok_tool, "write", d], check=True, capture_output=True)
        template = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))["chat_template"]
    compiled = compile_template(template)
    cases = [conversation(rng) for _ in range(N)]
    lines = "".join(json.dumps(c) + "\n" for c in cases).encode()
    ours = subprocess.run([tok_tool, "chat"], input=lines, capture_output=True, check=True).stdout.decode()
    ours = ours.split("\n")[:N]
    want = [render(compiled, c) for c in cases]
    bad = [(c, o, w) for c, o, w in zip(cases, ours, want) if o != w]
    print("# seed %d (RQ_CHAT_SEED), %d conversations (RQ_CHAT_N)" % (SEED, N))
    print("%s 1 - %d random conversations render byte for byte as jinja2 renders the shipped template"
          % ("not ok" if bad else "ok", N))
    for c, o, w in bad[:5]:
        print("#   %s\n#     ours   %r\n#     jinja2 %r" % (json.dumps(c, ensure_ascii=False),
              bytes.fromhex(o).decode() if o != "error" else o,
              bytes.fromhex(w).decode() if w != "error" else w))
    robots = [o for c, o in zip(cases, ours) if any(m["role"] == "robot" for m in c["messages"])]
    refused = robots and all(o == "error" for o in robots)
    print("%s 2 - all %d conversations with an unknown role are refused, as the template refuses them"
          % ("ok" if refused else "not ok", len(robots)))
    print("1..2")
    return 1 if bad or not refused else 0


if __name__ == "__main__":
    sys.exit(main())
