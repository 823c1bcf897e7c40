#!/usr/bin/env python3
"""--observer minmax|mse|expanded-mse for plan, export and mount, compare --observers (issue 32).

- Refusals (exit 2, naming what is at fault and what applies): an unknown value (plan,
  export, mount, compare --observers), an MSE observer with a recipe other than bf16, the
  Laguna fix's own NVFP4 (fp32 recipe), --rule-scheme nvfp4a16 on the fix's fp32 recipe,
  an F16 module (the search is BF16 only: refused at plan time naming the tensor),
  compare --observers without --schemes. --rule-scheme fp8-dynamic and nvfp4a16 with
  --recipe bf16 take them (opt-in).
- plan names the observer (table and --json) and labels the extra time an ESTIMATE.
- config.json: the weights' "observer" per scheme x observer equals what llm-compressor's
  model_free_ptq writes (tests/data/qconfig_golden/<scheme>.<observer>.json, minmax:
  <scheme>.json: unchanged), tools/golden/gen_qconfig_observer_golden.py.
- Bytes: export --scheme S --observer O of tests/data/tiny/llama, every tensor's sha256
  equal to model_free_ptq's (tests/data/observer/tiny_llama_mse.json).
- As root with /dev/fuse: a mount with --observer expanded-mse serves those bytes and
  status names the observer; a minmax mount on the SAME cache then serves minmax's bytes
  (the keys differ: no entry of one is taken for the other), and the expanded-mse mount
  again serves its own from the cache.
- compare --observers (root, FUSE): a row per rule scheme x observer on the Laguna form, a
  pair that does not apply a row saying so.
- W4A4 (--scheme nvfp4 --calib FILE): a calibration file whose __metadata__ says
  calib_observer is named by plan (and status) next to the weights' observer; one that
  does not say is accepted and only the weights' is named.

Usage: test_observer_cli.py REQUANTFS"""
import hashlib, json, os, shutil, struct, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run, mounted, MOUNTS  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import scheme_wide  # noqa: E402  (numpy)
except ImportError as e:
    rqtap.no_venv(e)

rqtap.init(sys.argv[1])
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
TINY = os.path.join(DATA, "tiny", "llama")
CAN_MOUNT = os.geteuid() == 0 and os.path.exists("/dev/fuse")
LLMC = {"mse": "memoryless_mse", "expanded-mse": "nvfp4_expanded_mse"}
SCHEMES = ("nvfp4a16", "fp8-dynamic", "w8a16", "w4a16")


def tensors(d):
    """name -> sha256 of its bytes over the safetensors files of directory d."""
    out = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            for k, (_, _, b) in rqtap.st_tensors(os.path.join(d, fn)).items():
                out[k] = hashlib.sha256(b).hexdigest()
    return out


def qconfig(d):
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f)["quantization_config"]


def golden_qc(scheme, obs):
    name = f"{scheme}.json" if obs == "minmax" else f"{scheme}.{LLMC[obs]}.json"
    with open(os.path.join(DATA, "qconfig_golden", name)) as f:
        return json.load(f)


def refused(args, want, what, code=2):
    rc, out = run(*args)
    ok(rc == code and all(w in out for w in want), f"refused (exit {code}): {what}",
       f"rc {rc}, want {want}\n{out}")


