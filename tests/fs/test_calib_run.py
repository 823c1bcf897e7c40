#!/usr/bin/env python3
"""calib run and calib diff (issue 21 items 1 and 5) on mkckpt's synthetic Laguna:
calib run over real text writes a calibration file in calib extract's layout (F32 [1]
scales, canonical header, token ids in __metadata__, read by the safetensors library)
that export --calib takes, scales landing in the export bit for bit; --all-experts
only lowers expert scales (more tokens, larger amax) and leaves the rest equal; experts
no token reached get their layer's fallback, counted; --prompts; the refusals (no text,
both modes, a missing file, a dense model with --all-experts, a model without a
tokenizer, a calibration file of a model without the rule's modules); calib diff
against the 07-22 twin and against itself. TAP output. Usage: test_calib_run.py REQUANTFS"""
import os, re, struct, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TEXT = ("Calibration needs real words: the quick brown fox jumps over the lazy dog, "
        "while a ledger of numbers 3.14159, 2.71828 and 1729 goes by. ") * 30


def f32(b):
    return struct.unpack("<f", b)[0]


def scales(path):
    return {k[:-len(".input_global_scale")]: f32(v[2]) for k, v in rqtap.st_tensors(path).items()}


def main():
    rqtap.init(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="rq-calib-run-")
    try:
        body(tmp)
    finally:
        rqtap.cleanup(tmp)
    return rqtap.finish()


