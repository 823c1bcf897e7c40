#!/usr/bin/env python3
"""export of mkckpt checkpoints (plain and hub layout) checked file by file
against SPEC.md section 4, verify against the calibration twin, and the
refusals on bad input. TAP output. Usage: test_export.py REQUANTFS"""
import json, os, re, shutil, struct, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rqtap import st_header as header, st_tensors as tensors, st_order, st_agrees  # noqa: E402

RQ = sys.argv[1]
RULE = r"re:^model\.layers\.4[0-7]\.mlp\.experts(\..*)?$"
n = failed = 0


def ok(cond, what, detail=""):
    global n, failed
    n += 1
    print(("ok" if cond else "not ok") + f" {n} - {what}")
    if not cond:
        failed += 1
        for line in str(detail).splitlines()[:30]:
            print("#   " + line)


def run(*args):
    p = subprocess.run([RQ, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def check_export(src, calib, dst, label):
    rc, out = run("export", src, dst, "--calib", calib, "--quiet")
    ok(rc == 0, f"{label}: export exits 0", out)
    if rc:
        return
    names = sorted(os.listdir(src))
    ok(sorted(os.listdir(dst)) == names, f"{label}: same file names as SRC", os.listdir(dst))
    src_cfg = open(os.path.join(src, "config.json")).read()
    dst_cfg = open(os.path.join(dst, "config.json")).read()
    cj, dj = json.loads(src_cfg), json.loads(dst_cfg)
    ign = cj["quantization_config"]["ignore"]
    ok(RULE in ign and RULE not in dj["quantization_config"]["ignore"],
       f"{label}: config.json lost the rule")
    ign.remove(RULE)
    ok(cj == dj, f"{label}: config.json differs only by the rule")
    # SPEC 4: the element goes with one separating comma and the whitespace between
    lit = re.escape(json.dumps(RULE))
    cands = {re.sub(r",\s*" + lit, "", src_cfg, count=1), re.sub(lit + r"\s*,\s*", "", src_cfg, count=1)}
    ok(dst_cfg in cands, f"{label}: config.json keeps every other byte")
    idx = json.load(open(os.path.join(dst, "model.safetensors.index.json")))
    raw = open(os.path.join(dst, "model.safetensors.index.json")).read()
    ok(raw == json.dumps(idx, indent=2, sort_keys=True) + "\n",
       f"{label}: index written like json.dumps(indent=2, sort_keys=True)")
    wm, total, consistent = idx["weight_map"], 0, True
    shard_tensors = {}
    for s in sorted(set(wm.values())):
        t = tensors(os.path.join(dst, s))
        shard_tensors[s] = t
        total += sum(len(v[2]) for v in t.values())
        for name in t:
            consistent &= wm.get(name) == s
    consistent &= sum(len(v) for v in shard_tensors.values()) == len(wm)
    ok(consistent, f"{label}: index weight_map matches the shard headers")
    ok(idx["metadata"]["total_size"] == total, f"{label}: metadata.total_size is the sum",
       (idx["metadata"]["total_size"], total))
    changed = unchanged_ok = 0
    untouched = True
    for s in names:
        a = open(os.path.join(src, s), "rb").read()
        b = open(os.path.join(dst, s), "rb").read()
        if s in ("config.json", "model.safetensors.index.json"):
            continue
        if a == b:
            continue
        changed += 1
        st, dt = tensors(os.path.join(src, s)), tensors(os.path.join(dst, s))
        for name, v in st.items():
            if name in dt:
                untouched &= dt[name] == v
            else:
                m = name[: -len(".weight")]
                untouched &= bool(re.match(RULE[3:], m)) and all(
                    m + x in dt for x in (".weight_packed", ".weight_scale",
                                          ".weight_global_scale", ".input_global_scale"))
        # the data order and layout of SPEC section 4
        h, _ = header(os.path.join(dst, s))
        order = [k for k in h if k != "__metadata__"]
        want = st_order(order, lambda k: h[k]["dtype"])
        ok(order == want and list(h)[0] == "__metadata__", f"{label}: {s} in canonical order")
    ok(changed >= 2, f"{label}: requantized shards rewritten ({changed})")
    # the real library reads every file export wrote
    good = all([st_agrees(os.path.join(dst, s), ("U8", "F32"))
                for s in sorted(set(wm.values()))])
    ok(good, f"{label}: safetensors.safe_open reads every shard: names, dtypes, shapes, bytes")
    ok(untouched, f"{label}: every other tensor of rewritten shards is byte-identical")
    rc, out = run("verify", dst, "--against", calib, "--tensors",
                  r"layers\.4[0-7]\.mlp\.experts", "--quiet")
    ok(rc == 0 and "differ" in out and " 0 differ" in out,
       f"{label}: verify against the calibration twin: all requantized tensors equal", out)


def main():
    tmp = tempfile.mkdtemp(prefix="rq-export-")
    try:
        src, cal = os.path.join(tmp, "src"), os.path.join(tmp, "cal")
        rc, out = run("mkckpt", src, "--calib-out", cal)
        ok(rc == 0, "mkckpt makes a checkpoint and its twin", out)
        check_export(src, cal, os.path.join(tmp, "dst"), "plain")

        hub = os.path.join(tmp, "hub")
        rc, out = run("mkckpt", hub, "--hub")
        snap = out.strip().splitlines()[-1] if rc == 0 else ""
        ok(rc == 0 and os.path.isdir(snap), "mkckpt --hub makes a hub snapshot", out)
        if os.path.isdir(snap):
            check_export(snap, cal, os.path.join(tmp, "dst-hub"), "hub")
            same = all(open(os.path.join(tmp, "dst", f), "rb").read() ==
                       open(os.path.join(tmp, "dst-hub", f), "rb").read()
                       for f in os.listdir(os.path.join(tmp, "dst")))
            ok(same, "hub export is byte-identical to the plain one")

        # calib extract: the same export from the small file
        cf = os.path.join(tmp, "calib.safetensors")
        rc, out = run("calib", "extract", cal, "-o", cf)
        ok(rc == 0 and os.path.getsize(cf) > 0, "calib extract writes a file", out)
        rc, out = run("export", src, os.path.join(tmp, "dst-cf"), "--calib", cf, "--quiet")
        same = rc == 0 and all(open(os.path.join(tmp, "dst", f), "rb").read() ==
                               open(os.path.join(tmp, "dst-cf", f), "rb").read()
                               for f in os.listdir(os.path.join(tmp, "dst")))
        ok(same, "export with the extracted calibration file is identical", out)

        rc, out = run("export", src, os.path.join(tmp, "dst"), "--calib", cal)
        ok(rc == 1 and "not empty" in out, "export refuses a non-empty DST", out)

        # a full disk: a clear error, and nothing in DST that looks complete
        small = os.path.join(tmp, "small")
        os.makedirs(small)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", small],
                           capture_output=True, text=True)
        ok(p.returncode == 0, "a 1 MiB tmpfs for the full-disk case", p.stderr)
        if p.returncode == 0:
            try:
                d = os.path.join(small, "out")
                rc, out = run("export", src, d, "--calib", cal, "--quiet")
                ok(rc == 1 and "No space left" in out and not looks_complete(d)
                   and not [f for f in os.listdir(d) if f.endswith("-tmp")],
                   "export to a full disk fails naming the file, leaves no file behind", out)
            finally:
                subprocess.run(["umount", small])

        # the rule first in the list: it goes with the comma and whitespace after it
        s2 = os.path.join(tmp, "src-rule-first")
        shutil.copytree(src, s2)
        cfgp = os.path.join(s2, "config.json")
        text = open(cfgp).read()
        lit = json.dumps(RULE)
        m = re.search(r'("ignore": \[\s*)', text)
        text = text.replace(",\n      " + lit, "").replace(m.group(1), m.group(1) + lit + ",\n      ", 1)
        open(cfgp, "w").write(text)
        rc, out = run("export", s2, os.path.join(tmp, "dst-rule-first"), "--calib", cal, "--quiet")
        got = open(os.path.join(tmp, "dst-rule-first", "config.json")).read() if rc == 0 else ""
        ok(rc == 0 and got == text.replace(lit + ",\n      ", "", 1),
           "a rule first in the ignore list is cut with the comma and whitespace after it", out)

        # verify's recipe diagnosis: the BF16 source against the twin (quantized with fp32)
        sel = r"layers\.4[0-7]\.mlp\.experts\.[0-3]\."
        rc, out = run("verify", src, "--against", cal, "--tensors", sel, "--quiet")
        ok(rc == 0 and re.search(r"variant reproducing all: fp32\b", out) and
           "no variant reproduces" not in out,
           "verify SRC --against twin: fp32 reproduces every module", out[-600:])
        # a bf16-recipe export differs from the twin, and verify says which variant would not
        rc, out = run("export", src, os.path.join(tmp, "dst-bf16"), "--calib", cal,
                      "--recipe", "bf16", "--quiet")
        rc, out = run("verify", os.path.join(tmp, "dst-bf16"), "--against", cal, "--tensors", sel,
                      "--source", src, "--quiet")
        ok(rc == 1 and "DIFFER" in out and re.search(r"variant reproducing all: fp32\b", out),
           "verify of a bf16 export: differences counted, fp32 named as the variant of REF",
           out[-600:])
        bad_cases(tmp, src, cal)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"1..{n}")
    return 1 if failed else 0


