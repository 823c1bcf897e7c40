#!/usr/bin/env python3
"""Convert a llama-architecture GGUF (byte-level BPE tokenizer) into a Hugging Face directory.

  .venv/bin/python3 tools/gguf_to_hf.py GGUF OUT_DIR

Writes OUT_DIR/{model.safetensors (BF16), config.json, generation_config.json,
tokenizer.json, tokenizer_config.json}. Needs only the `gguf` package (its
GGUFReader parses the container), numpy and `tokenizers`; no torch.

What it does, and why:
  * every tensor is dequantized to float32 by this file's own block decoders
    (F32, F16, Q8_0, Q4_0, Q4_1: the types such small llama GGUFs carry; any
    other type is refused, naming the tensor), then rounded to BF16
    round-to-nearest-even;
  * llama.cpp's converter permutes the rows of attn_q / attn_k (it interleaves
    the two rotary halves of each head); that permutation is undone here, as
    transformers' GGUF loader does, so the weights are in HF's rotate_half
    layout again;
  * GGUF names -> HF names (blk.N.attn_q -> model.layers.N.self_attn.q_proj, ...);
    no output.weight means tied embeddings;
  * the tokenizer is rebuilt from tokenizer.ggml.{tokens,merges,token_type}:
    byte-level BPE, control tokens (token_type 3) as special added tokens, and
    the pre-tokenizer that tokenizer.ggml.pre names (llama.cpp's table);
  * the output is deterministic: tensors in name order, JSON with sorted keys,
    so two runs give identical bytes. It is written to OUT_DIR.tmp and renamed.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

# tokenizer.ggml.pre -> the pre-tokenizer llama.cpp applies for it, as `tokenizers` objects.
# "smollm": each digit alone, then the GPT-2 regex (llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM).
PRE_TOKENIZERS = {
    "smollm": lambda: pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
    "gpt-2": lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
}

# GGUF per-layer tensor name -> HF name inside model.layers.N.
LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TOP_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}


class ConvertError(Exception):
    pass


def f16(blocks, lo, hi):
    """Bytes lo:hi of each block as a float16 widened to float32 (exact)."""
    return np.ascontiguousarray(blocks[:, lo:hi]).view(np.float16).astype(np.float32)


def nibbles(qs):
    """Q4 packing: byte j holds element j (low nibble) and element j+16 (high nibble)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)


def dq_q8_0(blocks):   # 34 bytes: f16 d, 32 x int8 q          -> d * q
    q = np.ascontiguousarray(blocks[:, 2:]).view(np.int8).astype(np.float32)
    return q * f16(blocks, 0, 2)


def dq_q4_0(blocks):   # 18 bytes: f16 d, 16 bytes of nibbles   -> d * (q - 8)
    return (nibbles(blocks[:, 2:]) - np.float32(8)) * f16(blocks, 0, 2)


def dq_q4_1(blocks):   # 20 bytes: f16 d, f16 m, 16 bytes       -> d * q + m
    return f16(blocks, 0, 2) * nibbles(blocks[:, 4:]) + f16(blocks, 2, 4)


# ggml type name -> (elements per block, bytes per block, decoder)
BLOCK_TYPES = {
    "Q8_0": (32, 34, dq_q8_0),
    "Q4_0": (32, 18, dq_q4_0),
    "Q4_1": (32, 20, dq_q4_1),
}


def dequantize(t):
    """A GGUF tensor as float32, numpy shape = reversed ggml ne (rows, cols)."""
    shape = tuple(int(x) for x in reversed(t.shape))
    kind = t.tensor_type.name
    if kind == "F32":
        return np.asarray(t.data, dtype=np.float32).reshape(shape)
    if kind == "F16":
        return np.asarray(t.data).view(np.float16).astype(np.float32).reshape(shape)
    if kind not in BLOCK_TYPES:
        raise ConvertError(f"tensor {t.name}: ggml type {kind} is not supported "
                           f"(supported: F32, F16, {', '.join(BLOCK_TYPES)})")
    qk, size, fn = BLOCK_TYPES[kind]
    raw = np.ascontiguousarray(np.asarray(t.data, dtype=np.uint8)).reshape(-1)
    n = int(np.prod(shape))
    if n % qk or raw.size != n // qk * size:
        raise ConvertError(f"tensor {t.name}: {raw.size} bytes do not hold {n} {kind} elements")
    return fn(raw.reshape(-1, size)).reshape(shape)


