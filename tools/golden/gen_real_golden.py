#!/usr/bin/env python3
"""Golden logits, greedy continuations and perplexity from transformers (float32) for the
real model (SmolLM2-135M-Instruct, tools/setup-model) and the tiny per-family models
(tests/data/tiny/<family>, tools/golden/gen_tiny_models.py), in every --scheme.

    /work/venv-ref/bin/python tools/golden/gen_real_golden.py --requantfs build/requantfs \
        [--model smollm2 --model tiny-llama ...] [--variant bf16 ...] [--out tests/data/golden]

Writes OUT/<model>/<variant>.safetensors; the format is in tests/data/golden/README.md.

The reference for a variant:
  bf16         transformers' <Family>ForCausalLM loaded from the BF16 directory with
               dtype=float32 (BF16 widens exactly), eager attention.
  nvfp4a16, fp8-dynamic, w8a16, w4a16
               `requantfs export DIR Q --scheme S` (plus EXPORT_ARGS below), then every
               quantized module of Q decompressed by compressed-tensors -- the compressor
               its quantization_config's format names, called with the scale widened to
               float32, so the weight is the dequantized value in float32 -- and every other
               tensor of Q widened to float32; written as a plain float32 checkpoint with
               Q's config.json minus quantization_config, and loaded like bf16. (transformers
               loads the quantized directory itself only in BF16, which rounds the dequantized
               weights; the float32 route is the exact value an engine computes with.)

Each prompt: one forward over the prompt (no cache) gives the logits at the stored
positions; the greedy continuation recomputes the whole sequence at every step (no
cache), takes the argmax, never stops at EOS. Perplexity (smollm2 only): the first N
tokens of the text as tokenizer(text)["input_ids"] encodes it (no BOS is added by this
tokenizer), one window, exp(loss) of model(ids, labels=ids) -- mean NLL of tokens 1..N-1.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VARIANTS = ["bf16", "nvfp4a16", "fp8-dynamic", "w8a16", "w4a16"]
FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe"]
MODELS = ["smollm2"] + [f"tiny-{f}" for f in FAMILIES]
N_GREEDY = 32
PPL_TEXT = "/usr/share/common-licenses/GPL-3"
PPL_TOKENS = 512

# SmolLM2's hidden size (576) is not a multiple of the w8a16/w4a16 group (128): only the
# Linears whose input is the MLP's 1536 (down_proj) can take those schemes.
SMOL_GROUP128 = ["--ignore", "lm_head", "--ignore", "re:.*embed_tokens$",
                 "--ignore", "re:.*(q|k|v|o|gate|up)_proj$"]
EXPORT_ARGS = {("smollm2", "w8a16"): SMOL_GROUP128, ("smollm2", "w4a16"): SMOL_GROUP128}

SMOL_PROMPTS = [
    ("chat", "What is the capital of France?"),
    ("text", "The Eiffel Tower is a wrought-iron lattice tower in Paris. It was built in"),
    ("text", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n"),
]
TINY_LENGTHS = [5, 17, 33]      # > the mistral window (8) from the second prompt on


def model_dir(name):
    if name == "smollm2":
        return os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct")
    return os.path.join(ROOT, "tests", "data", "tiny", name[len("tiny-"):])


def save_sorted(tensors, path, metadata):
    """safetensors with its header in sorted key order (safetensors' own writer orders the
    metadata at random), so a rerun gives the same bytes. I32/F32 tensors only."""
    import struct
    dt = {torch.int32: "I32", torch.float32: "F32"}
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        t = tensors[k].contiguous()
        b = t.numpy().tobytes()
        header[k] = {"dtype": dt[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = dict(sorted(metadata.items()))
    h = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def load_raw(d):
    raw = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), "pt") as sf:
                for k in sf.keys():
                    raw[k] = sf.get_tensor(k)
    return raw


def decompress_dir(q, out):
    """Q (a --scheme export) -> OUT: float32 checkpoint of compressed-tensors' dequantized weights."""
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.lifecycle.forward import dequantize
    cfg = json.load(open(os.path.join(q, "config.json")))
    qc = cfg.pop("quantization_config")
    groups = qc["config_groups"]
    if len(groups) != 1:
        sys.exit(f"{q}: one config group expected, found {len(groups)}")
    g = next(iter(groups.values()))
    fmt = g.get("format") or qc["format"]
    scheme = QuantizationScheme(targets=g["targets"], weights=QuantizationArgs(**g["weights"]))
    comp = BaseCompressor.get_value_from_registry(fmt)
    raw = load_raw(q)
    parts = ("weight", "weight_packed", "weight_scale", "weight_shape", "weight_zero_point",
             "weight_global_scale")
    mods = sorted({k.rsplit(".", 1)[0] for k in raw if k.endswith(".weight_scale")})
    sd, used = {}, set()
    for m in mods:
        part = {p: raw[f"{m}.{p}"] for p in parts if f"{m}.{p}" in raw}
        used.update(f"{m}.{p}" for p in part)
        if fmt == "nvfp4-pack-quantized":
            # The compressor unpacks to BF16 and dequantizes in BF16; the same two
            # compressed-tensors steps in float32: e2m1 codes, then x * (scale / global_scale).
            packed = part["weight_packed"]
            codes = unpack_fp4_from_uint8(packed, packed.shape[0], packed.shape[1] * 2, dtype=torch.float32)
            w = dequantize(x_q=codes, scale=part["weight_scale"].float(), args=scheme.weights,
                           global_scale=part["weight_global_scale"].float(), dtype=torch.float32)
        else:
            part["weight_scale"] = part["weight_scale"].float()
            w = comp.decompress(part, scheme)["weight"]
        if w.dtype != torch.float32:
            sys.exit(f"{q}: {m}: compressed-tensors returned {w.dtype}, float32 expected")
        sd[m + ".weight"] = w.contiguous()
    for k, t in raw.items():
        if k not in used:
            sd[k] = t.float().contiguous()
    os.makedirs(out, exist_ok=True)
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg["torch_dtype"] = "float32"
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    return len(mods), fmt


