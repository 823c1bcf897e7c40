#!/usr/bin/env python3
"""Generate tests/data/scheme_golden.safetensors: FP8 and INT (pack-quantized)
Linear weights written by the real compressed-tensors, with their values.

For each case a small random weight (odd row counts, negative values, a few
exact zeros) gets a scale computed here (any positive scale is a valid input
to the compressor; the observer's choice does not matter for dequantization),
then compressed-tensors' own compressor writes the tensors exactly as a
checkpoint holds them:

    float-quantized  FloatQuantizationCompressor.compress   weight F8_E4M3, weight_scale
    pack-quantized   PackedQuantizationCompressor.compress  weight_packed I32, weight_shape
                                                            I64, weight_scale (+ weight_zero_point
                                                            packed along dim 0 when asymmetric)

and `<case>.ref` (F32 [rows, cols]) is the same compressor's decompress() run with
the scale widened to float32, i.e. (q - zero_point) * scale in float32 (exact for
BF16/F16 scales). tests/engine/test_dequant.c checks that the engine's row
dequantization (engine/model/ops.c) gives these values bit for bit. Needs torch and
compressed-tensors; run with the reference venv:

    /work/venv-ref/bin/python tools/golden/gen_scheme_golden.py [-o tests/data/scheme_golden.safetensors]

Case names: "<name>" and its metadata entry "<name>" = "bits,group,symmetric,kind".
"""
import argparse

import torch
from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
from safetensors.torch import save_file

# name, kind, rows, cols, bits, group (0 = channel, -1 = tensor), symmetric, dtype
CASES = [
    ("fp8_channel_bf16", "fp8", 7, 48, 8, 0, True, torch.bfloat16),
    ("fp8_tensor_f32", "fp8", 5, 32, 8, -1, True, torch.float32),
    ("fp8_channel_f16", "fp8", 3, 64, 8, 0, True, torch.float16),
    ("int4_g16_sym", "int", 5, 64, 4, 16, True, torch.bfloat16),
    ("int8_g32_sym", "int", 3, 64, 8, 32, True, torch.bfloat16),
    ("int4_ch_asym", "int", 9, 64, 4, 0, False, torch.bfloat16),
    ("int4_g32_asym", "int", 11, 96, 4, 32, False, torch.bfloat16),
    ("int8_ch_asym", "int", 5, 32, 8, 0, False, torch.bfloat16),
    ("int3_g32_sym", "int", 5, 64, 3, 32, True, torch.bfloat16),
    ("int4_g16_f16", "int", 7, 32, 4, 16, True, torch.float16),
]


def scheme_for(kind, bits, group, sym):
    if kind == "fp8":
        args = QuantizationArgs(num_bits=8, type="float", symmetric=True, dynamic=False,
                                strategy="tensor" if group < 0 else "channel")
    else:
        args = QuantizationArgs(num_bits=bits, type="int", symmetric=sym, dynamic=False,
                                strategy="group" if group > 0 else "channel",
                                group_size=group if group > 0 else None)
    return QuantizationScheme(targets=["Linear"], weights=args)


def make_case(name, kind, rows, cols, bits, group, sym, dtype, gen):
    w = (torch.randn(rows, cols, generator=gen) * 0.05).to(dtype)
    w[0, 1] = 0
    w[rows - 1, cols - 1] = -w.abs().max()
    ng = 1 if group <= 0 else cols // group
    wg = w.float().reshape(rows, ng, -1)
    out = {}
    if kind == "fp8":
        amax = w.float().abs().amax() if group < 0 else wg.abs().amax(dim=-1)
        scale = (amax / 448.0).clamp(min=1e-8).to(dtype)
        scale = scale.reshape(1) if group < 0 else scale.reshape(rows, 1)
        sd = {"weight": w, "weight_scale": scale}
        comp = FloatQuantizationCompressor
    else:
        qmax, qmin = 2 ** (bits - 1) - 1, -(2 ** (bits - 1))
        if sym:
            scale = (wg.abs().amax(dim=-1) / ((qmax - qmin) / 2)).clamp(min=1e-8).to(dtype)
            zp = None
        else:
            lo, hi = wg.amin(dim=-1).clamp(max=0), wg.amax(dim=-1).clamp(min=0)
            scale = ((hi - lo) / (qmax - qmin)).clamp(min=1e-8).to(dtype)
            zp = torch.round(qmin - lo / scale.float()).clamp(qmin, qmax).to(torch.int8)
        sd = {"weight": w, "weight_scale": scale}
        if zp is not None:
            sd["weight_zero_point"] = zp
        comp = PackedQuantizationCompressor
    scheme = scheme_for(kind, bits, group, sym)
    packed = comp.compress(dict(sd), scheme)
    deq_in = dict(packed)
    deq_in["weight_scale"] = packed["weight_scale"].float()
    if "weight_zero_point" in deq_in and kind == "fp8":
        deq_in.pop("weight_zero_point")
    ref = comp.decompress(deq_in, scheme)["weight"].float()
    for k, v in packed.items():
        out[f"{name}.{k}"] = v.contiguous()
    out[f"{name}.ref"] = ref.contiguous()
    return out, f"{bits},{group},{int(sym)},{kind}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", default="tests/data/scheme_golden.safetensors")
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(12)
    tensors, meta = {}, {}
    for c in CASES:
        t, m = make_case(*c, gen)
        tensors.update(t)
        meta[c[0]] = m
    save_file(tensors, a.o, metadata=meta)
    for k in sorted(tensors):
        print(k, tuple(tensors[k].shape), tensors[k].dtype)


if __name__ == "__main__":
    main()
