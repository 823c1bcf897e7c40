#!/usr/bin/env python3
"""Differential test: random but valid tokenizer pipelines, our engine against
Hugging Face `tokenizers`.

A generator composes pipelines from the components `tokenizers` offers for
decoder LLMs: normalizers (NFC/NFD/NFKC/NFKD, Lowercase, Strip, Replace with a
string or a regex, Prepend, Sequence), pre-tokenizers (ByteLevel with and
without its regex and add_prefix_space, Split with string and regex patterns
under every behaviour and invert, Digits, Metaspace under every prepend
scheme, Whitespace, WhitespaceSplit, Punctuation, Sequence), a BPE model
trained here by `tokenizers`' own BpeTrainer on a small corpus (small
vocabularies; byte_fallback, ignore_merges, unk_token + fuse_unk,
continuing_subword_prefix, end_of_word_suffix), decoders (ByteLevel,
ByteFallback, Fuse, Replace, Strip, Metaspace, Sequence), post-processors
(TemplateProcessing, ByteLevel, Sequence) and added tokens (special or not,
lstrip / rstrip / single_word / normalized). Most pipelines follow a family's
shape (byte-level, SentencePiece-style, word-level) with random choices
inside it; some mix anything with anything; a few are broken on purpose.

Each becomes a tokenizer.json in a temp directory and is compared on texts
from Unicode edge cases (combining marks, NFC/NFKC-changing characters, emoji
ZWJ sequences, CJK, RTL, zero width), code, whitespace runs (tabs, CRLF, many
spaces) and digit runs:
  - `requantfs tokenize DIR --ids --text FILE` on one text against
    Tokenizer.from_file(...).encode(text).ids;
  - through tests/engine/tok_tool's session mode (one process for all), many
    texts with and without the post-processor, and decode, whole and
    streamed, with and without skip_special_tokens, of the encodings and of
    random id sequences (byte tokens make invalid UTF-8: U+FFFD as the
    library writes it).
The engine may refuse a pipeline it does not support: the refusal must name
a JSON path that exists in that tokenizer.json (e.g. pre_tokenizer.
pretokenizers[1].behavior), both in tok_tool and in `requantfs tokenize`.
Refusals are counted; any difference is a failure. A pipeline `tokenizers`
itself rejects (from_str raises) must be refused by the engine too.

The library itself panics on some inputs (a Strip decoder whose stop is longer
than a piece: decoders/strip.rs "slice index starts at 1 but ends at 0"; a
Replace regex that matches empty text). pyo3 raises that as PanicException,
a BaseException: every library call goes through lib(), such an input (a
text, an id sequence, a pipeline the trainer cannot build) is counted as a
"library panic" and skipped; the engine's deterministic answer stands there.

Then every real tokenizer.json the set-up makes: .models/SmolLM2-135M-Instruct
(tools/setup-model, our converter's), and tests/data/tok/smollm2-transformers/
(transformers' own conversion of the same GGUF) when it is in the checkout.

usage: test_tok_random.py REQUANTFS TOK_TOOL
  RQ_TOK_RANDOM=n  pipelines (default 1500, ~1 min);  RQ_TOK_SEED=s  the seed
  RQ_TOK_KEEP=DIR  copies the tokenizer.json of each pipeline that differs or
                   is refused without a JSON path into DIR (to reproduce it)
Prints TAP; the counts (equal / refused / different / library panics) as '#' lines.
"""
import concurrent.futures
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

os.environ["RUST_BACKTRACE"] = "0"     # a library panic prints its one line, not a backtrace

try:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors, trainers
except ImportError as e:
    print("not ok 1 - %s (python %s): run tools/setup to create .venv" % (e, sys.executable))
    print("1..1")
    sys.exit(1)

N_PIPES = int(os.environ.get("RQ_TOK_RANDOM", "1500"))
SEED = int(os.environ.get("RQ_TOK_SEED", "20260834"))
TEXTS_PER_PIPE = 24
CHUNK = 100            # pipelines per tok_tool run (their temp dirs live that long)
SHOW = 8               # failures shown per kind

n_test = n_failed = 0


def ok(cond, desc, detail=()):
    global n_test, n_failed
    n_test += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", n_test, desc), flush=True)
    if not cond:
        n_failed += 1
        for line in detail:
            print("#   " + line)
    return cond


class LibraryPanic(Exception):
    """tokenizers panicked (Rust) on this input: nothing to compare with."""


def lib(f, *args, **kw):
    """f(*args, **kw) of the tokenizers library, a Rust panic raised as
    LibraryPanic (an Exception) instead of pyo3's PanicException (a
    BaseException that `except Exception` lets through, ending the run)."""
    try:
        return f(*args, **kw)
    except Exception:
        raise
    except BaseException as e:
        if type(e).__name__ != "PanicException":
            raise
        raise LibraryPanic(str(e)) from None


# ---- corpora -------------------------------------------------------------------

