#!/usr/bin/env python3
"""--scheme nvfp4 (W4A4, issue 21 item 2) on the tiny llama and qwen2_moe with a
calibration file made by `calib run`: every weight tensor equal (sha256) to what
llm-compressor's oneshot wrote with its NVFP4 preset (tests/data/w4a4_golden.json,
tools/golden/gen_w4a4_golden.py), the quantization_config equal to oneshot's, each module's
input_global_scale bit-equal to the calibration file's, weight_global_scale shared
by q/k/v and by gate/up (routed experts too), a real mount byte-equal to export,
plan's figures, the cache keyed on the calibration's content, and the refusals (no
--calib; a calibration of another model, naming the module and the file).
TAP output. Usage: test_scheme_w4a4.py REQUANTFS (a FUSE mount: run as root)."""
import json, os, shutil, struct, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run, mounted, MOUNTS  # noqa: E402
from bytelevel import bytelevel_table  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
GOLDEN = json.load(open(os.path.join(ROOT, "tests", "data", "w4a4_golden.json")))
TEXT = "Calibration needs real words: the quick brown fox jumps over the lazy dog. " * 10


def byte_tokenizer(d):
    """A byte-level BPE without merges: ids 0..255, within the tiny models' 512."""
    vocab = bytelevel_table()
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
          "use_regex": True}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
           "normalizer": None, "pre_tokenizer": bl, "post_processor": None, "decoder": bl,
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": []}}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast"}, f)


def f32(b):
    return struct.unpack("<f", b)[0]


def tensors(d):
    out = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            out.update(rqtap.st_tensors(os.path.join(d, fn)))
    return out


def sha(b):
    import hashlib
    return hashlib.sha256(b).hexdigest()


def main():
    rqtap.init(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="rq-w4a4-")
    try:
        body(tmp)
    finally:
        rqtap.cleanup(tmp)
    return rqtap.finish()


def fused_equal(t, suffix, groups):
    """Modules of each group (parent, members) share t[<parent>.<m>.<suffix>]."""
    bad, n = [], 0
    for parent, members in groups:
        vals = {t[f"{parent}.{m}.{suffix}"][2] for m in members}
        n += 1
        if len(vals) != 1:
            bad.append(parent)
    return n, bad


def groups_of(t):
    """(parent, members) of every q/k/v and gate/up set quantized in t."""
    out = []
    for k in sorted(t):
        if k.endswith(".q_proj.weight_global_scale"):
            out.append((k[:-len(".q_proj.weight_global_scale")], ("q_proj", "k_proj", "v_proj")))
        if k.endswith(".gate_proj.weight_global_scale"):
            out.append((k[:-len(".gate_proj.weight_global_scale")], ("gate_proj", "up_proj")))
    return out


def one_model(tmp, name, txt):
    gold = GOLDEN["models"][name]
    src = os.path.join(tmp, name)
    shutil.copytree(os.path.join(ROOT, "tests", "data", "tiny", name), src)
    byte_tokenizer(src)
    cal = os.path.join(tmp, name + ".calib.safetensors")
    rc, out = run("calib", "run", src, "--text", txt, "--tokens", "64", "-o", cal)
    if not ok(rc == 0, f"{name}: calib run writes a calibration file", out):
        return None
    scales = {k[:-len(".input_global_scale")]: v[2] for k, v in rqtap.st_tensors(cal).items()}
    dst = os.path.join(tmp, name + "-out")
    rc, out = run("export", src, dst, "--scheme", "nvfp4", "--calib", cal, "--quiet",
                  "--no-cache")
    if not ok(rc == 0, f"{name}: export --scheme nvfp4 --calib", out):
        return None
    cfg = json.load(open(os.path.join(dst, "config.json")))
    ok(cfg.get("quantization_config") == gold["quantization_config"],
       f"{name}: quantization_config equals oneshot's NVFP4 preset (group_0, input "
       "activations dynamic local, ignore list by name)",
       json.dumps(cfg.get("quantization_config"), indent=1, sort_keys=True), lines=80)
    t = tensors(dst)
    ours = {k: sha(v[2]) for k, v in t.items()
            if k.endswith((".weight_packed", ".weight_scale", ".weight_global_scale"))}
    diff = sorted(k for k in set(ours) | set(gold["weights_sha256"])
                  if ours.get(k) != gold["weights_sha256"].get(k))
    ok(not diff and len(ours) == len(gold["weights_sha256"]),
       f"{name}: {len(ours)} weight_packed/weight_scale/weight_global_scale tensors "
       "byte-equal to oneshot's", diff[:20])
    mods = sorted(k[:-len(".weight_packed")] for k in t if k.endswith(".weight_packed"))
    bad = [m for m in mods
           if t.get(m + ".input_global_scale", (None, None, None))[:2] != ("F32", [1]) or
           t[m + ".input_global_scale"][2] != scales.get(m)]
    ok(mods and not bad, f"{name}: each of {len(mods)} modules has input_global_scale F32 [1] "
       "bit-equal to the calibration file's", bad[:10])
    gr = groups_of(t)
    n, bad = fused_equal(t, "weight_global_scale", gr)
    ok(n >= 4 and not bad, f"{name}: weight_global_scale shared in {n} q/k/v and gate/up sets",
       bad)
    n, bad = fused_equal(t, "input_global_scale", gr)
    ok(n >= 4 and not bad, f"{name}: input_global_scale equal across each set (same input)",
       bad)
    if name == "qwen2_moe":
        ex = [g for g in gr if ".experts." in g[0]]
        ok(len(ex) == 8, f"{name}: routed experts' gate/up are fused sets too (oneshot's "
           "fuse_weight_observers)", [g[0] for g in gr])
    return src, cal, dst, t


