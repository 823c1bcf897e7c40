#!/usr/bin/env python3
"""`requantfs tokenize` (issue 34) against `tokenizers` and jinja2:

- on SmolLM2-135M-Instruct's tokenizer.json (.models/, tools/setup-model):
  --ids is Tokenizer.encode(text).ids (add_special_tokens as tokenizer(text)
  does), for --prompt and --text FILE alike; --count is its length; the
  default lines and --tokens print each token's piece (the bytes it decodes
  to alone) as the Python literal the manual describes, byte for byte;
- --chat: the text as one user message rendered by jinja2 with the model's
  template and add_generation_prompt, tokenized without the post-processor
  (apply_chat_template(tokenize=True));
- a tokenizer whose post-processor adds a BOS (mkckpt's Laguna, through
  tok_tool write): tokenize adds it, --chat does not add a second;
- MODEL as an ORG/NAME id in the local hub cache; no config.json or weights
  needed;
- refusals, each naming what is at fault: text given twice or not at all,
  two output modes, text that is not UTF-8 (the offset), NUL with --chat, a
  FIFO or an over-64-MiB --text FILE, a directory without tokenizer.json,
  hf://.

usage: test_tokenize.py REQUANTFS TOK_TOOL      Prints TAP.
"""
import ast
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok  # noqa: E402
from bytelevel import bytelevel_table  # noqa: E402

try:
    from tokenizers import Tokenizer
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:
    rqtap.no_venv(e)

TEXTS = ["Hello world", "", " ", "café naïve e\u0301 \u212b", "🙂 👨\u200d👩\u200d👧 \U0001f1eb\U0001f1f7",
         "日本語のテキスト", "שלום مرحبا \u200f\u202e", "def f(x):\n\treturn x  # sq\r\n",
         "   many    spaces\n\n\nand 1234567890", "it's 'quoted' \\ back\\slash", "\x00\x01\x7f\x85\xa0\u2028",
         "<|im_start|>user\nhi<|im_end|>", "\u00e9\u00ff\u0100 x"]


def unprintable(c):
    """The characters tokenize escapes (cli/cmd_tokenize.c, docs/engine.md)."""
    c = ord(c)
    return (c < 0x20 or 0x7F <= c <= 0xA0 or c in (0xAD, 0x1680, 0x180E, 0x3000, 0xFEFF)
            or 0x2000 <= c <= 0x200F or 0x2028 <= c <= 0x202F or 0x205F <= c <= 0x206F
            or 0xFFF9 <= c <= 0xFFFB)


def literal(b):
    """The piece literal docs/engine.md specifies for the bytes b."""
    out, i = [], 0
    while i < len(b):
        for n in (1, 2, 3, 4):
            try:
                ch = b[i:i + n].decode("utf-8")
                break
            except UnicodeDecodeError:
                ch = None
        if ch is None:
            out.append("\\x%02x" % b[i])
            i += 1
            continue
        i += len(ch.encode())
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif unprintable(ch):
            out.append("\\x%02x" % ord(ch) if ord(ch) < 0x80 else "\\u%04x" % ord(ch))
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


BYTE_OF = {}


def piece_bytes(tk, i):
    """What SmolLM2's token i decodes to alone (byte-level: the GPT-2 alphabet
    mapped back; an added token: its content)."""
    s = tk.id_to_token(i)
    if not BYTE_OF:
        BYTE_OF.update(bytelevel_table())
    if all(c in BYTE_OF for c in s) and s not in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        return bytes(BYTE_OF[c] for c in s)
    return s.encode()


