#!/usr/bin/env python3
"""compare --schemes with W4A4 and the Laguna fix's choices (issue 21, items 4 and 6):

  SmolLM2 (real)  --schemes nvfp4a16,nvfp4 with no --calib: calibrates on the tokens
                  AFTER the window (calib run --skip), says so in the header; both rows
                  have finite ppl and KL > 0; the W4A4 row differs from nvfp4a16's (the
                  engine quantizes nvfp4's inputs); the same nvfp4 row with --calib of
                  `calib run --skip W --tokens N` (so the automatic calibration used
                  exactly those tokens); with RQ_ENGINE_ACT_QUANT=0 only the nvfp4 row
                  moves, onto nvfp4a16's (the difference is the inputs' quantization); whose ids are tokens W..W+N-1 of the text and
                  share no position with the window's; --calib-text another file
  Laguna (mkckpt) --schemes all --calib CAL: the three --rule-scheme rows under the
                  column 'rule-scheme'; without --calib: nvfp4a16,fp8-dynamic only
  refusals        Laguna nvfp4 without --calib, w8a16 on Laguna, --calib-text = --text,
                  a text too short to calibrate after the window, --calib with
                  --calib-text, --calib without an nvfp4 row, --calib without
                  --schemes, a missing --calib file

usage: test_compare_w4a4.py REQUANTFS MODEL_DIR    (standard library only; mounts FUSE)
"""
import math, os, re, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402

TEXT = "/usr/share/common-licenses/GPL-3"
OTHER = "/usr/share/common-licenses/Apache-2.0"
W, N = 48, 48          # the evaluation window and the calibration tokens (keeps it < 60 s)


def table(out):
    """{row name: [fields]} of compare --schemes' table (rows after the header)."""
    rows, on = {}, False
    for line in out.splitlines():
        f = line.split()
        if f and f[0] in ("scheme", "rule-scheme") and "presented" in f:
            on = True
            continue
        if on and f:
            rows[f[0]] = f[1:]
    return rows


def quality(r):
    """(ppl, KL mean, KL p99, top-1) of a scheme row: the last four fields."""
    try:
        return tuple(float(x.rstrip("%")) for x in r[-4:])
    except (ValueError, TypeError):
        return None


def good_row(r):
    q = quality(r) if r and len(r) >= 8 else None
    return q is not None and all(math.isfinite(x) for x in q) and q[0] > 1 and q[1] > 0


def ids(path):
    h, _ = rqtap.st_header(path)
    s = h.get("__metadata__", {}).get("calib_token_ids", "")
    return [int(x) for x in s.split(",")] if s else []


