#!/usr/bin/env python3
"""gen_qconfig_golden.py - the quantization_config llm-compressor's model_free_ptq
writes, per scheme, as golden data for tests/fs/test_qconfig.c.

Runs in the heavy reference venv (torch, llmcompressor 0.14.0.1, compressed-tensors
0.19.0; CI never has it, so its results are committed):

    /work/venv-ref/bin/python tools/golden/gen_qconfig_golden.py build-qc/requantfs

For each preset it runs model_free_ptq(SRC, DST, scheme=PRESET, ignore=["lm_head"])
on the CPU and writes DST/config.json's quantization_config to
tests/data/qconfig_golden/<scheme>.json (json.dumps(indent=2, sort_keys=True)).
SRC is the config.json of `requantfs mkckpt OUT --dense --no-tokenizer --layers 2
--experts 4` with one small BF16 shard whose Linear weights have 128 columns
(mkckpt's 64-wide model cannot take W4A16's group of 128; the config written
does not depend on the weights' values or shapes: checked for the other three
presets against the full mkckpt model when this script was written).
It also runs the same preset on the Laguna 08-01 form (plain mkckpt: a
compressed-tensors NVFP4 checkpoint), recording what compressed-tensors'
QuantizationConfig.merge makes of an existing config (new group name, format,
ignore list) in merge_<scheme>.json: the facts qconfig.c follows for group
naming and "format", and the ignore handling it deliberately does differently.
Last it checks, with compressed-tensors' own matching, that the config our
export writes for the Laguna form puts every module in the right group.
"""
import json
import os
import subprocess
import sys
import tempfile

PRESETS = {            # requantfs --scheme name -> llm-compressor preset
    "nvfp4a16": "NVFP4A16",
    "fp8-dynamic": "FP8_DYNAMIC",
    "w8a16": "W8A16",
    "w4a16": "W4A16",
}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_qconfig_golden.py path/to/requantfs")
    exe = sys.argv[1]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out_dir = os.path.join(root, "tests", "data", "qconfig_golden")
    os.makedirs(out_dir, exist_ok=True)

    import compressed_tensors
    import llmcompressor
    from llmcompressor import model_free_ptq

    versions = {"llmcompressor": llmcompressor.__version__,
                "compressed_tensors": compressed_tensors.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        import torch
        from safetensors.torch import save_file
        g = torch.Generator().manual_seed(0)
        tensors = {name: torch.randn(shape, generator=g).to(torch.bfloat16)
                   for name, shape in (("model.layers.0.self_attn.q_proj.weight", (128, 128)),
                                       ("model.layers.0.self_attn.k_proj.weight", (64, 128)),
                                       ("model.layers.0.self_attn.v_proj.weight", (64, 128)),
                                       ("model.layers.0.mlp.down_proj.weight", (64, 128)),
                                       ("model.norm.weight", (128,)),
                                       ("lm_head.weight", (64, 128)))}
        srcs = {}
        for form, extra in (("dense", ["--dense"]), ("laguna", [])):
            made = os.path.join(tmp, "mk-" + form)
            subprocess.run([exe, "mkckpt", made, "--no-tokenizer", "--layers", "2",
                            "--experts", "4"] + extra, check=True, stdout=subprocess.DEVNULL)
            srcs[form] = os.path.join(tmp, form)
            os.makedirs(srcs[form])
            with open(os.path.join(made, "config.json"), "rb") as f:
                cfg = f.read()
            with open(os.path.join(srcs[form], "config.json"), "wb") as f:
                f.write(cfg)
            save_file(tensors, os.path.join(srcs[form], "model.safetensors"))
        for name, preset in PRESETS.items():
            for form, prefix in (("dense", ""), ("laguna", "merge_")):
                dst = os.path.join(tmp, f"{form}-{name}")
                model_free_ptq(srcs[form], dst, scheme=preset, ignore=["lm_head"],
                               device="cpu")
                with open(os.path.join(dst, "config.json")) as f:
                    qc = json.load(f)["quantization_config"]
                path = os.path.join(out_dir, f"{prefix}{name}.json")
                with open(path, "w") as f:
                    f.write(json.dumps(qc, indent=2, sort_keys=True) + "\n")
                print(f"wrote {path}")
    check_extended(exe)
    path = os.path.join(out_dir, "VERSIONS.json")
    with open(path, "w") as f:
        f.write(json.dumps(versions, indent=2, sort_keys=True) + "\n")
    print(f"wrote {path}")


def check_extended(exe):
    """What compressed-tensors makes of the config `requantfs export --scheme` writes
    for an already-quantized checkpoint (the Laguna 08-01 form): it must validate,
    and by compressed-tensors' own matching (match_targets: exact name > regex >
    class; ignore by match_name) every module must land in the group whose tensors
    it has: the new scheme's modules in the new group, the NVFP4 experts in group_0,
    BF16 modules ignored. Prints one line per scheme; exits non-zero on a mismatch."""
    import torch
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.utils.match import match_name, match_targets
    from safetensors import safe_open
    linear = torch.nn.Linear(1, 1)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "laguna")
        subprocess.run([exe, "mkckpt", src, "--no-tokenizer", "--layers", "4", "--experts", "4"],
                       check=True, stdout=subprocess.DEVNULL)   # layer 1 NVFP4, 2-3 BF16
        for name, preset in PRESETS.items():
            if name in ("w8a16", "w4a16"):
                continue     # mkckpt's 64-wide modules cannot take their group of 128
            dst = os.path.join(tmp, "ex-" + name)
            subprocess.run([exe, "export", src, dst, "--scheme", name, "--quiet", "--device",
                            "cpu"], check=True)
            with open(os.path.join(dst, "config.json")) as f:
                qc = json.load(f)["quantization_config"]
            cfg = QuantizationConfig.model_validate(qc)
            target_group = {}
            for g, scheme in cfg.config_groups.items():
                for t in scheme.targets:
                    target_group.setdefault(t, g)
            kind = {}
            for fn in sorted(os.listdir(dst)):
                if fn.endswith(".safetensors"):
                    with safe_open(os.path.join(dst, fn), "pt") as f:
                        for k in f.keys():
                            m, _, p = k.rpartition(".")
                            if p == "input_global_scale":
                                kind[m] = "group_0"
                            elif p in ("weight_packed", "weight_scale") or (
                                    p == "weight" and f.get_slice(k).get_dtype() != "BF16"):
                                kind.setdefault(m, preset)
                            elif p == "weight" and not m.endswith("norm"):
                                kind.setdefault(m, None)
            wrong = []
            for m, want in sorted(kind.items()):
                ignored = any(match_name(m, i) for i in cfg.ignore or [])
                hits = match_targets(m, linear, list(target_group))
                got = None if ignored or not hits else target_group[hits[0]]
                if want is None and not ignored:
                    # BF16 and not ignored: only allowed when model_free_ptq would skip it
                    wrong.append(f"{m}: BF16 but not ignored")
                elif want is not None and got != want:
                    wrong.append(f"{m}: has {want}'s tensors, compressed-tensors picks {got}")
            bad += len(wrong)
            counts = {w: sum(1 for v in kind.values() if v == w) for w in set(kind.values())}
            print(f"check {name}: modules by expected group {counts}, groups "
                  f"{list(cfg.config_groups)}, "
                  f"format {cfg.format}: " + ("ok" if not wrong else "; ".join(wrong[:5])))
    if bad:
        sys.exit(f"{bad} modules land in the wrong group")


if __name__ == "__main__":
    main()
