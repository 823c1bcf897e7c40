#!/usr/bin/env python3
"""Golden logits of the W4A4 tiny checkpoints of tests/engine/test_actq_forward.py
from the peer: transformers' model in float32 with compressed-tensors' input
fake quantization (issue 21 item 4).

usage: /work/venv-ref/bin/python3 tools/golden/gen_actq_peer_golden.py build/requantfs
       (torch, transformers, compressed-tensors: tools/golden/requirements-ref.txt)

For each family of PEER_FAMILIES (mistral: transformers 5 keeps Mixtral's
experts as fused 3-D tensors, not Linears, so compressed-tensors'
per-Linear fake quantization cannot reach them; the numpy reference covers
the experts) it builds the very checkpoint the test
builds (build_w4a4: deterministic bytes, whose sha256 the golden records),
loads it with transformers (dequantize / run_compressed=False), applies the
checkpoint's quantization_config with compressed-tensors
(apply_quantization_config, weights left as loaded: the inputs alone are
fake-quantized, status frozen), sets every NVFP4 Linear's weight to the
test's exact dequantization e2m1·e4m3/gs (transformers' decompression rounds
differently: 0.6 % of max|logit| at A16, which W4A4's discontinuous input
rounding amplifies) and its input_global_scale to vLLM's fused value (the
largest of q/k/v, of w1/w3: compressed-tensors quantizes each module with its
own), then records the logits of TOKENS at every position. Writes
tests/data/actq_peer.json."""
import hashlib, json, os, sys, tempfile, shutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "engine"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))

import numpy as np
import torch
import compressed_tensors
import transformers
from transformers import AutoModelForCausalLM
from transformers.utils.quantization_config import CompressedTensorsConfig
from compressed_tensors.quantization import (QuantizationConfig, QuantizationStatus,
                                             apply_quantization_config)

import test_actq_forward as t


def peer_logits(b):
    d = b["w4"]
    m = AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, quantization_config=CompressedTensorsConfig(run_compressed=False))
    qc = QuantizationConfig.model_validate(b["cfg"]["quantization_config"])
    for g in qc.config_groups.values():
        g.weights = None
    apply_quantization_config(m, qc)
    fz = t.fused(b["nv"], b["gs"])
    for name in b["nv"]:
        mod = m.get_submodule(name)
        mod.weight.data.copy_(torch.from_numpy(np.ascontiguousarray(b["w"][name + ".weight"])))
        mod.input_global_scale.data.fill_(float(fz[name]))
    n = 0
    for mod in m.modules():
        if hasattr(mod, "quantization_scheme"):
            mod.quantization_status = QuantizationStatus.FROZEN
            n += 1
    if n != len(b["nv"]):
        sys.exit(f"{d}: compressed-tensors quantizes {n} modules, the checkpoint has {len(b['nv'])}")
    with torch.no_grad():
        return m(torch.tensor([t.TOKENS])).logits[0].float().numpy()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_actq_peer_golden.py REQUANTFS")
    rq = os.path.abspath(sys.argv[1])
    tiny = os.path.join(HERE, "..", "..", "tests", "data", "tiny")
    tmp = tempfile.mkdtemp(prefix="rq-actq-peer-")
    out = {"generator": "tools/golden/gen_actq_peer_golden.py",
           "reference": "transformers %s + compressed-tensors %s input fake quantization, float32, "
                        "vLLM's fused input global scales" % (transformers.__version__,
                                                               compressed_tensors.__version__),
           "tokens": t.TOKENS, "models": {}}
    try:
        for fam in t.PEER_FAMILIES:
            b = t.build_w4a4(rq, tiny, fam, tmp)
            if not isinstance(b, dict):
                sys.exit(f"{fam}: export failed: {b}")
            sha = hashlib.sha256(open(os.path.join(b["w4"], "model.safetensors"), "rb").read())
            lg = peer_logits(b)
            out["models"][fam] = {"sha256": sha.hexdigest(),
                                  "logits": [[float("%.8g" % v) for v in row] for row in lg]}
            print(f"{fam}: {lg.shape}, max|logit| {np.abs(lg).max():.4g}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    path = os.path.join(HERE, "..", "..", "tests", "data", "actq_peer.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
