#!/usr/bin/env python3
"""Golden logits for the engine, from transformers' LagunaForCausalLM.

Builds the tiny synthetic checkpoints with `requantfs mkckpt` (deterministic),
loads each into transformers' Laguna (float32: BF16 weights widened exactly,
NVFP4 weights dequantized as e2m1 * e4m3 / weight_global_scale, per-expert
tensors fused the way transformers stores them), runs fixed token-id prompts
and writes tests/data/engine_golden.json:

  models[]: name, mkckpt args, config overrides (applied to config.json
            before loading, e.g. a short sliding window), and cases[]:
            prompt ids, logits at the last position (all of the vocabulary),
            top-5 ids/values at every position, 16 greedy tokens.

tests/engine/test_forward.c rebuilds the same checkpoints and checks the
C engine against this file. Rerun (needs torch + transformers >= 5.24):

  /work/venv-ref/bin/python tools/golden/gen_engine_golden.py --requantfs build/requantfs

`--model-dir DIR` checks an existing directory instead (no file written
unless --out is given).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors import safe_open

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def dequant_nvfp4(packed, scale, gs):
    """e2m1(code) * e4m3(scale) / global_scale in float32 (quant.h's rq_dequant_row)."""
    p = packed.numpy()
    codes = np.empty((p.shape[0], p.shape[1] * 2), dtype=np.uint8)
    codes[:, 0::2] = p & 15
    codes[:, 1::2] = p >> 4
    s = scale.float().numpy()                       # E4M3FN widened exactly
    s = np.repeat(s, 16, axis=1)
    w = (E2M1[codes] * s) / np.float32(gs.reshape(-1)[0].item())
    return torch.from_numpy(w.astype(np.float32))


def load_raw(d):
    """Every tensor of a checkpoint dir's *.safetensors, as stored: name -> torch tensor."""
    raw = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), "pt") as sf:
                for k in sf.keys():
                    raw[k] = sf.get_tensor(k)
    return raw


def load_dir(d):
    """All tensors of a checkpoint dir as float32, NVFP4 modules dequantized to <m>.weight."""
    raw = load_raw(d)
    out = {}
    for k, t in raw.items():
        if k.endswith(".weight_packed"):
            m = k[: -len(".weight_packed")]
            out[m + ".weight"] = dequant_nvfp4(t, raw[m + ".weight_scale"], raw[m + ".weight_global_scale"])
        elif k.endswith((".weight_scale", ".weight_global_scale", ".input_global_scale")):
            continue
        else:
            out[k] = t.float()
    return out


def to_transformers(sd, cfg):
    """Checkpoint names -> LagunaForCausalLM parameter names (fused experts)."""
    out = {}
    moe_layers = set()
    for k, t in sd.items():
        k2 = k.replace(".mlp.shared_expert.", ".mlp.shared_experts.")
        k2 = k2.replace(".mlp.experts.e_score_correction_bias", ".mlp.gate.e_score_correction_bias")
        if ".mlp.experts." in k2:
            moe_layers.add(int(k2.split(".")[2]))
            continue
        out[k2] = t
    E = cfg["num_experts"]
    for i in sorted(moe_layers):
        p = f"model.layers.{i}.mlp.experts."
        gu = [torch.cat([sd[p + f"{e}.gate_proj.weight"], sd[p + f"{e}.up_proj.weight"]], 0) for e in range(E)]
        out[p + "gate_up_proj"] = torch.stack(gu)
        out[p + "down_proj"] = torch.stack([sd[p + f"{e}.down_proj.weight"] for e in range(E)])
    return out


def build_model(d, overrides):
    from transformers import LagunaConfig, LagunaForCausalLM
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg.update(overrides)
    hf = dict(cfg)
    hf.pop("quantization_config", None)
    config = LagunaConfig(**{k: v for k, v in hf.items() if k not in ("architectures", "model_type")})
    config._attn_implementation = "eager"
    try:
        config._experts_implementation = "eager"
    except Exception:
        pass
    torch.manual_seed(0)
    model = LagunaForCausalLM(config).float().eval()
    sd = to_transformers(load_dir(d), cfg)
    if cfg.get("tie_word_embeddings"):
        sd.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not (cfg.get("tie_word_embeddings") and m == "lm_head.weight")]
    if missing or unexpected:
        sys.exit(f"state dict mismatch: missing {missing[:8]} unexpected {unexpected[:8]}")
    return model, cfg


@torch.no_grad()
def run_case(model, ids, n_greedy):
    x = torch.tensor([ids])
    logits = model(input_ids=x, use_cache=False).logits[0].float()
    top = torch.topk(logits, 5, dim=-1)
    seq = list(ids)
    greedy = []
    for _ in range(n_greedy):
        lg = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
        t = int(torch.argmax(lg))
        greedy.append(t)
        seq.append(t)
    f = lambda v: float(np.float32(v))
    return {
        "prompt": ids,
        "last_logits": [f(v) for v in logits[-1].tolist()],
        "top5_ids": top.indices.tolist(),
        "top5_vals": [[f(v) for v in r] for r in top.values.tolist()],
        "greedy": greedy,
    }


def rope_of(model):
    """transformers' inverse frequencies and attention scaling per layer type."""
    r = model.model.rotary_emb
    return {t: {"inv_freq": [float(v) for v in getattr(r, f"{t}_inv_freq").tolist()],
                "attention_scaling": float(getattr(r, f"{t}_attention_scaling"))}
            for t in r.layer_types}


