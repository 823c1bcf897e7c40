#!/usr/bin/env python3
"""Golden data for `calib run --observer minmax|mse` (issue 32 item 5): llm-compressor
0.14.0.1's oneshot with the NVFP4 preset whose input_activations observer is "mse"
(MovingAverageMSEObserver) or "minmax" (MinMaxObserver, the moving-average min/max) on
SmolLM2, over the token ids `calib run` feeds.

    /work/venv-ref-h32a/bin/python tools/golden/gen_calib_mse_golden.py
        [--tokens 256] [--out tests/data/golden/llmc-nvfp4/calib-mse.json]

Needs the reference venv (torch, transformers, llmcompressor 0.14.0.1, datasets); CI
never runs it: its output is committed. A few minutes on the CPU.

Token sets (each sample one batch: oneshot's batch_size 1, no padding):
  text     the first N tokens of /usr/share/common-licenses/GPL-3 as
           AutoTokenizer(dir)(text)["input_ids"] encodes it, one sample: the ids
           `calib run --text GPL-3 --tokens N` records (one batch: the moving average
           does not act; mse is the search of one batch)
  prompts  PROMPTS (tests/data/golden/llmc-nvfp4/calib-prompts.txt, written here): four
           paragraphs of GPL-3, one a line, of four different token lengths, NOT in
           length order; each tokenizer(line) a sample. oneshot's LengthAwareSampler feeds
           them longest first, so the moving average folds 4 batches in that order:
           `calib run --prompts PROMPTS --tokens TOTAL --observer X` must do the same.
Recipe: QuantizationModifier(config_groups={"group_0": NVFP4 preset with
input_activations.observer = X}, ignore=["lm_head"]), pipeline="basic" (why not the
default: tools/golden/golden_llmc_nvfp4.py), the model loaded in BF16.

torch runs with ATEN_CPU_CAPABILITY=avx2 and ONEDNN_MAX_CPU_ISA=AVX2 (set below): the
kernels of an AVX2 machine, where the NVFP4 preset's goldens were made and whose
roundings the engine's BF16 forward reproduces.

Checked here before the runs (asserted; what quant/observer_act.c's header says):
torch.sum over dims (0, -1) of a BF16 (T, G, 16) tensor equals, per group, the row sums
of 16 (lanes x[l] + x[8+l], the 8 lanes in order) added in token order in binary32 and
rounded once to BF16 (sum_out's float accumulation buffer), on data where other orders
round differently.

Output (JSON): token ids of both sets, versions, and per set and observer, per quantized
module: input_global_scale (float and F32 bits) and absmax, the observer's
max(max_vals.max(), -min_vals.min()) the global scale is made from.
"""
import argparse
import json
import os
import struct
import sys

# torch's CPU kernels as on an AVX2 machine, whose BF16 orders the engine's BF16 forward
# reproduces (docs/calibration.md): on a CPU with AVX-512 (BF16) torch otherwise takes
# other kernels (ATen's AVX-512 ones, oneDNN's AVX-512 BF16 GEMM) whose roundings differ
# (there tools/golden/golden_llmc_nvfp4.py's own SmolLM2 run gives 130 of its committed
# 210 scales). Set before torch is imported.
os.environ["ATEN_CPU_CAPABILITY"] = "avx2"
os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEXT = "/usr/share/common-licenses/GPL-3"
SMOL = os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct")
GOLD = os.path.join(ROOT, "tests", "data", "golden", "llmc-nvfp4")
PROMPTS = os.path.join(GOLD, "calib-prompts.txt")
OBSERVERS = ("mse", "minmax")


def f32_bits(x):
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", float(x)))[0]


def check_sum_order():
    """torch.sum(bf16 (T, G, 16), dim=(0, -1)) as observer_act.c emulates it."""
    import numpy as np
    import torch
    g = torch.Generator().manual_seed(32)
    for T in (1, 3, 40, 300):
        # magnitudes spread over many binades: every other order rounds differently
        x = (torch.rand(T, 5, 16, generator=g) * 2.0 ** torch.randint(-12, 12, (T, 5, 16),
             generator=g)).to(torch.bfloat16)
        got = torch.sum(x, dim=(0, -1))
        xf = x.float().numpy()
        want = []
        for gi in range(5):
            acc = np.float32(0)
            for t in range(T):
                v = xf[t, gi]
                lanes = [np.float32(v[l]) + np.float32(v[l + 8]) for l in range(8)]
                r = np.float32(0)
                for l in lanes:
                    r = np.float32(r + l)
                acc = np.float32(acc + r)
            want.append(acc)
        want = torch.tensor(np.array(want, dtype=np.float32)).to(torch.bfloat16)
        if not torch.equal(got, want):
            sys.exit("torch.sum's order over (T=%d, G, 16) is not the one observer_act.c "
                     "emulates: got %s, want %s" % (T, got.tolist(), want.tolist()))


