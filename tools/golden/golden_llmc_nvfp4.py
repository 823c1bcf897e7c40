#!/usr/bin/env python3
"""Golden data from the peer: llm-compressor's NVFP4 (W4A4) preset on the real SmolLM2
model and a tiny MoE, calibrated on the same token ids `requantfs calib run --text` feeds.

    /work/venv-llmc/bin/python tools/golden/golden_llmc_nvfp4.py [--tokens 256]
        [--out tests/data/golden/llmc-nvfp4] [--keep DIR]

Needs a venv with llmcompressor 0.14.0.1 (it brings torch, transformers 5, compressed-
tensors 0.19.0, datasets); never part of tools/setup or CI. Runs on the CPU in about a
minute. --keep DIR also leaves the two compressed checkpoints in DIR.

Models
  smollm2         .models/SmolLM2-135M-Instruct (tools/setup-model), BF16, dense llama.
  tiny-qwen3_moe  tests/data/tiny/qwen3_moe (tools/golden/gen_tiny_models.py: transformers'
                  Qwen3MoeConfig, 2 layers, 4 experts, top-2, vocabulary 512) with a
                  512-entry tokenizer cut from SmolLM2's (written to OUT/tiny-tokenizer/:
                  the 17 special tokens, the 256 byte symbols, the 239 merged tokens
                  after them and every merge (in rank order) that makes one of them; every byte has a token, so any text encodes within the
                  vocabulary, and the HF tokenizers library and the engine agree on it).
Calibration tokens: the first N tokens of /usr/share/common-licenses/GPL-3 as
`AutoTokenizer(dir)(text)["input_ids"]` encodes it (no BOS: this tokenizer adds none), one
sequence, no padding: the ids `calib run --text GPL-3 --tokens N` records.

The peer run: oneshot(model, dataset=[those ids], recipe=QuantizationModifier(
targets="Linear", scheme="NVFP4", ignore=["lm_head"]), num_calibration_samples=1,
max_seq_length=N, moe_calibrate_all_experts=True (0.14's default, written out),
pipeline="basic"), twice: the model loaded in its own dtype (BF16: the preset as users
run it; its weights are saved and hashed) and loaded in FP32 (only its input scales are
kept: the same observer over an FP32 forward, which is what the engine computes).

Why pipeline="basic" (one whole-model forward) and not the default: with transformers
5.17 the default ("independent", which picks "sequential": the model traced into one
subgraph per decoder layer) hands every self_attn attention_mask=None under the eager
attention it forces, so attention runs WITHOUT its causal mask (seen with a forward-pre
hook on self_attn; "basic" passes the (1,1,N,N) causal mask). That is an accident, not a
convention — a server runs causal attention — and it moves every scale downstream of
the first attention: on the tiny MoE layer 0's o_proj scale was 2112 instead of 1048
(-50 %). The observer, the rounding and the weights are the same in both pipelines.

How llm-compressor 0.14.0.1 computes the activation scale (read in its sources):
  * Pipeline: QuantizationModifier needs data, so the "independent" pipeline picks the
    "sequential" one: one decoder layer at a time, all of it inside DisableQuantization,
    so every layer sees the plain forward of the layers before it (no fake quantization
    of weights or activations; "propagate_error" replays the same unquantized forward).
  * dtype: the model is loaded with precision "auto" = the checkpoint's torch_dtype,
    BF16 here: the whole forward runs in BF16 (torch CPU kernels: matmuls accumulate in
    FP32 and round each output to BF16; RMSNorm in FP32 then rounded to BF16), so the
    observed inputs are BF16 values.
  * Observer: the preset's input_activations say observer="static_minmax" (a running
    min/max over every batch, not a moving average), strategy TENSOR_GROUP, group 16,
    dynamic="local" (per-group scales at run time, only the global scale is static).
    A forward-pre hook on each targeted Linear takes amin/amax of its input in BF16
    (exact: a max does not round).
  * Global scale: compressed_tensors.quantization.utils.generate_gparam:
    448 * 6 / max(|min|, |max|) with max_val clamped to the dtype's tiny, computed in
    the observed dtype, NaN/Inf replaced by 1.0, then .to(float32). A Python float over
    a tensor is Tensor.__rtruediv__, i.e. t.reciprocal() * 2688: two roundings in BF16.
    So input_global_scale = bf16(bf16(1 / amax_bf16) * 2688) stored as F32 (8
    significant bits; amax 9.96875 -> 10 -> 0.10009765625 -> 270, where one rounded
    quotient would give 268). engine/model/observe.c lg_obs_scale does exactly this.
  * Fusing: llmcompressor.observers.helpers.fuse_weight_observers links the WEIGHT
    observers of (q_proj, k_proj, v_proj), (gate_proj, up_proj) and (w1, w3): those
    share weight_global_scale = bf16(2688 / max amax of the group's BF16 weights). Input
    observers are not fused: q/k/v (and gate/up) read the same tensor, so their
    input_global_scale values come out equal anyway.
  * MoE: transformers 5 fuses a Qwen3 MoE's experts into 3-D tensors; llm-compressor
    replaces them with one Linear per expert for calibration (modeling/moe/
    linear_experts.py). With moe_calibrate_all_experts every expert runs on every token
    of the batch (its output then masked to the routed tokens), so every expert's gate/
    up observe all tokens, and its down_proj observes act(gate(x))*up(x) of all tokens:
    `calib run --all-experts`.
  * Weight global scale: generate_gparam over the BF16 weight's amax, rounded to BF16
    the same way; weight_scale = FP8(amax_group / 6 * global_scale), weight_packed =
    FP4 of w * global_scale / scale (compressed-tensors' NVFP4 compressor).

What is left between the engine and the peer (measured with tests/fs/test_calib_peer.py,
N = 256): against the FP32-forward run, `calib run --scale-dtype f32 --forward-dtype f32`
agrees within 0.0002 % on every module (SmolLM2 and the tiny MoE): the observer is the
same. Against the BF16 run, `calib run` (for a BF16 checkpoint: BF16 scales over the
engine's BF16 forward, which rounds where transformers' eager BF16 forward does and sums
in torch's CPU kernels' orders) is bit for bit on every module: 210 of 210 on SmolLM2, 32
of 32 on the tiny MoE. The F32 forward gave 126 and 19 (max 2.1 % and 1.3 %): one BF16
rounding gone the other way grows over the layers into a few ulps of an outlier's max.
transformers' BF16 forward with sdpa attention (its default) gives only 149 of 210, up to
2.6 % off: the peer's run is the eager one.

Output: OUT/<model>.json, per model: the token ids, the source files' sha256, versions,
and per quantized module: input_global_scale and weight_global_scale (float and F32 bit
pattern), input_global_scale_fp32_forward (the FP32-forward run) and the sha256 of its weight_packed and weight_scale bytes as saved
(little-endian, row-major; the saved tensors' names and layouts are recorded as they
are: a fused MoE layout is sliced back to per-expert bytes, see expert_bytes()).
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile

# torch's CPU kernels as on the AVX2 machine that made the committed data: on a CPU with
# AVX-512 BF16 torch takes other kernels (ATen's AVX-512 ones, oneDNN's BF16 GEMM) that
# round differently; unpinned, this script's SmolLM2 run there kept 130 of the 210
# committed scales, pinned its BF16 forward gives all 210. Set before torch is imported.
os.environ["ATEN_CPU_CAPABILITY"] = "avx2"
os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEXT = "/usr/share/common-licenses/GPL-3"
SMOL = os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct")
TINY = os.path.join(ROOT, "tests", "data", "tiny", "qwen3_moe")
TINY_VOCAB = 512


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def tiny_tokenizer(out):
    """SmolLM2's byte-level BPE cut to its first TINY_VOCAB ids (see the docstring)."""
    with open(os.path.join(SMOL, "tokenizer.json"), encoding="utf-8") as f:
        t = json.load(f)
    m = t["model"]
    vocab = {k: v for k, v in m["vocab"].items() if v < TINY_VOCAB}
    merges = []
    for mg in m["merges"]:
        a, b = mg if isinstance(mg, list) else mg.split(" ", 1)
        if a in vocab and b in vocab and a + b in vocab:
            merges.append([a, b])
    made = {vocab[a + b] for a, b in merges}
    first = min(made)   # the alphabet (one symbol a token) ends here
    single = {v for k, v in vocab.items() if len(k) == 1}
    if (len(vocab) != TINY_VOCAB or made != set(range(first, TINY_VOCAB))
            or single != set(range(17, first))):
        sys.exit("tiny tokenizer: SmolLM2's tokenizer.json is not laid out as expected "
                 "(17 specials, the byte alphabet, then merged tokens): %d tokens, %d merges"
                 % (len(vocab), len(merges)))
    m["vocab"], m["merges"] = vocab, merges
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(t, f, ensure_ascii=False, indent=1)
        f.write("\n")
    shutil.copy(os.path.join(SMOL, "tokenizer_config.json"), out)