def refusals(tmp):
    bad = "--observer must be minmax (the default), mse or expanded-mse (got 'maxmin')"
    refused(["plan", TINY, "--scheme", "nvfp4a16", "--observer", "maxmin"], [bad],
            "plan --observer maxmin: the supported list")
    refused(["export", TINY, os.path.join(tmp, "x"), "--scheme", "nvfp4a16", "--observer",
             "maxmin"], [bad], "export --observer maxmin")
    os.makedirs(os.path.join(tmp, "m"), exist_ok=True)
    refused(["mount", TINY, os.path.join(tmp, "m"), "--scheme", "nvfp4a16", "--observer",
             "maxmin"], [bad], "mount --observer maxmin")
    for cmd in ("plan", "export"):
        args = [cmd, TINY] + ([os.path.join(tmp, "y")] if cmd == "export" else [])
        refused(args + ["--scheme", "nvfp4a16", "--recipe", "fp32", "--observer", "mse"],
                ["--observer mse does not apply to --scheme nvfp4a16 with --recipe fp32",
                 "it takes minmax", "--recipe bf16"],
                f"{cmd} --scheme nvfp4a16 --recipe fp32 --observer mse: names both, lists "
                "what applies")
    # the Laguna 08-01 form (mkckpt) and its 07-22 twin
    lag, cal = os.path.join(tmp, "lag"), os.path.join(tmp, "cal")
    rc, out = run("mkckpt", lag, "--calib-out", cal, "--layers", "4", "--experts", "4")
    if not ok(rc == 0, "mkckpt: a Laguna 08-01 checkpoint and its twin", out):
        return
    refused(["plan", lag, "--calib", cal, "--observer", "expanded-mse"],
            ["the Laguna fix's own NVFP4", "fp32 recipe", "takes minmax",
             "--rule-scheme nvfp4a16 --recipe bf16"],
            "the Laguna fix's own NVFP4 with --observer expanded-mse")
    refused(["plan", lag, "--rule-scheme", "nvfp4a16", "--observer", "mse"],
            ["--rule-scheme nvfp4a16 with --recipe fp32", "takes minmax"],
            "--rule-scheme nvfp4a16 on the fix's fp32 recipe with --observer mse")
    rc, out = run("plan", lag, "--rule-scheme", "nvfp4a16", "--recipe", "bf16", "--observer",
                  "mse")
    ok(rc == 0 and "observer: weights mse (llm-compressor memoryless_mse)" in out,
       "--rule-scheme nvfp4a16 --recipe bf16 --observer mse: planned (the opt-in)", out)
    rc, out = run("plan", lag, "--rule-scheme", "fp8-dynamic", "--observer", "expanded-mse",
                  "--json")
    j = json.loads(out) if rc == 0 else {}
    ok(j.get("observer") == "expanded-mse" and j.get("rule_scheme") == "fp8-dynamic",
       "--rule-scheme fp8-dynamic --observer expanded-mse: planned", out)
    ex = os.path.join(tmp, "lag-ex")
    rc, out = run("export", lag, ex, "--rule-scheme", "fp8-dynamic", "--observer",
                  "expanded-mse", "--quiet", "--device", "cpu")
    obs = []
    if rc == 0:
        for g in qconfig(ex)["config_groups"].values():
            obs.append(g["weights"].get("observer"))
    ok(rc == 0 and "nvfp4_expanded_mse" in obs and obs.count("nvfp4_expanded_mse") == 1,
       "export --rule-scheme fp8-dynamic --observer expanded-mse: the rule's group (only) "
       f"names nvfp4_expanded_mse ({obs})", out)
    # an F16 module: the MSE search is BF16 only
    f16 = os.path.join(tmp, "f16")
    scheme_wide.write(f16, "F16")
    refused(["plan", f16, "--scheme", "nvfp4a16", "--observer", "mse"],
            ["is F16; --observer mse searches BF16 weights only", "--ignore",
             "--observer minmax"], "an F16 module with --observer mse: named, at plan time "
            "(exit 1, as every refusal of what SRC holds)", code=1)
    refused(["compare", TINY, TINY, "--observers", "mse"], ["--observers is for --schemes"],
            "compare --observers without --schemes")
    refused(["compare", TINY, "--schemes", "all", "--text", "/dev/null", "--observers",
             "minmax,minmax"], ["--observers: expected all or a comma list of minmax, mse, "
                                "expanded-mse, each once"], "compare --observers repeated")


def plan_output():
    rc, out = run("plan", TINY, "--scheme", "nvfp4a16")
    ok(rc == 0 and "observer: weights minmax (the default" in out and "ESTIMATE" not in out,
       "plan: minmax named, no extra time", out)
    rc, out = run("plan", TINY, "--scheme", "w4a16", "--observer", "expanded-mse")
    ok(rc == 0 and "observer: weights expanded-mse (llm-compressor nvfp4_expanded_mse)" in out
       and "observer time: ESTIMATE, not measured" in out and "~98x minmax" in out,
       "plan --observer expanded-mse: named, its extra time labelled an estimate", out)
    rc, out = run("plan", TINY, "--scheme", "nvfp4a16", "--observer", "expanded-mse")
    ok(rc == 0 and "~36x minmax" in out and "bench quant --observer, nvfp4a16" in out,
       "plan --observer expanded-mse on NVFP4's groups of 16: the bounded search's estimate", out)
    rc, out = run("plan", TINY, "--scheme", "fp8-dynamic", "--observer", "mse", "--json")
    j = json.loads(out) if rc == 0 else {}
    ok(j.get("observer") == "mse" and j.get("observer_llmc") == "memoryless_mse" and
       j.get("observer_estimate", {}).get("times_minmax") == 42 and
       j.get("calib_observer", 0) is None, "plan --json: observer, observer_llmc, estimate", out)
    rc, out = run("plan", TINY, "--scheme", "fp8-dynamic", "--json")
    j = json.loads(out) if rc == 0 else {}
    ok(j.get("observer") == "minmax" and j.get("observer_llmc") == "memoryless_minmax",
       "plan --json, minmax: observer_llmc names llm-compressor's weight observer "
       "memoryless_minmax (its 'minmax' is the activations' moving average)", out)


