#!/usr/bin/env python3
"""Peer test: the real model (.models/SmolLM2-135M-Instruct, made by tools/setup-model), the
tiny family checkpoints (tests/data/tiny) and the golden data (tests/data/golden) are what
the engine's golden tests take them to be. Uses .venv only (safetensors, tokenizers, numpy).

  * the converted model: all five files, the config the facts say, model.safetensors with
    exactly the sha256 tools/setup-model records (the conversion is deterministic) and BF16
    Llama tensors of the right shapes; `tokenizers` on its tokenizer.json encodes each
    golden prompt text to the stored ids and GPL-3 to the stored ppl.ids, and decodes back;
  * every tiny checkpoint: BF16 tensors whose 2-D Linears take inputs in multiples of 128
    (so every --scheme exports them), the shapes its config implies;
  * every golden file: the tensors and header of tests/data/golden/README.md, shapes that
    agree with its model's config, logits that are finite and not flat, ppl finite.

A missing .models directory fails (run tools/setup-model), it never skips.
usage: test_real_model.py          Prints TAP.
"""
import hashlib
import json
import math
import os
import re
import sys

try:
    import numpy as np
    from safetensors import safe_open
    from tokenizers import Tokenizer
except ImportError as e:
    print(f"not ok 1 - {e} (python {sys.executable}): run tools/setup to create .venv")
    print("1..1")
    sys.exit(1)

ROOT = os.environ.get("RQ_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SMOL = os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct")
TINY = os.path.join(ROOT, "tests", "data", "tiny")
GOLDEN = os.path.join(ROOT, "tests", "data", "golden")
FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe"]
VARIANTS = ["bf16", "nvfp4a16", "fp8-dynamic", "w8a16", "w4a16"]
n = failed = 0


def ok(cond, what, detail=""):
    global n, failed
    n += 1
    print(("ok" if cond else "not ok") + f" {n} - {what}", flush=True)
    if not cond:
        failed += 1
        for line in str(detail).splitlines()[:20]:
            print("#   " + line)
    return cond


