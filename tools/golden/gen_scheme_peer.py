#!/usr/bin/env python3
"""Golden data for the data-free schemes (quant/scheme.h) from the real llm-compressor.

Two outputs, both committed (CI has no torch):

tests/data/scheme_peer.bin  (--tensors)   tensor level. Fixed random and adversarial BF16
    weights (zero rows, -0.0, ties of every rounding step, subnormals, huge values, one row,
    cols == group, ...), and the same for F16 and F32 sources where requantfs takes them, quantized by llm-compressor's ModelFreePtqConverter.process() -- the
    very call model_free_ptq makes on each shard's tensors -- for NVFP4A16, FP8_DYNAMIC, W8A16
    and W4A16. Fused NVFP4A16 cases use q/k/v and mlp.gate_proj/up_proj names, so the library
    shares their global scale. tests/quant/test_scheme_peer.c checks every byte and the layout.

tests/data/scheme_peer_model.json  (--model)   model level. model_free_ptq on the synthetic
    checkpoint `requantfs mkckpt OUT --dense --no-tokenizer --layers 2 --experts 4` per scheme:
    every output tensor's dtype, shape and sha256, the quantization_config written, the
    versions; and the same ("wide") for tests/fs/scheme_wide.py's 128-divisible Llama-shaped
    model in BF16 and F16, which every scheme takes whole. tests/fs/test_scheme_peer.py
    compares requantfs export/mount with it.

Run with the reference venv (tools/golden/requirements-ref.txt):

    /work/venv-ref/bin/python tools/golden/gen_scheme_peer.py --tensors tests/data/scheme_peer.bin
    /work/venv-ref/bin/python tools/golden/gen_scheme_peer.py --model tests/data/scheme_peer_model.json \\
        --requantfs build/requantfs

scheme_peer.bin format (little-endian):
    "RQSCHP02"  u32 ncases  u32 0
    per case:   char name[24] (NUL-padded)  u8 scheme (enum rq_scheme)  u8 nmod
                u16 source dtype (enum rq_src_dtype: 0 BF16, 1 F16, 2 F32)
                per module: u32 rows  u32 cols
                per module: input[rows*cols]            BF16/F16 (2 bytes) or F32 (4 bytes)
                per module: u32 ntensors, then per tensor:
                    char suffix[24]  char dtype[8]  u32 ndim  u64 shape[2]  u64 len
                    u8 bytes[len]
                (tensors in rq_scheme_layout()'s order, i.e. the module output's order)
    "END!"
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

import compressed_tensors
import llmcompressor
from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus
from compressed_tensors.quantization import preset_name_to_scheme
from llmcompressor.entrypoints.model_free.converter import ModelFreePtqConverter

# enum rq_scheme (quant/scheme.h)
SCHEMES = {"NVFP4A16": 1, "FP8_DYNAMIC": 2, "W8A16": 3, "W4A16": 4}
# our module-output order per scheme (rq_scheme_layout)
ORDER = {
    "NVFP4A16": ["weight_packed", "weight_scale", "weight_global_scale"],
    "FP8_DYNAMIC": ["weight", "weight_scale"],
    "W8A16": ["weight_packed", "weight_scale", "weight_shape"],
    "W4A16": ["weight_packed", "weight_scale", "weight_shape"],
}
GROUP = {"NVFP4A16": 16, "FP8_DYNAMIC": 1, "W8A16": 128, "W4A16": 128}
DTYPES = {torch.uint8: "U8", torch.float8_e4m3fn: "F8_E4M3", torch.float32: "F32",
          torch.bfloat16: "BF16", torch.float16: "F16", torch.int32: "I32", torch.int64: "I64"}

# the rounding midpoints each scheme's quantizer must break as torch does, as q = w / scale
TIES = {
    "NVFP4A16": [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0],
    "FP8_DYNAMIC": [1.0625, 1.1875, 17.0, 19.0, 104.0, 120.0, 232.0, 440.0, 0.0029296875,
                    0.0048828125, 0.013671875, 448.0],
    "W8A16": [0.5, 1.5, 2.5, 3.5, 62.5, 63.5, 64.5, 126.5, 127.5, 0.25, 100.75, 127.25],
    "W4A16": [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 0.25, 6.75],
}
QMAX = {"NVFP4A16": 6.0, "FP8_DYNAMIC": 448.0, "W8A16": 127.5, "W4A16": 7.5}


def make_config(scheme):
    s = preset_name_to_scheme(scheme, ["Linear"])
    return QuantizationConfig(config_groups={scheme: s}, ignore=[],
                              quantization_status=QuantizationStatus.INITIALIZED)


SRC = {"BF16": (0, torch.bfloat16), "F16": (1, torch.float16), "F32": (2, torch.float32)}
# per source dtype: integer view, finite-magnitude bound (bits), subnormal bound, mantissa bits
BITS = {"BF16": (np.uint16, 0x7F80, 0x0080, 7), "F16": (np.uint16, 0x7C00, 0x0400, 10),
        "F32": (np.uint32, 0x7F800000, 0x00800000, 23)}


def from_float(a, dt):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(SRC[dt][1])


def from_bits(bits, dt):
    if dt == "F32":
        return torch.from_numpy(np.ascontiguousarray(bits, dtype=np.uint32).view(np.float32))
    return torch.from_numpy(np.ascontiguousarray(bits, dtype=np.uint16).view(np.int16)).view(
        SRC[dt][1])


def cases_for(scheme, rng, dt="BF16"):
    """(name, [weights], [module names]) per case; weights are 2-D tensors of dtype dt."""
    g = GROUP[scheme]
    small = dt != "BF16" or g == 128     # keep the file small: 4-byte inputs, wide groups
    cols = (g if dt != "BF16" else 2 * g) if g > 1 else (96 if dt == "BF16" else 48)
    nr = 8 if small else 16              # rows of the larger random cases
    ity, inf, sub, mant = BITS[dt]
    sign = ity(1) << ity(8 * np.dtype(ity).itemsize - 1)
    out = []

    def one(name, w):
        out.append((name, [w], ["model.layers.0.mlp.experts.0.down_proj"]))

    one("randn", from_float(rng.standard_normal((nr, cols)) * 0.02, dt))
    w = rng.standard_normal((8, cols)) * 0.05
    w[2] = 0.0
    w[5] = -0.0
    w[6, : cols // 2] = 0.0
    one("zero-rows", from_float(w, dt))
    # ties: the scale is exactly 1 (or a power of two) so q = w / scale lands on midpoints
    t = TIES[scheme]
    rows = []
    for p2 in (1.0, 0.5, 2.0 ** -20, 2.0 ** 20) if dt != "F16" else (1.0, 0.5, 2.0 ** -6, 64.0):
        r = np.zeros(cols)
        r[0] = QMAX[scheme] * p2 if scheme != "NVFP4A16" else 6.0 * p2
        for i in range(1, cols):
            r[i] = t[i % len(t)] * p2 * (-1 if (i // len(t)) % 2 else 1)
        rows.append(r)
    one("ties", from_float(np.array(rows), dt))
    # subnormal values, alone and mixed with small normals
    bits = rng.integers(1, sub, size=(4, cols), dtype=ity)
    bits[1, ::3] |= sign
    bits[2, ::5] = rng.integers(sub, sub * 8, size=bits[2, ::5].shape, dtype=ity)
    bits[3, 0] = 1
    bits[3, 1:] = 0
    one("subnormal", from_bits(bits, dt))
    # huge magnitudes up to the type's max
    bits = rng.integers(inf - (sub << 2), inf, size=(4, cols), dtype=ity)
    bits[:, ::2] |= sign
    bits[0, 0] = inf - 1
    bits[3, 7] = (inf - 1) | sign
    one("huge", from_bits(bits, dt))
    # every finite exponent: random bit patterns, per-row exponent window
    bits = np.zeros((nr + 4, cols), dtype=ity)
    for i in range(nr + 4):
        lo = (i * int(inf)) // (nr + 4)
        bits[i] = rng.integers(lo, min(lo + (int(inf) // 20), int(inf)), size=cols, dtype=ity)
        bits[i, rng.integers(0, cols, size=cols // 3)] |= sign
    one("all-exponents", from_bits(bits, dt))
    if dt == "BF16":
        one("one-row", from_float(rng.standard_normal((1, cols)), dt))
    one("cols-group", from_float(rng.standard_normal((5, g if g > 1 else 7)) * 3.0, dt))
    one("single-nonzero", from_float(np.where(np.arange(3 * cols).reshape(3, cols) == cols + 5,
                                              -0.37, 0.0), dt))
    if dt == "BF16":
        one("wide", from_float(rng.standard_normal((1 if g == 128 else 2, 8 * max(g, 16)))
                               * 0.1, dt))
    w = rng.standard_normal((nr - 2, cols))
    w *= np.exp(rng.uniform(-30, 30, size=(nr - 2, 1)) if dt != "F16" else
                rng.uniform(-8, 8, size=(nr - 2, 1)))
    one("row-scales", from_float(w, dt))
    if scheme == "FP8_DYNAMIC":
        one("odd-cols", from_float(rng.standard_normal((3, 33)), dt))
    if scheme == "NVFP4A16":
        # fused: q/k/v share one global scale; gate/up of a dense mlp too
        fr = 16 if dt == "BF16" else 8       # rows of the fused cases (file size)
        q = from_float(rng.standard_normal((fr, 64)) * 0.02, dt)
        k = from_float(rng.standard_normal((fr // 2, 64)) * 0.09, dt)
        v = from_float(rng.standard_normal((fr // 2, 64)) * 0.01, dt)
        out.append(("fused-qkv", [q, k, v], ["model.layers.0.self_attn.q_proj",
                                             "model.layers.0.self_attn.k_proj",
                                             "model.layers.0.self_attn.v_proj"]))
        gt = from_float(rng.standard_normal((fr, 64)) * 0.5, dt)
        up = from_float(rng.standard_normal((fr, 64)) * 0.01, dt)
        out.append(("fused-gate-up", [gt, up], ["model.layers.0.mlp.gate_proj",
                                                "model.layers.0.mlp.up_proj"]))
        if dt == "F16":   # gs = f16(f16(1/a) * 2688): inf -> 1.0 below amax 0.041, finite above
            out.append(("f16-gs-finite", [from_float(rng.standard_normal((4, 32)) * 0.5, dt)],
                        ["model.layers.0.mlp.experts.0.down_proj"]))
            out.append(("f16-gs-overflow", [from_float(rng.standard_normal((4, 32)) * 0.004, dt)],
                        ["model.layers.0.mlp.experts.0.down_proj"]))
        z = from_float(np.zeros((4, 32)), dt)
        out.append(("all-zero", [z], ["model.layers.0.mlp.experts.0.down_proj"]))
        tiny = from_bits(np.full((2, 32), 1, dtype=ity), dt)
        out.append(("tiny-gs-inf", [tiny], ["model.layers.0.mlp.experts.0.down_proj"]))
    return out


def run_converter(scheme, weights, names):
    tensors = {n + ".weight": w.clone() for n, w in zip(names, weights)}
    conv = ModelFreePtqConverter(make_config(scheme))
    return conv.process(tensors)


def tensor_bytes(t):
    t = t.contiguous().cpu()
    if t.dtype in (torch.float8_e4m3fn, torch.bfloat16, torch.float16):
        t = t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t.view(torch.int16)
    return t.numpy().tobytes()


# source dtypes per scheme: F16/F32 only where requantfs takes them (rq_scheme_layout)
SOURCES = {"NVFP4A16": ["BF16", "F16", "F32"], "FP8_DYNAMIC": ["BF16", "F16", "F32"],
           "W8A16": ["BF16", "F16", "F32"], "W4A16": ["BF16", "F16", "F32"]}


def write_tensors(path):
    rng = np.random.default_rng(20261203)
    blobs = []
    for scheme in ("NVFP4A16", "FP8_DYNAMIC", "W8A16", "W4A16"):
      for dt in SOURCES[scheme]:
        for name, weights, names in cases_for(scheme, rng, dt):
            out = run_converter(scheme, weights, names)
            b = bytearray()
            b += struct.pack("<24sBBH", name.encode(), SCHEMES[scheme], len(weights), SRC[dt][0])
            for w in weights:
                b += struct.pack("<II", *w.shape)
            for w in weights:
                v = w.contiguous().view(torch.int32 if dt == "F32" else torch.int16)
                b += v.numpy().tobytes()
            for n in names:
                b += struct.pack("<I", len(ORDER[scheme]))
                for suf in ORDER[scheme]:
                    t = out[n + "." + suf]
                    data = tensor_bytes(t)
                    shape = list(t.shape) + [0] * (2 - t.dim())
                    b += struct.pack("<24s8sIQQQ", suf.encode(), DTYPES[t.dtype].encode(),
                                     t.dim(), shape[0], shape[1], len(data))
                    b += data
                extra = sorted(k for k in out if k.startswith(n + ".") and
                               k[len(n) + 1:] not in ORDER[scheme])
                if extra:
                    sys.exit(f"gen_scheme_peer: {scheme} wrote unexpected tensors {extra}")
            blobs.append(bytes(b))
    with open(path, "wb") as f:
        f.write(b"RQSCHP02" + struct.pack("<II", len(blobs), 0))
        for b in blobs:
            f.write(b)
        f.write(b"END!")
    print(f"gen_scheme_peer: wrote {path}: {len(blobs)} cases, {os.path.getsize(path)} bytes")


# ---- model level ----

# W8A16/W4A16 (group 128) cannot take the mkckpt model's hidden size 64: model_free_ptq
# raises for any targeted Linear with in % 128 != 0, so those modules must be ignored.
IGNORE = {
    "NVFP4A16": ["lm_head"],
    "FP8_DYNAMIC": ["lm_head"],
    "W8A16": ["lm_head",
              "re:.*(q_proj|k_proj|v_proj|g_proj|o_proj|gate_proj|up_proj|mlp\\.gate|embed_tokens)$",
              "re:.*(experts\\.\\d+|shared_expert)\\.down_proj$"],
}
IGNORE["W4A16"] = IGNORE["W8A16"]
MKCKPT_ARGS = ["--dense", "--no-tokenizer", "--layers", "2", "--experts", "4"]


def st_tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    hdr = json.loads(data[8:8 + n])
    res = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        res[k] = {"dtype": v["dtype"], "shape": v["shape"], "file": os.path.basename(path),
                  "sha256": hashlib.sha256(data[8 + n + b:8 + n + e]).hexdigest()}
    return res, "__metadata__" in hdr


def run_model(src, dst, scheme, ign):
    """model_free_ptq on SRC -> the golden entry of one scheme."""
    from llmcompressor import model_free_ptq
    srct = {}
    for fn in sorted(os.listdir(src)):
        if fn.endswith(".safetensors"):
            srct.update(st_tensors(os.path.join(src, fn))[0])
    model_free_ptq(src, dst, scheme=scheme, ignore=ign, max_workers=1, device="cpu")
    tens, meta = {}, False
    for fn in sorted(os.listdir(dst)):
        if fn.endswith(".safetensors"):
            t, m = st_tensors(os.path.join(dst, fn))
            tens.update(t)
            meta = meta or m
    with open(os.path.join(dst, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    with open(os.path.join(dst, "model.safetensors.index.json")) as f:
        idx = json.load(f)
    quantized = sorted(k[:-len(".weight")] for k in srct if k.endswith(".weight") and
                       (k not in tens or tens[k]["dtype"] != srct[k]["dtype"]))
    return {"ignore": ign, "quantization_config": qc, "index_metadata": idx["metadata"],
            "shards_have_metadata": meta, "quantized_modules": quantized,
            "tensors": dict(sorted(tens.items()))}


def write_model(path, requantfs):
    res = {"llmcompressor": llmcompressor.__version__,
           "compressed_tensors": compressed_tensors.__version__,
           "torch": torch.__version__,
           "mkckpt_args": MKCKPT_ARGS, "schemes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        subprocess.run([requantfs, "mkckpt", src] + MKCKPT_ARGS, check=True,
                       stdout=subprocess.DEVNULL)
        srct = {}
        for fn in sorted(os.listdir(src)):
            if fn.endswith(".safetensors"):
                srct.update(st_tensors(os.path.join(src, fn))[0])
        res["source_sha256"] = {k: v["sha256"] for k, v in sorted(srct.items())}
        for scheme, ign in IGNORE.items():
            res["schemes"][scheme] = run_model(src, os.path.join(tmp, scheme), scheme, ign)
        # the 128-divisible Llama-shaped model of tests/fs/scheme_wide.py, BF16 and F16:
        # every Linear takes every scheme
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "tests", "fs"))
        import scheme_wide
        res["wide"] = {}
        for dt in ("BF16", "F16"):
            wsrc = scheme_wide.write(os.path.join(tmp, "wide-" + dt), dt)
            ws = {}
            for fn in sorted(os.listdir(wsrc)):
                if fn.endswith(".safetensors"):
                    ws.update(st_tensors(os.path.join(wsrc, fn))[0])
            res["wide"][dt] = {"source_sha256": {k: v["sha256"] for k, v in sorted(ws.items())},
                               "schemes": {}}
            for scheme in IGNORE:
                res["wide"][dt]["schemes"][scheme] = run_model(
                    wsrc, os.path.join(tmp, f"wide-{dt}-{scheme}"), scheme, ["lm_head"])
    with open(path, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"gen_scheme_peer: wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tensors", metavar="FILE", help="write the tensor-level golden file")
    ap.add_argument("--model", metavar="FILE", help="write the model-level golden file")
    ap.add_argument("--requantfs", default="build/requantfs", help="binary for mkckpt")
    a = ap.parse_args()
    if not a.tensors and not a.model:
        ap.error("give --tensors FILE and/or --model FILE")
    torch.manual_seed(0)
    if a.tensors:
        write_tensors(a.tensors)
    if a.model:
        write_model(a.model, a.requantfs)


if __name__ == "__main__":
    main()