def exports(tmp, golden):
    for scheme in SCHEMES:
        for obs in ("minmax", "mse", "expanded-mse"):
            dst = os.path.join(tmp, f"ex-{scheme}-{obs}")
            rc, out = run("export", TINY, dst, "--scheme", scheme, "--observer", obs,
                          "--ignore", "lm_head", "--quiet", "--device", "cpu")
            if not ok(rc == 0, f"export --scheme {scheme} --observer {obs}", out):
                continue
            got, want = qconfig(dst), golden_qc(scheme, obs)
            ok(got == want, f"{scheme} {obs}: quantization_config == model_free_ptq's (weights "
               f"observer {want['config_groups'][next(iter(want['config_groups']))]['weights']['observer']})",
               json.dumps(got, indent=1, sort_keys=True))
            if obs == "minmax":
                continue
            want_t, got_t = golden["sha256"][scheme][LLMC[obs]], tensors(dst)
            bad = [f"{k}: ours {got_t.get(k, 'missing')[:12]}, llm-compressor {v[:12]}"
                   for k, v in sorted(want_t.items()) if got_t.get(k) != v]
            ok(not bad and set(got_t) == set(want_t), f"{scheme} {obs}: every tensor's bytes "
               f"(sha256) == model_free_ptq's ({len(want_t)} tensors)", "\n".join(bad))


def mounts(tmp, golden):
    if not CAN_MOUNT:
        print("# mount part skipped: needs root and /dev/fuse (as CI has)")
        return
    cache, mnt = os.path.join(tmp, "cache"), os.path.join(tmp, "mnt")
    os.makedirs(mnt, exist_ok=True)
    want = golden["sha256"]["nvfp4a16"]["nvfp4_expanded_mse"]
    minmax = tensors(os.path.join(tmp, "ex-nvfp4a16-minmax"))
    differ = sum(1 for k, v in want.items() if minmax.get(k) != v)
    ok(differ > 0, f"expanded-mse's bytes differ from minmax's in {differ} tensors (so a "
       "shared cache entry would show)")
    for step, obs, ref in (("first", "expanded-mse", want), ("same cache", "minmax", minmax),
                           ("again", "expanded-mse", want)):
        MOUNTS.append(os.path.abspath(mnt))
        rc, out = run("mount", TINY, mnt, "--scheme", "nvfp4a16", "--observer", obs,
                      "--ignore", "lm_head", "--cache", cache, "--device", "cpu")
        if not ok(rc == 0 and mounted(mnt), f"mount --observer {obs} ({step})", out):
            return
        got = tensors(mnt)
        bad = [k for k, v in ref.items() if got.get(k) != v]
        ok(not bad, f"mount --observer {obs} ({step}): every tensor as "
           f"{'model_free_ptq with ' + LLMC[obs] if obs != 'minmax' else 'export (minmax)'}"
           + (": the cache held expanded-mse's entries, none taken" if obs == "minmax" else ""),
           "\n".join(bad[:8]))
        rc, out = run("status", mnt)
        ok(rc == 0 and f"observer    weights: {obs}" in out, f"status names the observer "
           f"({obs})", out)
        rc, out = run("umount", mnt, timeout=60)
        ok(rc == 0 and not mounted(mnt), "umount", out)
        MOUNTS.clear()