def body(tmp):
    src, cal, txt = (os.path.join(tmp, x) for x in ("src", "cal", "text.txt"))
    with open(txt, "w") as f:
        f.write(TEXT)
    rc, out = run("mkckpt", src, "--calib-out", cal)
    if not ok(rc == 0, "mkckpt makes the synthetic Laguna and its 07-22 twin", out):
        return
    f = os.path.join(tmp, "f.safetensors")
    rc, out = run("calib", "run", src, "--text", txt, "--tokens", "150", "-o", f)
    ok(rc == 0 and "scales from 150 tokens" in out, "calib run --text writes scales", out)
    ok("the calibration pass: 150 tokens" in out and "bench:" not in out,
       "calib run gives the pass's rate, and no bench without --bench", out)
    rc, out = run("calib", "run", src, "--text", txt, "--tokens", "150", "--bench", "-o", f)
    ok(rc == 0 and "bench: observing" in out and "prefill of the same model" in out
       and "the first 150 tokens as one prefill" in out,
       "calib run --bench times the same tokens as one prefill (observing vs prefill tok/s)", out)
    h, _ = rqtap.st_header(f)
    meta = h.get("__metadata__", {})
    ids = meta.get("calib_token_ids", "")
    ok(meta.get("requantfs") == "calib" and len(ids.split(",")) == 150 and ";" not in ids,
       "the 150 token ids are in __metadata__", str(meta)[:400])
    t = rqtap.st_tensors(f)
    ok(all(k.endswith(".input_global_scale") and v[0] == "F32" and v[1] == [1]
           for k, v in t.items()), "every tensor is <module>.input_global_scale F32 [1]")
    s = scales(f)
    ok(all(0 < x < 3.4e38 for x in s.values()), "every scale is finite and positive")
    names = set(s)
    want = {"model.layers.40.mlp.experts.0.gate_proj", "model.layers.47.mlp.experts.7.down_proj",
            "model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.g_proj",
            "model.layers.5.mlp.shared_expert.up_proj"}
    ok(want <= names and not any("lm_head" in k or "embed" in k or k.endswith(".gate")
                                 for k in names),
       "attention, shared and routed experts observed; lm_head, embedding, routers not",
       str(sorted(want - names)))
    ok(rqtap.st_agrees(f, ("F32",)), "the safetensors library reads the file the same")
    q = (s["model.layers.0.self_attn.q_proj"], s["model.layers.0.self_attn.k_proj"],
         s["model.layers.0.self_attn.v_proj"])
    ok(q[0] == q[1] == q[2], "q/k/v of a layer share their input, hence their scale", str(q))

    # export --calib takes it; its scales land in the export bit for bit
    dst = os.path.join(tmp, "dst")
    rc, out = run("export", src, dst, "--calib", f, "--quiet")
    ok(rc == 0, "export --calib takes the calib run file", out)
    got = {}
    for fn in sorted(os.listdir(dst)) if rc == 0 else []:
        if fn.endswith(".safetensors"):
            for k, v in rqtap.st_tensors(os.path.join(dst, fn)).items():
                if k.endswith(".input_global_scale") and re.search(r"\.layers\.4[0-7]\.mlp\.experts\.", k):
                    got[k] = v[2]
    ft = rqtap.st_tensors(f)
    ok(len(got) == 8 * 8 * 3 and all(ft[k][2] == b for k, b in got.items()),
       "the re-quantized experts of layers 40-47 carry calib run's scales bit for bit",
       "%d scales" % len(got))

    # --all-experts: every token through every expert for the observer
    fa = os.path.join(tmp, "fa.safetensors")
    rc, out = run("calib", "run", src, "--text", txt, "--tokens", "150", "--all-experts",
                  "-o", fa, "--quiet")
    ok(rc == 0, "calib run --all-experts", out)
    if rc == 0:
        sa = scales(fa)
        exp = [k for k in s if ".experts." in k]
        rest = [k for k in s if ".experts." not in k]
        ok(set(sa) == set(s) and all(sa[k] <= s[k] for k in exp)
           and any(sa[k] < s[k] for k in exp), "--all-experts lowers expert scales only "
           "(amax over more tokens), some strictly")
        ok(all(sa[k] == s[k] for k in rest), "--all-experts keeps the forward: every other "
           "scale equal bit for bit")

    # experts no token reached: few tokens, many experts, top-1
    src2 = os.path.join(tmp, "src2")
    rc, out = run("mkckpt", src2, "--layers", "4", "--experts", "32", "--top-k", "1")
    f2 = os.path.join(tmp, "f2.safetensors")
    rc, out = run("calib", "run", src2, "--text", txt, "--tokens", "6", "-o", f2)
    m = re.search(r"(\d+) routed-expert inputs saw no token", out)
    ok(rc == 0 and m and int(m.group(1)) > 0, "unreached experts are counted in the summary", out)
    if rc == 0:
        s2 = scales(f2)
        good = True
        for layer in range(4):
            for p in ("gate_proj", "up_proj", "down_proj"):
                v = [s2.get(f"model.layers.{layer}.mlp.experts.{e}.{p}") for e in range(32)]
                if None in v:
                    continue
                good &= min(v) == max(v) or v.count(min(v)) > 1   # fallback = the layer's min scale
        ok(good, "an unreached expert gets its layer's largest amax (the smallest scale)")
        rc, out = run("export", src, os.path.join(tmp, "dst2"), "--calib", f2, "--quiet")
        ok(rc != 0 and "model.layers.40" in out and "not in" in out,
           "a calibration of a model without layers 40-47 is refused by export, naming the scale",
           out)

    # --prompts: one sequence a line
    pf, fp = os.path.join(tmp, "prompts.txt"), os.path.join(tmp, "fp.safetensors")
    with open(pf, "w") as fh:
        fh.write("The first prompt.\n\nA second one, longer than the first.\nThird.\n")
    rc, out = run("calib", "run", src, "--prompts", pf, "-o", fp)
    h, _ = rqtap.st_header(fp) if rc == 0 else ({}, 0)
    ok(rc == 0 and "3 sequences" in out and h["__metadata__"]["calib_token_ids"].count(";") == 2,
       "calib run --prompts: three sequences, separated in the metadata", out)

    # refusals
    x = os.path.join(tmp, "x.safetensors")
    rc, out = run("calib", "run", src, "-o", x)
    ok(rc == 2 and "--text FILE or --prompts FILE" in out, "refused: no calibration text", out)
    rc, out = run("calib", "run", src, "--text", txt, "--prompts", pf, "-o", x)
    ok(rc == 2, "refused: --text and --prompts together", out)
    rc, out = run("calib", "run", src, "--text", os.path.join(tmp, "nope.txt"), "-o", x)
    ok(rc == 1 and "nope.txt" in out, "refused: a missing text file, named", out)
    tiny = os.path.join(ROOT, "tests", "data", "tiny", "llama")
    rc, out = run("calib", "run", tiny, "--text", txt, "--all-experts", "-o", x)
    ok(rc == 2 and "no routed experts" in out, "refused: --all-experts on a dense model", out)
    rc, out = run("calib", "run", tiny, "--text", txt, "-o", x)
    ok(rc == 1 and "tokenizer" in out, "refused: a model without a tokenizer", out)
    rc, out = run("calib", "run", src, "--text", txt, "-o", os.path.join(tmp, "no", "dir", "f"))
    ok(rc == 1 and not os.path.exists(x), "refused: an output path that cannot be written", out)

    # calib diff
    rc, out = run("calib", "diff", f, f)
    ok(rc == 0 and "median 1.0000" in out and "min 1.0000" in out and "max 1.0000" in out
       and "0 only in A" in out, "calib diff of a file with itself: every ratio 1", out[-400:])
    rc, out = run("calib", "diff", f, cal)
    m = re.search(r"summary: (\d+) modules in both.*?(\d+) only in A.*?(\d+) only in B", out)
    nexp = sum(1 for k in s if ".experts." in k)
    ok(rc == 0 and m and int(m.group(1)) == nexp and int(m.group(2)) == len(s) - nexp
       and int(m.group(3)) == 0, "calib diff against the 07-22 twin: its experts compared, the "
       "rest only in A", out[-400:])
    e = "model.layers.40.mlp.experts.3.up_proj"
    line = [l for l in out.splitlines() if l.startswith(e + " ")]
    ok(line and abs(float(line[0].split()[3]) - s[e] / float(line[0].split()[2])) < 1e-3,
       "a diff line shows A, B and A/B", "\n".join(line))
    rc, out = run("calib", "diff", f, os.path.join(tmp, "nope"))
    ok(rc == 1 and "nope" in out, "calib diff refuses a missing file, named", out)


if __name__ == "__main__":
    sys.exit(main())