def tensors(path):
    with safe_open(path, "np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata() or {}


def header_dtypes(path):
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        h = json.loads(f.read(size))
    h.pop("__metadata__", None)
    return {k: v["dtype"] for k, v in h.items()}, {k: v["shape"] for k, v in h.items()}


def check_smollm2():
    files = ["model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
             "tokenizer_config.json"]
    missing = [f for f in files if not os.path.isfile(os.path.join(SMOL, f))]
    if not ok(not missing, f"{SMOL} has {', '.join(files)}",
              f"missing {missing}: run tools/setup-model (tools/setup runs it)"):
        return None
    cfg = json.load(open(os.path.join(SMOL, "config.json")))
    want = {"model_type": "llama", "num_hidden_layers": 30, "hidden_size": 576, "intermediate_size": 1536,
            "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152,
            "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "rope_theta": 100000.0,
            "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16", "architectures": ["LlamaForCausalLM"]}
    bad = {k: cfg.get(k) for k in want if cfg.get(k) != want[k]}
    ok(not bad, "config.json: Llama, 30 layers, hidden 576, 9/3 heads, vocab 49152, tied", f"differs: {bad}")
    gen = json.load(open(os.path.join(SMOL, "generation_config.json")))
    ok(gen.get("eos_token_id") == 2 and gen.get("bos_token_id") == 1, "generation_config.json: bos 1, eos 2", gen)
    tc = json.load(open(os.path.join(SMOL, "tokenizer_config.json")))
    ok(tc.get("eos_token") == "<|im_end|>" and tc.get("chat_template", "").startswith("{% for message in messages %}")
       and "<|im_start|>assistant" in tc.get("chat_template", ""),
       "tokenizer_config.json: eos <|im_end|>, the ChatML chat template", tc.get("chat_template", "")[:200])

    setup = open(os.path.join(ROOT, "tools", "setup-model")).read()
    m = re.search(r"^want_sha=([0-9a-f]{64})$", setup, re.M)
    h = hashlib.sha256()
    with open(os.path.join(SMOL, "model.safetensors"), "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    ok(m and h.hexdigest() == m.group(1), "model.safetensors has the sha256 tools/setup-model records",
       f"got {h.hexdigest()}, tools/setup-model says {m.group(1) if m else '(none)'}")

    dtypes, shapes = header_dtypes(os.path.join(SMOL, "model.safetensors"))
    exp = {"model.embed_tokens.weight": [49152, 576], "model.norm.weight": [576]}
    for i in range(30):
        p = f"model.layers.{i}."
        exp.update({p + "input_layernorm.weight": [576], p + "post_attention_layernorm.weight": [576],
                    p + "self_attn.q_proj.weight": [576, 576], p + "self_attn.k_proj.weight": [192, 576],
                    p + "self_attn.v_proj.weight": [192, 576], p + "self_attn.o_proj.weight": [576, 576],
                    p + "mlp.gate_proj.weight": [1536, 576], p + "mlp.up_proj.weight": [1536, 576],
                    p + "mlp.down_proj.weight": [576, 1536]})
    ok(shapes == exp and set(dtypes.values()) == {"BF16"},
       "model.safetensors: 272 BF16 tensors, HF Llama names and shapes, no lm_head (tied)",
       f"extra {sorted(set(shapes) - set(exp))[:4]} missing {sorted(set(exp) - set(shapes))[:4]} "
       f"dtypes {sorted(set(dtypes.values()))}")
    return Tokenizer.from_file(os.path.join(SMOL, "tokenizer.json"))


def check_smollm2_tokens(tok):
    g, meta = tensors(os.path.join(GOLDEN, "smollm2", "bf16.safetensors"))
    for i in range(int(meta.get("prompts", "0"))):
        text = meta.get(f"p{i}.text", "")
        ids = tok.encode(text, add_special_tokens=False).ids
        ok(ids == g[f"p{i}.ids"].tolist(), f"tokenizers encodes golden prompt {i} to its stored ids",
           f"{text[:60]!r}: {ids[:16]} vs {g[f'p{i}.ids'].tolist()[:16]}")
        ok(tok.decode(ids, skip_special_tokens=False) == text, f"decode(encode(prompt {i})) is the text")
    text = open(meta.get("ppl_text", "/usr/share/common-licenses/GPL-3"), encoding="utf-8").read()
    ids = tok.encode(text).ids[: int(meta["ppl_tokens"])]
    ok(ids == g["ppl.ids"].tolist(), f"tokenizers encodes GPL-3 to the stored ppl.ids (first {len(ids)})",
       f"first difference at {next((j for j, (a, b) in enumerate(zip(ids, g['ppl.ids'].tolist())) if a != b), None)}")
    ok(ids[0] != 1, "no BOS is added by tokenizer(text)", ids[:4])


def check_tiny(fam):
    d = os.path.join(TINY, fam)
    cfg = json.load(open(os.path.join(d, "config.json")))
    path = os.path.join(d, "model.safetensors")
    dtypes, shapes = header_dtypes(path)
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    lin = {k: s for k, s in shapes.items() if len(s) == 2 and not k.endswith("embed_tokens.weight")
           and not k.endswith("lm_head.weight")}
    bad = {k: s for k, s in lin.items() if s[1] % 128}
    ok(set(dtypes.values()) == {"BF16"} and not bad and os.path.getsize(path) < 1_600_000,
       f"tiny {fam}: BF16, every Linear input a multiple of 128, < 1.6 MB",
       f"dtypes {set(dtypes.values())} bad {bad} size {os.path.getsize(path)}")
    ok(shapes.get("model.embed_tokens.weight") == [v, h] and
       ("lm_head.weight" in shapes) != cfg["tie_word_embeddings"] and
       sum(k.endswith("input_layernorm.weight") for k in shapes) == cfg["num_hidden_layers"],
       f"tiny {fam}: embedding, lm_head (or tied) and layer count match config.json")
    return cfg


def check_golden(model, variant, cfg):
    path = os.path.join(GOLDEN, model, f"{variant}.safetensors")
    if not ok(os.path.isfile(path), f"golden {model}/{variant} exists", "run tools/golden/gen_real_golden.py"):
        return
    g, meta = tensors(path)
    vocab = cfg["vocab_size"]
    errs = []
    if meta.get("model") != model or meta.get("variant") != variant:
        errs.append(f"header names {meta.get('model')}/{meta.get('variant')}")
    if variant != "bf16" and json.loads(meta.get("export_args", "[]"))[:2] != ["--scheme", variant]:
        errs.append(f"export_args {meta.get('export_args')} do not start with --scheme {variant}")
    np_ = int(meta.get("prompts", "0"))
    if np_ < 1:
        errs.append("no prompts")
    for i in range(np_):
        ids, pos, lg, gr = (g.get(f"p{i}.{k}") for k in ("ids", "pos", "logits", "greedy"))
        if any(x is None for x in (ids, pos, lg, gr, g.get(f"p{i}.greedy_margin"))):
            errs.append(f"p{i}: a tensor is missing")
            continue
        if ids.dtype != np.int32 or pos.dtype != np.int32 or gr.dtype != np.int32 or lg.dtype != np.float32:
            errs.append(f"p{i}: dtypes")
        if lg.shape != (len(pos), vocab) or gr.shape != (32,):
            errs.append(f"p{i}: logits {lg.shape} greedy {gr.shape}")
        if not (0 <= pos.min() and pos.max() < len(ids) and ids.max() < vocab and gr.max() < vocab and ids.min() >= 0):
            errs.append(f"p{i}: ids/pos out of range")
        if not np.all(np.isfinite(lg)) or float(lg.std()) < 0.5:
            errs.append(f"p{i}: logits not finite or flat (std {float(lg.std()):.3g})")
    if model == "smollm2":
        ppl = float(meta.get("ppl", "nan"))
        if not (math.isfinite(ppl) and 1 < ppl < 1000) or len(g.get("ppl.ids", [])) != int(meta.get("ppl_tokens", -1)):
            errs.append(f"ppl {meta.get('ppl')} / ppl.ids")
    ok(not errs, f"golden {model}/{variant}: format of tests/data/golden/README.md, shapes agree with config",
       "\n".join(errs))


def main():
    tok = check_smollm2()
    if tok is not None:
        check_smollm2_tokens(tok)
        cfg = json.load(open(os.path.join(SMOL, "config.json")))
    else:
        cfg = {"vocab_size": 49152}
    for v in VARIANTS:
        check_golden("smollm2", v, cfg)
    for fam in FAMILIES:
        tcfg = check_tiny(fam)
        for v in VARIANTS:
            check_golden(f"tiny-{fam}", v, tcfg)
    print(f"1..{n}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
