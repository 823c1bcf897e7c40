#!/usr/bin/env python3
"""--rule-scheme (issue 21 item 6) on mkckpt's synthetic Laguna 08-01 form: the
default and `--rule-scheme nvfp4` give the same bytes (today's fix); nvfp4a16 gives
the same weight bytes without input_global_scale and one more config group; fp8-dynamic
gives llm-compressor's FP8_DYNAMIC tensors (equal to `--scheme fp8-dynamic` on the same
modules, dequantizing close to the BF16 source) and a mixed-precision config; the new
group's anchored re: targets select the rule's layers the way vLLM's matching does
(FusedMoE layers asked by expert 0's projection names) and nothing else; plan's size
of every choice equals what export writes; a mount equals export; the refusals.
TAP output. Usage: test_rule_scheme.py REQUANTFS (mounts FUSE: run as root)."""
import json, os, re, struct, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run, mounted, MOUNTS  # noqa: E402

RULE = r"re:^model\.layers\.4[0-7]\.mlp\.experts(\..*)?$"


def tensors(d):
    wm = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
    out = {}
    for shard in sorted(set(wm.values())):
        out.update(rqtap.st_tensors(os.path.join(d, shard)))
    return out


def files(d):
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


def qconfig(d):
    return json.load(open(os.path.join(d, "config.json")))["quantization_config"]


def bf16(b, i):
    return struct.unpack("<f", b"\0\0" + b[2 * i:2 * i + 2])[0]


def e4m3(c):
    s, e, m = c >> 7, (c >> 3) & 15, c & 7
    v = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -v if s else v


def target_match(name, t):
    return re.match(t[3:], name) is not None if t.startswith("re:") else name == t


def vllm_group(qc, layer):
    """The group vLLM's get_scheme_dict gives a layer named `layer` (an unfused Linear,
    or a FusedMoE asked by <layer>.experts.0.<proj>): None when ignored; else the
    first target, over all groups in order, equal to or re.match'ing the name; else the
    first group whose targets hold the class name Linear."""
    if any(target_match(layer, i) for i in qc["ignore"]):
        return None
    for g, v in qc["config_groups"].items():
        if any(t != "Linear" and target_match(layer, t) for t in v["targets"]):
            return g
    for g, v in qc["config_groups"].items():
        if "Linear" in v["targets"]:
            return g
    return None


def main():
    rqtap.init(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="rq-rule-scheme-")
    try:
        body(tmp)
    finally:
        rqtap.cleanup(tmp)
    return rqtap.finish()


def export(src, dst, *args):
    return run("export", src, dst, "--quiet", "--no-cache", *args)