def check_mount(tmp, src, cal, dst, name):
    mnt, cache = os.path.join(tmp, "m-" + name), os.path.join(tmp, "c-" + name)
    os.makedirs(mnt)
    MOUNTS.append(os.path.abspath(mnt))
    rc, out = run("mount", src, mnt, "--scheme", "nvfp4", "--calib", cal, "--cache", cache,
                  "--prefetch", "0")
    if not ok(rc == 0 and mounted(mnt), f"{name}: mount --scheme nvfp4 --calib", out):
        return
    rc, out = run("status", mnt)
    ok(rc == 0 and "nvfp4 (W4A4" in out, f"{name}: status names the W4A4 scheme", out)
    names = sorted(os.listdir(dst))
    bad = [f for f in names if open(os.path.join(mnt, f), "rb").read() !=
           open(os.path.join(dst, f), "rb").read()]
    ok(sorted(os.listdir(mnt)) == names and not bad,
       f"{name}: every file read through the mount equals export's", bad)
    rc, out = run("verify", dst, "--against", mnt)
    ok(rc == 0, f"{name}: verify export --against the mount", out)
    rc, out = run("umount", mnt, timeout=60)
    ok(rc == 0 and not mounted(mnt), f"{name}: umount", out)


def body(tmp):
    txt = os.path.join(tmp, "text.txt")
    with open(txt, "w") as f:
        f.write(TEXT)
    got = {}
    for name in ("llama", "qwen2_moe"):
        r = one_model(tmp, name, txt)
        if r:
            got[name] = r
    if "qwen2_moe" in got:
        check_mount(tmp, *got["qwen2_moe"][:3], "qwen2_moe")
    if "llama" not in got or "qwen2_moe" not in got:
        return
    src, cal, dst, t = got["llama"]
    # plan: the same modules and presented size as the export
    rc, out = run("plan", src, "--scheme", "nvfp4", "--calib", cal, "--json")
    try:
        pj = json.loads(out)
    except ValueError:
        pj = {}
    size = sum(os.path.getsize(os.path.join(dst, f)) for f in os.listdir(dst))
    ok(rc == 0 and pj.get("scheme") == "nvfp4" and pj.get("presented_bytes") == size,
       "plan --scheme nvfp4 --json: scheme and presented size equal the export's",
       (out[:2000], size))
    # refusals
    x = os.path.join(tmp, "x")
    for cmd in (("export", src, x), ("plan", src), ("mount", src, x)):
        rc, out = run(*cmd, "--scheme", "nvfp4")
        ok(rc == 2 and "calib run" in out and "--calib" in out,
           f"{cmd[0]} --scheme nvfp4 without --calib: refused, saying to run calib run", out)
    msrc, mcal = got["qwen2_moe"][:2]
    rc, out = run("export", msrc, x, "--scheme", "nvfp4", "--calib", cal, "--quiet")
    ok(rc == 1 and "model.layers.0.mlp.experts.0.down_proj" in out and cal in out and
       "calib run" in out and not os.path.exists(x),
       "a calibration of another model: refused naming the module and the file", out)
    rc, out = run("export", src, x, "--scheme", "nvfp4a16", "--calib", cal, "--quiet")
    ok(rc == 2 and "--calib" in out, "--calib with a data-free scheme: refused", out)
    # the cache keys on the calibration's content: other scales, other bytes
    cache = os.path.join(tmp, "cache-llama")
    d1, d2 = os.path.join(tmp, "k1"), os.path.join(tmp, "k2")
    rc1, o1 = run("export", src, d1, "--scheme", "nvfp4", "--calib", cal, "--cache", cache,
                  "--quiet")
    cal2 = os.path.join(tmp, "llama2.calib.safetensors")
    raw = bytearray(open(cal, "rb").read())
    h, start = rqtap.st_header(cal)
    k = "model.layers.1.self_attn.o_proj.input_global_scale"
    b = start + h[k]["data_offsets"][0]
    raw[b:b + 4] = struct.pack("<f", f32(bytes(raw[b:b + 4])) * 2)
    open(cal2, "wb").write(raw)
    rc2, o2 = run("export", src, d2, "--scheme", "nvfp4", "--calib", cal2, "--cache", cache,
                  "--quiet")
    t2 = tensors(d2) if rc2 == 0 else {}
    ok(rc1 == 0 and rc2 == 0 and t2.get(k, (0, 0, b""))[2] == bytes(raw[b:b + 4]) and
       all(t2[n] == v for n, v in tensors(d1).items() if n != k),
       "the same cache with another calibration: its scale, every other tensor the same",
       o1 + o2)
    # the data-free nvfp4a16 has the same weight bytes, no input scales, its own config
    d3 = os.path.join(tmp, "a16")
    rc, out = run("export", src, d3, "--scheme", "nvfp4a16", "--ignore", "lm_head",
                  "--ignore", "re:.*embed_tokens$",
                  "--cache", cache, "--quiet")
    t3 = tensors(d3) if rc == 0 else {}
    same = all(t3.get(n) == v for n, v in t.items() if not n.endswith("input_global_scale"))
    ok(rc == 0 and same and not any(n.endswith("input_global_scale") for n in t3),
       "nvfp4a16 from the same cache: the same weight bytes, no input_global_scale", out)


if __name__ == "__main__":
    sys.exit(main())
