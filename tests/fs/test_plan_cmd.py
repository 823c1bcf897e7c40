#!/usr/bin/env python3
"""`requantfs plan` against the truth: on small mkckpt models its sizes equal the
real files `requantfs export` writes (per file, total, quantized bytes, Laguna fix
and --scheme), and on shape-only checkpoints (tools/golden/shape_ckpt.py: real headers,
sparse data) they equal the arithmetic of SPEC.md section 4 done here in Python
from the shard headers and the schemes' tensor layouts. Standard library only.
Usage: test_plan_cmd.py REQUANTFS"""
import json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import rqtap                                       # noqa: E402
from rqtap import ok, run                          # noqa: E402
from rqtap import st_header as header              # noqa: E402

SHAPE = os.path.join(ROOT, "tools", "golden", "shape_ckpt.py")
SIZE = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "U8": 1, "I32": 4, "I64": 8}
RANK = {"U8": 4, "F8_E4M3": 7, "F16": 13, "BF16": 14, "I32": 15, "F32": 17, "I64": 19}


def plan(src, *args):
    rc, out = run("plan", src, *args, "--json")
    try:
        return json.loads(out[out.index("{"):]) if rc == 0 else None, out
    except ValueError:
        return None, out


def nbytes(dtype, shape):
    n = SIZE[dtype]
    for d in shape:
        n *= d
    return n


def src_size(d, name):
    return os.stat(os.path.join(d, name)).st_size


def check_against_export(label, src, dst, p, export_args):
    """plan's figures against the files export really wrote."""
    if not ok(p is not None, f"{label}: plan --json ran"):
        return
    rc, out = run("export", src, dst, *export_args, "--quiet", "--device", "cpu")
    if not ok(rc == 0, f"{label}: export ran", out):
        return
    files = sorted(os.listdir(dst))
    listed = {f["name"]: f for f in p["file_list"]}
    ok(sorted(listed) == files and p["files"] == len(files), f"{label}: same file set",
       f"plan {sorted(listed)}\nexport {files}")
    sizes = {f: os.path.getsize(os.path.join(dst, f)) for f in files}
    bad = [f for f in files if f in listed and listed[f]["size"] != sizes[f]]
    ok(not bad, f"{label}: every file's size equals export's", "\n".join(
        f"{f}: plan {listed[f]['size']} export {sizes[f]}" for f in bad))
    ok(p["presented_bytes"] == sum(sizes.values()), f"{label}: presented size = export total",
       f"{p['presented_bytes']} vs {sum(sizes.values())}")
    ok(p["source_bytes"] == sum(src_size(src, f) for f in files),
       f"{label}: source size = SRC's files")
    same = [f for f in files if open(os.path.join(dst, f), "rb").read() ==
            open(os.path.join(src, f), "rb").read()]
    ok(sorted(f for f in files if not listed[f]["changed"]) == same,
       f"{label}: unchanged files are exactly those export copied byte for byte")
    ok(p["unchanged_bytes"] + p["memory_bytes"] + p["quantized_bytes"] == p["presented_bytes"],
       f"{label}: unchanged + rewritten + quantized = presented")
    ok(p["cache_job_bytes"] == p["quantized_bytes"], f"{label}: cache = quantized tensor bytes")
    # quantized bytes: the tensors export wrote that SRC does not have as they are
    srct, newbytes, mods, shards = {}, 0, set(), set()
    for f in files:
        if f.endswith(".safetensors"):
            h, _ = header(os.path.join(src, f))
            srct.update({k: v for k, v in h.items() if k != "__metadata__"})
    for f in files:
        if not f.endswith(".safetensors"):
            continue
        h, _ = header(os.path.join(dst, f))
        for k, v in h.items():
            if k == "__metadata__" or k.endswith(".input_global_scale"):
                continue               # Laguna: copied from CALIB, not a job's output
            s = srct.get(k)
            if s is None or s["dtype"] != v["dtype"] or s["shape"] != v["shape"]:
                newbytes += v["data_offsets"][1] - v["data_offsets"][0]
                mods.add(k.rsplit(".", 1)[0])
                shards.add(f)
    ok(p["quantized_bytes"] == newbytes, f"{label}: quantized bytes = export's new tensors",
       f"plan {p['quantized_bytes']} export {newbytes}")
    ok(p["modules"] == len(mods) == sum(r["count"] for r in p["roles"]),
       f"{label}: {p['modules']} modules, by role and in export agree")
    ok(p["cache_materialized_bytes"] == sum(sizes[f] for f in shards),
       f"{label}: materialized cache = the requantized shards' sizes")