def bf16_bits(x):
    """float32 -> BF16 bit patterns, round to nearest even (no NaN expected: refused)."""
    if not np.all(np.isfinite(x)):
        raise ConvertError("non-finite weight")
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((b + np.uint32(0x7FFF) + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def unpermute(w, n_head):
    """Undo llama.cpp's Q/K row interleave: rows (head, half, i) were stored as (head, i, half)."""
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise ConvertError(f"{rows} rows do not split into {n_head} heads of two rotary halves")
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_name(gguf_name):
    base, _, suffix = gguf_name.rpartition(".")
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in LAYER_NAMES:
        return f"model.layers.{int(parts[1])}.{LAYER_NAMES[parts[2]]}.{suffix}"
    if base in TOP_NAMES:
        return f"{TOP_NAMES[base]}.{suffix}"
    raise ConvertError(f"tensor {gguf_name}: no Hugging Face llama name for it")


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        if default is None:
            raise ConvertError(f"GGUF key {key} is missing")
        return default
    return f.contents()


def f32_clean(v):
    """A GGUF float32 as the shortest decimal that round-trips (9.99999974e-06 -> 1e-05)."""
    return float(str(np.float32(v)))


def write_safetensors(path, tensors):
    """tensors: name -> (shape, uint16 BF16 bits). Name order, 8-byte aligned header."""
    header, off = {}, 0
    for name in sorted(tensors):
        shape, bits = tensors[name]
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + bits.nbytes]}
        off += bits.nbytes
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in sorted(tensors):
            f.write(tensors[name][1].astype("<u2").tobytes())


def convert_weights(r, cfg):
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    out = {}
    for t in r.tensors:
        name = hf_name(t.name)
        w = dequantize(t)
        if t.name.endswith("attn_q.weight"):
            w = unpermute(w, n_head)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute(w, n_kv)
        try:
            out[name] = (w.shape, bf16_bits(w))
        except ConvertError as e:
            raise ConvertError(f"tensor {t.name}: {e}") from None
    if "lm_head.weight" in out:
        cfg["tie_word_embeddings"] = False
    want = {"model.embed_tokens.weight", "model.norm.weight"}
    for i in range(cfg["num_hidden_layers"]):
        want |= {f"model.layers.{i}.{v}.weight" for v in LAYER_NAMES.values()}
    missing = sorted(want - out.keys())
    if missing:
        raise ConvertError(f"tensors missing for a llama model: {', '.join(missing[:4])}")
    return out


