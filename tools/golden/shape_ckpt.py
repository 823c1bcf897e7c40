#!/usr/bin/env python3
"""shape_ckpt.py - a shape-only checkpoint of a real model: config.json, the
index and safetensors shards whose headers are real (names, dtypes, shapes,
offsets as Hugging Face writes them) and whose data are SPARSE (the files are
extended with truncate: no disk is used), so that `requantfs plan` gives the
exact figures of the real model without downloading it.

    tools/golden/shape_ckpt.py MODEL OUT [--layers N] [--shards N]
    MODEL: llama-3.1-70b | qwen3-235b-a22b | laguna-s-2.1-0801 | laguna-s-2.1-0722 | tiny-llama

The architecture numbers below are the models' published config.json values
(source named on each). Standard library only (CI's .venv or any python3).
Data bytes read back as zeros, except F32 tensors, written as 1.0 (so that
Laguna's input_global_scale calibration scalars are valid: `requantfs plan
SRC --calib` reads them); F32 tensors are a few KiB per shard.

Tensors are assigned to shards in the model's state-dict order, greedily,
each shard closed once it reaches total/N bytes (N = the published repo's
shard count unless --shards), and inside a shard laid out as safetensors
does (SPEC.md section 4: by dtype descending, then name).
"""
import argparse
import json
import os
import struct
import sys

# meta-llama/Llama-3.1-70B config.json
LLAMA_31_70B = dict(
    architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=8192,
    intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
    num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=False,
    rms_norm_eps=1e-05, rope_theta=500000.0, max_position_embeddings=131072,
    bos_token_id=128000, eos_token_id=128001, hidden_act="silu", torch_dtype="bfloat16")
# Qwen/Qwen3-235B-A22B config.json
QWEN3_235B = dict(
    architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=4096,
    intermediate_size=12288, moe_intermediate_size=1536, num_experts=128,
    num_experts_per_tok=8, num_hidden_layers=94, num_attention_heads=64,
    num_key_value_heads=4, head_dim=128, vocab_size=151936, tie_word_embeddings=False,
    decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True, rms_norm_eps=1e-06,
    rope_theta=1000000.0, max_position_embeddings=40960, bos_token_id=151643,
    eos_token_id=151645, hidden_act="silu", torch_dtype="bfloat16")