def load_model(d):
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit(f"{d}: transformers did not load every weight: {bad}")
    return model.eval()


def positions(name, n):
    if name == "smollm2":
        return [n - 2, n - 1]
    return sorted(set(range(0, n, 4)) | {n - 1})


def prompts_of(name, d, vocab):
    """[(ids, text or '')]"""
    if name == "smollm2":
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(d)
        out = []
        for kind, text in SMOL_PROMPTS:
            if kind == "chat":
                text = tok.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, tokenize=False)
            out.append((tok(text, add_special_tokens=False)["input_ids"], text))
        return out
    rng = np.random.default_rng(18)
    return [([int(v) for v in rng.integers(3, vocab, n)], "") for n in TINY_LENGTHS]


class RouterWatch:
    """Smallest gap between the k-th and (k+1)-th router logit over every token routed."""

    def __init__(self, model, k):
        self.k, self.min_gap, self.hooks = k, math.inf, []
        for name, mod in model.named_modules():
            w = getattr(mod, "weight", None)
            if name.endswith(".gate") and isinstance(w, torch.Tensor) and w.dim() == 2 and w.shape[0] > 1:
                self.hooks.append(mod.register_forward_hook(self.hook))

    def hook(self, mod, args, _out):
        x = args[0].reshape(-1, args[0].shape[-1]).float()
        top = torch.topk(torch.nn.functional.linear(x, mod.weight.float()), self.k + 1, dim=-1).values
        self.min_gap = min(self.min_gap, float((top[:, self.k - 1] - top[:, self.k]).min()))


@torch.no_grad()
def run_prompt(model, ids, pos):
    logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    seq, greedy, margin = list(ids), [], []
    for _ in range(N_GREEDY):
        lg = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
        top = torch.topk(lg, 2)
        greedy.append(int(top.indices[0]))
        margin.append(float(top.values[0] - top.values[1]))
        seq.append(greedy[-1])
    return logits[pos].contiguous(), greedy, margin


@torch.no_grad()
def perplexity(model, d):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d)
    ids = tok(open(PPL_TEXT, encoding="utf-8").read())["input_ids"][:PPL_TOKENS]
    if len(ids) != PPL_TOKENS:
        sys.exit(f"{PPL_TEXT}: only {len(ids)} tokens")
    x = torch.tensor([ids])
    loss = model(input_ids=x, labels=x, use_cache=False).loss
    return ids, math.exp(float(loss))


