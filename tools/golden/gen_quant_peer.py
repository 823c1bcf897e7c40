#!/usr/bin/env python3
"""Generate tests/data/quant_peer.bin: NVFP4 outputs of the real compressed-tensors.

For a fixed set of random BF16 tensors (zero groups, tiny and subnormal values,
E2M1 ties, huge values, the golden-vector inputs, ...) this runs compressed-tensors
the way llm-compressor does for an NVFP4 (tensor_group, group 16) weight:

    gs            = generate_gparam(w.min(), w.max())            # global scale
    scale, _      = calculate_qparams(group_min, group_max, args, global_scale=gs)
    weight_scale  = scale stored in the weight's dtype (as the module parameter is)
    compressed    = NVFP4PackedCompressor.compress(...)          # quantize + pack

once on the BF16 weight (must equal requantfs's `bf16` recipe) and once on the
weight widened to FP32 (must equal the `fp32` recipe). tests/quant/test_quant_peer.c
checks every byte. Needs torch + compressed-tensors; run with the reference venv:

    /work/venv-ref/bin/python tools/golden/gen_quant_peer.py [-o tests/data/quant_peer.bin]

File format (little-endian):
    "RQPEER01"  u32 ncases  u32 0
    per case:   char name[24] (NUL-padded)  u32 rows  u32 cols
                u16 input[rows*cols]                       BF16 bits
                twice, for recipe bf16 then fp32:
                    u32 weight_global_scale                f32 bits
                    u8  weight_packed[rows*cols/2]
                    u8  weight_scale[rows*cols/16]         E4M3FN bytes
    "END!"
"""
import argparse
import struct
import sys

import torch
import compressed_tensors
from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
from compressed_tensors.quantization import QuantizationScheme
from compressed_tensors.quantization.quant_scheme import NVFP4
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

ARGS = NVFP4["weights"]
SCHEME = QuantizationScheme(targets=["Linear"], weights=ARGS)

MIDS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.5, 3.0]


