#!/usr/bin/env python3
"""Tiny random checkpoints, one per decoder family the engine runs, for the golden tests.

    /work/venv-ref/bin/python tools/golden/gen_tiny_models.py [--out tests/data/tiny]

Writes OUT/<family>/{config.json, model.safetensors} for llama, mistral, qwen2, qwen3,
mixtral, qwen2_moe, qwen3_moe. Each config is validated by transformers' own config class
(the one its model_type names) and each checkpoint is loaded back with from_pretrained,
which must find every parameter (no missing, unexpected or freshly initialised weight) and
read exactly the values written.

The files use the names and config keys of real Hub checkpoints of each family: per-expert
2-D Linears (block_sparse_moe.experts.E.w1/w2/w3 for mixtral, mlp.experts.E.*_proj for the
Qwen MoEs; transformers fuses them on load), rope_theta / rope_scaling as separate keys,
torch_dtype bfloat16. Weights are drawn in float32 from a fixed seed per family and stored
as BF16 (round to nearest even, torch's conversion); their scales keep activations of order
one, so logits are far from zero and the routers' top-k choices are clear.

Dimensions are compatible with every --scheme: every Linear's input features are a
multiple of 128 (the w8a16/w4a16 group; 16 for nvfp4). Each file stays under ~1.5 MB.
"""
import argparse
import copy
import json
import os
import sys

import torch
from safetensors.torch import save_file

H = 128          # hidden size
HD = 64          # head dim
NH = 2           # attention heads  (q: 128 rows)
NKV = 1          # kv heads         (k, v: 64 rows; grouped-query attention 2:1)
I = 256          # dense MLP intermediate
E, TOPK, IE = 4, 2, 128   # experts, experts per token, expert intermediate
V = 512          # vocabulary
L = 2            # layers

BASE = {
    "hidden_size": H, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
    "num_hidden_layers": L, "vocab_size": V, "intermediate_size": I, "hidden_act": "silu",
    "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
    "bos_token_id": 1, "eos_token_id": 2, "attention_dropout": 0.0, "initializer_range": 0.02,
}

FAMILIES = {
    # Llama 3 rope scaling with a short original context so that it changes most frequencies
    # (wavelengths above 64 positions are slowed 8x, 16..64 are blended); biases on q/k/v/o.
    "llama": dict(model_type="llama", architectures=["LlamaForCausalLM"], attention_bias=True,
                  mlp_bias=False, tie_word_embeddings=True, rope_theta=500000.0,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    # A window of 8 tokens: every golden prompt is longer, so the window changes the logits.
    "mistral": dict(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=8),
    "qwen2": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], use_sliding_window=False,
                  sliding_window=None, max_window_layers=L, rope_theta=1000000.0),
    "qwen3": dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], attention_bias=False,
                  use_sliding_window=False, sliding_window=None, max_window_layers=L,
                  rope_theta=1000000.0),
    "mixtral": dict(model_type="mixtral", architectures=["MixtralForCausalLM"], intermediate_size=IE,
                    num_local_experts=E, num_experts_per_tok=TOPK, sliding_window=None,
                    router_aux_loss_coef=0.0, output_router_logits=False, rope_theta=1000000.0),
    "qwen2_moe": dict(model_type="qwen2_moe", architectures=["Qwen2MoeForCausalLM"],
                      num_experts=E, num_experts_per_tok=TOPK, moe_intermediate_size=IE,
                      shared_expert_intermediate_size=IE, norm_topk_prob=False,
                      decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False,
                      sliding_window=None, max_window_layers=L, router_aux_loss_coef=0.0,
                      output_router_logits=False, rope_theta=1000000.0),
    "qwen3_moe": dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"],
                      attention_bias=False, num_experts=E, num_experts_per_tok=TOPK,
                      moe_intermediate_size=IE, norm_topk_prob=True, decoder_sparse_step=1,
                      mlp_only_layers=[], use_sliding_window=False, sliding_window=None,
                      max_window_layers=L, router_aux_loss_coef=0.0, output_router_logits=False,
                      rope_theta=1000000.0),
}
SEEDS = {f: 1800 + i for i, f in enumerate(FAMILIES)}


def config_of(family):
    cfg = copy.deepcopy(BASE)
    cfg.update(copy.deepcopy(FAMILIES[family]))
    return dict(sorted(cfg.items()))


