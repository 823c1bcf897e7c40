#!/usr/bin/env python3
"""Peer test: tools/gguf_to_hf.py on small GGUF files written here with the `gguf` package's
own writer and quantizers (.venv: gguf, numpy, tokenizers, safetensors; tools/setup-model
installs gguf).

  * weights: F32 attn_q/attn_k written with llama.cpp's row permutation come back exactly in
    HF's layout (the un-permutation, checked against the permutation, not against itself);
    Q8_0, Q4_0, Q4_1 and F16 tensors come back as gguf.quants.dequantize's float32 rounded
    to BF16 to nearest-even (rounding checked by float64 distance, not by bit tricks);
    output.weight present -> lm_head and tie_word_embeddings false;
  * config.json from the llama.* keys; tokenizer.json: byte-level BPE with the merges, control
    tokens whole, digits split one by one for tokenizer.ggml.pre = smollm; decode exact;
  * refusals, naming the key or tensor, before any output: another architecture, an unknown
    tokenizer.ggml.pre, a ggml type it does not decode (Q6_K);
  * two runs give identical bytes.
usage: test_gguf_convert.py        Prints TAP.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import gguf
    from gguf.quants import dequantize, quantize
    from safetensors import safe_open
    from tokenizers import Tokenizer, pre_tokenizers
except ImportError as e:
    print(f"not ok 1 - {e} (python {sys.executable}): run tools/setup (its tools/setup-model installs gguf)")
    print("1..1")
    sys.exit(1)

ROOT = os.environ.get("RQ_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CONVERT = os.path.join(ROOT, "tools", "gguf_to_hf.py")
Q = gguf.GGMLQuantizationType
H, NH, NKV, FF = 64, 2, 1, 96
HD = H // NH
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


def bf16_exact(x):
    """float32 values already representable in BF16 (low 16 bits zero)."""
    b = x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return b.view(np.float32)


def bf16_rne_ref(x):
    """BF16 bits of float32 x, round to nearest, ties to even, decided in float64."""
    x = x.astype(np.float32)
    lo = (x.view(np.uint32) & np.uint32(0xFFFF0000))
    hi = lo + np.uint32(0x10000)
    xl, xh = lo.view(np.float32).astype(np.float64), hi.view(np.float32).astype(np.float64)
    dl, dh = np.abs(x.astype(np.float64) - xl), np.abs(xh - x.astype(np.float64))
    even_lo = ((lo >> 16) & 1) == 0
    pick_hi = (dh < dl) | ((dh == dl) & ~even_lo)
    return (np.where(pick_hi, hi, lo) >> 16).astype(np.uint16)


def llama_cpp_permute(w, n_head):
    """What llama.cpp's converter does to q/k rows: (head, half, i) -> (head, i, half)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def vocab():
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = ["h e", "t he", "Ġ the"]
    tokens = special + alphabet + ["he", "the", "Ġthe"]
    types = [3] * len(special) + [1] * (len(tokens) - len(special))
    return tokens, types, merges