# RoPE-only cases: configs whose rotary tables transformers computes without
# weights (Laguna S 2.1's real head_dim and YaRN block; a YaRN variant with
# mscale / mscale_all_dim, default betas and a 0.75 partial factor).
ROPE_CONFIGS = [
    {"hidden_size": 3072, "num_hidden_layers": 4, "vocab_size": 1000, "num_attention_heads": 48,
     "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "num_experts": 4,
     "num_experts_per_tok": 2, "moe_intermediate_size": 1024, "max_position_embeddings": 1048576,
     "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "sliding_attention"],
     "rope_parameters": {
         "full_attention": {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 128.0,
                            "original_max_position_embeddings": 8192, "beta_fast": 32.0, "beta_slow": 1.0,
                            "attention_factor": 1.4852030263919618, "partial_rotary_factor": 0.5},
         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}}},
    {"hidden_size": 256, "num_hidden_layers": 2, "vocab_size": 1000, "num_attention_heads": 4,
     "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512, "num_experts": 4,
     "num_experts_per_tok": 2, "moe_intermediate_size": 64, "max_position_embeddings": 65536,
     "layer_types": ["full_attention", "sliding_attention"],
     "rope_parameters": {
         "full_attention": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0,
                            "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 0.5,
                            "partial_rotary_factor": 0.75},
         "sliding_attention": {"rope_type": "default", "rope_theta": 50000.0, "partial_rotary_factor": 0.5}}},
]


def rope_case(cfg):
    from transformers import LagunaConfig
    from transformers.models.laguna.modeling_laguna import LagunaRotaryEmbedding
    c = LagunaConfig(**json.loads(json.dumps(cfg)))
    r = LagunaRotaryEmbedding(c)
    return {"config": cfg,
            "rope": {t: {"inv_freq": [float(v) for v in getattr(r, f"{t}_inv_freq").tolist()],
                         "attention_scaling": float(getattr(r, f"{t}_attention_scaling"))}
                     for t in r.layer_types}}


def prompts(vocab, seed, lengths):
    rng = np.random.default_rng(seed)
    return [[int(v) for v in rng.integers(3, vocab, n)] for n in lengths]


def with_overrides(src, overrides, tmp):
    """A directory that is src with config.json keys replaced (shards symlinked)."""
    if not overrides:
        return src
    d = tempfile.mkdtemp(dir=tmp)
    for f in os.listdir(src):
        if f != "config.json":
            os.symlink(os.path.join(os.path.abspath(src), f), os.path.join(d, f))
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg.update(overrides)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    return d


# What the committed golden covers. Each model: mkckpt arguments, the form
# the test reads ("src": mkckpt's directory; "export": `requantfs export` of it
# with mkckpt's --calib-out twin as CALIB, which must equal the all-NVFP4 twin
# that transformers reads here), config.json overrides, prompt lengths. The
# short window makes sliding layers drop keys inside the 40-token prompt.
MODELS = [
    {"name": "nvfp4", "mkckpt": [], "form": "src", "override": {}, "lengths": [1, 7, 23]},
    {"name": "dense", "mkckpt": ["--dense"], "form": "src", "override": {}, "lengths": [5, 19]},
    {"name": "export", "mkckpt": [], "form": "export", "override": {}, "lengths": [11]},
    {"name": "nvfp4-window6", "mkckpt": [], "form": "src", "override": {"sliding_window": 6},
     "lengths": [40]},
    {"name": "nvfp4-softcap", "mkckpt": [], "form": "src", "override": {"moe_router_logit_softcapping": 0.05},
     "lengths": [9]},
]


def make_dir(rq, spec, tmp):
    """mkckpt's directory for spec (its --calib-out twin for the export form)."""
    base = os.path.join(tmp, "ckpt" + "".join(spec["mkckpt"]) + spec["form"])
    twin = base + ".twin"
    extra = ["--calib-out", twin] if spec["form"] == "export" else []
    if not os.path.exists(base):
        subprocess.run([rq, "mkckpt", base] + extra + spec["mkckpt"], check=True, stdout=subprocess.DEVNULL)
    return twin if spec["form"] == "export" else base


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requantfs", default="build/requantfs")
    ap.add_argument("--out", default=None)
    ap.add_argument("--model-dir", default=None, help="check one existing directory")
    ap.add_argument("--greedy", type=int, default=16)
    a = ap.parse_args()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="rq-golden-")
    models = []
    if a.model_dir:
        specs = [{"name": os.path.basename(a.model_dir.rstrip("/")), "dir": a.model_dir, "override": {},
                  "lengths": [1, 7, 23]}]
    else:
        specs = MODELS
    for spec in specs:
        d = spec.get("dir") or make_dir(a.requantfs, spec, tmp)
        model, cfg = build_model(with_overrides(d, spec["override"], tmp), {})
        cases = [run_case(model, p, a.greedy) for p in prompts(cfg["vocab_size"], 7, spec["lengths"])]
        m = {"name": spec["name"], "mkckpt": spec.get("mkckpt", []), "form": spec.get("form", "src"),
             "override": spec["override"],
             "rope": rope_of(model), "cases": cases}
        models.append(m)
        print(f"{spec['name']}: {len(cases)} cases, greedy {[c['greedy'][:6] for c in cases]}", file=sys.stderr)
    doc = {
        "generator": "tools/golden/gen_engine_golden.py",
        "reference": "transformers %s LagunaForCausalLM, float32, eager attention" % __import__("transformers").__version__,
        "tolerance": "max|dlogit| <= 1e-3 * max|logit| per position; greedy tokens identical",
        "models": models,
        "rope_cases": [rope_case(c) for c in ROPE_CONFIGS],
    }
    out = a.out or (None if a.model_dir else "tests/data/engine_golden.json")
    if out:
        with open(out, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {out} ({os.path.getsize(out)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