# poolside Laguna S 2.1 (its config as summarized in shared/LAGUNA.md; names and the
# quantization_config of the NVFP4 releases as `requantfs mkckpt` writes them)
LAGUNA_S_21 = dict(
    architectures=["LagunaForCausalLM"], model_type="laguna", hidden_size=3072,
    intermediate_size=12288, moe_intermediate_size=1024, shared_expert_intermediate_size=1024,
    num_experts=256, num_experts_per_tok=10, num_hidden_layers=48, num_attention_heads=48,
    num_attention_heads_per_layer=[48 if i % 4 == 0 else 72 for i in range(48)],
    layer_types=["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(48)],
    num_key_value_heads=8, head_dim=128, vocab_size=100352, tie_word_embeddings=False,
    mlp_only_layers=[0], decoder_sparse_step=1, sliding_window=512, gating=True,
    rms_norm_eps=1e-06, max_position_embeddings=1048576, bos_token_id=2, eos_token_id=[2, 24],
    pad_token_id=9, hidden_act="silu", torch_dtype="bfloat16")
# a small Llama-shaped model for tests (every width a multiple of 128)
TINY_LLAMA = dict(
    architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=256,
    intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=64, vocab_size=384, tie_word_embeddings=False, rms_norm_eps=1e-05,
    rope_theta=500000.0, max_position_embeddings=4096, bos_token_id=1, eos_token_id=2,
    hidden_act="silu", torch_dtype="bfloat16")

# (config, published shard count, form)
MODELS = {
    "llama-3.1-70b": (LLAMA_31_70B, 30, "dense"),
    "qwen3-235b-a22b": (QWEN3_235B, 118, "dense"),
    "laguna-s-2.1-0801": (LAGUNA_S_21, 49, "laguna-0801"),
    "laguna-s-2.1-0722": (LAGUNA_S_21, 49, "laguna-0722"),
    "tiny-llama": (TINY_LLAMA, 2, "dense"),
}

DTYPE_SIZE = {"F32": 4, "BF16": 2, "F8_E4M3": 1, "U8": 1}
# safetensors' dtype order (SPEC.md section 4), data laid out descending
DTYPE_RANK = {"U8": 4, "F8_E4M3": 7, "BF16": 14, "F32": 17}
LAGUNA_RULE_LAYERS = range(40, 48)    # 2026-08-01: routed experts of layers 40-47 in BF16

NVFP4_ARGS = {"actorder": None, "block_structure": None, "group_size": 16, "num_bits": 4,
              "observer_kwargs": {}, "scale_dtype": "torch.float8_e4m3fn",
              "strategy": "tensor_group", "symmetric": True, "type": "float", "zp_dtype": None}


def linear(out, name, rows, cols):
    out.append((name + ".weight", "BF16", [rows, cols]))


def nvfp4(out, name, rows, cols):
    out.append((name + ".weight_packed", "U8", [rows, cols // 2]))
    out.append((name + ".weight_scale", "F8_E4M3", [rows, cols // 16]))
    out.append((name + ".weight_global_scale", "F32", [1]))
    out.append((name + ".input_global_scale", "F32", [1]))


def attn(out, p, heads, kv_heads, hd, h):
    """q_proj, k_proj, v_proj, o_proj of p (a layer's "self_attn.")."""
    linear(out, p + "q_proj", heads * hd, h)
    linear(out, p + "k_proj", kv_heads * hd, h)
    linear(out, p + "v_proj", kv_heads * hd, h)
    linear(out, p + "o_proj", h, heads * hd)


def mlp(out, p, m, h, kind=linear):
    """gate_proj, up_proj [m, h] and down_proj [h, m] of p, as kind (linear or nvfp4)."""
    for proj, rows, cols in (("gate_proj", m, h), ("up_proj", m, h), ("down_proj", h, m)):
        kind(out, p + proj, rows, cols)


def llama_like(c, layers):
    """Llama and Qwen3-MoE: state-dict order."""
    h, hd = c["hidden_size"], c["head_dim"]
    t = [("model.embed_tokens.weight", "BF16", [c["vocab_size"], h])]
    for i in range(layers):
        p = f"model.layers.{i}."
        t.append((p + "input_layernorm.weight", "BF16", [h]))
        attn(t, p + "self_attn.", c["num_attention_heads"], c["num_key_value_heads"], hd, h)
        if c["model_type"] == "qwen3_moe":
            t.append((p + "self_attn.q_norm.weight", "BF16", [hd]))
            t.append((p + "self_attn.k_norm.weight", "BF16", [hd]))
        t.append((p + "post_attention_layernorm.weight", "BF16", [h]))
        if c.get("num_experts") and i not in c.get("mlp_only_layers", []):
            linear(t, p + "mlp.gate", c["num_experts"], h)
            for e in range(c["num_experts"]):
                mlp(t, p + f"mlp.experts.{e}.", c["moe_intermediate_size"], h)
        else:
            mlp(t, p + "mlp.", c["intermediate_size"], h)
    t.append(("model.norm.weight", "BF16", [h]))
    t.append(("lm_head.weight", "BF16", [c["vocab_size"], h]))
    return t


def laguna(c, layers, form):
    """Laguna S 2.1: names as in shared/LAGUNA.md and `requantfs mkckpt`."""
    h, hd = c["hidden_size"], c["head_dim"]
    t = [("model.embed_tokens.weight", "BF16", [c["vocab_size"], h])]
    for i in range(layers):
        p = f"model.layers.{i}."
        heads = c["num_attention_heads_per_layer"][i]
        t.append((p + "input_layernorm.weight", "BF16", [h]))
        attn(t, p + "self_attn.", heads, c["num_key_value_heads"], hd, h)
        linear(t, p + "self_attn.g_proj", heads, h)
        t.append((p + "self_attn.q_norm.weight", "BF16", [hd]))
        t.append((p + "self_attn.k_norm.weight", "BF16", [hd]))
        t.append((p + "post_attention_layernorm.weight", "BF16", [h]))
        if i in c["mlp_only_layers"]:
            mlp(t, p + "mlp.", c["intermediate_size"], h)
            continue
        linear(t, p + "mlp.gate", c["num_experts"], h)
        t.append((p + "mlp.experts.e_score_correction_bias", "F32", [c["num_experts"]]))
        bf16 = form == "laguna-0801" and i in LAGUNA_RULE_LAYERS
        for e in range(c["num_experts"]):
            mlp(t, p + f"mlp.experts.{e}.", c["moe_intermediate_size"], h,
                linear if bf16 else nvfp4)
        mlp(t, p + "mlp.shared_expert.", c["shared_expert_intermediate_size"], h)
    t.append(("model.norm.weight", "BF16", [h]))
    t.append(("lm_head.weight", "BF16", [c["vocab_size"], h]))
    return t


def laguna_qconfig(c, layers, form):
    ignore = []
    for i in range(layers):
        p = f"model.layers.{i}."
        ignore += [p + f"self_attn.{x}_proj" for x in "qkvog"]
        if i in c["mlp_only_layers"]:
            ignore += [p + f"mlp.{x}_proj" for x in ("gate", "up", "down")]
        else:
            ignore += [p + "mlp.gate"] + [p + f"mlp.shared_expert.{x}_proj"
                                          for x in ("gate", "up", "down")]
    ignore.append("lm_head")
    if form == "laguna-0801":
        ignore.append(r"re:^model\.layers\.4[0-7]\.mlp\.experts(\..*)?$")
    group = {"format": "nvfp4-pack-quantized",
             "input_activations": dict(NVFP4_ARGS, dynamic="local", observer="static_minmax"),
             "output_activations": None, "targets": ["Linear"],
             "weights": dict(NVFP4_ARGS, dynamic=False, observer="memoryless_minmax")}
    return {"config_groups": {"group_0": group}, "format": "nvfp4-pack-quantized",
            "global_compression_ratio": None, "ignore": ignore, "kv_cache_scheme": None,
            "quant_method": "compressed-tensors", "quantization_status": "compressed",
            "sparsity_config": {}, "transform_config": {}, "version": "0.20.1"}


def nbytes(dtype, shape):
    n = DTYPE_SIZE[dtype]
    for d in shape:
        n *= d
    return n


def write_shard(path, tensors):
    """A safetensors file with these (name, dtype, shape), data sparse (F32 as 1.0)."""
    order = sorted(tensors, key=lambda t: (-DTYPE_RANK[t[1]], t[0]))
    hdr, off, f32 = {"__metadata__": {"format": "pt"}}, 0, []
    for name, dtype, shape in order:
        n = nbytes(dtype, shape)
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        if dtype == "F32":
            f32.append((off, n))
        off += n
    text = json.dumps(hdr, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        base = 8 + len(text)
        for o, n in f32:
            f.seek(base + o)
            f.write(struct.pack("<f", 1.0) * (n // 4))
        f.truncate(base + off)
    return off


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, help="fewer layers (default: the model's)")
    ap.add_argument("--shards", type=int, help="shard count (default: the published repo's)")
    a = ap.parse_args()
    cfg, nshards, form = MODELS[a.model]
    cfg = dict(cfg)
    layers = a.layers or cfg["num_hidden_layers"]
    if layers != cfg["num_hidden_layers"]:
        cfg["num_hidden_layers"] = layers
        for k in ("num_attention_heads_per_layer", "layer_types"):
            if k in cfg:
                cfg[k] = cfg[k][:layers]
    tensors = laguna(cfg, layers, form) if form.startswith("laguna") else llama_like(cfg, layers)
    if form.startswith("laguna"):
        cfg["quantization_config"] = laguna_qconfig(cfg, layers, form)
    nshards = a.shards or nshards
    total = sum(nbytes(d, s) for _, d, s in tensors)
    limit = -(-total // nshards)
    shards, cur, size = [], [], 0
    for t in tensors:
        cur.append(t)
        size += nbytes(t[1], t[2])
        if size >= limit:
            shards.append(cur)
            cur, size = [], 0
    if cur:
        shards.append(cur)
    os.makedirs(a.out, exist_ok=True)
    weight_map, total_size = {}, 0
    for k, sh in enumerate(shards):
        name = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        total_size += write_shard(os.path.join(a.out, name), sh)
        weight_map.update({t[0]: name for t in sh})
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps({"metadata": {"total_size": total_size}, "weight_map": weight_map},
                           indent=2, sort_keys=True) + "\n")
    with open(os.path.join(a.out, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    print(f"{a.out}: {a.model}, {layers} layers, {len(tensors)} tensors, {len(shards)} shards, "
          f"{total_size / 1e9:.2f} GB of tensor data (sparse)")


if __name__ == "__main__":
    sys.exit(main())