# ---- shape-only: the arithmetic of SPEC section 4, independently ----

def layout(scheme, rows, cols):
    if scheme == "nvfp4a16":
        return [("weight_packed", "U8", [rows, cols // 2]),
                ("weight_scale", "F8_E4M3", [rows, cols // 16]),
                ("weight_global_scale", "F32", [1])]
    if scheme == "fp8-dynamic":
        return [("weight", "F8_E4M3", [rows, cols]), ("weight_scale", "BF16", [rows, 1])]
    bits = 8 if scheme == "w8a16" else 4
    return [("weight_packed", "I32", [rows, cols * bits // 32]),
            ("weight_scale", "BF16", [rows, cols // 128]), ("weight_shape", "I64", [2])]


def st_size(meta, tensors):
    """The size of the file safetensors' save_file writes for tensors."""
    order = sorted(tensors, key=lambda t: (-RANK[t[1]], t[0]))
    h, off = ({"__metadata__": meta} if meta is not None else {}), 0
    for name, dtype, shape in order:
        n = nbytes(dtype, shape)
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(h, separators=(",", ":"))
    return 8 + len(text) + (-len(text) % 8) + off


def expected(src, scheme, ignore):
    """name -> size of every virtual file, modules, job bytes."""
    with open(os.path.join(src, "model.safetensors.index.json")) as f:
        index = json.load(f)
    sizes, wm, mods, job = {}, dict(index["weight_map"]), 0, 0
    total = 0
    for shard in sorted(set(index["weight_map"].values())):
        h, _ = header(os.path.join(src, shard))
        meta = h.pop("__metadata__", None)
        out, changed = [], False
        for k, v in h.items():
            m = k[:-len(".weight")] if k.endswith(".weight") else None
            if (m and v["dtype"] == "BF16" and len(v["shape"]) == 2 and not m.endswith("norm")
                    and m not in ignore):
                changed = True
                mods += 1
                del wm[k]
                for suf, dt, shp in layout(scheme, *v["shape"]):
                    out.append((f"{m}.{suf}", dt, shp))
                    wm[f"{m}.{suf}"] = shard
                    job += nbytes(dt, shp)
            else:
                out.append((k, v["dtype"], v["shape"]))
        total += sum(nbytes(d, s) for _, d, s in out)
        sizes[shard] = st_size(meta, out) if changed else src_size(src, shard)
    index["weight_map"] = wm
    index["metadata"]["total_size"] = total
    sizes["model.safetensors.index.json"] = len(json.dumps(index, indent=2, sort_keys=True)) + 1
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(ROOT, "tests", "data", "qconfig_golden", scheme + ".json")) as f:
        qc = json.load(f)
    qc["ignore"] = list(ignore)
    cfg["quantization_config"] = qc   # inserted last, in the file's indent-2 style
    sizes["config.json"] = len(json.dumps(cfg, indent=2)) + 1
    return sizes, mods, job


def check_shape(label, src, scheme, ignore):
    args = ["--scheme", scheme]
    for i in ignore:
        args += ["--ignore", i]
    p, out = plan(src, *args)
    if not ok(p is not None, f"{label} {scheme}: plan ran", out):
        return
    sizes, mods, job = expected(src, scheme, ignore)
    listed = {f["name"]: f["size"] for f in p["file_list"]}
    bad = [f"{k}: plan {listed.get(k)} arithmetic {v}" for k, v in sizes.items()
           if listed.get(k) != v]
    ok(not bad and len(listed) == len(sizes), f"{label} {scheme}: every file size as computed",
       "\n".join(bad))
    ok(p["presented_bytes"] == sum(sizes.values()), f"{label} {scheme}: presented size "
       f"{p['presented_bytes']} = {sum(sizes.values())}")
    ok(p["modules"] == mods and p["cache_job_bytes"] == job,
       f"{label} {scheme}: {mods} modules, cache {job} bytes",
       f"plan: {p['modules']} modules, {p['cache_job_bytes']} bytes")


def main():
    rqtap.init(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        # small mkckpt models, against export
        dense, lag, cal = (os.path.join(tmp, x) for x in ("dense", "laguna", "calib"))
        rc, out = run("mkckpt", dense, "--dense", "--no-tokenizer", "--layers", "2",
                      "--experts", "4")
        ok(rc == 0, "mkckpt --dense", out)
        for scheme in ("nvfp4a16", "fp8-dynamic"):
            p, out = plan(dense, "--scheme", scheme)
            check_against_export(f"mkckpt --dense {scheme}", dense,
                                 os.path.join(tmp, "ex-" + scheme), p, ["--scheme", scheme])
        rc, out = run("mkckpt", lag, "--no-tokenizer", "--layers", "4", "--experts", "4",
                      "--calib-out", cal)
        ok(rc == 0, "mkckpt (Laguna 08-01 form with its 07-22 twin)", out)
        p, out = plan(lag, "--calib", cal)
        check_against_export("mkckpt Laguna fix", lag, os.path.join(tmp, "ex-laguna"), p,
                             ["--calib", cal])
        ok(p is not None and
           p["dropped_ignore"] == [r"re:^model\.layers\.[2-3]\.mlp\.experts(\..*)?$"],
           "Laguna fix: the experts rule of layers 2-3 dropped", p and p["dropped_ignore"])
        p, out = plan(lag, "--scheme", "nvfp4a16")
        check_against_export("mkckpt Laguna --scheme nvfp4a16", lag,
                             os.path.join(tmp, "ex-laguna-s"), p, ["--scheme", "nvfp4a16"])
        rc, text = run("plan", dense, "--scheme", "fp8-dynamic")
        m = re.search(r"presented size:\s+[\d.]+ GB\s+\((\d+) bytes\)", text)
        pj, _ = plan(dense, "--scheme", "fp8-dynamic")
        ok(rc == 0 and m and pj and int(m.group(1)) == pj["presented_bytes"] and
           "modules quantized:" in text and "time: not estimated" in text,
           "the table says what --json says", text)
        pm, out = plan(dense, "--scheme", "nvfp4a16", "--measure", "2", "--device", "cpu")
        m = pm and pm["measured"]
        ok(m and m["jobs"] == 2 and 0 < m["bytes"] <= pm["weight_bytes_read"] and
           m["seconds"] > 0 and m["all_jobs_seconds"] >= m["seconds"] and "cpu" in m["device"],
           "--measure 2: two jobs timed, scaled to all", out)
        ok(pj and pj["measured"] is None, "no time without --measure")
        rc, out = run("plan", dense, "--scheme", "nvfp4a16", "--measure", "0")
        ok(rc == 2 and "--measure" in out, "--measure 0 refused", out)
        rc, out = run("plan", dense)
        ok(rc == 2 and "--scheme" in out, "no --scheme and no --calib: usage error", out)
        rc, out = run("plan", dense, "--scheme", "fp8-dynamic", "--calib", cal)
        ok(rc == 2 and "--calib" in out, "--calib with --scheme refused", out)
        rc, out = run("plan", "--help")
        ok(rc == 0 and "usage: requantfs plan" in out, "--help")

        # shape-only checkpoints, against the arithmetic
        tiny = os.path.join(tmp, "tiny")
        r = subprocess.run([sys.executable, SHAPE, "tiny-llama", tiny], capture_output=True,
                           text=True)
        ok(r.returncode == 0, "shape_ckpt.py tiny-llama", r.stdout + r.stderr)
        on_disk = sum(os.stat(os.path.join(tiny, f)).st_blocks * 512 for f in os.listdir(tiny))
        logical = sum(os.path.getsize(os.path.join(tiny, f)) for f in os.listdir(tiny))
        ok(on_disk < logical, f"shape-only files are sparse ({on_disk} of {logical} bytes "
           "on disk)")
        for scheme in ("nvfp4a16", "fp8-dynamic", "w8a16", "w4a16"):
            check_shape("tiny-llama", tiny, scheme, ["lm_head", "model.embed_tokens"])
        big = os.path.join(tmp, "llama70b")
        r = subprocess.run([sys.executable, SHAPE, "llama-3.1-70b", big, "--layers", "2",
                            "--shards", "3"], capture_output=True, text=True)
        ok(r.returncode == 0, "shape_ckpt.py llama-3.1-70b --layers 2", r.stdout + r.stderr)
        for scheme in ("nvfp4a16", "w4a16"):
            check_shape("llama-3.1-70b (2 layers)", big, scheme, ["lm_head"])
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