UNICODE = [
    "e\u0301", "A\u030a", "\u212b", "o\u0323\u0302", "\u1e9b\u0323", "\u0915\u093c", "\u1100\u1161\u11a8",
    "\uac00", "\ufb01", "\u2460", "\u00bd", "\u2167", "\uff21\uff42", "\u3300", "\u01c4", "\u00df", "\u0130",
    "\u03a3\u03b1\u03c2", "\u1f88", "\u00c5ngstr\u00f6m", "caf\u00e9", "\u00e9\u0301", "\u0301\u0301",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f44d\U0001f3fd", "\U0001f1eb\U0001f1f7", "\u2764\ufe0f",
    "\U0001f9ea", "\U0001d4b3", "\U00010000", "\u65e5\u672c\u8a9e", "\u4e2d\u6587\u6587\u672c", "\ud55c\uad6d\uc5b4",
    "\u0448\u0430\u043b\u043e\u043c", "\u05e9\u05dc\u05d5\u05dd", "\u0645\u0631\u062d\u0628\u0627", "\u200f", "\u200e",
    "\u202e", "\u2066", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00a0", "\u3000", "\u2009",
    "\u2028", "\u2029", "\u0085", "\u00ad", "\u0661\u0662\u0663", "\u0966\u0967", "\u00b2", "\U00011de0",
    "\u2581", "\u2581\u2581", "\u0120", "\u010a", "<0x41>", "\u00ff\u0100",
]
CODE = [
    "def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}\n",
    "if __name__ == '__main__':\n    main()\n", "x = [1, 22, 333, 4444]; y = {'a': 0x1F}\n",
    "#include <stdio.h>\r\nint main(void) { return 0; }\r\n", "SELECT * FROM t WHERE id=42;",
    "fn main() -> Result<(), Box<dyn Error>> {}", "a->b::c => d !== e", "/* comment */ // line",
    "don't I'LL we've it's", "http://example.com/a?b=c&d=e#f", "\"quoted\" 'single' `back`",
]
SPACES = [" ", "  ", "   ", "     ", "        ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n",
          "\r", " \n ", " \t\n", "\x0b", "\x0c", "\u3000 "]
DIGITS = ["0", "7", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "2024-08-01",
          "v1.2.3", "0000", "99 bottles"]
WORDS = ["hello", "world", "Hello", "WORLD", "the", "The", "token", "tokenizer", "ab", "abc", "xyz",
         "quick", "brown", "fox", "lazy", "dog", "café", "naïve", "über", "Straße"]
SPECIAL_LIKE = ["<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool>",
                "[MASK]", "<|im_start", "<s", "hello world", "< tool >"]


def random_text(rng):
    parts = []
    for _ in range(rng.randrange(0, 14)):
        r = rng.random()
        src = (UNICODE if r < 0.25 else CODE if r < 0.35 else SPACES if r < 0.55 else DIGITS if r < 0.65
               else SPECIAL_LIKE if r < 0.75 else WORDS)
        parts.append(rng.choice(src))
        if rng.random() < 0.5:
            parts.append(" ")
    if rng.random() < 0.1:
        parts.append("".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(1, 6))))
    return "".join(parts)


def training_corpus():
    try:
        gpl = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()[:5000]
    except OSError:
        gpl = ""
    lines = [l for l in gpl.split("\n") if l.strip()]
    extra = [" ".join(WORDS)] * 5 + CODE + ["".join(UNICODE)] + [" ".join(DIGITS)] * 3
    return lines + extra


CORPUS = training_corpus()


# ---- the generator -------------------------------------------------------------

GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPLIT_REGEX = [GPT2_RE, LLAMA3_RE, QWEN2_RE, r"\s+", r"\p{N}", r"\p{N}{1,3}", r"\d+", r"[A-Za-z]+",
               r"\p{L}+", r"(?:\r?\n)+(?!\r?\n)", r" ?[^\s\p{L}\p{N}]+", r"'s|'t", r"\w+|[^\w\s]+"]
SPLIT_STRING = [" ", "\n", "-", "ab", "\u2581", ", ", "\t"]
BEHAVIORS = ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]
REPLACE_STRING = [(" ", "\u2581"), ("\t", " "), ("\r\n", "\n"), ("ab", "x"), ("\u00e9", "e"), ("  ", " ")]
REPLACE_REGEX = [(r"\s+", " "), (r"\d", "0"), (r" {2,}", " "), (r"[\u200b-\u200f]", "")]


