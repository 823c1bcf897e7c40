#!/usr/bin/env python3
"""Golden logits of transformers' Laguna on a checkpoint in any data-free
compressed-tensors scheme (FP8, NVFP4/NVFP4A16, pack-quantized INT), for
tests/engine/test_forward's development mode:

    /work/venv-ref/bin/python tools/golden/check_scheme_forward.py DIR OUT.json [--lengths 1,7,23]
    build/tests/engine/test_forward build/requantfs OUT.json DIR

Each quantized module is decompressed by compressed-tensors itself
(the compressor registered for the checkpoint's format, with the scale
widened to float32, so the weight is (q - zero_point) * scale in float32,
the value the engine computes), everything else as tools/golden/gen_engine_golden.py
does; then gen_engine_golden's transformers run writes OUT.json, with the
sha256 of DIR's shards and config.json ("checkpoint_sha256"). Needs torch,
transformers and compressed-tensors (the reference venv).

The committed tests/data/scheme_forward/<scheme>.json were made this way from
`requantfs export BF16 Q --scheme <scheme>` of `requantfs mkckpt BF16 --dense
--layers 2 --experts 4` (w8a16/w4a16 with --targets model.layers.0.mlp.down_proj)
with --lengths 9 --greedy 8; tests/engine/test_schemes.py checks the export's
digest and runs test_forward on it. Regenerate them when the export's bytes
change on purpose:

    for s in fp8-dynamic nvfp4a16 w8a16 w4a16; do ... tools/golden/check_scheme_forward.py \
        Q-$s tests/data/scheme_forward/$s.json --name $s --lengths 9 --greedy 8; done
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_engine_golden as geg  # noqa: E402

from compressed_tensors.compressors.base import BaseCompressor  # noqa: E402
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme  # noqa: E402


def scheme_of(qc):
    """(format, QuantizationScheme) of the checkpoint's single config group."""
    groups = qc["config_groups"]
    if len(groups) != 1:
        sys.exit("one config group expected")
    g = next(iter(groups.values()))
    fmt = g.get("format") or qc.get("format")
    return fmt, QuantizationScheme(targets=g["targets"], weights=QuantizationArgs(**g["weights"]))


def load_dir_ct(d):
    raw = geg.load_raw(d)
    cfg = json.load(open(os.path.join(d, "config.json")))
    fmt, scheme = scheme_of(cfg["quantization_config"])
    comp = BaseCompressor.get_value_from_registry(fmt)
    mods = sorted({k.rsplit(".", 1)[0] for k in raw if k.endswith(".weight_scale")})
    out, used = {}, set()
    for m in mods:
        sd = {k[len(m) + 1:]: v for k, v in raw.items() if k.startswith(m + ".") and
              k[len(m) + 1:] in ("weight", "weight_packed", "weight_scale", "weight_shape",
                                 "weight_zero_point", "weight_global_scale")}
        used.update(m + "." + k for k in sd)
        if fmt == "nvfp4-pack-quantized":
            w = geg.dequant_nvfp4(sd["weight_packed"], sd["weight_scale"], sd["weight_global_scale"])
        else:
            sd["weight_scale"] = sd["weight_scale"].float()
            w = comp.decompress(sd, scheme)["weight"].float()
        out[m + ".weight"] = w
    for k, t in raw.items():
        if k not in used and not k.endswith((".input_global_scale", ".input_scale")):
            out[k] = t.float()
    return out


def dir_digest(d):
    """sha256 over the checkpoint's *.safetensors and config.json, in name order."""
    import hashlib
    h = hashlib.sha256()
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors") or f == "config.json":
            h.update(f.encode() + b"\0")
            h.update(open(os.path.join(d, f), "rb").read())
    return h.hexdigest()


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("out")
    ap.add_argument("--name", default=None)
    ap.add_argument("--lengths", default="1,7,23", help="prompt lengths (token ids from seed 7)")
    ap.add_argument("--greedy", type=int, default=16)
    a = ap.parse_args()
    torch.set_num_threads(1)
    geg.load_dir = load_dir_ct
    model, cfg = geg.build_model(a.dir, {})
    lengths = [int(x) for x in a.lengths.split(",")]
    cases = [geg.run_case(model, p, a.greedy) for p in geg.prompts(cfg["vocab_size"], 7, lengths)]
    name = a.name or os.path.basename(a.dir.rstrip("/"))
    doc = {
        "generator": "tools/golden/check_scheme_forward.py",
        "reference": "transformers %s LagunaForCausalLM, float32, eager attention; weights "
                     "decompressed by compressed-tensors %s" % (
                         __import__("transformers").__version__,
                         __import__("compressed_tensors").__version__),
        "tolerance": "max|dlogit| <= 1e-3 * max|logit| per position; greedy tokens identical",
        "checkpoint_sha256": dir_digest(a.dir),
        "models": [{"name": name, "mkckpt": [], "form": "src", "override": {},
                    "rope": geg.rope_of(model), "cases": cases}],
        "rope_cases": [],
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: {len(cases)} cases, greedy {[c['greedy'][:6] for c in cases]}; wrote {a.out} "
          f"({os.path.getsize(a.out)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