def tokenize(*args, env=None):
    p = subprocess.run([rqtap.RQ, "tokenize", *args], capture_output=True, timeout=60, env=env)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def g_smollm2(tmp, model):
    tk = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    bad_ids, bad_lines, bad_tokens, bad_count, bad_file = [], [], [], [], []
    for t in TEXTS:
        ref = tk.encode(t).ids
        rc, out, err = tokenize(model, "--prompt", t, "--ids") if "\x00" not in t else (0, str(ref) + "\n", "")
        if rc != 0 or out != str(ref) + "\n":
            bad_ids.append("%r: exit %d %s%s, tokenizers %s" % (t, rc, out[:200], err[:200], ref))
        path = os.path.join(tmp, "t.txt")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(t)
        rc, out, err = tokenize(model, "--text", path, "--ids")
        if rc != 0 or out != str(ref) + "\n":
            bad_file.append("%r: exit %d %s%s, tokenizers %s" % (t, rc, out[:200], err[:200], ref))
        want = "".join("%d\t%s\n" % (i, literal(piece_bytes(tk, i))) for i in ref)
        rc, out, err = tokenize(model, "--text", path)
        if rc != 0 or out != want:
            bad_lines.append("%r: exit %d %r%s, want %r" % (t, rc, out[:300], err[:200], want[:300]))
        rc, out, err = tokenize(model, "--text", path, "--tokens")
        want = "[" + ", ".join(literal(piece_bytes(tk, i)) for i in ref) + "]\n"
        try:
            parsed = ast.literal_eval(out)
        except (SyntaxError, ValueError):
            parsed = None
        if rc != 0 or out != want or not isinstance(parsed, list) or len(parsed) != len(ref):
            bad_tokens.append("%r: exit %d %r%s, want %r" % (t, rc, out[:300], err[:200], want[:300]))
        rc, out, err = tokenize(model, "--text", path, "--count")
        if rc != 0 or out != "%d\n" % len(ref):
            bad_count.append("%r: exit %d %r, want %d" % (t, rc, out, len(ref)))
    ok(not bad_ids, "--prompt TEXT --ids: tokenizers' encode(text).ids on %d texts" % len(TEXTS), "\n".join(bad_ids))
    ok(not bad_file, "--text FILE --ids: the same from a file (CRLF, NUL and all)", "\n".join(bad_file))
    ok(not bad_lines, "default: one 'ID<TAB>piece' line per token, pieces as specified", "\n".join(bad_lines))
    ok(not bad_tokens, "--tokens: one Python list of the pieces (ast.literal_eval reads it)", "\n".join(bad_tokens))
    ok(not bad_count, "--count: the number of tokens", "\n".join(bad_count))
    # a token holding part of a character: its byte escaped \xNN, a character of U+0080..U+00FF never
    rc, out, err = tokenize(model, "--prompt", "\U0001d4b3\u00e9", "--tokens")
    ok(rc == 0 and out.startswith("['\\xf0\\x9d'") and "'é'" in out,
       "a piece holding part of a character shows its bytes as \\xNN, é as itself", out + err)

    # --chat: jinja2 renders, tokenizers tokenizes without the post-processor
    cfg = json.load(open(os.path.join(model, "tokenizer_config.json"), encoding="utf-8"))
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    tmpl = env.from_string(cfg["chat_template"])
    bad = []
    for t in TEXTS:
        if "\x00" in t:
            continue
        text = tmpl.render(messages=[{"role": "user", "content": t}], add_generation_prompt=True,
                           bos_token=cfg.get("bos_token"), eos_token=cfg.get("eos_token"))
        ref = tk.encode(text, add_special_tokens=False).ids
        rc, out, err = tokenize(model, "--prompt", t, "--chat", "--ids")
        if rc != 0 or out != str(ref) + "\n":
            bad.append("%r: exit %d %s%s, want %s" % (t, rc, out[:200], err[:200], ref))
    ok(not bad, "--chat: apply_chat_template(add_generation_prompt=True, tokenize=True) on %d texts" % len(TEXTS),
       "\n".join(bad))


def g_bos(tmp, tok_tool):
    d = os.path.join(tmp, "laguna")
    os.makedirs(d)
    subprocess.run([tok_tool, "write", d], check=True, capture_output=True)
    tk = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    ref = tk.encode("Hello world").ids
    rc, out, err = tokenize(d, "--prompt", "Hello world", "--ids")
    ok(rc == 0 and out == str(ref) + "\n" and ref != tk.encode("Hello world", add_special_tokens=False).ids,
       "a tokenizer with a BOS post-processor: tokenize adds it, as tokenizer(text) does", out + err + str(ref))
    rc, out, err = tokenize(d, "--prompt", "Hello world", "--chat", "--ids")
    ids = ast.literal_eval(out) if rc == 0 else []
    ok(rc == 0 and len(ids) > 2 and ids[0] == ref[0] and ids[1] != ref[0],
       "--chat: the template writes the BOS once, none added on top", out + err)
    rc, out, err = tokenize(d, "--prompt", "x", "--chat", "--count")
    ok(rc == 0 and int(out) > 1 and not os.path.exists(os.path.join(d, "config.json")) and
       not any(f.endswith(".safetensors") for f in os.listdir(d)),
       "no config.json or weights needed (only the tokenizer and the template)", out + err)


