#!/usr/bin/env python3
"""Peer test: our tokenizer (through tests/engine/tok_tool) against Hugging
Face `tokenizers`, live, on random text: random Unicode from every plane,
white space and line-break soups, contractions, digits, added-token
fragments. Covers encode with and without the post-processor, decode and the
streaming decoder (with and without skip_special_tokens), and two variants
of the tokenizer.json: added tokens with lstrip / rstrip / single_word /
normalized flags and extra tokens outside the vocab plus a duplicated merge,
and ignore_merges.

usage: test_tok_peer.py PATH/TO/tok_tool     (RQ_TOK_SEED=n picks the seed)
Prints TAP.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer

N_TEXTS = int(os.environ.get("RQ_TOK_N", "3000"))
SEED = int(os.environ.get("RQ_TOK_SEED", "20260801"))
n_test = 0
n_failed = 0


def ok(cond, desc, detail=()):
    global n_test, n_failed
    n_test += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", n_test, desc))
    if not cond:
        n_failed += 1
        for line in detail:
            print("#   " + line)


FRAGMENTS = [
    " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", "\r\r\n", "\x0b", "\x0c", "\x85",
    "\xa0", "\u2028", "\u2029", "\u3000", "\u200b", "\u2009", "\x1c", "'", "'s", "'S", "'\u017f", "'t",
    "'re", "'RE", "'ve", "'m", "'ll", "'lL", "'d", "'D", "'x", "’s", "0", "7", "12", "3.14", "\u00b2",
    "\u0663", "\u2167", "\u00bd", "a", "Z", "hello", " world", "The", "tokenizer", "_", "__init__",
    "->", "::", "=>", "...", "!?", "{", "}", "()", "[]", ";", ",", ".", "#", "//", "/*", "*/", "\"",
    "e\u0301", "\u0301", "\u0308", "\u093f", "क", "ि", "日本", "語", "中文", "한국", "мир", "αβγ", "שלום",
    "مرحبا", "\u200f", "\u200e", "🙂", "🚀", "👨\u200d👩\u200d👧", "🇫🇷", "\U0001f9ea", "𝒳", "\U00010000",
    "<", ">", "</", "<think>", "</think>", "<think", "think>", "<assistant>", "</assistant>",
    "<tool_call>", "</tool_call>", "<user>", "〈|EOS|〉", "〈|PAD|〉", "〈|EOS|", "|〉", "〈", "〉",
    "〈|SPECIAL_8|〉", "<thinking>", "hello world", "ab", "ab ", " ab", "xab", "aby",
]


def random_cp(rng):
    while True:
        r = rng.random()
        if r < 0.5:
            c = rng.randrange(0x20, 0x800)
        elif r < 0.8:
            c = rng.randrange(0x800, 0x10000)
        else:
            c = rng.randrange(0x10000, 0x110000)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def random_text(rng):
    parts = []
    for _ in range(rng.randrange(0, 24)):
        r = rng.random()
        if r < 0.55:
            parts.append(rng.choice(FRAGMENTS))
        elif r < 0.8:
            parts.append("".join(random_cp(rng) for _ in range(rng.randrange(1, 5))))
        elif r < 0.9:
            parts.append(chr(rng.randrange(0, 0x80)) * rng.randrange(1, 4))
        else:
            parts.append("".join(rng.choice("ab \n\t'sS1") for _ in range(rng.randrange(1, 8))))
    return "".join(parts)


def tool(path, mode, lines, *args):
    out = subprocess.run([path, mode] + list(args), input="".join(l + "\n" for l in lines).encode(),
                         capture_output=True, check=True).stdout.decode().split("\n")
    return out[:len(lines)]


def compare_encode(tok_tool, tjson, texts, label):
    tk = Tokenizer.from_file(tjson)
    hexes = [t.encode().hex() for t in texts]
    for special in (False, True):
        ours = tool(tok_tool, "encode", hexes, tjson, *(["special"] if special else []))
        bad = []
        for t, o in zip(texts, ours):
            ref = tk.encode(t, add_special_tokens=special).ids
            mine = [int(x) for x in o.split()]
            if mine != ref:
                bad.append("%r: ours %s, tokenizers %s %s" % (t, mine[:30], ref[:30],
                                                              [tk.id_to_token(i) for i in ref[:30]]))
        ok(not bad, "%s: %d random texts encode exactly (add_special_tokens=%s), seed %d"
           % (label, len(texts), special, SEED), bad[:5])
    return tk


def compare_decode(tok_tool, tjson, tk, rng, label):
    vs = tk.get_vocab_size()
    seqs = []
    for _ in range(600):
        n = rng.randrange(0, 16)
        seq = []
        for _ in range(n):
            r = rng.random()
            seq.append(rng.randrange(70, 326) if r < 0.5 else rng.randrange(0, 70) if r < 0.65
                       else rng.randrange(0, vs))
        seqs.append(seq)
    for skip in (False, True):
        ours = tool(tok_tool, "decode", [" ".join(map(str, s)) for s in seqs], tjson,
                    *(["special"] if skip else []))
        bad = []
        for s, o in zip(seqs, ours):
            ref = tk.decode(s, skip_special_tokens=skip).encode().hex()
            full, streamed = (o.split(" ") + [""])[:2]
            if full != ref or streamed != ref:
                bad.append("%s: ours %s / streamed %s, tokenizers %s" % (s, full, streamed, ref))
        ok(not bad, "%s: decode and streamed decode of %d random id sequences (skip_special=%s)"
           % (label, len(seqs), skip), bad[:5])


def variant_flags(tj):
    """Added-token flags, tokens outside the vocab, a duplicated merge."""
    d = json.loads(tj)
    flags = {"<think>": {"lstrip": True}, "</think>": {"rstrip": True},
             "<tool_call>": {"single_word": True}, "</tool_call>": {"normalized": True},
             "〈|PAD|〉": {"lstrip": True, "rstrip": True}}
    for a in d["added_tokens"]:
        a.update(flags.get(a["content"], {}))
    extra = [("hello world", dict(normalized=True, special=False)),
             ("<thinking>", dict(special=True)),
             ("ab", dict(single_word=True, special=False)),
             ("\u3000x", dict(lstrip=True, special=False))]
    nid = max(d["model"]["vocab"].values()) + 1
    for content, f in extra:
        a = {"id": nid, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": False}
        a.update(f)
        d["added_tokens"].append(a)
        nid += 1
    d["model"]["merges"].append(d["model"]["merges"][0])
    d["model"]["merges"] = [" ".join(m) for m in d["model"]["merges"]]
    return json.dumps(d, ensure_ascii=False)


def variant_ignore_merges(tj):
    d = json.loads(tj)
    d["model"]["ignore_merges"] = True
    return json.dumps(d, ensure_ascii=False)


def main():
    if len(sys.argv) != 2:
        print("1..0 # SKIP usage: test_tok_peer.py PATH/TO/tok_tool")
        return 77
    tok_tool = sys.argv[1]
    rng = random.Random(SEED)
    print("# seed %d (RQ_TOK_SEED), %d texts (RQ_TOK_N)" % (SEED, N_TEXTS))
    texts = [random_text(rng) for _ in range(N_TEXTS)]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([tok_tool, "write", d], check=True, capture_output=True)
        tjson = os.path.join(d, "tokenizer.json")
        tk = compare_encode(tok_tool, tjson, texts, "mkckpt tokenizer")
        compare_decode(tok_tool, tjson, tk, rng, "mkckpt tokenizer")
        tj = open(tjson, encoding="utf-8").read()
        for name, make in (("added-token flags + extra tokens + duplicate merge", variant_flags),
                           ("ignore_merges", variant_ignore_merges)):
            vpath = os.path.join(d, "variant.json")
            with open(vpath, "w", encoding="utf-8") as f:
                f.write(make(tj))
            vtk = compare_encode(tok_tool, vpath, texts[: N_TEXTS // 2], name)
            if name.startswith("added"):
                compare_decode(tok_tool, vpath, vtk, rng, name)
    print("1..%d" % n_test)
    return 1 if n_failed else 0


if __name__ == "__main__":
    sys.exit(main())
