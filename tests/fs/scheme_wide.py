"""A small Llama-shaped checkpoint whose every Linear is 128-divisible, written the same way
everywhere (numpy's frozen RandomState stream, our own safetensors writer): so that W8A16 and
W4A16 (groups of 128) quantize every module, and F16 sources go end to end. Used by
tools/golden/gen_scheme_peer.py (with model_free_ptq) and tests/fs/test_scheme_peer.py (with
requantfs); needs only numpy.

    write(dst, "BF16" | "F16")   ->  dst/{config.json, model-0000{1,2}-of-00002.safetensors,
                                         model.safetensors.index.json}
"""
import json
import os
import struct

import numpy as np

HIDDEN, INTER, VOCAB, KV = 256, 512, 384, 128


def _tensors():
    """(name, shape, std) in a fixed order, and the shard (1 or 2) of each."""
    out = [("model.embed_tokens.weight", (VOCAB, HIDDEN), 0.02, 1)]
    for layer in range(2):
        p = f"model.layers.{layer}."
        shard = 1 if layer == 0 else 2
        out += [
            (p + "input_layernorm.weight", (HIDDEN,), 0, shard),
            (p + "self_attn.q_proj.weight", (HIDDEN, HIDDEN), 0.03, shard),
            # layer 1's k/v sit in shard 1, away from their q_proj: fused partners across shards
            (p + "self_attn.k_proj.weight", (KV, HIDDEN), 0.05, 1),
            (p + "self_attn.v_proj.weight", (KV, HIDDEN), 0.01, 1),
            (p + "self_attn.o_proj.weight", (HIDDEN, HIDDEN), 0.02, shard),
            (p + "post_attention_layernorm.weight", (HIDDEN,), 0, shard),
            (p + "mlp.gate_proj.weight", (INTER, HIDDEN), 0.04, shard),
            (p + "mlp.up_proj.weight", (INTER, HIDDEN), 0.02, shard),
            (p + "mlp.down_proj.weight", (HIDDEN, INTER), 0.02, shard),
        ]
    out += [("model.norm.weight", (HIDDEN,), 0, 2), ("lm_head.weight", (VOCAB, HIDDEN), 0.02, 2)]
    return out


def _bf16_bytes(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16          # round to nearest even
    return u.astype(np.uint16).tobytes()


def _save(path, tensors):
    """safetensors as safetensors.torch.save_file writes it: data sorted by dtype, then name."""
    order = sorted(tensors, key=lambda k: k)
    hdr, blobs, off = {}, [], 0
    for k in order:
        dt, shape, data = tensors[k]
        hdr[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    j = json.dumps(hdr, separators=(",", ":")).encode()
    j += b" " * (-len(j) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(j)) + j + b"".join(blobs))


def write(dst, dtype="BF16"):
    rng = np.random.RandomState(20261203)      # the legacy stream numpy keeps frozen
    os.makedirs(dst, exist_ok=True)
    shards = {1: {}, 2: {}}
    wmap, total = {}, 0
    for name, shape, std, shard in _tensors():
        a = rng.standard_normal(shape) * std if std else 1.0 + 0.1 * rng.standard_normal(shape)
        data = _bf16_bytes(a) if dtype == "BF16" else a.astype(np.float16).tobytes()
        shards[shard][name] = (dtype, shape, data)
        fn = f"model-0000{shard}-of-00002.safetensors"
        wmap[name] = fn
        total += len(data)
    for s, t in shards.items():
        _save(os.path.join(dst, f"model-0000{s}-of-00002.safetensors"), t)
    with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2,
                  sort_keys=True)
        f.write("\n")
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
           "intermediate_size": INTER, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": VOCAB,
           "torch_dtype": "bfloat16" if dtype == "BF16" else "float16"}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    return dst