def llama_config(r):
    arch = field(r, "general.architecture")
    if arch != "llama":
        raise ConvertError(f"general.architecture is {arch!r}; only 'llama' is supported")
    a = "llama."
    hidden = int(field(r, a + "embedding_length"))
    heads = int(field(r, a + "attention.head_count"))
    head_dim = int(field(r, a + "rope.dimension_count", hidden // heads))
    if head_dim * heads != hidden:
        raise ConvertError("llama.rope.dimension_count * head_count != embedding_length: unsupported")
    bos = int(field(r, "tokenizer.ggml.bos_token_id"))
    eos = int(field(r, "tokenizer.ggml.eos_token_id"))
    pad = int(field(r, "tokenizer.ggml.padding_token_id", eos))
    tokens = field(r, "tokenizer.ggml.tokens")
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": int(field(r, a + "feed_forward_length")),
        "max_position_embeddings": int(field(r, a + "context_length")),
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": int(field(r, a + "block_count")),
        "num_key_value_heads": int(field(r, a + "attention.head_count_kv", heads)),
        "pad_token_id": pad,
        "pretraining_tp": 1,
        "rms_norm_eps": f32_clean(field(r, a + "attention.layer_norm_rms_epsilon")),
        "rope_scaling": None,
        "rope_theta": f32_clean(field(r, a + "rope.freq_base", 10000.0)),
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": int(field(r, a + "vocab_size", len(tokens))),
    }


def build_tokenizer(r):
    """(tokenizer.json text, tokenizer_config dict) from the GGUF's tokenizer.ggml.* keys."""
    kind = field(r, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ConvertError(f"tokenizer.ggml.model is {kind!r}; only 'gpt2' (byte-level BPE) is supported")
    pre = field(r, "tokenizer.ggml.pre", "gpt-2")
    if pre not in PRE_TOKENIZERS:
        raise ConvertError(f"tokenizer.ggml.pre is {pre!r}; supported: {', '.join(PRE_TOKENIZERS)}")
    if field(r, "tokenizer.ggml.add_space_prefix", False):
        raise ConvertError("tokenizer.ggml.add_space_prefix is true: not supported")
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = []
    for m in field(r, "tokenizer.ggml.merges"):
        pair = m.split(" ")
        if len(pair) != 2:
            raise ConvertError(f"tokenizer.ggml.merges entry {m!r} is not two tokens")
        merges.append(tuple(pair))
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ConvertError("tokenizer.ggml.tokens has duplicate tokens")
    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = PRE_TOKENIZERS[pre]()
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    special = [i for i, ty in enumerate(types) if ty == 3]   # llama.cpp: 3 = CONTROL
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in special])

    def name(key):
        i = field(r, key, -1)
        return tokens[int(i)] if 0 <= int(i) < len(tokens) else None
    bos, eos = name("tokenizer.ggml.bos_token_id"), name("tokenizer.ggml.eos_token_id")
    cfg = {
        "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(field(r, "tokenizer.ggml.add_eos_token", False)),
        "add_prefix_space": False,
        "added_tokens_decoder": {str(i): {"content": tokens[i], "lstrip": False, "normalized": False,
                                          "rstrip": False, "single_word": False, "special": True}
                                 for i in special},
        "bos_token": bos,
        "clean_up_tokenization_spaces": False,
        "eos_token": eos,
        "model_max_length": int(field(r, "llama.context_length")),
        "pad_token": name("tokenizer.ggml.padding_token_id") or eos,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": name("tokenizer.ggml.unknown_token_id"),
    }
    if "tokenizer.chat_template" in r.fields:
        cfg["chat_template"] = field(r, "tokenizer.chat_template")
    return tok.to_str(pretty=True), cfg


def dump_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")


def convert(gguf_path, out_dir):
    r = GGUFReader(gguf_path)
    cfg = llama_config(r)
    tok_json, tok_cfg = build_tokenizer(r)         # refuse a bad tokenizer before any weight
    weights = convert_weights(r, cfg)
    tmp = out_dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    write_safetensors(os.path.join(tmp, "model.safetensors"), weights)
    dump_json(os.path.join(tmp, "config.json"), cfg)
    gen = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
           "pad_token_id": cfg["pad_token_id"]}
    dump_json(os.path.join(tmp, "generation_config.json"), gen)
    with open(os.path.join(tmp, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok_json)
        f.write("\n")
    dump_json(os.path.join(tmp, "tokenizer_config.json"), tok_cfg)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)


def main():
    if len(sys.argv) != 3:
        print("usage: gguf_to_hf.py GGUF OUT_DIR", file=sys.stderr)
        return 2
    try:
        convert(sys.argv[1], sys.argv[2])
    except (ConvertError, OSError) as e:
        print(f"gguf_to_hf: {sys.argv[1]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