def ct_nvfp4(w):
    """compressed-tensors NVFP4 of a 2-D weight (its own dtype) -> (gs_bits, packed, scales)."""
    gs = generate_gparam(w.min(), w.max())
    wg = w.unflatten(-1, (w.shape[-1] // ARGS.group_size, ARGS.group_size))
    scale, _ = calculate_qparams(wg.amin(dim=-1), wg.amax(dim=-1), ARGS, global_scale=gs)
    sd = {"weight": w, "weight_scale": scale.to(w.dtype), "weight_global_scale": gs}
    out = NVFP4PackedCompressor.compress(sd, SCHEME)
    gs_bits = out["weight_global_scale"].view(torch.int32).item() & 0xFFFFFFFF
    packed = out["weight_packed"].contiguous().view(torch.uint8).numpy().tobytes()
    scales = out["weight_scale"].contiguous().view(torch.uint8).numpy().tobytes()
    return gs_bits, packed, scales


def bf16_from_bits(bits, rows, cols):
    t = torch.tensor([b - 65536 if b > 32767 else b for b in bits], dtype=torch.int16)
    return t.view(torch.bfloat16).reshape(rows, cols)


def rand_bits(g, n, lo, hi):
    return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int32)


def make_cases(extra=0):
    g = torch.Generator().manual_seed(20260801)
    cases = []

    def add(name, w):
        assert w.dtype == torch.bfloat16 and w.dim() == 2 and w.shape[1] % 16 == 0
        assert torch.isfinite(w.float()).all()
        cases.append((name, w.contiguous()))

    shapes = [(1, 16), (2, 32), (4, 64), (8, 128), (16, 256), (3, 1024), (32, 96), (5, 2048)]
    for i, (r, c) in enumerate(shapes):
        mag = [0.02, 1.0, 3e-3, 40.0, 1e-6, 0.1, 7e-2, 2.5][i]
        w = torch.randn(r, c, generator=g) * mag
        w[torch.rand(r, c, generator=g) < 0.002] *= 25.0              # outliers
        add("gauss%d" % i, w.to(torch.bfloat16))
    for i, (r, c) in enumerate([(4, 64), (8, 256), (16, 512), (2, 1024)]):
        w = torch.randn(r, c, generator=g) * 0.01
        grp = w.view(r, c // 16, 16)
        zero = torch.rand(r, c // 16, generator=g) < 0.35
        grp[zero] = 0.0
        w = w.to(torch.bfloat16)
        neg = torch.rand(r, c, generator=g) < 0.5                     # some -0.0
        w[(w == 0) & neg] = -0.0
        add("zero-groups%d" % i, w)
    for i, (r, c) in enumerate([(4, 64), (8, 128), (2, 512), (16, 64)]):
        # subnormal BF16 and values near 2^-126; case 0/1 also keep a normal outlier
        n = r * c
        bits = rand_bits(g, n, 0, 0x0200) | (rand_bits(g, n, 0, 2) << 15)
        w = bits.to(torch.int16).view(torch.bfloat16).reshape(r, c).clone()
        if i < 2:
            w[0, 3] = 0.05 if i == 0 else 1e-30
        add("tiny%d" % i, w)
    for i, (r, c) in enumerate([(2, 32), (4, 64), (8, 128), (4, 256), (16, 64), (1, 1024)]):
        # E2M1 midpoints and grid values times a power of two, some +-1 ulp; with a
        # group max of 6*2^k the group scale is exact and the ties are real ties
        n = r * c
        idx = torch.randint(0, len(MIDS), (n,), generator=g)
        e = torch.randint(-9, -6, (n,), generator=g).float()
        w = (torch.tensor(MIDS)[idx] * torch.exp2(e)).to(torch.bfloat16)
        wv = w.view(torch.int16)
        ulp = torch.randint(-2, 3, (n,), generator=g).to(torch.int16)
        if i % 2 == 1:
            wv += torch.where(ulp.abs() == 1, ulp, torch.zeros_like(ulp))
        w = wv.view(torch.bfloat16).reshape(r, c).clone()
        sign = torch.rand(r, c, generator=g) < 0.5
        w[sign] = -w[sign]
        if i < 3:
            w.view(-1, 16)[:, 0] = 6.0 * 2.0 ** -7                  # every group max 6*2^-7
        add("ties%d" % i, w)
    for i, (r, c) in enumerate([(4, 64), (8, 256), (2, 1024)]):
        e = torch.randint(-60, 61, (r, c), generator=g).float()
        add("wide%d" % i, (torch.randn(r, c, generator=g) * torch.exp2(e)).to(torch.bfloat16))
    for i, (r, c) in enumerate([(2, 32), (4, 128)]):
        n = r * c
        bits = rand_bits(g, n, 0x7F00, 0x7F80) | (rand_bits(g, n, 0, 2) << 15)
        w = bits.to(torch.int16).view(torch.bfloat16).reshape(r, c).clone()
        w[1] = torch.randn(c, generator=g).to(torch.bfloat16)
        add("huge%d" % i, w)
    for i, (r, c) in enumerate([(4, 64), (8, 32)]):
        n = r * c
        bits = rand_bits(g, n, 0, 0x0300) | (rand_bits(g, n, 0, 2) << 15)
        add("all-tiny%d" % i, bits.to(torch.int16).view(torch.bfloat16).reshape(r, c))
    for i, (r, c) in enumerate([(4, 64), (8, 128), (2, 256)]):
        n = r * c
        bits = rand_bits(g, n, 0, 0x10000)
        bits = torch.where((bits & 0x7F80) == 0x7F80, bits & 0x807F, bits)   # keep finite
        add("random-bits%d" % i, bits.to(torch.int16).view(torch.bfloat16).reshape(r, c))
    for i, (r, c) in enumerate([(4, 64), (8, 128)]):
        # groups far below amax: their scales land in E4M3's subnormal range / 0
        w = torch.randn(r, c, generator=g) * 1e-3
        grp = w.view(r, c // 16, 16)
        small = torch.rand(r, c // 16, generator=g) < 0.5
        grp[small] *= torch.exp2(-torch.randint(4, 14, (int(small.sum()), 1), generator=g).float())
        w[0, 0] = 3.0
        add("sub-scales%d" % i, w.to(torch.bfloat16))
    for i in range(4):
        # a sweep of amax values: the fp32/bf16 global scales differ in the last bits
        r, c = 4, 64
        w = torch.randn(r, c, generator=g) * 0.01
        w[1, 5] = float(torch.rand(1, generator=g)) * 2.0 ** (i * 3 - 6)
        add("amax-sweep%d" % i, w.to(torch.bfloat16))
    for i in range(10):
        # rows of different kinds in one tensor: gauss, zero, tiny, ties, outliers
        r, c = 8, 16 * (1 + i * 7)
        w = torch.randn(r, c, generator=g) * 0.02
        w[1] = 0.0
        w[2] *= 1e-35
        w[3] = (torch.tensor(MIDS)[torch.randint(0, len(MIDS), (c,), generator=g)]
                * 2.0 ** -8)
        w[4, ::5] = 0.0
        w[5] *= 64.0
        w[6] = -w[6].abs()
        add("mixed%d" % i, w.to(torch.bfloat16))
    add("big-gauss", (torch.randn(64, 1024, generator=g) * 0.015).to(torch.bfloat16))
    add("amax-3C03", bf16_from_bits([0x3C03] + [0x3A00 + k for k in range(31)], 2, 16))
    for name, bits, r, c in GOLDEN_INPUTS:
        add("golden-" + name, bf16_from_bits(bits, r, c))
    for i in range(extra):
        # --extra: a wider random sweep for local checks (not in the committed file)
        r, c = int(torch.randint(1, 9, (1,), generator=g)), 16 * int(torch.randint(1, 17, (1,), generator=g))
        e = torch.randint(-40, 20, (1,), generator=g).item()
        w = torch.randn(r, c, generator=g) * 2.0 ** e
        w.view(-1, 16)[torch.rand(r * c // 16, generator=g) < 0.1] = 0.0
        w.view(-1)[torch.rand(r * c, generator=g) < 0.05] *= 2.0 ** -20
        add("extra%d" % i, w.to(torch.bfloat16))
    return cases


# inputs of shared/vectors/nvfp4-vectors.md (the outputs are checked there)
GOLDEN_INPUTS = [
    ("ties", [0x3F60, 0x4028, 0x408C, 0x40C4, 0x410C, 0x4144, 0x418C, 0x41A8,
              0xBF60, 0xC028, 0xC08C, 0xC0C4, 0xC10C, 0xC144, 0xC18C, 0xC1A8], 1, 16),
    ("ulp-ties", [0x3F61, 0x3F5F, 0x4029, 0x4027, 0x408D, 0x408B, 0x40C5, 0x40C3,
                  0x410D, 0x410B, 0x4145, 0x4143, 0x418D, 0x418B, 0x41A8, 0xC1A8], 1, 16),
    ("signed-zeros", [0x3FE0, 0xC1A8, 0x0000, 0x8000, 0xBF00, 0x3F00, 0xBF60, 0x3F60]
     + [0] * 8, 1, 16),
    ("gs-rounding", [0x3C25] + [0x3A83] * 15, 1, 16),
    ("tiny-7b", [0x0529] + [0] * 15, 1, 16),
    ("fp8-sub", [0x41A8] + [0] * 15 + [0x3980, 0xB900, 0x3880] + [0] * 13
     + [0x3580, 0xB500] + [0] * 14, 3, 16),
    ("clamp448", [0x3F80, 0xBF80] + [0x3F80] * 14, 1, 16),
    ("realistic", [0x3C1A, 0xBCC3, 0x3CEB, 0xBBCD, 0xBC6C, 0x3C91, 0x3C8D, 0xBC51,
                   0x39A5, 0xBD38, 0x3CBC, 0x3CA3, 0x3C9C, 0xBD26, 0xBBDB, 0x3832,
                   0x3C05, 0x3BBD, 0x3CD8, 0xBCFD, 0xBB85, 0xBC57, 0x3B7E, 0x3C35,
                   0x3CD8, 0xBC1A, 0x3C5D, 0xBD15, 0xBB70, 0x3CAE, 0xBC02, 0x3BDD], 1, 32),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", default="tests/data/quant_peer.bin")
    ap.add_argument("--extra", type=int, default=0,
                    help="add N more random tensors (for a local sweep; keep 0 for the committed file)")
    opt = ap.parse_args()
    torch.set_num_threads(1)
    cases = make_cases(opt.extra)
    out = bytearray(b"RQPEER01" + struct.pack("<II", len(cases), 0))
    for name, w in cases:
        r, c = w.shape
        nb = name.encode()[:23]
        out += nb + b"\0" * (24 - len(nb)) + struct.pack("<II", r, c)
        out += w.view(torch.int16).numpy().astype("<i2").tobytes()
        for x in (w, w.float()):                     # recipe bf16, then fp32
            gs_bits, packed, scales = ct_nvfp4(x)
            assert len(packed) == r * c // 2 and len(scales) == r * c // 16
            out += struct.pack("<I", gs_bits) + packed + scales
    out += b"END!"
    with open(opt.output, "wb") as f:
        f.write(out)
    print("%s: %d cases, %d bytes (compressed-tensors %s, torch %s)"
          % (opt.output, len(cases), len(out), compressed_tensors.__version__, torch.__version__))


if __name__ == "__main__":
    sys.exit(main())