def compare_rows(tmp):
    """compare --observers on the Laguna mkckpt (it has a tokenizer): one row per rule scheme
    and observer; the fix's fp32 nvfp4a16 with an MSE observer is a row saying so."""
    if not CAN_MOUNT:
        return
    lag = os.path.join(tmp, "lag")
    rc, out = run("compare", lag, "--schemes", "nvfp4a16,fp8-dynamic", "--observers",
                  "minmax,expanded-mse", "--text", "/usr/share/common-licenses/GPL-3",
                  "--tokens", "48", "--threads", "2", timeout=600)
    rows, on = {}, False
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "rule-scheme" and "presented" in f:
            on = True
        elif on and f:
            rows[f[0]] = f[1:]
    want = ["source", "nvfp4a16/minmax", "nvfp4a16/expanded-mse", "fp8-dynamic/minmax",
            "fp8-dynamic/expanded-mse"]
    ok(rc == 0 and list(rows) == want, "compare --observers minmax,expanded-mse: one row per "
       "rule scheme x observer, in order", out)
    na = " ".join(rows.get("nvfp4a16/expanded-mse", []))
    ok(na.startswith("not applicable: --rule-scheme nvfp4a16 takes --observer minmax"),
       "the fix's fp32 nvfp4a16 with expanded-mse: a row saying what applies", out)
    a, b = rows.get("fp8-dynamic/minmax", []), rows.get("fp8-dynamic/expanded-mse", [])
    ok(len(a) == len(b) == 8 and a[-4:] != b[-4:], "fp8-dynamic: minmax and expanded-mse rows "
       "both measured, and they differ", out)


def calib_file(path, meta):
    """A calibration file of every tiny llama Linear's input_global_scale (F32 [1])."""
    h, _ = rqtap.st_header(os.path.join(TINY, "model.safetensors"))
    mods = sorted(k[:-7] for k, v in h.items() if k.endswith(".weight") and
                  len(v.get("shape", [])) == 2 and "embed" not in k)
    hdr = {"__metadata__": meta} if meta else {}
    for i, m in enumerate(mods):
        hdr[m + ".input_global_scale"] = {"dtype": "F32", "shape": [1],
                                          "data_offsets": [4 * i, 4 * i + 4]}
    text = json.dumps(hdr).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + struct.pack("<f", 96.0) * len(mods))


def w4a4(tmp):
    said, mute = os.path.join(tmp, "cal-said.safetensors"), os.path.join(tmp, "cal-mute.safetensors")
    calib_file(said, {"calib_source": "requantfs calib run", "calib_observer": "static_minmax"})
    calib_file(mute, None)
    rc, out = run("plan", TINY, "--scheme", "nvfp4", "--calib", said, "--observer",
                  "expanded-mse")
    ok(rc == 0 and "weights expanded-mse" in out and
       "input scales static_minmax (--calib's __metadata__)" in out,
       "W4A4: plan names the weights' observer and the calibration's", out)
    rc, out = run("plan", TINY, "--scheme", "nvfp4", "--calib", mute, "--observer", "mse",
                  "--json")
    j = json.loads(out) if rc == 0 else {}
    ok(rc == 0 and j.get("observer") == "mse" and j.get("calib_observer", 0) is None,
       "W4A4: a calibration file that does not say is accepted; only the weights' observer "
       "is named", out)
    if not CAN_MOUNT:
        return
    mnt, cache = os.path.join(tmp, "mnt-w4"), os.path.join(tmp, "cache-w4")
    os.makedirs(mnt, exist_ok=True)
    MOUNTS.append(os.path.abspath(mnt))
    rc, out = run("mount", TINY, mnt, "--scheme", "nvfp4", "--calib", said, "--observer",
                  "expanded-mse", "--cache", cache, "--device", "cpu")
    if ok(rc == 0 and mounted(mnt), "W4A4 mount with --observer expanded-mse", out):
        rc, out = run("status", mnt)
        ok(rc == 0 and "weights: expanded-mse" in out and
           "input scales (--calib): static_minmax" in out, "W4A4: status names both", out)
        run("umount", mnt, timeout=60)
    MOUNTS.clear()


def main():
    with open(os.path.join(DATA, "observer", "tiny_llama_mse.json")) as f:
        golden = json.load(f)
    tmp = tempfile.mkdtemp(prefix="rq-observer-")
    os.chmod(tmp, 0o755)
    try:
        refusals(tmp)
        plan_output()
        exports(tmp, golden)
        mounts(tmp, golden)
        compare_rows(tmp)
        w4a4(tmp)
    finally:
        rqtap.cleanup(tmp)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