def tensors_of(cfg):
    """Hub-style tensor name -> (shape, init kind) for the family's checkpoint."""
    mt = cfg["model_type"]
    # Tied: a smaller embedding, or h . e_t of the current token dominates and greedy repeats it.
    embed = "embed_tied" if cfg["tie_word_embeddings"] else "embed"
    t = {"model.embed_tokens.weight": ((V, H), embed), "model.norm.weight": ((H,), "norm")}
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = ((V, H), "head")
    qkv_bias = mt in ("qwen2", "qwen2_moe") or cfg.get("attention_bias", False)
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ((H,), "norm")
        t[p + "post_attention_layernorm.weight"] = ((H,), "norm")
        a = p + "self_attn."
        for n, rows in (("q_proj", NH * HD), ("k_proj", NKV * HD), ("v_proj", NKV * HD)):
            t[a + n + ".weight"] = ((rows, H), "linear")
            if qkv_bias:
                t[a + n + ".bias"] = ((rows,), "bias")
        t[a + "o_proj.weight"] = ((H, NH * HD), "linear")
        if mt == "llama" and cfg["attention_bias"]:
            t[a + "o_proj.bias"] = ((H,), "bias")
        if mt in ("qwen3", "qwen3_moe"):
            t[a + "q_norm.weight"] = ((HD,), "norm")
            t[a + "k_norm.weight"] = ((HD,), "norm")

        def mlp(prefix, inter, names=("gate_proj", "up_proj", "down_proj")):
            t[prefix + names[0] + ".weight"] = ((inter, H), "linear")
            t[prefix + names[1] + ".weight"] = ((inter, H), "linear")
            t[prefix + names[2] + ".weight"] = ((H, inter), "linear")
        if mt == "mixtral":
            m = p + "block_sparse_moe."
            t[m + "gate.weight"] = ((E, H), "router")
            for e in range(E):
                mlp(f"{m}experts.{e}.", IE, ("w1", "w3", "w2"))
        elif mt in ("qwen2_moe", "qwen3_moe"):
            m = p + "mlp."
            t[m + "gate.weight"] = ((E, H), "router")
            for e in range(E):
                mlp(f"{m}experts.{e}.", IE)
            if mt == "qwen2_moe":
                mlp(m + "shared_expert.", cfg["shared_expert_intermediate_size"])
                t[m + "shared_expert_gate.weight"] = ((1, H), "linear")
        else:
            mlp(p + "mlp.", I)
    return t


def draw(shape, kind, g):
    """float32 weights whose scale keeps activations and logits of order one."""
    n = torch.randn(shape, generator=g, dtype=torch.float32)
    fan_in = shape[-1]
    if kind == "embed":
        return n * 0.5
    if kind == "embed_tied":
        return n * 0.15
    if kind == "norm":
        return 1.0 + 0.2 * n
    if kind == "bias":
        return 0.3 * n
    if kind == "head":
        return n * (2.0 / fan_in ** 0.5)
    if kind == "router":
        return n * (3.0 / fan_in ** 0.5)
    return n * (1.0 / fan_in ** 0.5)


def make(family, out_dir):
    import transformers
    cfg = config_of(family)
    transformers.CONFIG_MAPPING[cfg["model_type"]](**copy.deepcopy(cfg))   # its own class accepts it
    g = torch.Generator().manual_seed(SEEDS[family])
    sd = {name: draw(shape, kind, g).to(torch.bfloat16).contiguous()
          for name, (shape, kind) in tensors_of(cfg).items()}
    d = os.path.join(out_dir, family)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    check(d, sd)
    return d


def check(d, sd):
    """transformers reads every tensor we wrote, and nothing else is left initialised."""
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k != "error_msgs" or (k == "error_msgs" and v)}
    if bad:
        sys.exit(f"{d}: transformers' loading info is not clean: {bad}")
    total_written = sum(v.numel() for v in sd.values())
    params = dict(model.named_parameters())
    total_model = sum(p.numel() for p in params.values())
    if total_written != total_model:
        sys.exit(f"{d}: wrote {total_written} weights, the model has {total_model}")
    ref = torch.cat([v.float().flatten() for v in sd.values()]).sort().values
    got = torch.cat([p.detach().flatten() for p in params.values()]).sort().values
    if not torch.equal(ref, got):
        sys.exit(f"{d}: the loaded weights are not the values written")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/tiny")
    ap.add_argument("--family", action="append", help="only these (default: all)")
    a = ap.parse_args()
    for fam in a.family or FAMILIES:
        d = make(fam, a.out)
        size = os.path.getsize(os.path.join(d, "model.safetensors"))
        print(f"{fam}: {d}/model.safetensors {size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