def looks_complete(d):
    return os.path.isdir(d) and any(not f.startswith(".") for f in os.listdir(d))


def bad_cases(tmp, src, cal):
    shard = sorted(f for f in os.listdir(src) if f.endswith(".safetensors"))
    wm = json.load(open(os.path.join(src, "model.safetensors.index.json")))["weight_map"]
    expert = sorted(k for k in wm if re.match(r"model\.layers\.4[0-7]\.mlp\.experts\.\d+\.down_proj\.weight$", k))[0]
    eshard = wm[expert]

    def case(label, mutate, expect, calib=None):
        s = os.path.join(tmp, "bad-" + label)
        shutil.copytree(src, s)
        c = calib or cal
        mutate(s)
        d = os.path.join(tmp, "out-" + label)
        rc, out = run("export", s, d, "--calib", c, "--quiet")
        ok(rc == 1 and expect in out and not looks_complete(d),
           f"bad input '{label}': refused naming {expect}", out)

    case("missing-shard", lambda s: os.remove(os.path.join(s, eshard)), eshard)

    def corrupt(s):
        p = os.path.join(s, eshard)
        b = bytearray(open(p, "rb").read())
        b[8:20] = b"{garbage!!!!"
        open(p, "wb").write(b)
    case("corrupt-header", corrupt, eshard)

    def nan(s):
        p = os.path.join(s, eshard)
        h, start = header(p)
        b = bytearray(open(p, "rb").read())
        off = start + h[expert]["data_offsets"][0] + 6
        b[off:off + 2] = struct.pack("<H", 0x7FC0)
        open(p, "wb").write(b)
    case("nan-weight", nan, expert[: -len(".weight")])

    def ambiguous(s):
        p = os.path.join(s, "config.json")
        j = open(p).read().replace('"' + RULE.replace("\\", "\\\\") + '"',
                                   '"re:^model\\\\.layers\\\\.4[0-3]\\\\.mlp\\\\.experts\\\\..*$",\n    "'
                                   + RULE.replace("\\", "\\\\") + '"')
        open(p, "w").write(j)
    case("ambiguous-rule", ambiguous, "--drop-ignore")

    # calibration without one module's scale: a calib dir missing the shard that holds it
    c2 = os.path.join(tmp, "cal-missing")
    shutil.copytree(cal, c2)
    cwm = json.load(open(os.path.join(c2, "model.safetensors.index.json")))["weight_map"]
    scale = expert[: -len(".weight")] + ".input_global_scale"
    os.remove(os.path.join(c2, cwm[scale]))
    case("missing-calibration", lambda s: None, cwm[scale], calib=c2)


if __name__ == "__main__":
    sys.exit(main())
