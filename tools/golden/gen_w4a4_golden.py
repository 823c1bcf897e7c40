#!/usr/bin/env python3
"""gen_w4a4_golden.py - what llm-compressor's oneshot writes for the NVFP4 preset (W4A4)
on the tiny models, as golden data for tests/fs/test_scheme_w4a4.py (`--scheme nvfp4`).

Runs in a venv with llmcompressor 0.14.0.1, compressed-tensors 0.19.0, torch,
transformers and datasets (CI never has it, so the result is committed):

    VENV/bin/python tools/golden/gen_w4a4_golden.py

For tests/data/tiny/llama and tests/data/tiny/qwen2_moe it loads the model in BF16,
runs oneshot(recipe=QuantizationModifier(targets="Linear", scheme="NVFP4",
ignore=["lm_head"])) over 32 token ids on the CPU, saves it compressed and records
in tests/data/w4a4_golden.json: the saved config.json's quantization_config and the
sha256 of every weight_packed, weight_scale and weight_global_scale tensor. Those do
not depend on the calibration tokens (only input_global_scale does), so requantfs'
weights must match them whatever text `calib run` saw; input_global_scale is the
calibration's and is compared with the calibration file instead.
"""
import hashlib
import json
import os
import sys
import tempfile

MODELS = ("llama", "qwen2_moe")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one(name, tmp):
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    src = os.path.join(ROOT, "tests", "data", "tiny", name)
    dst = os.path.join(tmp, name)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    # oneshot wants a processor when given a dataset; the ids are given already
    tok = Tokenizer(models.BPE(vocab={chr(65 + i): i for i in range(26)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    proc = PreTrainedTokenizerFast(tokenizer_object=tok)
    ids = [list(range(1, 33))]
    ds = Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * 32]})
    recipe = QuantizationModifier(targets="Linear", scheme="NVFP4", ignore=["lm_head"])
    oneshot(model=model, processor=proc, dataset=ds, recipe=recipe,
            num_calibration_samples=1, max_seq_length=32)
    model.save_pretrained(dst, save_compressed=True)
    with open(os.path.join(dst, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    sha = {}
    for fn in sorted(os.listdir(dst)):
        if not fn.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(dst, fn), "pt") as st:
            for k in st.keys():
                if k.endswith((".weight_packed", ".weight_scale", ".weight_global_scale")):
                    t = st.get_tensor(k).contiguous()
                    raw = t.view(torch.uint8).numpy().tobytes()
                    sha[k] = hashlib.sha256(raw).hexdigest()
    return {"quantization_config": qc, "weights_sha256": sha}


def main():
    import compressed_tensors
    import llmcompressor
    out = {"generator": "tools/golden/gen_w4a4_golden.py",
           "llmcompressor": llmcompressor.__version__,
           "compressed_tensors": compressed_tensors.__version__, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            out["models"][name] = one(name, tmp)
    path = os.path.join(ROOT, "tests", "data", "w4a4_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", path, {m: len(v["weights_sha256"]) for m, v in out["models"].items()})


if __name__ == "__main__":
    sys.exit(main())