def f32_bits(x):
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", float(x)))[0]


def tensor_bytes(t):
    import torch
    t = t.detach().cpu().contiguous()
    if t.dtype in (torch.float8_e4m3fn, torch.uint8, torch.int8):
        return t.view(torch.uint8).numpy().tobytes()
    return t.numpy().tobytes()


def expert_bytes(tensors, name, kind):
    """Bytes of <name>.weight_<kind> as one module's tensor: saved as is, or sliced
    out of a fused experts tensor (gate_up_proj_<kind> [E, 2I, ...] / down_proj_<kind>)."""
    key = name + ".weight_" + kind
    if key in tensors:
        return tensor_bytes(tensors[key])
    head, e, proj = name.rsplit(".", 2)
    if not e.isdigit():
        return None
    e = int(e)
    if proj in ("gate_proj", "up_proj"):
        t = tensors.get("%s.gate_up_proj_%s" % (head, kind))
        if t is None:
            return None
        half = t.shape[1] // 2
        t = t[e, :half] if proj == "gate_proj" else t[e, half:]
        return tensor_bytes(t)
    t = tensors.get("%s.%s_%s" % (head, proj, kind))
    return None if t is None else tensor_bytes(t[e])


def run_peer(name, model_dir, ntok, out, keep, pipeline):
    import torch
    import transformers
    import compressed_tensors
    import llmcompressor
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    with open(TEXT, encoding="utf-8") as f:
        ids = tok(f.read())["input_ids"][:ntok]
    assert len(ids) == ntok and max(ids) < tok.vocab_size + len(tok.added_tokens_decoder)
    ds = Dataset.from_dict({"input_ids": [ids], "attention_mask": [[1] * ntok]})

    def calibrate(dtype):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        recipe = QuantizationModifier(targets="Linear", scheme="NVFP4", ignore=["lm_head"])
        oneshot(model=model, dataset=ds, recipe=recipe, num_calibration_samples=1,
                max_seq_length=ntok, shuffle_calibration_samples=False,
                moe_calibrate_all_experts=True, pipeline=pipeline)
        mods = {}
        for mname, mod in model.named_modules():
            ig = getattr(mod, "input_global_scale", None)
            wg = getattr(mod, "weight_global_scale", None)
            if ig is not None and wg is not None:
                mods[mname] = (float(ig.reshape(-1)[0]), float(wg.reshape(-1)[0]))
        return model, mods

    # the FP32 forward first: only its input scales are kept (see the docstring)
    m32, mods32 = calibrate(torch.float32)
    del m32
    model, got = calibrate("auto")
    assert model.dtype == torch.bfloat16, model.dtype
    assert set(got) == set(mods32), "the FP32 and BF16 runs quantized different modules"
    moe = "moe" in model.config.model_type
    mods = {}
    for mname, (ig, wg) in got.items():
        mods[mname] = {"input_global_scale": ig, "input_global_scale_bits": f32_bits(ig),
                       "weight_global_scale": wg, "weight_global_scale_bits": f32_bits(wg),
                       "input_global_scale_fp32_forward": mods32[mname][0]}

    save = os.path.join(keep, name) if keep else tempfile.mkdtemp(prefix="llmc-")
    try:
        model.save_pretrained(save, save_compressed=True)
        tok.save_pretrained(save)
        tensors = {}
        for fn in sorted(os.listdir(save)):
            if fn.endswith(".safetensors"):
                tensors.update(load_file(os.path.join(save, fn)))
        saved_names = sorted(k for k in tensors if "weight_packed" in k or "_packed" in k)
        for mname, d in mods.items():
            for kind in ("packed", "scale"):
                b = expert_bytes(tensors, mname, kind)
                if b is None:
                    sys.exit("%s: no weight_%s for %s in the saved checkpoint %s"
                             % (name, kind, mname, save))
                d["weight_%s_sha256" % kind] = hashlib.sha256(b).hexdigest()
        with open(os.path.join(save, "config.json")) as f:
            qcfg = json.load(f).get("quantization_config")
    finally:
        if not keep:
            shutil.rmtree(save, ignore_errors=True)

    src = {fn: sha256_file(os.path.join(model_dir, fn))
           for fn in ("model.safetensors", "tokenizer.json", "config.json")}
    doc = {
        "model": name,
        "source_sha256": src,
        "text": TEXT,
        "text_sha256": sha256_file(TEXT),
        "tokens": ntok,
        "token_ids": ids,
        "all_experts": moe,
        "pipeline": pipeline,
        "peer": "llmcompressor %s, compressed-tensors %s, transformers %s, torch %s; "
                "oneshot NVFP4 preset, BF16 forward on the CPU"
                % (llmcompressor.__version__, compressed_tensors.__version__,
                   transformers.__version__, torch.__version__),
        "generator": "tools/golden/golden_llmc_nvfp4.py",
        "saved_packed_tensors": saved_names[:8] + (["..."] if len(saved_names) > 8 else []),
        "quantization_config": qcfg,
        "modules": dict(sorted(mods.items())),
    }
    path = os.path.join(out, name + ".json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    print("%s: %d modules, %d tokens -> %s" % (name, len(mods), ntok, path), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "golden", "llmc-nvfp4"))
    ap.add_argument("--keep", help="leave the compressed checkpoints in this directory")
    ap.add_argument("--only", choices=("smollm2", "tiny-qwen3_moe"))
    ap.add_argument("--pipeline", default="basic", choices=("basic", "sequential"),
                    help="the calibration pipeline (see the docstring: sequential runs "
                    "attention without its causal mask in this version)")
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(SMOL, "model.safetensors")):
        sys.exit("%s is missing: run tools/setup-model first" % SMOL)
    os.makedirs(a.out, exist_ok=True)
    toks = os.path.join(a.out, "tiny-tokenizer")
    tiny_tokenizer(toks)
    tmp = tempfile.mkdtemp(prefix="llmc-tiny-")
    try:
        tiny = os.path.join(tmp, "tiny-qwen3_moe")
        os.makedirs(tiny)
        for fn in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(TINY, fn), tiny)
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(toks, fn), tiny)
        if a.only in (None, "smollm2"):
            run_peer("smollm2", SMOL, a.tokens, a.out, a.keep, a.pipeline)
        if a.only in (None, "tiny-qwen3_moe"):
            run_peer("tiny-qwen3_moe", tiny, a.tokens, a.out, a.keep, a.pipeline)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
