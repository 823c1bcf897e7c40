#!/usr/bin/env python3
"""Golden input amax of every quantizable Linear, from transformers (float32, eager), for
the tiny family models (tests/data/tiny/<family>) and the real SmolLM2 (.models/, made by
tools/setup-model): the reference of tests/engine/test_observe.c
(the engine's calibration observer, engine/model/observe.h).

    /work/venv-ref/bin/python tools/golden/gen_observe_golden.py [--out tests/data/observe]

One forward over fixed token ids; forward pre-hooks record max|x| of each nn.Linear's input
(lm_head excluded, the router is not an nn.Linear). Names are the checkpoint's. Routed experts (transformers 5 keeps
them as 3-D parameters in one <block>.experts module) are recomputed from that module's
inputs in a separate plain pass: gate/up input = the hidden rows routed to expert e
(top_k_index), down input = act(x W_gate^T) * (x W_up^T) on those rows; with every row
for the --all-experts figures. Writes OUT/<family>.txt:
    tokens N id id ...
    routed <module> <amax>     (every quantizable Linear, routed experts over their tokens)
    all <module> <amax>        (the routed experts over every token)
"""
import argparse
import os

import torch
from transformers import AutoModelForCausalLM

FAMILIES = ["llama", "qwen3_moe", "qwen2_moe", "mixtral"]
# the real model (tools/setup-model), by its directory under .models
REAL = ["SmolLM2-135M-Instruct"]


def tokens(vocab, n=24):
    return [(i * 37 + 11) % vocab for i in range(n)]


def golden(path):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    routed, allx = {}, {}
    # transformers 5 names Mixtral's experts mlp.experts.E.{gate,up,down}_proj; the
    # checkpoint (and the engine) say block_sparse_moe.experts.E.{w1,w3,w2}
    mixtral = model.config.model_type == "mixtral"

    def keep(d, name, x):
        v = float(x.abs().max()) if x.numel() else None
        if v is not None:
            d[name] = max(d.get(name, 0.0), v)

    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name != "lm_head":
            hooks.append(mod.register_forward_pre_hook(
                lambda m, a, name=name: keep(routed, name, a[0])))
        elif hasattr(mod, "gate_up_proj") and hasattr(mod, "down_proj"):
            def ex(m, a, name=name):
                h, idx = a[0], a[1]
                inter = m.gate_up_proj.shape[1] // 2
                w1, w3, w2 = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
                base = name.replace(".mlp.experts", ".block_sparse_moe.experts") if mixtral else name
                for e in range(m.gate_up_proj.shape[0]):
                    for d, rows in ((routed, (idx == e).any(dim=-1)), (allx, None)):
                        x = h if rows is None else h[rows]
                        if not x.shape[0]:
                            continue
                        gu = torch.nn.functional.linear(x, m.gate_up_proj[e])
                        g, u = gu[:, :inter], gu[:, inter:]
                        for p in (w1, w3):
                            keep(d, f"{base}.{e}.{p}", x)
                        keep(d, f"{base}.{e}.{w2}", m.act_fn(g) * u)
            hooks.append(mod.register_forward_pre_hook(ex))
    ids = tokens(model.config.vocab_size)
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    return ids, routed, allx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/observe")
    ap.add_argument("--tiny", default="tests/data/tiny")
    ap.add_argument("--models", default=".models")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for fam in FAMILIES + REAL:
        ids, routed, allx = golden(os.path.join(a.models if fam in REAL else a.tiny, fam))
        with open(os.path.join(a.out, fam + ".txt"), "w") as f:
            f.write("tokens %d %s\n" % (len(ids), " ".join(map(str, ids))))
            for k in sorted(routed):
                f.write("routed %s %.9g\n" % (k, routed[k]))
            for k in sorted(allx):
                f.write("all %s %.9g\n" % (k, allx[k]))
        print(fam, len(routed), "routed", len(allx), "all")


if __name__ == "__main__":
    main()
