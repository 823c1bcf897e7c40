#!/usr/bin/env python3
"""Golden data for the MSE weight observers (quant/observer.h) from the real llm-compressor.

llm-compressor 0.14.0.1's ModelFreePtqConverter.process() -- the call model_free_ptq makes on
each shard's tensors, eager torch on the CPU -- with the weights' QuantizationArgs.observer
set to "memoryless_mse" (requantfs "mse") or "nvfp4_expanded_mse" ("expanded-mse"), for
NVFP4A16, W4A16, W8A16 and FP8_DYNAMIC, on:
  - real tensors of SmolLM2-135M-Instruct (.models/): layer 0's q/k/v (one fused set) and
    layer 15's mlp.down_proj;
  - every Linear weight of the tiny MoE tests/data/tiny/qwen2_moe (attention q/k/v fused,
    each other alone), experts and shared expert included;
  - gen_scheme_peer.py's awkward BF16 cases (zeros, ties, subnormals, huge, ...), inline.
Also: torch's table of bf16(|d|.pow(2.4)) for every BF16 magnitude (its sha256), and the
quantization_config model_free_ptq writes for each observer (printed, for the report/docs).

Run with the reference venv (tools/golden/requirements-ref.txt):
    /work/venv-ref/bin/python tools/golden/gen_observer_golden.py tests/data/observer/observer_peer.bin

observer_peer.bin (little-endian):
    "RQOBSP01"  u32 ncases  u32 0  u8 pow_sha256[32]
    per case:   char name[48]  u8 scheme (enum rq_scheme)  u8 observer (enum rq_observer)
                u8 nmod  u8 source (0 inline, 1 SmolLM2 model.safetensors, 2 tiny qwen2_moe)
                per module: u32 rows  u32 cols  u64 offset (byte offset of the BF16 input in
                            the source file; 0 for inline)  u8 input_sha256[32]
                per module (inline only): input bytes [rows*cols*2]
                per module: u32 ntensors, then per tensor:
                    char suffix[24]  char dtype[8]  u64 len  u8 full  u8 sha256[32]
                    u8 bytes[len] when full (scales, global scales, shapes; every tensor
                    of inline cases), else only the sha256 (packed weights of the model
                    cases: the scales and global scale identify each group's choice)
    "END!"
"""
import argparse
import hashlib
import json
import os
import struct
import sys
import tempfile

import numpy as np
import torch

import compressed_tensors
import llmcompressor
from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus
from compressed_tensors.quantization import preset_name_to_scheme
from llmcompressor.entrypoints.model_free.converter import ModelFreePtqConverter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_scheme_peer import cases_for, ORDER, tensor_bytes  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SMOL = os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct", "model.safetensors")
TINY = os.path.join(ROOT, "tests", "data", "tiny", "qwen2_moe", "model.safetensors")
SCHEMES = {"NVFP4A16": 1, "FP8_DYNAMIC": 2, "W8A16": 3, "W4A16": 4}
OBSERVERS = {"memoryless_mse": 1, "nvfp4_expanded_mse": 2}   # enum rq_observer
DTYPES = {torch.uint8: "U8", torch.float8_e4m3fn: "F8_E4M3", torch.float32: "F32",
          torch.bfloat16: "BF16", torch.int32: "I32", torch.int64: "I64"}


def make_config(scheme, observer):
    s = preset_name_to_scheme(scheme, ["Linear"])
    s.weights.observer = observer
    return QuantizationConfig(config_groups={scheme: s}, ignore=[],
                              quantization_status=QuantizationStatus.INITIALIZED)


