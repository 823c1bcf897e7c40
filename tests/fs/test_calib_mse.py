#!/usr/bin/env python3
"""calib run --observer minmax|mse against llm-compressor (issue 32 item 5): oneshot's
NVFP4 preset with input_activations.observer "mse" (MovingAverageMSEObserver) and
"minmax" (MinMaxObserver) on SmolLM2, golden data from tools/golden/gen_calib_mse_golden.py
(tests/data/golden/llmc-nvfp4/calib-mse.json and calib-prompts.txt).

  * text: the first 256 tokens of GPL-3, one batch: the per-group search of one batch;
    prompts: four GPL-3 paragraphs, four batches that oneshot feeds longest first, so the
    moving average (0.01) folds them in that order;
  * per run: the peer's token ids, a scale for exactly the peer's modules, every
    input_global_scale bit-equal to the peer's (a near tie of two candidates' BF16 error
    sums may flip one: at most 0.1 % of the modules, each printed with both sides'
    absmax), calib_observer in the file's __metadata__, plan naming it, export writing it
    as config.json's input_activations observer;
  * minmax over one batch is static_minmax (the default, whose bytes are calib_peer's);
  * --observer refusals: an unknown name (the supported list), --device cuda and
    --forward-dtype f32 (the search needs the CPU's BF16 forward).
TAP output. Usage: test_calib_mse.py REQUANTFS"""
import json, os, struct, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
GOLD = os.path.join(ROOT, "tests", "data", "golden", "llmc-nvfp4")
SMOL = os.path.join(ROOT, ".models", "SmolLM2-135M-Instruct")
TEXT = "/usr/share/common-licenses/GPL-3"
SUF = ".input_global_scale"
NEAR_TIES = 0.001     # the share of modules a near tie may flip


def scales(path):
    return {k[:-len(SUF)]: struct.unpack("<f", v[2])[0]
            for k, v in rqtap.st_tensors(path).items()}


def calib(tmp, g, tokset, observer):
    cal = os.path.join(tmp, "%s-%s.safetensors" % (tokset, observer))
    if tokset == "text":
        src = ["--text", TEXT, "--tokens", str(g["text"]["tokens"])]
    else:
        src = ["--prompts", os.path.join(ROOT, g["prompts"]["file"]), "--tokens",
               str(g["prompts"]["tokens"])]
    rc, out = run("calib", "run", SMOL, *src, "--observer", observer, "-o", cal,
                  timeout=240)
    for line in out.splitlines():
        if "calibration pass:" in line:
            print("# %s/%s: %s" % (tokset, observer, line))
    return cal if ok(rc == 0 and "observer " + observer in out,
                     "%s/%s: calib run --observer %s" % (tokset, observer, observer), out) else None


def check(tmp, g, tokset, observer):
    cal = calib(tmp, g, tokset, observer)
    if not cal:
        return None
    meta = rqtap.st_header(cal)[0]["__metadata__"]
    seqs = [[int(x) for x in s.split(",")] for s in meta["calib_token_ids"].split(";")]
    want = [g["text"]["token_ids"]] if tokset == "text" else g["prompts"]["token_ids"]
    ok(seqs == want, "%s/%s: the token ids are the peer's (%s)" % (tokset, observer, [len(s)
       for s in want]), "ours %s" % [len(s) for s in seqs])
    ok(meta.get("calib_observer") == observer, "%s/%s: the file records calib_observer %s"
       % (tokset, observer, observer), str(meta.get("calib_observer")))
    ours, mods = scales(cal), g["runs"]["%s/%s" % (tokset, observer)]
    if not ok(set(ours) == set(mods), "%s/%s: a scale for exactly the peer's %d modules"
              % (tokset, observer, len(mods))):
        return ours
    diff = sorted(k for k in mods if ours[k] != mods[k]["input_global_scale"])
    for k in diff:
        print("# %s/%s %s: ours %r (2688/amax), peer %r (its absmax %r)" % (
            tokset, observer, k, ours[k], mods[k]["input_global_scale"], mods[k]["absmax"]))
    ok(len(diff) <= NEAR_TIES * len(mods), "%s/%s: %d of %d input_global_scale bit-equal to "
       "oneshot's (at most %.1f %% near ties)" % (tokset, observer, len(mods) - len(diff),
                                                  len(mods), 100 * NEAR_TIES),
       "\n".join(diff[:10]))
    return ours