def prompts(tok):
    """Four GPL-3 paragraphs (a line each) of different token lengths, not in length order."""
    with open(TEXT, encoding="utf-8") as f:
        paras = [" ".join(p.split()) for p in f.read().split("\n\n")]
    picked, lens = [], set()
    for p in paras:
        n = len(tok(p)["input_ids"])
        if 40 <= n <= 110 and n not in lens:
            picked.append(p)
            lens.add(n)
        if len(picked) == 4:
            break
    ls = [len(tok(p)["input_ids"]) for p in picked]
    if ls == sorted(ls, reverse=True):       # make the sampler's reordering matter
        picked = picked[::-1]
    return picked


def run(ids_list, observer):
    import torch
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import NVFP4
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.observers import Observer
    from transformers import AutoModelForCausalLM

    absmax, owner = {}, {}
    orig_attach, orig_q = Observer.attach, Observer.get_qparams

    def attach(self, module):
        owner[id(self)] = module
        return orig_attach(self, module)

    def get_qparams(self):
        if self.base_name == "input":
            st = self.get_statistics()
            a = torch.max(st["max_vals"].max(), -st["min_vals"].min())
            absmax[owner[id(self)]] = float(a)
        return orig_q(self)

    Observer.attach, Observer.get_qparams = attach, get_qparams
    try:
        model = AutoModelForCausalLM.from_pretrained(SMOL, dtype="auto")
        assert model.dtype == torch.bfloat16
        scheme = QuantizationScheme(
            targets=["Linear"], weights=NVFP4["weights"],
            input_activations=NVFP4["input_activations"].model_copy(
                update={"observer": observer}))
        recipe = QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"])
        ds = Dataset.from_dict({"input_ids": ids_list,
                                "attention_mask": [[1] * len(i) for i in ids_list]})
        oneshot(model=model, dataset=ds, recipe=recipe, num_calibration_samples=len(ids_list),
                max_seq_length=max(len(i) for i in ids_list),
                shuffle_calibration_samples=False, pipeline="basic")
    finally:
        Observer.attach, Observer.get_qparams = orig_attach, orig_q
    mods = {}
    for name, mod in model.named_modules():
        ig = getattr(mod, "input_global_scale", None)
        if ig is None or getattr(mod, "weight_global_scale", None) is None:
            continue
        v = float(ig.reshape(-1)[0])
        mods[name] = {"input_global_scale": v, "input_global_scale_bits": f32_bits(v),
                      "absmax": absmax.get(mod)}
    return dict(sorted(mods.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--out", default=os.path.join(GOLD, "calib-mse.json"))
    a = ap.parse_args()
    import compressed_tensors
    import llmcompressor
    import torch
    import transformers
    from transformers import AutoTokenizer
    check_sum_order()
    tok = AutoTokenizer.from_pretrained(SMOL)
    with open(TEXT, encoding="utf-8") as f:
        text_ids = tok(f.read())["input_ids"][:a.tokens]
    ps = prompts(tok)
    with open(PROMPTS, "w", encoding="utf-8") as f:
        f.write("".join(p + "\n" for p in ps))
    prompt_ids = [tok(p)["input_ids"] for p in ps]
    doc = {
        "generator": "tools/golden/gen_calib_mse_golden.py",
        "peer": "llmcompressor %s, compressed-tensors %s, transformers %s, torch %s; oneshot "
                "NVFP4 preset with input_activations.observer set, BF16 forward on the CPU, "
                "pipeline basic" % (llmcompressor.__version__, compressed_tensors.__version__,
                                     transformers.__version__, torch.__version__),
        "text": {"tokens": a.tokens, "token_ids": text_ids},
        "prompts": {"file": os.path.relpath(PROMPTS, ROOT), "lengths":
                    [len(i) for i in prompt_ids], "tokens": sum(len(i) for i in prompt_ids),
                    "token_ids": prompt_ids},
        "runs": {},
    }
    for obs in OBSERVERS:
        doc["runs"]["text/" + obs] = run([text_ids], obs)
        doc["runs"]["prompts/" + obs] = run(prompt_ids, obs)
        print("%s: done" % obs, file=sys.stderr)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("wrote %s (%d modules a run)" % (a.out, len(doc["runs"]["text/mse"])), file=sys.stderr)


if __name__ == "__main__":
    main()