def st_index(path):
    """name -> (dtype, shape, absolute byte offset) of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    return {k: (v["dtype"], v["shape"], 8 + n + v["data_offsets"][0])
            for k, v in hdr.items() if k != "__metadata__"}


def st_tensor(path, idx, name):
    dt, shape, off = idx[name]
    assert dt == "BF16", name
    with open(path, "rb") as f:
        f.seek(off)
        raw = f.read(int(np.prod(shape)) * 2)
    return torch.frombuffer(bytearray(raw), dtype=torch.bfloat16).reshape(shape), off


def bf16_bytes(w):
    return w.contiguous().view(torch.int16).numpy().tobytes()


def pow_table_sha():
    bits = np.arange(0, 0x8000, dtype=np.uint16)
    x = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
    t = x.pow(2.4).float().numpy().astype("<f4")
    return hashlib.sha256(t.tobytes()).digest()


def run(scheme, observer, weights, names):
    tensors = {n + ".weight": w.clone() for n, w in zip(names, weights)}
    return ModelFreePtqConverter(make_config(scheme, observer)).process(tensors)


def emit(out, name, scheme, observer, source, weights, names, offsets, full_weights):
    res = run(scheme, observer, weights, names)
    rec = bytearray(name.encode()[:47].ljust(48, b"\0"))
    rec += struct.pack("<BBBB", SCHEMES[scheme], OBSERVERS[observer], len(weights), source)
    for w, off in zip(weights, offsets):
        rec += struct.pack("<IIQ", w.shape[0], w.shape[1], off)
        rec += hashlib.sha256(bf16_bytes(w)).digest()
    if source == 0:
        for w in weights:
            rec += bf16_bytes(w)
    for n in names:
        ts = [(s, res[n + "." + s]) for s in ORDER[scheme]]
        rec += struct.pack("<I", len(ts))
        for suffix, t in ts:
            b = tensor_bytes(t)
            full = full_weights or suffix not in ("weight", "weight_packed")
            rec += suffix.encode().ljust(24, b"\0") + DTYPES[t.dtype].encode().ljust(8, b"\0")
            rec += struct.pack("<QB", len(b), 1 if full else 0) + hashlib.sha256(b).digest()
            if full:
                rec += b
    out.append(bytes(rec))


def qconfig_observers(tmp):
    """What model_free_ptq writes as the weights' observer in config.json."""
    from llmcompressor import model_free_ptq
    seen = {}
    for obs in OBSERVERS:
        dst = os.path.join(tmp, obs)
        model_free_ptq(os.path.dirname(TINY), dst, scheme=make_config("NVFP4A16", obs)
                       .config_groups["NVFP4A16"], max_workers=1, device="cpu")
        qc = json.load(open(os.path.join(dst, "config.json")))["quantization_config"]
        seen[obs] = [g["weights"]["observer"] for g in qc["config_groups"].values()]
    return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true", help="inline and tiny cases only")
    a = ap.parse_args()
    torch.manual_seed(0)
    rng = np.random.default_rng(32)
    out = []
    for scheme in SCHEMES:
        for obs in OBSERVERS:
            tag = f"{scheme}/{obs}"
            for name, ws, names in cases_for(scheme, rng, "BF16"):
                emit(out, f"{tag}/{name}", scheme, obs, 0, ws, names, [0] * len(ws), True)
            idx = st_index(TINY)
            lin = sorted(k for k, (dt, shp, _) in idx.items()
                         if k.endswith(".weight") and len(shp) == 2 and "proj" in k
                         and "embed" not in k)
            done = set()
            for k in lin:
                if k in done:
                    continue
                base = k[: -len(".weight")]
                if base.endswith(".q_proj"):
                    set_ = [base[:-6] + p for p in ("q_proj", "k_proj", "v_proj")]
                else:
                    set_ = [base]
                if any(s + ".weight" not in idx for s in set_):
                    set_ = [base]
                ws, offs = zip(*(st_tensor(TINY, idx, s + ".weight") for s in set_))
                if scheme != "FP8_DYNAMIC" and any(w.shape[1] % (16 if scheme == "NVFP4A16" else 128)
                                                   for w in ws):
                    done.update(s + ".weight" for s in set_)
                    continue
                emit(out, f"{tag}/tiny:{base}", scheme, obs, 2, list(ws), set_, list(offs), False)
                done.update(s + ".weight" for s in set_)
            if a.quick:
                continue
            idx = st_index(SMOL)
            for set_ in (["model.layers.0.self_attn." + p for p in ("q_proj", "k_proj", "v_proj")],
                         ["model.layers.15.mlp.down_proj"]):
                ws, offs = zip(*(st_tensor(SMOL, idx, s + ".weight") for s in set_))
                if scheme != "FP8_DYNAMIC" and any(
                        w.shape[1] % (16 if scheme == "NVFP4A16" else 128) for w in ws):
                    continue         # q/k/v are 576 wide: no group of 128 (llm-compressor refuses)
                emit(out, f"{tag}/smol:{set_[0]}", scheme, obs, 1, list(ws), set_, list(offs),
                     False)
            print(tag, "done", flush=True)
    with open(a.out, "wb") as f:
        f.write(b"RQOBSP01" + struct.pack("<II", len(out), 0) + pow_table_sha())
        for r in out:
            f.write(r)
        f.write(b"END!")
    print(f"{a.out}: {len(out)} cases; llmcompressor {llmcompressor.__version__}, "
          f"compressed-tensors {compressed_tensors.__version__}, torch {torch.__version__} "
          f"({torch.backends.cpu.get_cpu_capability()})")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            print("config.json weights observer:", qconfig_observers(tmp))
        except Exception as e:   # reported, not fatal: the golden bytes are written
            print("model_free_ptq config check failed:", repr(e))


if __name__ == "__main__":
    main()