def golden(name, variant, requantfs, tmp, out_root):
    import transformers
    src = model_dir(name)
    if not os.path.isfile(os.path.join(src, "config.json")):
        sys.exit(f"{src} is missing: run tools/setup-model (smollm2) or tools/golden/gen_tiny_models.py")
    meta = {"model": name, "variant": variant, "generator": "tools/golden/gen_real_golden.py",
            "reference": f"transformers {transformers.__version__} float32 eager, torch {torch.__version__}"}
    ref = src
    if variant != "bf16":
        import compressed_tensors
        q = os.path.join(tmp, f"{name}-{variant}")
        args = [requantfs, "export", src, q, "--scheme", variant] + EXPORT_ARGS.get((name, variant), [])
        subprocess.run(args, check=True, stderr=subprocess.DEVNULL)
        ref = q + "-f32"
        n_mod, fmt = decompress_dir(q, ref)
        meta["export_args"] = json.dumps(args[4:])
        meta["reference"] += (f"; {n_mod} modules ({fmt}) decompressed by compressed-tensors "
                              f"{compressed_tensors.__version__} to float32")
    model = load_model(ref)
    cfg = model.config
    k = getattr(cfg, "num_experts_per_tok", 0)
    watch = RouterWatch(model, k) if k else None
    tensors = {}
    min_margin = math.inf
    prompts = prompts_of(name, src, cfg.vocab_size)
    for i, (ids, text) in enumerate(prompts):
        pos = positions(name, len(ids))
        logits, greedy, margin = run_prompt(model, ids, pos)
        tensors[f"p{i}.ids"] = torch.tensor(ids, dtype=torch.int32)
        tensors[f"p{i}.pos"] = torch.tensor(pos, dtype=torch.int32)
        tensors[f"p{i}.logits"] = logits.float()
        tensors[f"p{i}.greedy"] = torch.tensor(greedy, dtype=torch.int32)
        tensors[f"p{i}.greedy_margin"] = torch.tensor(margin, dtype=torch.float32)
        if text:
            meta[f"p{i}.text"] = text
        min_margin = min(min_margin, min(margin))
    meta["prompts"] = str(len(prompts))
    meta["greedy_min_margin"] = repr(min_margin)
    if watch:
        meta["router_min_gap"] = repr(watch.min_gap)
    if name == "smollm2":
        ids, ppl = perplexity(model, src)
        tensors["ppl.ids"] = torch.tensor(ids, dtype=torch.int32)
        meta["ppl"] = repr(ppl)
        meta["ppl_tokens"] = str(len(ids))
        meta["ppl_text"] = PPL_TEXT
    d = os.path.join(out_root, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"{variant}.safetensors")
    save_sorted(tensors, path, meta)
    if variant != "bf16":
        shutil.rmtree(q, ignore_errors=True)
        shutil.rmtree(ref, ignore_errors=True)
    return path, meta


@torch.no_grad()
def cross_check(name, variant, requantfs, tmp, out_root):
    """transformers + compressed-tensors loading the exported directory itself (BF16 only,
    as they allow; for bf16 the BF16 directory in BF16: the noise of BF16 arithmetic alone),
    against the stored float32 golden: relative max |dlogit| per prompt and
    whether the argmax after the prompt agrees. A check of the dequantization route, not data."""
    from transformers import AutoModelForCausalLM
    g = safe_open(os.path.join(out_root, name, f"{variant}.safetensors"), "pt")
    q = os.path.join(tmp, f"{name}-{variant}-x")
    if variant == "bf16":                # the baseline: BF16 arithmetic alone
        q = model_dir(name)
    else:
        args = json.loads(g.metadata()["export_args"])
        subprocess.run([requantfs, "export", model_dir(name), q] + args,
                       check=True, stderr=subprocess.DEVNULL)
    model = AutoModelForCausalLM.from_pretrained(q, dtype=torch.bfloat16, attn_implementation="eager").eval()
    rel, agree = [], 0
    i = 0
    while f"p{i}.ids" in g.keys():
        ids, pos = g.get_tensor(f"p{i}.ids").long(), g.get_tensor(f"p{i}.pos").long()
        ref = g.get_tensor(f"p{i}.logits")
        got = model(input_ids=ids[None], use_cache=False).logits[0][pos].float()
        rel.append(float((got - ref).abs().max() / ref.abs().max()))
        agree += int(got[-1].argmax() == ref[-1].argmax())
        i += 1
    if variant != "bf16":
        shutil.rmtree(q, ignore_errors=True)
    return rel, agree, i


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requantfs", default=os.path.join(ROOT, "build", "requantfs"))
    ap.add_argument("--model", action="append", choices=MODELS)
    ap.add_argument("--variant", action="append", choices=VARIANTS)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "golden"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cross-check", action="store_true",
                    help="write nothing: compare transformers' own BF16 load of each export with the golden")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    tmp = tempfile.mkdtemp(prefix="rq-golden-")
    try:
        for name in a.model or MODELS:
            for variant in a.variant or VARIANTS:
                if a.cross_check:
                    rel, agree, n = cross_check(name, variant, os.path.abspath(a.requantfs), tmp, a.out)
                    print(f"{name} {variant}: transformers' BF16 load of the export vs golden: "
                          f"max|d|/max|logit| {max(rel):.3g}, next-token argmax agrees {agree}/{n}",
                          file=sys.stderr)
                    continue
                path, meta = golden(name, variant, os.path.abspath(a.requantfs), tmp, a.out)
                extra = "".join(f" {k} {meta[k]}" for k in ("ppl", "router_min_gap") if k in meta)
                print(f"{name} {variant}: {path} ({os.path.getsize(path)} bytes) greedy margin "
                      f"{float(meta['greedy_min_margin']):.3g}{extra}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
