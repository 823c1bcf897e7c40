#!/usr/bin/env python3
"""Golden data for `calib run --forward-dtype bf16` on the tiny families: the input amax of
every nn.Linear (lm_head excluded) that transformers' eager BF16 forward computes, as the
input_global_scale llm-compressor would write from it (bf16(bf16(1 / amax) * 2688)).

    /work/venv-llmc/bin/python tools/golden/golden_bf16_eager.py [--out FILE] [--only FAMILY...]

--only recomputes the families named and keeps the file's other entries as they are.

Needs the venv of tools/golden/golden_llmc_nvfp4.py (torch 2.14 on an AVX2 CPU: the engine's BF16
forward reproduces that build's kernel orders); never part of tools/setup or CI.

Per family of tests/data/tiny (BF16 checkpoints, vocabulary 512) with the 512-token
tokenizer tools/golden/golden_llmc_nvfp4.py cut from SmolLM2's: the first N tokens of
/usr/share/common-licenses/GPL-3 (the ids `calib run --text GPL-3 --tokens N` records), one
forward of the model loaded with dtype=bfloat16, attn_implementation="eager", forward
pre-hooks taking max|x| of each nn.Linear's input. transformers 5 keeps routed experts as
3-D parameters (no nn.Linear), so they are not in the file; everything after a MoE block
(the next layers' inputs) still depends on its output. Writes one JSON file: per family the
token ids and {module: input_global_scale}.
"""
import argparse
import json
import os
import shutil
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEXT = "/usr/share/common-licenses/GPL-3"
TOK = os.path.join(ROOT, "tests", "data", "golden", "llmc-nvfp4", "tiny-tokenizer")
# biased Linears: llama's tiny model has q/k/v/o biases (attention_bias), qwen2_moe and the
# dense qwen2 q/k/v biases (qwen2 added by h24d: the dense family users calibrate most)
FAMILIES = ["llama", "qwen2_moe", "mixtral", "qwen3_moe", "qwen2"]


def scales(model_dir, ntok):
    import torch
    from transformers import AutoModelForCausalLM
    import tokenizers
    # the ids of tokenizer.json as written (the tokenizers library: what calib run reads).
    # Not AutoTokenizer: transformers 5 rebuilds the tokenizer of a model_type that has its
    # own class (qwen2 -> Qwen2Tokenizer, its own pre-tokenizer regex) instead of the file's
    # PreTrainedTokenizerFast; for the other families both give the same ids.
    tok = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    with open(TEXT, encoding="utf-8") as f:
        ids = tok.encode(f.read()).ids[:ntok]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16,
                                                 attn_implementation="eager")
    model.eval()
    amax = {}

    def hook(name):
        def f(mod, args):
            v = args[0].detach().abs().max().float().item()
            amax[name] = max(amax.get(name, 0.0), v)
        return f
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name != "lm_head":
            mod.register_forward_pre_hook(hook(name))
    with torch.no_grad():
        model(torch.tensor([ids]))
    out = {}
    for name, a in sorted(amax.items()):
        t = torch.tensor(a, dtype=torch.bfloat16)
        out[name] = float((t.reciprocal() * 2688).float().item())
    return ids, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "golden", "llmc-nvfp4",
                                                  "eager-bf16-families.json"))
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--only", nargs="+", choices=FAMILIES, help="recompute these families only, "
                    "keeping the others of --out")
    a = ap.parse_args()
    import torch
    import transformers
    res = {"text": TEXT, "tokens": a.tokens, "torch": torch.__version__,
           "transformers": transformers.__version__, "families": {}}
    if a.only:
        with open(a.out) as f:
            old = json.load(f)
        if (old["torch"], old["transformers"], old["tokens"]) != (res["torch"],
                                                                  res["transformers"], a.tokens):
            raise SystemExit("--only: %s was made with torch %s, transformers %s, %d tokens; "
                             "this is torch %s, transformers %s: regenerate all" % (
                                 a.out, old["torch"], old["transformers"], old["tokens"],
                                 res["torch"], res["transformers"]))
        res["families"] = old["families"]
    tmp = tempfile.mkdtemp(prefix="bf16-eager-")
    try:
        for fam in a.only or FAMILIES:
            d = os.path.join(tmp, fam)
            os.makedirs(d)
            for fn in ("config.json", "model.safetensors"):
                shutil.copy(os.path.join(ROOT, "tests", "data", "tiny", fam, fn), d)
            for fn in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(TOK, fn), d)
            ids, sc = scales(d, a.tokens)
            res["families"][fam] = {"token_ids": ids, "input_global_scale": sc}
            print(fam, len(sc), "modules")
    finally:
        shutil.rmtree(tmp)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