def body(tmp):
    with open(os.path.join(GOLD, "calib-mse.json")) as f:
        g = json.load(f)
    if not ok(os.path.isfile(os.path.join(SMOL, "model.safetensors")), "the real model is "
              "there", f"{SMOL} is missing: run tools/setup-model"):
        return
    # refusals first (cheap)
    rc, out = run("calib", "run", SMOL, "--text", TEXT, "--observer", "memoryless", "-o",
                  os.path.join(tmp, "x.safetensors"))
    ok(rc == 2 and "'memoryless'" in out and "static_minmax" in out and "minmax" in out and
       "mse" in out, "--observer memoryless: refused, naming the supported ones", out)
    for extra, what in ((["--device", "cuda"], "--device cuda"),
                        (["--forward-dtype", "f32"], "--forward-dtype f32")):
        rc, out = run("calib", "run", SMOL, "--text", TEXT, "--observer", "mse", *extra, "-o",
                      os.path.join(tmp, "x.safetensors"))
        ok(rc == 2 and what in out and "BF16 forward" in out,
           "--observer mse %s: refused (the search needs the CPU's BF16 forward)" % what, out)
    ok(not os.path.exists(os.path.join(tmp, "x.safetensors")), "a refused run writes nothing")

    got = {}
    for tokset in ("text", "prompts"):
        for observer in ("mse", "minmax"):
            got[tokset, observer] = check(tmp, g, tokset, observer)
    # minmax over one batch: the moving average never acts, static_minmax's scales
    cal = os.path.join(tmp, "text-static.safetensors")
    rc, out = run("calib", "run", SMOL, "--text", TEXT, "--tokens", str(g["text"]["tokens"]),
                  "-o", cal)
    if ok(rc == 0 and "observer static_minmax" in out, "calib run without --observer: "
          "static_minmax", out) and got["text", "minmax"]:
        ok(scales(cal) == got["text", "minmax"], "minmax over one batch == static_minmax")
        meta = rqtap.st_header(cal)[0]["__metadata__"]
        ok(meta.get("calib_observer") == "static_minmax", "the default records "
           "calib_observer static_minmax")
    # mse moves the scales: a search that changed nothing would pass the peer on ties only
    if got["text", "mse"] and got["text", "minmax"]:
        up = sum(got["text", "mse"][k] > got["text", "minmax"][k] for k in got["text", "mse"])
        ok(up > 0 and all(got["text", "mse"][k] >= got["text", "minmax"][k]
                          for k in got["text", "mse"]),
           "mse's scales are >= static_minmax's (ranges <= the max), %d higher" % up)
    # plan names the calibration's observer next to the weights'
    rc, out = run("plan", SMOL, "--scheme", "nvfp4", "--calib",
                  os.path.join(tmp, "prompts-mse.safetensors"))
    ok(rc == 0 and "input scales mse (--calib's __metadata__)" in out,
       "plan names the input scales' observer (mse)", out)
    # export writes the calibration's observer into input_activations, as oneshot dumps it
    for cal, want in (("prompts-mse", "mse"), ("text-static", "static_minmax")):
        dst = os.path.join(tmp, "exp-" + cal)
        rc, out = run("export", SMOL, dst, "--scheme", "nvfp4", "--calib",
                      os.path.join(tmp, cal + ".safetensors"), "--quiet", timeout=240)
        got = None
        if rc == 0:
            with open(os.path.join(dst, "config.json")) as f:
                g0 = json.load(f)["quantization_config"]["config_groups"]["group_0"]
            got = (g0["input_activations"]["observer"], g0["weights"]["observer"])
        ok(got == (want, "memoryless_minmax"), "export --calib %s: config.json's input_activations "
           "observer %s (the weights' stays memoryless_minmax)" % (cal, want), "%s\n%s" % (got, out))


def main():
    rqtap.init(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="rq-calib-mse-")
    try:
        body(tmp)
    finally:
        rqtap.cleanup(tmp)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