def body(tmp):
    src, cal = os.path.join(tmp, "src"), os.path.join(tmp, "cal")
    rc, out = run("mkckpt", src, "--calib-out", cal)
    if not ok(rc == 0, "mkckpt: the synthetic 08-01 form and its 07-22 twin", out):
        return
    d = {k: os.path.join(tmp, "o-" + k) for k in ("default", "nvfp4", "nvfp4a16", "fp8-dynamic")}
    rc, out = export(src, d["default"], "--calib", cal)
    ok(rc == 0, "export --calib (default rule scheme)", out)
    rc, out = export(src, d["nvfp4"], "--calib", cal, "--rule-scheme", "nvfp4")
    ok(rc == 0 and files(d["nvfp4"]) == files(d["default"]),
       "--rule-scheme nvfp4: every file byte-equal to the default export", out)
    rc, out = export(src, d["nvfp4a16"], "--rule-scheme", "nvfp4a16")
    ok(rc == 0, "--rule-scheme nvfp4a16 without --calib: exported", out)
    rc, out = export(src, d["fp8-dynamic"], "--rule-scheme", "fp8-dynamic")
    ok(rc == 0, "--rule-scheme fp8-dynamic without --calib: exported", out)
    td, ta, tf = tensors(d["default"]), tensors(d["nvfp4a16"]), tensors(d["fp8-dynamic"])
    ts = tensors(src)
    mods = sorted(k[:-len(".weight")] for k in ts if k.endswith(".weight") and
                  re.match(RULE[3:], k[:-len(".weight")]))
    rc, out = run("plan", src, "--calib", cal, "--json")
    try:
        pj = json.loads(out)
    except ValueError:
        pj = {}
    ok(mods and len(mods) % (8 * 3) == 0 and pj.get("modules") == len(mods),
       f"the rule covers {len(mods)} BF16 expert projections of layers 40-47, all planned",
       out[:800])

    # nvfp4a16: the default's weights, no input scales
    same = all(ta.get(m + s) == td[m + s] for m in mods
               for s in (".weight_packed", ".weight_scale", ".weight_global_scale"))
    ok(same and not any(m + ".input_global_scale" in ta for m in mods),
       "nvfp4a16: the default's weight bytes, no input_global_scale")
    others = [k for k in td if not any(k.startswith(m + ".") for m in mods)]
    ok(others and all(ta.get(k) == td[k] and tf.get(k) == td[k] for k in others),
       f"nvfp4a16 and fp8-dynamic: the other {len(others)} tensors as the default's")

    # fp8-dynamic: FP8 weight [out, in], BF16 scale [out, 1], close to the source
    shapes = all(tf[m + ".weight"][:2] == ("F8_E4M3", ts[m + ".weight"][1]) and
                 tf[m + ".weight_scale"][:2] == ("BF16", [ts[m + ".weight"][1][0], 1]) and
                 m + ".input_global_scale" not in tf and m + ".weight_packed" not in tf
                 for m in mods)
    ok(shapes, "fp8-dynamic: weight F8_E4M3 [out, in] and weight_scale BF16 [out, 1] per module")
    m = mods[0]
    rows, cols = ts[m + ".weight"][1]
    w, q, sc = ts[m + ".weight"][2], tf[m + ".weight"][2], tf[m + ".weight_scale"][2]
    worst = 0.0
    for r in range(rows):
        amax = max(abs(bf16(w, r * cols + j)) for j in range(cols)) or 1.0
        s = bf16(sc, r)
        for j in range(cols):
            worst = max(worst, abs(e4m3(q[r * cols + j]) * s - bf16(w, r * cols + j)) / amax)
    ok(worst <= 0.07, f"fp8-dynamic: {m} dequantizes within {worst:.4f} of the row's absmax")
    ref = os.path.join(tmp, "ref-fp8")
    rc, out = export(src, ref, "--scheme", "fp8-dynamic", "--targets", RULE)
    tr = tensors(ref) if rc == 0 else {}
    ok(rc == 0 and all(tr.get(m + s) == tf[m + s] for m in mods
                       for s in (".weight", ".weight_scale")),
       "fp8-dynamic: bytes equal `--scheme fp8-dynamic --targets RULE` (llm-compressor's)", out)

    # the configs
    q0, qa, qf = qconfig(d["default"]), qconfig(d["nvfp4a16"]), qconfig(d["fp8-dynamic"])
    qs = qconfig(src)
    ok(RULE in qs["ignore"] and all(RULE not in q["ignore"] for q in (q0, qa, qf)),
       "the rule is dropped from the ignore list by every choice")
    ok(list(q0["config_groups"]) == ["group_0"] and
       list(qa["config_groups"]) == ["group_0", "NVFP4A16"] and
       list(qf["config_groups"]) == ["group_0", "FP8_DYNAMIC"] and
       qa["config_groups"]["group_0"] == qs["config_groups"]["group_0"] ==
       qf["config_groups"]["group_0"],
       "nvfp4a16 / fp8-dynamic: group_0 kept, one group added (the default adds none)",
       (list(qa["config_groups"]), list(qf["config_groups"])))
    ga, gf = qa["config_groups"]["NVFP4A16"], qf["config_groups"]["FP8_DYNAMIC"]
    ok(ga["input_activations"] is None and ga["weights"]["strategy"] == "tensor_group" and
       qa["format"] == "nvfp4-pack-quantized", "nvfp4a16: weight-only NVFP4 group, format kept",
       json.dumps(ga)[:600])
    ok(gf["input_activations"]["dynamic"] is True and gf["weights"]["num_bits"] == 8 and
       gf["format"] == "float-quantized" and qf["format"] == "mixed-precision",
       "fp8-dynamic: FP8 dynamic group, format mixed-precision", json.dumps(gf)[:600])
    want = [r"re:^model\.layers\.%d\.mlp\.experts\.[0-9]+\.(down_proj|gate_proj|up_proj)$" % i
            for i in range(40, 48)]
    ok(ga["targets"] == want and gf["targets"] == want,
       "the new group's targets: one anchored regex per layer 40-47", ga["targets"])
    for q, g in ((qa, "NVFP4A16"), (qf, "FP8_DYNAMIC")):
        bad = []
        for layer in range(48):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                name = f"model.layers.{layer}.mlp.experts.0.{proj}"
                want_g = g if layer >= 40 else "group_0"
                if vllm_group(q, name) != want_g:
                    bad.append((name, vllm_group(q, name)))
        rest = [k[:-len(".weight_packed")] for k in tensors(d["default"])
                if k.endswith(".weight_packed")]
        hit = [n for n in rest for t in want if n not in mods and target_match(n, t)]
        ok(not bad and not hit, f"{g}: vLLM's matching gives the FusedMoE layers 40-47 the new "
           "group, layers 0-39 group_0; the regexes match no other module", (bad[:5], hit[:5]))

    # plan: each choice's presented size is what export writes
    sizes = {k: sum(len(v) for v in files(d[k]).values()) for k in ("nvfp4", "nvfp4a16",
                                                                     "fp8-dynamic")}
    ok(pj.get("rule_scheme") == "nvfp4" and
       pj.get("rule_scheme_presented_bytes") == sizes,
       "plan --json: rule_scheme_presented_bytes of the three choices equal the exports'",
       (out[:1500], sizes))
    rc, out = run("plan", src, "--rule-scheme", "fp8-dynamic")
    lines = [ln for ln in out.splitlines() if "--rule-scheme" in ln]
    ok(rc == 0 and len(lines) == 3 and "(this)" in lines[2] and
       all(f"({sizes[k]} bytes)" in out for k in sizes),
       "plan (table, no --calib): the size of each choice in bytes, this one marked", out)

    # a mount presents the same bytes
    mnt, cache = os.path.join(tmp, "mnt"), os.path.join(tmp, "cache")
    os.makedirs(mnt)
    MOUNTS.append(os.path.abspath(mnt))
    rc, out = run("mount", src, mnt, "--rule-scheme", "nvfp4a16", "--cache", cache,
                  "--prefetch", "0")
    if ok(rc == 0 and mounted(mnt), "mount --rule-scheme nvfp4a16 (no --calib)", out):
        bad = [f for f, b in files(d["nvfp4a16"]).items()
               if open(os.path.join(mnt, f), "rb").read() != b]
        ok(not bad, "mount --rule-scheme nvfp4a16: every file equals export's", bad)
        rc, out = run("status", mnt)
        ok(rc == 0 and "its modules as nvfp4a16" in out,
           "status names the rule's scheme (nvfp4a16)", out)
        rc, out = run("umount", mnt, timeout=60)
        ok(rc == 0, "umount", out)

    # refusals
    x = os.path.join(tmp, "x")
    rc, out = export(src, x, "--calib", cal, "--rule-scheme", "w8a16")
    ok(rc == 2 and all(n in out for n in ("nvfp4 (the default)", "nvfp4a16", "fp8-dynamic"))
       and not os.path.exists(x),
       "--rule-scheme w8a16: refused naming the allowed values", out)
    rc, out = export(src, x, "--scheme", "nvfp4a16", "--rule-scheme", "fp8-dynamic")
    ok(rc == 2 and "Laguna fix" in out, "--rule-scheme with --scheme: refused", out)
    rc, out = export(src, x, "--rule-scheme", "nvfp4")
    ok(rc == 2 and "--calib" in out, "--rule-scheme nvfp4 without --calib: refused", out)


if __name__ == "__main__":
    sys.exit(main())
