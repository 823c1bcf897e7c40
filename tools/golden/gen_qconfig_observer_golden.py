#!/usr/bin/env python3
"""gen_qconfig_observer_golden.py - the quantization_config llm-compressor's model_free_ptq
writes when the weights' observer is an MSE one, as golden data for
tests/fs/test_observer_cli.py (requantfs --observer mse|expanded-mse).

Runs in the heavy reference venv (torch, llmcompressor 0.14.0.1, compressed-tensors 0.19.0;
CI never has it, so its results are committed):

    /work/venv-ref/bin/python tools/golden/gen_qconfig_observer_golden.py

For each data-free preset (NVFP4A16, FP8_DYNAMIC, W8A16, W4A16) and each MSE observer
(memoryless_mse, nvfp4_expanded_mse) it runs model_free_ptq on tests/data/tiny/llama with
config=QuantizationConfig({PRESET: preset with weights.observer = OBSERVER},
ignore=["lm_head"]) on the CPU -- the group keeps the preset's name, as requantfs writes
it -- and writes DST/config.json's quantization_config to
tests/data/qconfig_golden/<scheme>.<observer>.json (json.dumps(indent=2, sort_keys=True)).
A preset given by name (the minmax default) dumps "observer": null: those are the
<scheme>.json files of gen_qconfig_golden.py.

The same runs' tensors, as the sha256 of each tensor's bytes of DST/model.safetensors, go
to tests/data/observer/tiny_llama_mse.json ({scheme: {observer: {tensor: sha256}}}): the
bytes `requantfs export/mount --scheme S --observer O --ignore lm_head` must serve.
"""
import hashlib
import json
import os
import tempfile

import compressed_tensors
import torch
import llmcompressor
from compressed_tensors.quantization import (QuantizationConfig, QuantizationStatus,
                                             preset_name_to_scheme)
from llmcompressor import model_free_ptq

PRESETS = {"nvfp4a16": "NVFP4A16", "fp8-dynamic": "FP8_DYNAMIC", "w8a16": "W8A16",
           "w4a16": "W4A16"}
OBSERVERS = ("memoryless_mse", "nvfp4_expanded_mse")


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    src = os.path.join(root, "tests", "data", "tiny", "llama")
    out_dir = os.path.join(root, "tests", "data", "qconfig_golden")
    from safetensors import safe_open
    shas = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, preset in PRESETS.items():
            for obs in OBSERVERS:
                s = preset_name_to_scheme(preset, ["Linear"])
                s.weights.observer = obs
                cfg = QuantizationConfig(config_groups={preset: s}, ignore=["lm_head"],
                                         quantization_status=QuantizationStatus.INITIALIZED)
                dst = os.path.join(tmp, f"{name}-{obs}")
                model_free_ptq(src, dst, config=cfg, device="cpu")
                with open(os.path.join(dst, "config.json")) as f:
                    qc = json.load(f)["quantization_config"]
                path = os.path.join(out_dir, f"{name}.{obs}.json")
                with open(path, "w") as f:
                    f.write(json.dumps(qc, indent=2, sort_keys=True) + "\n")
                out = {}
                with safe_open(os.path.join(dst, "model.safetensors"), "pt") as f:
                    for k in sorted(f.keys()):
                        t = f.get_tensor(k).contiguous()
                        raw = t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
                        out[k] = hashlib.sha256(raw).hexdigest()
                shas.setdefault(name, {})[obs] = out
                print(f"wrote {path} (llmcompressor {llmcompressor.__version__}, "
                      f"compressed-tensors {compressed_tensors.__version__})")
    path = os.path.join(root, "tests", "data", "observer", "tiny_llama_mse.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(json.dumps({"llmcompressor": llmcompressor.__version__, "src": "tests/data/tiny/llama",
                            "ignore": ["lm_head"], "sha256": shas}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