def write_gguf(path, arch="llama", pre="smollm", q6k=False, rng=None):
    tokens, types, merges = vocab()
    V = len(tokens)
    w = gguf.GGUFWriter(path, arch)
    w.add_uint32(f"{arch}.block_count", 1)
    w.add_uint32(f"{arch}.context_length", 512)
    w.add_uint32(f"{arch}.embedding_length", H)
    w.add_uint32(f"{arch}.feed_forward_length", FF)
    w.add_uint32(f"{arch}.attention.head_count", NH)
    w.add_uint32(f"{arch}.attention.head_count_kv", NKV)
    w.add_float32(f"{arch}.rope.freq_base", 10000.0)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32(f"{arch}.vocab_size", V)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_string("tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    ref = {}

    def put(name, hf, x, qt):
        if qt == Q.F32:
            w.add_tensor(name, x.astype(np.float32))
            deq = x.astype(np.float32)
        elif qt == Q.F16:
            w.add_tensor(name, x.astype(np.float16))
            deq = x.astype(np.float16).astype(np.float32)
        else:
            data = quantize(x.astype(np.float32), qt)
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qt)
            deq = dequantize(data, qt).reshape(x.shape)
        ref[hf] = deq

    r = rng
    wq = bf16_exact(r.standard_normal((NH * HD, H)).astype(np.float32))
    wk = bf16_exact(r.standard_normal((NKV * HD, H)).astype(np.float32))
    put("token_embd.weight", "model.embed_tokens.weight", r.standard_normal((V, H)), Q.Q8_0)
    put("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", llama_cpp_permute(wq, NH), Q.F32)
    put("blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj.weight", llama_cpp_permute(wk, NKV), Q.F32)
    ref["model.layers.0.self_attn.q_proj.weight"], ref["model.layers.0.self_attn.k_proj.weight"] = wq, wk
    put("blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight", r.standard_normal((NKV * HD, H)), Q.F16)
    put("blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight", r.standard_normal((H, H)), Q.Q4_1)
    put("blk.0.ffn_gate.weight", "model.layers.0.mlp.gate_proj.weight", r.standard_normal((FF, H)), Q.Q4_0)
    if q6k:                                  # a type the converter does not decode: 24 Q6_K blocks
        raw = np.zeros((1, FF * H // 256 * 210), dtype=np.uint8)
        w.add_tensor("blk.0.ffn_up.weight", raw, raw_shape=raw.shape, raw_dtype=Q.Q6_K)
    else:
        put("blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight", r.standard_normal((FF, H)), Q.Q4_1)
    put("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight", r.standard_normal((H, FF)), Q.Q8_0)
    put("blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight", 1 + r.standard_normal(H) / 8, Q.F32)
    put("blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight", 1 + r.standard_normal(H) / 8, Q.F32)
    put("output_norm.weight", "model.norm.weight", 1 + r.standard_normal(H) / 8, Q.F32)
    put("output.weight", "lm_head.weight", r.standard_normal((V, H)), Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return ref


def convert(g, out):
    p = subprocess.run([sys.executable, CONVERT, g, out], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stderr


def main():
    tmp = tempfile.mkdtemp(prefix="rq-gguf-")
    g = os.path.join(tmp, "m.gguf")
    ref = write_gguf(g, rng=np.random.default_rng(7))
    out = os.path.join(tmp, "hf")
    rc, err = convert(g, out)
    if not ok(rc == 0, "gguf_to_hf converts a llama GGUF (F32, F16, Q8_0, Q4_0, Q4_1 tensors)", err):
        print(f"1..{n}")
        return 1
    with safe_open(os.path.join(out, "model.safetensors"), "np") as f:
        keys = set(f.keys())
        ok(keys == set(ref), "every GGUF tensor under its HF name, nothing else",
           f"extra {sorted(keys - set(ref))} missing {sorted(set(ref) - keys)}")
    raw_hdr = open(os.path.join(out, "model.safetensors"), "rb").read()
    hlen = int.from_bytes(raw_hdr[:8], "little")
    hdr = json.loads(raw_hdr[8:8 + hlen])
    base = 8 + hlen
    for name in sorted(ref):
        e = hdr[name]
        a, b = e["data_offsets"]
        got = np.frombuffer(raw_hdr[base + a:base + b], dtype="<u2").reshape(e["shape"])
        want = bf16_rne_ref(ref[name])
        ok(e["dtype"] == "BF16" and got.shape == want.shape and np.array_equal(got, want),
           f"{name}: BF16 round-to-nearest-even of the GGUF's float32 value"
           + (" (llama.cpp's Q/K row permutation undone)" if "q_proj" in name or "k_proj" in name else ""),
           f"dtype {e['dtype']} shape {got.shape} vs {want.shape}; "
           f"{int(np.sum(got != want)) if got.shape == want.shape else '-'} elements differ")
    cfg = json.load(open(os.path.join(out, "config.json")))
    want = {"model_type": "llama", "hidden_size": H, "num_attention_heads": NH, "num_key_value_heads": NKV,
            "head_dim": HD, "intermediate_size": FF, "num_hidden_layers": 1, "tie_word_embeddings": False,
            "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2,
            "max_position_embeddings": 512, "vocab_size": len(vocab()[0])}
    bad = {k: cfg.get(k) for k in want if cfg.get(k) != want[k]}
    ok(not bad, "config.json from the llama.* keys (output.weight present: not tied)", bad)
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    tokens = vocab()[0]
    e = tok.encode("the the<|im_end|> 12", add_special_tokens=False)
    ok(e.tokens == ["the", "Ġthe", "<|im_end|>", "Ġ", "1", "2"],
       "tokenizer.json: merges applied, control token whole, digits split (tokenizer.ggml.pre smollm)", e.tokens)
    ok(e.ids == [tokens.index(t) for t in e.tokens], "token ids are the GGUF's indices", e.ids)
    s = "héllo wörld\n\t🤗 x=1.5"
    ok(tok.decode(tok.encode(s).ids) == s, "decode(encode(text)) is the text (byte-level)")
    tc = json.load(open(os.path.join(out, "tokenizer_config.json")))
    ok(tc.get("eos_token") == "<|im_end|>" and tc.get("bos_token") == "<|im_start|>" and
       tc.get("chat_template", "").startswith("{% for m in messages %}") and tc.get("add_bos_token") is False,
       "tokenizer_config.json: bos/eos from the ids, the GGUF's chat template", tc)
    gen = json.load(open(os.path.join(out, "generation_config.json")))
    ok(gen == {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}, "generation_config.json", gen)

    out2 = os.path.join(tmp, "hf2")
    convert(g, out2)
    same = all(open(os.path.join(out, f), "rb").read() == open(os.path.join(out2, f), "rb").read()
               for f in os.listdir(out))
    ok(same and sorted(os.listdir(out)) == sorted(os.listdir(out2)), "a second run writes identical bytes")

    for what, kw, key in [("general.architecture 'qwen2'", {"arch": "qwen2"}, "general.architecture"),
                          ("tokenizer.ggml.pre 'unknown-pre'", {"pre": "unknown-pre"}, "tokenizer.ggml.pre"),
                          ("a Q6_K tensor", {"q6k": True}, "blk.0.ffn_up.weight: ggml type Q6_K")]:
        gb = os.path.join(tmp, "bad.gguf")
        ob = os.path.join(tmp, "bad-out")
        write_gguf(gb, rng=np.random.default_rng(1), **kw)
        rc, err = convert(gb, ob)
        ok(rc == 1 and key in err and not os.path.exists(ob) and not os.path.exists(ob + ".tmp"),
           f"refused: {what}, naming {key}, nothing written", f"rc {rc}: {err.strip()[-300:]}")
    print(f"1..{n}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