def g_hub_id(tmp, model):
    hub = os.path.join(tmp, "hub")
    repo = os.path.join(hub, "models--org--tok")
    snap = os.path.join(repo, "snapshots", "b" * 40)
    os.makedirs(snap)
    os.makedirs(os.path.join(repo, "refs"))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write("b" * 40)
    os.symlink(os.path.abspath(os.path.join(model, "tokenizer.json")), os.path.join(snap, "tokenizer.json"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env["HF_HUB_CACHE"] = hub
    cwd = os.getcwd()
    os.chdir(tmp)                      # "org/tok" must not exist as a path
    try:
        rc, out, err = tokenize("org/tok", "--prompt", "Hello world", "--ids", env=env)
    finally:
        os.chdir(cwd)
    ok(rc == 0 and out == "[19556, 905]\n", "MODEL as ORG/NAME in the local hub cache (HF_HUB_CACHE)", out + err)


def refused(what, args, code, words, env=None):
    rc, out, err = tokenize(*args, env=env)
    ok(rc == code and all(w in err for w in words) and not out,
       "refused: %s (exit %d, naming %s)" % (what, code, ", ".join(words)), "exit %d: %s%s" % (rc, out, err))


def g_refusals(tmp, model):
    refused("--text and --prompt both", [model, "--prompt", "a", "--text", "/dev/null"], 2, ["--text", "--prompt"])
    refused("no text", [model, "--ids"], 2, ["--text FILE or --prompt TEXT"])
    refused("two output modes", [model, "--prompt", "a", "--ids", "--count"], 2, ["--ids", "--count"])
    refused("--prompt not UTF-8", [model, "--prompt", os.fsdecode(b"ab\xffc")], 1,
            ["--prompt", "byte 2", "0xff", "not valid UTF-8"])
    bad = os.path.join(tmp, "latin1.txt")
    with open(bad, "wb") as f:
        f.write("caf\u00e9 ok\n".encode() + b"caf\xe9\n")
    refused("--text not UTF-8", [model, "--text", bad], 1, [bad, "byte 12", "0xe9", "iconv"])
    nul = os.path.join(tmp, "nul.txt")
    with open(nul, "wb") as f:
        f.write(b"a\x00b")
    refused("a NUL with --chat", [model, "--text", nul, "--chat"], 1, [nul, "byte 1", "NUL"])
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    refused("a FIFO as --text (never waited on)", [model, "--text", fifo], 1, [fifo, "FIFO"])
    big = os.path.join(tmp, "big.txt")
    with open(big, "wb") as f:
        f.truncate((64 << 20) + 1)
    refused("a --text FILE over 64 MiB", [model, "--text", big], 1, [big, "64 MiB"])
    empty = os.path.join(tmp, "empty-dir")
    os.makedirs(empty)
    refused("a directory without tokenizer.json", [empty, "--prompt", "a"], 1,
            [os.path.join(empty, "tokenizer.json")])
    refused("--chat on a model without a chat template", [empty, "--prompt", "a", "--chat"], 1,
            ["tokenizer.json"])
    refused("hf:// (the engine reads directories)", ["hf://org/name", "--prompt", "a"], 2,
            ["hf://org/name", "mount"])


def main():
    if len(sys.argv) != 3:
        print("1..0 # SKIP usage: test_tokenize.py REQUANTFS TOK_TOOL")
        return 77
    rqtap.init(sys.argv[1])
    tok_tool = sys.argv[2]
    root = os.environ.get("RQ_SOURCE_ROOT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    model = os.environ.get("RQ_SMOLLM2_DIR", os.path.join(root, ".models", "SmolLM2-135M-Instruct"))
    rc, out, err = tokenize("--help")
    ok(rc == 0 and "--ids" in out and "--chat" in out, "tokenize --help", out + err)
    tmp = tempfile.mkdtemp(prefix="rq-tokenize-")
    try:
        if ok(os.path.exists(os.path.join(model, "tokenizer.json")),
              "SmolLM2-135M-Instruct at %s (tools/setup-model makes it)" % model):
            g_smollm2(tmp, model)
            g_hub_id(tmp, model)
            g_refusals(tmp, model)
        g_bos(tmp, tok_tool)
    finally:
        rqtap.cleanup(tmp)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