def main():
    rqtap.init(sys.argv[1])
    model = sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="rq-cmp-w4a4-")
    try:
        env = dict(os.environ, TMPDIR=os.path.join(tmp, "t"))
        os.mkdir(env["TMPDIR"])
        if ok(os.path.exists(os.path.join(model, "config.json")),
              f"the real model is there ({model})", "run tools/setup-model"):
            smollm(model, tmp, env)
        laguna(tmp, env)
        ok(os.listdir(env["TMPDIR"]) == [], "temporary mounts, caches and calibrations removed",
           os.listdir(env["TMPDIR"]))
        with open("/proc/self/mountinfo") as f:
            left = [ln for ln in f if tmp in ln]
        ok(not left, "nothing left mounted", "".join(left))
    finally:
        rqtap.cleanup(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    return rqtap.finish()


def cmp(*args, env=None):
    p = subprocess.run([rqtap.RQ, "compare", *args, "--threads", "2"], capture_output=True,
                       text=True, env=env, timeout=300)
    return p.returncode, p.stdout, p.stdout + p.stderr


def smollm(model, tmp, env):
    rc, so, out = cmp(model, "--schemes", "nvfp4a16,nvfp4", "--text", TEXT, "--tokens", str(W),
                      "--calib-tokens", str(N), env=env)
    rows = table(so)
    ok(rc == 0, "SmolLM2: compare --schemes nvfp4a16,nvfp4 (no --calib) exits 0", out)
    ok(f"tokens {W}..{W + N - 1} of {TEXT}, the {N} after the evaluated window" in so,
       "the header says nvfp4 was calibrated on the tokens after the window", out)
    ok(good_row(rows.get("nvfp4a16")) and good_row(rows.get("nvfp4")),
       "rows nvfp4a16 and nvfp4 (W4A4): finite ppl, KL > 0", out)
    qa, qw = quality(rows.get("nvfp4a16", [])), quality(rows.get("nvfp4", []))
    ok(qa and qw and qa != qw and qa[0] != qw[0],
       f"the W4A4 row differs from nvfp4a16's (ppl {qw and qw[0]} vs {qa and qa[0]}: "
       "activations quantized)", out)

    # the same tokens by hand: calib run --skip W, and the window's own ids
    cal, win = os.path.join(tmp, "cal.safetensors"), os.path.join(tmp, "win.safetensors")
    rc1, o1 = run("calib", "run", model, "--text", TEXT, "--skip", str(W), "--tokens", str(N),
                  "-o", cal, "--quiet")
    rc2, o2 = run("calib", "run", model, "--text", TEXT, "--tokens", str(W + N), "-o", win,
                  "--quiet")
    c, w = (ids(cal), ids(win)) if rc1 == 0 and rc2 == 0 else ([], [])
    ok(len(c) == N and len(w) == W + N and c == w[W:],
       f"calib run --skip {W} --tokens {N}: the ids of tokens {W}..{W + N - 1} (positions "
       "disjoint from the window's 0..%d)" % (W - 1), o1 + o2 + str((c[:8], w[W:W + 8])))
    rc, out = run("calib", "run", model, "--prompts", TEXT, "--skip", "4", "-o", cal + ".x")
    ok(rc == 2 and "--skip is for --text" in out, "calib run: --skip with --prompts refused", out)
    rc, out = run("calib", "run", model, "--text", OTHER, "--skip", "100000", "-o", cal + ".x")
    ok(rc == 1 and "leaves fewer than 2" in out and OTHER in out and not os.path.exists(cal + ".x"),
       "calib run: --skip past the text's end refused, the file named", out)
    rc, so, out = cmp(model, "--schemes", "nvfp4", "--text", TEXT, "--tokens", str(W), "--calib",
                      cal, env=env)
    q = quality(table(so).get("nvfp4", []))
    ok(rc == 0 and f"{cal} (--calib)" in so and q == qw,
       "--calib with those scales: the very nvfp4 row of the automatic calibration", out)
    # the difference is the activations': with the engine's input quantization off
    # (RQ_ENGINE_ACT_QUANT=0, weight-only numerics) the nvfp4 row moves, nvfp4a16's not
    rc, so, out = cmp(model, "--schemes", "nvfp4a16,nvfp4", "--text", TEXT, "--tokens", str(W),
                      "--calib", cal, env=dict(env, RQ_ENGINE_ACT_QUANT="0"))
    rows = table(so)
    q0a, q0w = quality(rows.get("nvfp4a16", [])), quality(rows.get("nvfp4", []))
    ok(rc == 0 and q0a == qa and q0w and q0w != qw,
       f"RQ_ENGINE_ACT_QUANT=0: nvfp4a16's row unchanged, nvfp4's moves (ppl {q0w and q0w[0]} "
       f"without input quantization, {qw and qw[0]} with)", out)
    ok(q0w == q0a, "and then nvfp4's row equals nvfp4a16's: the same weights, so the W4A4 "
       "row's difference is all the inputs' quantization", out)
    rc, so, out = cmp(model, "--schemes", "nvfp4", "--text", TEXT, "--tokens", str(W),
                      "--calib-text", OTHER, "--calib-tokens", str(N), env=env)
    r = table(so).get("nvfp4")
    ok(rc == 0 and f"the first {N} tokens of {OTHER} (--calib-text)" in so and good_row(r),
       "--calib-text another file: calibrated on its first tokens, a finite row", out)

    # refusals, each before any mount or calibration
    short = os.path.join(tmp, "short.txt")
    with open(short, "w") as f:
        f.write("A short text of a few words, far fewer than the window and calibration need.\n")
    cases = [
        (["--schemes", "nvfp4", "--text", TEXT, "--calib-text", TEXT],
         "is the --text file", "--calib-text = --text (the evaluated tokens)"),
        (["--schemes", "all", "--text", short, "--tokens", "8", "--calib-tokens", "64"],
         "Pass --calib FILE", "a text too short to calibrate after the window: says "
         "--calib / --calib-text"),
        (["--schemes", "nvfp4", "--text", TEXT, "--calib", cal, "--calib-text", OTHER],
         "give one", "--calib and --calib-text together"),
        (["--schemes", "nvfp4a16", "--text", TEXT, "--calib", cal],
         "nvfp4 row only", "--calib without an nvfp4 row"),
        (["--schemes", "nvfp4", "--text", TEXT, "--calib", os.path.join(tmp, "nope")],
         "nope", "a missing --calib file, named"),
    ]
    for args, msg, what in cases:
        rc, so, out = cmp(model, *args, env=env)
        ok(rc == 2 and msg in out and "presented" not in so, f"refused: {what}", out)
    rc, out = run("compare", model, model, "--text", TEXT, "--calib", cal)
    ok(rc == 2 and "are for --schemes" in out, "refused: --calib without --schemes", out)
    ok("calib-text" in run("compare", "--help")[1], "compare --help documents --calib-text")


def laguna(tmp, env):
    src, cal = os.path.join(tmp, "lg"), os.path.join(tmp, "lg-cal")
    rc, out = run("mkckpt", src, "--calib-out", cal)
    if not ok(rc == 0, "mkckpt: the synthetic Laguna 08-01 and its 07-22 scales", out):
        return
    rc, so, out = cmp(src, "--schemes", "all", "--text", TEXT, "--tokens", "64", "--calib", cal,
                      env=env)
    rows = table(so)
    ok(rc == 0 and re.search(r"^rule-scheme\s+presented", so, re.M) and "Laguna 08-01" in so,
       "Laguna: compare --schemes all --calib: the column says rule-scheme", out)
    ok(list(rows) == ["source", "nvfp4", "nvfp4a16", "fp8-dynamic"] and
       all(good_row(rows[k]) for k in ("nvfp4", "nvfp4a16", "fp8-dynamic")),
       "all = the three --rule-scheme choices, each a finite row", out)
    rc, so, out = cmp(src, "--schemes", "nvfp4a16,fp8-dynamic", "--text", TEXT, "--tokens", "64",
                      env=env)
    ok(rc == 0 and list(table(so)) == ["source", "nvfp4a16", "fp8-dynamic"],
       "nvfp4a16,fp8-dynamic need no --calib", out)
    rc, so, out = cmp(src, "--schemes", "all", "--text", TEXT, "--tokens", "64", env=env)
    ok(rc == 2 and "needs --calib CALIB" in out and "presented" not in so,
       "refused: the rule scheme nvfp4 without --calib (as mount)", out)
    rc, so, out = cmp(src, "--schemes", "w8a16", "--text", TEXT, env=env)
    ok(rc == 2 and "Laguna 08-01" in out and "nvfp4, nvfp4a16, fp8-dynamic" in out,
       "refused: w8a16 on Laguna, the choices named", out)


if __name__ == "__main__":
    sys.exit(main())
