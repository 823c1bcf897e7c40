#!/usr/bin/env python3
"""`requantfs mkckpt` writes what the rest of the project assumes.

  usage: test_mkckpt.py REQUANTFS

A tiny 08-01-style checkpoint, its 07-22 twin (--calib-out) and the hub-cache
layout (--hub), checked with the real safetensors library: every shard opens
and is byte-identical to what safetensors.serialize writes for its tensors,
the index matches the headers, config.json carries the ignore rule (the twin's
is the same file minus that one element), the BF16/NVFP4 split follows the
rule, a gate_proj/up_proj pair straddles two shards, the all-zero expert
exists, and two runs with one seed give identical bytes. Prints TAP; needs
only safetensors and numpy (.venv).
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok  # noqa: E402

try:
    import numpy as np
    from safetensors import TensorSpec, deserialize, safe_open, serialize
except ImportError as e:
    rqtap.no_venv(e)

RULE = "re:^model\\.layers\\.4[0-7]\\.mlp\\.experts(\\..*)?$"
PY_DTYPE = {"BF16": "bfloat16", "F32": "float32", "U8": "uint8", "F8_E4M3": "float8_e4m3fn"}


def run(exe, *args, check=True):
    r = subprocess.run([exe, "mkckpt"] + list(args), capture_output=True, text=True)
    if check and r.returncode:
        raise RuntimeError("mkckpt %s failed (%d): %s" % (args, r.returncode, r.stderr))
    return r


def shards(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))


def load(d):
    """name -> (dtype, shape, raw bytes, shard file)"""
    out = {}
    for f in shards(d):
        with open(os.path.join(d, f), "rb") as fh:
            for name, t in deserialize(fh.read()):
                out[name] = (t["dtype"], t["shape"], bytes(t["data"]), f)
    return out


def tree_bytes(d):
    res = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            res[os.path.relpath(p, d)] = open(p, "rb").read()
    return res


def check_files(d, label):
    names = shards(d)
    good = 0
    for f in names:
        p = os.path.join(d, f)
        raw = open(p, "rb").read()
        with safe_open(p, framework="numpy") as s:
            meta = s.metadata()
        keep, specs = [], {}
        for name, t in deserialize(raw):
            buf = np.frombuffer(bytes(t["data"]) or b"\0", dtype=np.uint8).copy()
            keep.append(buf)
            specs[name] = TensorSpec(dtype=PY_DTYPE[t["dtype"]], shape=t["shape"],
                                     data_ptr=buf.ctypes.data, data_len=len(t["data"]))
        if meta == {"format": "pt"} and bytes(serialize(specs, metadata=meta)) == raw:
            good += 1
        else:
            print("# %s: metadata %r or bytes differ from safetensors.serialize" % (p, meta))
    ok(good == len(names) and len(names) >= 5,
       "%s: %d shards open with safe_open and equal safetensors.serialize's bytes" %
       (label, len(names)))

    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    t = load(d)
    total = sum(len(v[2]) for v in t.values())
    ok(idx["weight_map"] == {k: v[3] for k, v in t.items()} and
       idx["metadata"] == {"total_size": total} and
       all(f == "model-%05d-of-%05d.safetensors" % (i + 1, len(names))
           for i, f in enumerate(names)),
       "%s: index weight_map and total_size (%d bytes) match the headers" % (label, total))
    for f in ("config.json", "generation_config.json", "model.safetensors.index.json"):
        text = open(os.path.join(d, f), encoding="utf-8").read()
        ok(text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n",
           "%s: %s is json.dumps(indent=2, sort_keys=True) + newline" % (label, f))
    return t


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="rq-mkckpt-") as tmp:
        a, calib = os.path.join(tmp, "a"), os.path.join(tmp, "calib")
        r = run(exe, a, "--calib-out", calib)
        ok(r.stdout.split() == [a, calib], "prints the two model directories")
        t = check_files(a, "08-01")
        c = check_files(calib, "07-22 twin")

        cfg_text = open(os.path.join(a, "config.json")).read()
        cfg = json.loads(cfg_text)
        qc = cfg["quantization_config"]
        ok(qc["ignore"][-1] == RULE and qc["quant_method"] == "compressed-tensors" and
           qc["format"] == "nvfp4-pack-quantized" and cfg["model_type"] == "laguna" and
           cfg["architectures"] == ["LagunaForCausalLM"] and "lm_head" in qc["ignore"],
           "config.json: compressed-tensors NVFP4 with the layers 40-47 rule last")
        twin_text = open(os.path.join(calib, "config.json")).read()
        rule_line = '      "lm_head",\n      "%s"\n' % RULE.replace("\\", "\\\\")
        ok(rule_line in cfg_text and twin_text == cfg_text.replace(rule_line, '      "lm_head"\n'),
           "the twin's config.json is the same bytes minus the rule element")

        def form(tensors, layer, e, p):
            pre = "model.layers.%d.mlp.experts.%d.%s." % (layer, e, p)
            return sorted(k[len(pre):] for k in tensors if k.startswith(pre))
        nv = ["input_global_scale", "weight_global_scale", "weight_packed", "weight_scale"]
        main_ok = all(form(t, l, e, p) == (["weight"] if l >= 40 else nv)
                      for l in range(1, 48) for e in range(8)
                      for p in ("gate_proj", "up_proj", "down_proj"))
        twin_ok = all(form(c, l, e, p) == nv for l in range(1, 48) for e in range(8)
                      for p in ("gate_proj", "up_proj", "down_proj"))
        ok(main_ok and twin_ok, "experts of layers 40-47 are BF16 .weight in 08-01, every other "
           "expert (and all in the twin) NVFP4")
        w = t["model.layers.41.mlp.experts.0.gate_proj.weight"]
        pk = t["model.layers.3.mlp.experts.0.gate_proj.weight_packed"]
        sc = t["model.layers.3.mlp.experts.0.gate_proj.weight_scale"]
        gs = t["model.layers.3.mlp.experts.0.gate_proj.weight_global_scale"]
        ok(w[:2] == ("BF16", [32, 64]) and pk[:2] == ("U8", [32, 32]) and
           sc[:2] == ("F8_E4M3", [32, 4]) and gs[:2] == ("F32", [1]) and
           t["model.layers.5.mlp.experts.e_score_correction_bias"][:2] == ("F32", [8]) and
           t["model.layers.0.mlp.down_proj.weight"][:2] == ("BF16", [64, 128]) and
           t["model.layers.5.mlp.shared_expert.up_proj.weight"][:2] == ("BF16", [32, 64]) and
           t["model.layers.4.self_attn.q_proj.weight"][:2] == ("BF16", [64, 64]) and
           t["model.layers.5.self_attn.g_proj.weight"][:2] == ("BF16", [6, 64]),
           "dtypes and shapes of the Laguna names")

        same = [k for k in t if k in c]
        ok(all(t[k][:3] == c[k][:3] for k in same) and
           len(t) - len(same) == 8 * 8 * 3 and len(c) - len(same) == 8 * 8 * 3 * 4,
           "outside the BF16 experts both forms hold the same bytes (%d tensors)" % len(same))
        f32 = lambda v: np.frombuffer(v[2], np.float32)[0]
        pairs = all(f32(c["model.layers.%d.mlp.experts.%d.gate_proj.weight_global_scale" % (l, e)]) ==
                    f32(c["model.layers.%d.mlp.experts.%d.up_proj.weight_global_scale" % (l, e)]) and
                    f32(c["model.layers.%d.mlp.experts.%d.gate_proj.input_global_scale" % (l, e)]) ==
                    f32(c["model.layers.%d.mlp.experts.%d.up_proj.input_global_scale" % (l, e)]) > 0
                    for l in (1, 40, 47) for e in range(8))
        ok(pairs, "gate_proj and up_proj share weight_global_scale and input_global_scale")

        zero = t["model.layers.42.mlp.experts.1.down_proj.weight"]
        ok(not any(zero[2]) and
           f32(c["model.layers.42.mlp.experts.1.down_proj.weight_global_scale"]) == 1.0 and
           any(t["model.layers.42.mlp.experts.2.down_proj.weight"][2]),
           "layers.42 expert 1 down_proj is all zeros (twin global scale 1.0)")
        split = [(l, e) for l in range(40, 48) for e in range(8)
                 if t["model.layers.%d.mlp.experts.%d.gate_proj.weight" % (l, e)][3] !=
                 t["model.layers.%d.mlp.experts.%d.up_proj.weight" % (l, e)][3]]
        ok(len(split) >= 1, "a shard boundary splits gate_proj from up_proj in the BF16 layers: %r"
           % split)
        csplit = [k for k in c if k.endswith("gate_proj.weight_packed") and
                  c[k][3] != c[k.replace("gate_proj", "up_proj")][3]]
        ok(len(csplit) >= 1 and shards(a) == shards(calib),
           "the twin has the same file names and keeps a split pair (%d)" % len(csplit))

        norm = np.frombuffer(t["model.norm.weight"][2], np.uint16).astype(np.uint32) << 16
        norm = norm.view(np.float32)
        emb = np.frombuffer(t["model.embed_tokens.weight"][2], np.uint16).astype(np.uint32) << 16
        emb = emb.view(np.float32)
        bias = np.frombuffer(t["model.layers.7.mlp.experts.e_score_correction_bias"][2], np.float32)
        ok(0.9 < norm.mean() < 1.1 and abs(emb.mean()) < 0.01 and 0.05 < emb.std() < 0.3 and
           np.abs(bias).max() < 0.05, "weight scales: norms ~1, linear ~N(0, 1/fan_in), small bias")

        b = os.path.join(tmp, "b")
        run(exe, b, "--calib-out", os.path.join(tmp, "calib-b"))
        ok(tree_bytes(a) == tree_bytes(b) and
           tree_bytes(calib) == tree_bytes(os.path.join(tmp, "calib-b")),
           "two runs with one seed write identical bytes")
        s2 = os.path.join(tmp, "s2")
        run(exe, s2, "--seed", "2", "--no-tokenizer")
        ta, tb = tree_bytes(a), tree_bytes(s2)
        ok(all(ta[f] != tb[f] for f in shards(a)) and "tokenizer.json" not in tb and
           json.load(open(os.path.join(s2, "config.json")))["vocab_size"] == 512,
           "another seed changes every shard; --no-tokenizer gives vocab 512")

        hub = os.path.join(tmp, "hub")
        r = run(exe, hub, "--hub", "--calib-out", hub)
        repo = os.path.join(hub, "models--synthetic--laguna-s-2.1-nvfp4")
        snap, csnap = r.stdout.split()
        rev = open(os.path.join(repo, "refs", "main")).read()
        links_ok = True
        for s, plain in ((snap, a), (csnap, calib)):
            for f in os.listdir(s):
                target = os.readlink(os.path.join(s, f))
                blob = os.path.normpath(os.path.join(s, target))
                data = open(blob, "rb").read()
                links_ok &= (target == "../../blobs/" + hashlib.sha256(data).hexdigest() and
                             data == open(os.path.join(plain, f), "rb").read())
            links_ok &= sorted(os.listdir(s)) == sorted(os.listdir(plain))
        ok(links_ok and snap == os.path.join(repo, "snapshots", rev) and len(rev) == 40 and
           os.path.dirname(csnap) == os.path.dirname(snap) and csnap != snap,
           "--hub: snapshots/<rev>/* -> ../../blobs/<sha256>, refs/main = the 08-01 revision, "
           "same bytes as the plain run")

        dense = os.path.join(tmp, "dense")
        run(exe, dense, "--dense", "--layers", "6", "--experts", "4")
        td = load(dense)
        dcfg = json.load(open(os.path.join(dense, "config.json")))
        ok("quantization_config" not in dcfg and all(v[0] in ("BF16", "F32") for v in td.values())
           and dcfg["num_hidden_layers"] == 6 and dcfg["num_experts"] == 4 and
           "model.layers.5.mlp.experts.3.down_proj.weight" in td,
           "--dense: every tensor BF16 (bias F32), no quantization_config")

        r = subprocess.run([exe, "mkckpt", "--help"], capture_output=True, text=True)
        ok(r.returncode == 0 and "--calib-out" in r.stdout, "--help exits 0")
        x = os.path.join(tmp, "x")
        bad = [subprocess.run([exe, "mkckpt"] + args, capture_output=True).returncode
               for args in ([x, "--bf16-layers", "0-3"], [x, "--layers", "x"], [x, "--bogus"],
                            [], [x, "--top-k", "9"], [x, x])]
        ok(bad == [2] * 6, "usage errors exit 2 (%r)" % bad)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