def norm_one(rng, fam):
    k = rng.choice(["NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "Replace", "ReplaceRe", "Prepend"])
    if k == "NFC": return normalizers.NFC()
    if k == "NFD": return normalizers.NFD()
    if k == "NFKC": return normalizers.NFKC()
    if k == "NFKD": return normalizers.NFKD()
    if k == "Lowercase": return normalizers.Lowercase()
    if k == "Strip": return normalizers.Strip(left=rng.random() < 0.5, right=rng.random() < 0.5)
    if k == "Replace":
        a, b = rng.choice(REPLACE_STRING)
        return normalizers.Replace(a, b)
    if k == "ReplaceRe":
        a, b = rng.choice(REPLACE_REGEX)
        return normalizers.Replace(Regex(a), b)
    return normalizers.Prepend(rng.choice(["\u2581", " ", "x"]))


def normalizer(rng, fam):
    if fam == "sp-prepend":
        pre = [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
        if rng.random() < 0.3:
            pre.insert(0, rng.choice([normalizers.NFC(), normalizers.NFKC()]))
        return normalizers.Sequence(pre)
    r = rng.random()
    if r < 0.4:
        return None
    if r < 0.75:
        return norm_one(rng, fam)
    return normalizers.Sequence([norm_one(rng, fam) for _ in range(rng.randrange(0, 4))])


def split(rng):
    pat = Regex(rng.choice(SPLIT_REGEX)) if rng.random() < 0.7 else rng.choice(SPLIT_STRING)
    return pre_tokenizers.Split(pat, behavior=rng.choice(BEHAVIORS), invert=rng.random() < 0.2)


def pretok_other(rng):
    k = rng.choice(["Split", "Split", "Digits", "Whitespace", "WhitespaceSplit", "Punctuation", "Metaspace"])
    if k == "Split": return split(rng)
    if k == "Digits": return pre_tokenizers.Digits(individual_digits=rng.random() < 0.5)
    if k == "Whitespace": return pre_tokenizers.Whitespace()
    if k == "WhitespaceSplit": return pre_tokenizers.WhitespaceSplit()
    if k == "Punctuation": return pre_tokenizers.Punctuation(behavior=rng.choice(BEHAVIORS))
    return metaspace(rng)


def metaspace(rng):
    return pre_tokenizers.Metaspace(replacement=rng.choice(["\u2581", "\u2581", "_"]),
                                    prepend_scheme=rng.choice(["always", "first", "never"]),
                                    split=rng.random() < 0.5)


def pre_tokenizer(rng, fam):
    if fam == "bytelevel":
        bl = pre_tokenizers.ByteLevel(add_prefix_space=rng.random() < 0.3, use_regex=rng.random() < 0.5)
        before = [rng.choice([split(rng), pre_tokenizers.Digits(individual_digits=rng.random() < 0.5)])
                  for _ in range(rng.randrange(0, 3))]
        return bl if not before and rng.random() < 0.5 else pre_tokenizers.Sequence(before + [bl])
    if fam == "sp-metaspace":
        return metaspace(rng)
    if fam == "sp-prepend":
        return None
    if fam == "word":
        items = [rng.choice([pre_tokenizers.Whitespace(), pre_tokenizers.WhitespaceSplit(),
                             pre_tokenizers.Punctuation(behavior=rng.choice(BEHAVIORS)), split(rng),
                             pre_tokenizers.Digits(individual_digits=rng.random() < 0.5)])
                 for _ in range(rng.randrange(1, 4))]
        return items[0] if len(items) == 1 else pre_tokenizers.Sequence(items)
    # mixed: anything
    items = [pretok_other(rng) if rng.random() < 0.8 else
             pre_tokenizers.ByteLevel(add_prefix_space=rng.random() < 0.5, use_regex=rng.random() < 0.5)
             for _ in range(rng.randrange(0, 4))]
    return None if not items else items[0] if len(items) == 1 else pre_tokenizers.Sequence(items)


def decoder_one(rng):
    k = rng.choice(["ByteLevel", "ByteFallback", "Fuse", "Replace", "Strip", "Metaspace"])
    if k == "ByteLevel": return decoders.ByteLevel()
    if k == "ByteFallback": return decoders.ByteFallback()
    if k == "Fuse": return decoders.Fuse()
    if k == "Replace": return decoders.Replace("\u2581", " ")
    if k == "Strip": return decoders.Strip(content=rng.choice([" ", "\u2581", "x"]), left=rng.randrange(0, 2),
                                           right=rng.randrange(0, 2))
    return decoders.Metaspace(replacement="\u2581", prepend_scheme=rng.choice(["always", "first", "never"]),
                              split=rng.random() < 0.5)


def decoder(rng, fam, pt_json):
    if fam == "bytelevel":
        return decoders.ByteLevel() if rng.random() < 0.9 else decoders.Sequence([decoders.ByteLevel()])
    if fam in ("sp-metaspace", "sp-prepend"):
        if fam == "sp-metaspace" and rng.random() < 0.4:
            ms = pt_json or {}
            return decoders.Metaspace(replacement=ms.get("replacement", "\u2581"),
                                      prepend_scheme=ms.get("prepend_scheme", "always"),
                                      split=ms.get("split", True))
        seq = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        if rng.random() < 0.8:
            seq.append(decoders.Strip(content=" ", left=1, right=0))
        return decoders.Sequence(seq)
    if rng.random() < 0.3:
        return None
    items = [decoder_one(rng) for _ in range(rng.randrange(1, 4))]
    return items[0] if len(items) == 1 and rng.random() < 0.5 else decoders.Sequence(items)


def post_processor(rng, fam, specials):
    r = rng.random()
    tp = None
    if specials and r < 0.5:
        bos, eos = specials[0], specials[-1]
        single = rng.choice(["%s $A" % bos, "$A %s" % eos, "%s $A %s" % (bos, eos), "$A"])
        pair = single + " $B:1" if "$A" in single else "$A $B:1"
        tp = ("TemplateProcessing", single, pair, sorted({bos, eos}))
    if fam == "bytelevel" and rng.random() < 0.5:
        return ("ByteLevel", tp)
    return ("Template", tp) if tp else None


def model_opts(rng, fam):
    o = {"byte_fallback": fam.startswith("sp") and rng.random() < 0.8 or fam == "mixed" and rng.random() < 0.3,
         "ignore_merges": rng.random() < 0.2, "unk": fam != "bytelevel" and rng.random() < 0.7}
    o["fuse_unk"] = o["unk"] and rng.random() < 0.5
    o["prefix"] = "##" if fam in ("word", "mixed") and rng.random() < 0.3 else None
    o["suffix"] = "</w>" if fam in ("word", "mixed") and rng.random() < 0.3 else None
    return o


def canonical_ids(m, specials):
    """Renumbers a trained vocabulary the same way on every run: the special
    tokens first (as trained), then the alphabet sorted, then each merge's
    result in merge order. BpeTrainer numbers the continuing_subword_prefix /
    end_of_word_suffix alphabet in a hash map's order, which differs from run
    to run; the merges themselves do not."""
    v, pre = m["vocab"], m.get("continuing_subword_prefix") or ""
    merged = []
    for a, b in m["merges"]:
        merged.append(a + (b[len(pre):] if pre and b.startswith(pre) else b))
    made = set(merged)
    order = sorted((t for t in v if t in specials), key=v.get)
    order += sorted(t for t in v if t not in made and t not in specials)
    seen = set(order)
    for t in merged:
        if t not in seen and t in v:
            order.append(t)
            seen.add(t)
    order += sorted(t for t in v if t not in seen)
    m["vocab"] = {t: i for i, t in enumerate(order)}


def as_json(component):
    return json.loads(component.__getstate__()) if component is not None else None


def make_pipeline(rng):
    """(tokenizer.json text, label) of one random pipeline, or (text, label) of
    a deliberately broken one (label starts with 'broken')."""
    fam = rng.choice(["bytelevel", "bytelevel", "sp-metaspace", "sp-prepend", "word", "mixed"])
    opts = model_opts(rng, fam)
    specials = rng.sample(["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"], rng.randrange(0, 4))
    if opts["unk"]:
        specials = ["<unk>"] + specials
    tk = Tokenizer(models.BPE(unk_token="<unk>" if opts["unk"] else None))
    norm = normalizer(rng, fam)
    pt = pre_tokenizer(rng, fam)
    if norm is not None:
        tk.normalizer = norm
    if pt is not None:
        tk.pre_tokenizer = pt
    # (no limit_alphabet: its cut among characters of equal counts follows a
    # hash map's order, so the same seed would train different vocabularies)
    targs = dict(vocab_size=rng.randrange(120, 700), special_tokens=specials, show_progress=False)
    if fam == "bytelevel" or (fam == "mixed" and rng.random() < 0.3):
        targs["initial_alphabet"] = pre_tokenizers.ByteLevel.alphabet()
    if opts["prefix"]:
        targs["continuing_subword_prefix"] = opts["prefix"]
    if opts["suffix"]:
        targs["end_of_word_suffix"] = opts["suffix"]
    lib(tk.train_from_iterator, CORPUS if pt is not None else [l for c in CORPUS for l in c.split(" ")],
                           trainers.BpeTrainer(**targs))
    d = json.loads(lib(tk.to_str))
    m = d["model"]
    canonical_ids(m, [a["content"] for a in d["added_tokens"]])
    m["byte_fallback"] = opts["byte_fallback"]
    m["ignore_merges"] = opts["ignore_merges"]
    m["fuse_unk"] = opts["fuse_unk"]
    if opts["byte_fallback"]:
        nid = max(m["vocab"].values(), default=-1) + 1   # (a pipeline may train nothing)
        for b in range(256):
            if "<0x%02X>" % b not in m["vocab"]:
                m["vocab"]["<0x%02X>" % b] = nid
                nid += 1
    dec = decoder(rng, fam, d.get("pre_tokenizer"))
    d["decoder"] = as_json(dec)
    pp = post_processor(rng, fam, [s for s in specials if s != "<unk>"])
    if pp:
        kind, tp = pp
        parts = []
        if kind == "ByteLevel":
            parts.append({"type": "ByteLevel", "add_prefix_space": rng.random() < 0.3, "trim_offsets": False,
                          "use_regex": rng.random() < 0.5})
        if tp:
            _, single, pair, toks = tp
            parts.append(as_json(processors.TemplateProcessing(
                single=single, pair=pair, special_tokens=[(t, m["vocab"][t]) for t in toks])))
        d["post_processor"] = parts[0] if len(parts) == 1 and rng.random() < 0.6 else \
            {"type": "Sequence", "processors": parts}
    text = json.dumps(d, ensure_ascii=False)
    # added tokens, with their flags, through the library itself
    if rng.random() < 0.6:
        tk = lib(Tokenizer.from_str, text)
        adds = []
        for c in rng.sample(["<tool>", "hello world", "[MASK]", "ab", " x", "\u2581y", "token", "<|sep|>",
                             "\u65e5\u672c", "12"], rng.randrange(1, 5)):
            adds.append(AddedToken(c, single_word=rng.random() < 0.3, lstrip=rng.random() < 0.3,
                                   rstrip=rng.random() < 0.3, normalized=rng.random() < 0.5,
                                   special=rng.random() < 0.4))
        lib(tk.add_tokens, adds)
        text = lib(tk.to_str)
    label = "%s/%s" % (fam, describe(json.loads(text)))
    if rng.random() < 0.04:
        return break_pipeline(rng, json.loads(text)), "broken " + label
    return text, label


def describe(d):
    def t(c):
        if not c:
            return "-"
        for key in ("normalizers", "pretokenizers", "decoders", "processors"):
            if key in c:
                return "Seq(" + ",".join(t(x) for x in c[key]) + ")"
        return c["type"]
    m = d["model"]
    flags = [k for k in ("byte_fallback", "ignore_merges", "fuse_unk") if m.get(k)]
    flags += [k for k in ("continuing_subword_prefix", "end_of_word_suffix") if m.get(k)]
    flags += ["unk"] if m.get("unk_token") else []
    return "n=%s p=%s m=BPE[%s] d=%s pp=%s added=%d" % (
        t(d.get("normalizer")), t(d.get("pre_tokenizer")), ",".join(flags), t(d.get("decoder")),
        t(d.get("post_processor")), len(d.get("added_tokens") or []))


def break_pipeline(rng, d):
    """A tokenizer.json `tokenizers` refuses: a bad type, regex, merge or id."""
    k = rng.randrange(5)
    if k == 0:
        d["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated",
                              "invert": False}
    elif k == 1:
        d["normalizer"] = {"type": "NoSuchNormalizer"}
    elif k == 2:
        d["model"]["merges"].append(["\u0378\u0379", "not-a-token"])
    elif k == 3:
        d["decoder"] = {"type": "Strip", "content": " "}          # start/stop missing
    else:
        d["model"]["vocab"]["x-bad-id"] = "seven"
    return json.dumps(d, ensure_ascii=False)


def features(d):
    """What a pipeline is made of, as "section:Type" (and a few options)."""
    out = set()

    def walk(sec, c):
        if not isinstance(c, dict):
            return
        for key in ("normalizers", "pretokenizers", "decoders", "processors"):
            for x in c.get(key) or []:
                walk(sec, x)
        t = c.get("type")
        if not t:
            return
        out.add("%s:%s" % (sec, t))
        pat = c.get("pattern")
        if isinstance(pat, dict):
            out.add("%s:%s/%s" % (sec, t, "Regex" if "Regex" in pat else "String"))
        if t in ("Split", "Punctuation"):
            out.add("%s:%s/%s" % (sec, t, c.get("behavior")))
            out.add("%s:%s/invert" % (sec, t)) if c.get("invert") else None
        if t == "Metaspace":
            out.add("%s:Metaspace/%s" % (sec, c.get("prepend_scheme")))
        if t == "ByteLevel":
            out.add("%s:ByteLevel/use_regex=%s" % (sec, c.get("use_regex")))
            out.add("%s:ByteLevel/add_prefix_space=%s" % (sec, c.get("add_prefix_space")))
    for sec in ("normalizer", "pre_tokenizer", "decoder", "post_processor"):
        walk(sec, d.get(sec))
    m = d["model"]
    for k in ("byte_fallback", "ignore_merges", "fuse_unk", "continuing_subword_prefix", "end_of_word_suffix",
              "unk_token"):
        if m.get(k):
            out.add("model:" + k)
    for a in d.get("added_tokens") or []:
        for k in ("special", "single_word", "lstrip", "rstrip", "normalized"):
            if a.get(k):
                out.add("added:" + k)
    return out


REQUIRED = (["normalizer:" + t for t in ("NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "Replace/String",
                                          "Replace/Regex", "Prepend", "Sequence")]
            + ["pre_tokenizer:" + t for t in ("ByteLevel/use_regex=True", "ByteLevel/use_regex=False",
                                               "ByteLevel/add_prefix_space=True", "Split/Regex", "Split/String",
                                               "Split/invert", "Digits", "Metaspace/always", "Metaspace/first",
                                               "Metaspace/never", "Whitespace", "WhitespaceSplit", "Punctuation",
                                               "Sequence")]
            + ["pre_tokenizer:Split/" + b for b in ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                                    "Contiguous")]
            + ["model:" + k for k in ("byte_fallback", "ignore_merges", "fuse_unk", "continuing_subword_prefix",
                                      "end_of_word_suffix", "unk_token")]
            + ["decoder:" + t for t in ("ByteLevel", "ByteFallback", "Fuse", "Replace", "Strip", "Metaspace",
                                        "Sequence")]
            + ["post_processor:" + t for t in ("TemplateProcessing", "ByteLevel", "Sequence")]
            + ["added:" + k for k in ("special", "single_word", "lstrip", "rstrip", "normalized")])


# ---- running ours --------------------------------------------------------------

TOP = ("normalizer", "pre_tokenizer", "model", "decoder", "post_processor", "added_tokens")
PATH_RE = re.compile(r"\b(%s)((?:\.[A-Za-z_]+|\[\d+\]|\[\"[^\"]*\"\])*)" % "|".join(TOP))
STEP_RE = re.compile(r"\.([A-Za-z_]+)|\[(\d+)\]|\[\"([^\"]*)\"\]")


def resolves(d, head, tail):
    cur = d.get(head)
    if cur is None and head not in d:
        return False
    for m in STEP_RE.finditer(tail):
        name, idx, key = m.groups()
        if idx is not None:
            if not isinstance(cur, list) or int(idx) >= len(cur):
                return False
            cur = cur[int(idx)]
        else:
            k = name if name is not None else key
            if not isinstance(cur, dict) or k not in cur:
                return False
            cur = cur[k]
    return True


def names_json_path(msg, d):
    """The first JSON path in msg that exists in d, else None."""
    for m in PATH_RE.finditer(msg):
        if resolves(d, m.group(1), m.group(2)):
            return m.group(0)
    return None


def run_tool(tok_tool, cmds):
    out = subprocess.run([tok_tool, "session"], input="".join(c + "\n" for c in cmds).encode(),
                         capture_output=True, timeout=600)
    lines = out.stdout.decode("utf-8", "replace").split("\n")
    if out.returncode != 0 or len(lines) < len(cmds):
        raise RuntimeError("tok_tool session: exit %d, %d lines for %d commands: %s"
                           % (out.returncode, len(lines), len(cmds), out.stderr.decode()[-500:]))
    return lines[:len(cmds)]


def run_cli(rq, tdir, text_file):
    p = subprocess.run([rq, "tokenize", tdir, "--ids", "--text", text_file], capture_output=True, timeout=60)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def random_ids(rng, vs, n):
    out = []
    for _ in range(n):
        r = rng.random()
        out.append(rng.randrange(0, min(vs, 300)) if r < 0.4 else rng.randrange(max(0, vs - 300), vs)
                   if r < 0.7 else rng.randrange(0, vs))
    return out


class Tally:
    def __init__(self):
        self.equal = self.refused = self.different = self.both_reject = 0
        self.panics = 0      # inputs the library panics on (skipped)
        self.panic_kinds = {}
        self.fail = {}       # kind -> [detail lines]
        self.features = {}   # feature -> [pipelines with it, equal ones]
        self.refusal_kinds = {}

    def panic(self, e, where):
        """One input skipped: the library panicked on it."""
        self.panics += 1
        msg = "%s: %s" % (where, str(e).split("\n")[0][:80])
        self.panic_kinds[msg] = self.panic_kinds.get(msg, 0) + 1

    def bad(self, kind, line, path=None):
        self.fail.setdefault(kind, []).append(line)
        keep = os.environ.get("RQ_TOK_KEEP")
        if keep and path:
            os.makedirs(keep, exist_ok=True)
            name = "%s-%d.json" % (re.sub(r"\W+", "-", kind), len(self.fail[kind]))
            shutil.copy(path, os.path.join(keep, name))
            line += " [kept as %s]" % os.path.join(keep, name)
            self.fail[kind][-1] = line


def encode_mismatches(tk, texts, out, first, T, where):
    """(text, add_special, ours, tokenizers') for each text and add_special whose tok_tool line
    (out[first:], two a text: without, with) differs from tk.encode; a panic counts in T."""
    found = []
    for k, t in enumerate(texts):
        for j, special in enumerate((False, True)):
            try:
                ref = lib(tk.encode, t, add_special_tokens=special).ids
            except LibraryPanic as e:
                T.panic(e, where)
                continue
            got = [int(x) for x in out[first + 2 * k + j].split()]
            if got != ref:
                found.append((t, special, got, ref))
    return found


def check_chunk(rq, tok_tool, pipes, tmp, T):
    """pipes: [(json text, label, its random generator)]: run them all, tally into T."""
    cmds, plan = [], []
    for i, (text, label, rng) in enumerate(pipes):
        tdir = os.path.join(tmp, "p%d" % i)
        os.makedirs(tdir)
        path = os.path.join(tdir, "tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            tk = lib(Tokenizer.from_str, text)
        except LibraryPanic as e:                    # nothing to compare with
            T.panic(e, "Tokenizer.from_str")
            continue
        except Exception as e:                       # tokenizers rejects it: so must we
            tk, why = None, str(e)
        texts = [random_text(rng) for _ in range(TEXTS_PER_PIPE)]
        texts.append(" ".join(texts[:6]) + "\n" + "".join(CODE[:2]))
        seqs = []
        if tk is not None:
            vs = tk.get_vocab_size()
            seqs = [random_ids(rng, vs, rng.randrange(0, 24)) for _ in range(12)]
        start = len(cmds)
        cmds.append("load " + path)
        for t in texts:
            h = t.encode().hex()
            cmds += ["enc " + h, "enc+ " + h]
        plan.append((tdir, path, text, label, tk, texts, seqs, start))
    out = run_tool(tok_tool, cmds)
    # decode: of the library's own encodings and of random ids, second pass
    dcmds, dplan = [], []
    for tdir, path, text, label, tk, texts, seqs, start in plan:
        if tk is None or not out[start].startswith("ok"):
            continue
        encs = []
        for t in texts[:8]:
            try:
                encs.append(lib(tk.encode, t).ids)
            except LibraryPanic as e:
                T.panic(e, "encode")
        dstart = len(dcmds)
        for s in seqs + encs:
            line = " ".join(map(str, s))
            dcmds += ["load " + path] if len(dcmds) == dstart else []
            dcmds += ["dec " + line, "dec+ " + line]
        dplan.append((path, tk, seqs + encs, dstart))
    dout = run_tool(tok_tool, dcmds) if dcmds else []
    dres = {}
    for path, tk, allseqs, dstart in dplan:
        bad = []
        for k, s in enumerate(allseqs):
            for j, skip in enumerate((False, True)):
                try:
                    ref = lib(tk.decode, s, skip_special_tokens=skip).encode().hex()
                except LibraryPanic as e:
                    T.panic(e, "decode")
                    continue
                got = (dout[dstart + 1 + 2 * k + j].split(" ") + [""])[:2]
                if got[0] != ref or got[1] != ref:
                    bad.append("decode %s skip_special=%s: ours %r / streamed %r, tokenizers %r" % (
                        s, skip, bytes.fromhex(got[0]).decode("utf-8", "replace"),
                        bytes.fromhex(got[1]).decode("utf-8", "replace"), bytes.fromhex(ref).decode()))
        dres[path] = bad
    # requantfs tokenize on each pipeline's last text, a few at a time
    for tdir, path, text, label, tk, texts, seqs, start in plan:
        with open(os.path.join(tdir, "text.txt"), "w", encoding="utf-8", newline="") as f:
            f.write(texts[-1])
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        cli = list(ex.map(lambda p: run_cli(rq, p[0], os.path.join(p[0], "text.txt")), plan))
    for (tdir, path, text, label, tk, texts, seqs, start), (rc, sout, serr) in zip(plan, cli):
        d = json.loads(text) if " broken " not in label else {}
        loaded = out[start]
        if tk is None:
            if loaded.startswith("ok") or rc == 0:
                T.bad("accepted what tokenizers rejects", "%s: tokenizers: %s; tok_tool %r, tokenize exit %d"
                      % (label, why_short(text), loaded[:120], rc))
            else:
                T.both_reject += 1
            continue
        feats = features(d)
        for f in feats:
            T.features.setdefault(f, [0, 0])[0] += 1
        if loaded.startswith("refused"):
            msg = loaded[len("refused "):]
            T.refused += 1
            where = names_json_path(msg, d)
            kind = re.sub(r"\"[^\"]*\"|\d+", "_", msg.split(": ", 1)[-1])[:90]
            T.refusal_kinds[kind] = T.refusal_kinds.get(kind, 0) + 1
            if not where:
                T.bad("refusal without a JSON path", "%s: %s" % (label, msg), path)
            if rc != 1 or not names_json_path(serr, d):
                T.bad("tokenize refuses differently", "%s: exit %d: %s (tok_tool: %s)" % (label, rc,
                                                                                           serr.strip(), msg))
            continue
        bad = ["encode %r add_special=%s: ours %s, tokenizers %s %s" % (
                   t, special, got[:24], ref[:24], [tk.id_to_token(i) for i in ref[:24]])
               for t, special, got, ref in encode_mismatches(tk, texts, out, start + 1, T, "encode")]
        try:
            ref = lib(tk.encode, texts[-1]).ids
        except LibraryPanic:                         # (counted above: the same text)
            ref = None
        if ref is not None and (rc != 0 or sout.strip() != str(ref)):
            bad.append("requantfs tokenize --ids --text: exit %d: %s %s, tokenizers %s" % (
                rc, sout.strip()[:200], serr.strip()[:200], ref[:40]))
        bad += dres.get(path, [])
        if bad:
            T.different += 1
            T.bad("different", "%s (%d differences), first: %s" % (label, len(bad), bad[0]), path)
        else:
            T.equal += 1
            for f in feats:
                T.features[f][1] += 1


def why_short(text):
    try:
        lib(Tokenizer.from_str, text)
        return "accepted"
    except Exception as e:
        return str(e)[:120]


def real_tokenizers(rq, tok_tool, rng, root, T):
    """Every real tokenizer.json the set-up makes, the same comparison."""
    smol = os.path.join(os.environ.get("RQ_SMOLLM2_DIR", os.path.join(root, ".models", "SmolLM2-135M-Instruct")))
    conv = os.path.join(root, "tests", "data", "tok", "smollm2-transformers")
    for name, d, required in (("SmolLM2-135M-Instruct (our converter's)", smol, True),
                              ("SmolLM2 as transformers converts the GGUF", conv, False)):
        path = os.path.join(d, "tokenizer.json")
        if not os.path.exists(path):
            if required:
                ok(False, "%s: %s is missing (tools/setup-model makes it)" % (name, path))
            else:
                print("ok %d - %s # SKIP %s is not in this checkout" % (n_test + 1, name, path))
                globals()["n_test"] += 1
            continue
        tk = Tokenizer.from_file(path)
        texts = [random_text(rng) for _ in range(600)] + UNICODE + CODE + SPACES + DIGITS + SPECIAL_LIKE
        cmds = ["load " + path] + ["enc%s %s" % (p, t.encode().hex()) for t in texts for p in ("", "+")]
        out = run_tool(tok_tool, cmds)
        if not ok(out[0].startswith("ok"), "%s: the engine loads it" % name, [out[0]]):
            continue
        bad = ["%r add_special=%s: tokenizers %s" % (t, special, ref[:24])
               for t, special, _, ref in encode_mismatches(tk, texts, out, 1, T, "%s encode" % name)]
        ok(not bad, "%s: %d texts encode as tokenizers does" % (name, len(texts)), bad[:SHOW])
        seqs = [random_ids(rng, tk.get_vocab_size(), rng.randrange(0, 30)) for _ in range(300)]
        dout = run_tool(tok_tool, ["load " + path] + ["dec%s %s" % (p, " ".join(map(str, s)))
                                                       for s in seqs for p in ("", "+")])
        bad = []
        for k, s in enumerate(seqs):
            for j, skip in enumerate((False, True)):
                try:
                    ref = lib(tk.decode, s, skip_special_tokens=skip).encode().hex()
                except LibraryPanic as e:
                    T.panic(e, "%s decode" % name)
                    continue
                got = (dout[1 + 2 * k + j].split(" ") + [""])[:2]
                if got != [ref, ref]:
                    bad.append("%s skip=%s: ours %s, tokenizers %s" % (s, skip, got, ref))
        ok(not bad, "%s: %d random id sequences decode (whole and streamed) as tokenizers does"
           % (name, len(seqs)), bad[:SHOW])
        with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", newline="", delete=False) as f:
            f.write("\n".join(texts[:200]))
        try:
            p = subprocess.run([rq, "tokenize", d, "--ids", "--text", f.name], capture_output=True,
                               timeout=60)
            ref = tk.encode("\n".join(texts[:200])).ids
            ok(p.returncode == 0 and p.stdout.decode().strip() == str(ref),
               "%s: requantfs tokenize --ids --text gives tokenizers' ids (%d tokens)" % (name, len(ref)),
               [p.stderr.decode()[-300:], p.stdout.decode()[:300]])
        finally:
            os.unlink(f.name)


def main():
    if len(sys.argv) != 3:
        print("1..0 # SKIP usage: test_tok_random.py REQUANTFS TOK_TOOL")
        return 77
    rq, tok_tool = sys.argv[1], sys.argv[2]
    root = os.environ.get("RQ_SOURCE_ROOT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    rng = random.Random(SEED)
    print("# seed %d (RQ_TOK_SEED), %d pipelines (RQ_TOK_RANDOM)" % (SEED, N_PIPES))
    T = Tally()
    gen_errors = []
    tmp = tempfile.mkdtemp(prefix="rq-tokrandom-")
    try:
        done = 0
        while done < N_PIPES:
            pipes = []
            for i in range(done, min(done + CHUNK, N_PIPES)):
                # one generator per pipeline: BpeTrainer with a subword prefix or
                # suffix breaks ties in a hash map's order, so such a vocabulary
                # may differ between runs; it must not shift the pipelines after it
                prng = random.Random("%d-%d" % (SEED, i))
                try:
                    text, label = make_pipeline(prng)
                    pipes.append((text, "#%d %s" % (i, label), prng))
                except LibraryPanic as e:       # the trainer panicked: no pipeline to compare
                    T.panic(e, "training #%d" % i)
                except Exception as e:          # the generator's own mistake, not the engine's
                    gen_errors.append("#%d: %r" % (i, e))
            check_chunk(rq, tok_tool, pipes, tmp, T)
            done += CHUNK
            for name in os.listdir(tmp):
                shutil.rmtree(os.path.join(tmp, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    total = T.equal + T.refused + T.different + T.both_reject
    print("# %d pipelines: %d equal, %d refused by the engine, %d different, %d broken ones both reject"
          % (total, T.equal, T.refused, T.different, T.both_reject))
    for kind, n in sorted(T.refusal_kinds.items(), key=lambda x: -x[1])[:20]:
        print("#   refused %4d x %s" % (n, kind))
    print("# %d library panics (inputs tokenizers panics on, skipped)" % T.panics)
    for kind, n in sorted(T.panic_kinds.items(), key=lambda x: -x[1])[:10]:
        print("#   panicked %4d x %s" % (n, kind))
    ok(not gen_errors, "the generator makes every pipeline it draws (%d did not)" % len(gen_errors),
       gen_errors[:SHOW])
    ok(total >= N_PIPES * 0.9, "%d pipelines checked" % total)
    missing = [f for f in REQUIRED if f not in T.features]
    ok(not missing, "the pipelines use every component listed (%d kinds)" % len(REQUIRED), missing)
    print("# per component: pipelines with it / of them equal")
    for f in sorted(T.features):
        print("#   %-48s %5d / %5d" % (f, T.features[f][0], T.features[f][1]))
    for kind in ("different", "refusal without a JSON path", "tokenize refuses differently",
                 "accepted what tokenizers rejects"):
        lines = T.fail.get(kind, [])
        ok(not lines, "%s: %d pipelines" % (kind, len(lines)), lines[:SHOW])
    real_tokenizers(rq, tok_tool, rng, root, T)
    if T.panics:
        print("# %d library panics in all (inputs skipped)" % T.panics)
    print("1..%d" % n_test)
    return 1 if n_failed else 0


if __name__ == "__main__":
    sys.exit(main())
