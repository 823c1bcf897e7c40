#!/usr/bin/env python3
"""calib run / calib diff and --calib as a new user meets them (issue 21 items 1, 5, 6),
on mkckpt's synthetic Laguna:
  - `requantfs --help` lists calib run and calib diff;
  - calib run without -o, calib diff with one file: a usage error saying what is missing;
  - calib diff of two calibrations that share no module (another model's file):
    exit 1, saying so (before: exit 0 and a table of "only A"/"only B");
  - calib run on a machine without a usable GPU does not tell the user to use one;
  - calib run on a text shorter than --tokens warns that it calibrates on fewer;
  - plan's --rule-scheme size lines aligned with the table (the "(this)" mark last);
  - calib run, generate and compare given hf://ORG/NAME: say to mount it or download
    a snapshot (before: "hf://.../config.json: No such file or directory");
  - mount/export of the 08-01 form without --calib, and export with another model's
    calibration: the message names all the ways out (calib fetch, calib run,
    --rule-scheme nvfp4a16|fp8-dynamic).
Stdlib only, no mount. TAP output. Usage: test_calib_cli_review.py REQUANTFS"""
import json, os, struct, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402

TEXT = ("A calibration text of plain words: the ledger lists 3.14159, 2.71828 and 1729, "
        "and the quick brown fox jumps over the lazy dog once more. ") * 20


def write_calib(path, names):
    """A calibration file (calib extract's layout) holding names, scale 100.0 each."""
    hdr = {n: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
           for i, n in enumerate(sorted(names))}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + struct.pack("<f", 100.0) * len(names))


def main():
    rqtap.init(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="rq-calib-cli-")
    try:
        body(tmp)
    finally:
        rqtap.cleanup(tmp)
    return rqtap.finish()


def body(tmp):
    src, cal, txt = (os.path.join(tmp, x) for x in ("src", "cal", "text.txt"))
    with open(txt, "w") as f:
        f.write(TEXT)
    rc, out = run("mkckpt", src, "--calib-out", cal, "--layers", "4", "--experts", "4")
    if not ok(rc == 0, "mkckpt makes the synthetic Laguna and its 07-22 twin", out):
        return
    rc, out = run("--help")
    ok(rc == 0 and "calib run" in out and "calib diff" in out,
       "requantfs --help lists calib run and calib diff", out)

    for cmd in ("mount", "export", "plan"):
        rc, out = run(cmd, "--help")
        i = out.find("  --calib CALIB")
        opt = out[i:i + 300] if i >= 0 else ""
        ok(rc == 0 and "calib run" in opt and "fetch" in opt,
           f"{cmd} --help: --calib names calib fetch and calib run files", opt or out)
    f = os.path.join(tmp, "f.safetensors")
    rc, out = run("calib", "run", src, "--text", txt, "--tokens", "64")
    ok(rc == 2 and "-o FILE is required" in out, "calib run without -o: says -o FILE is "
       "required", out[-400:])
    rc, out = run("calib", "diff", f)
    ok(rc == 2 and "needs two calibration files" in out, "calib diff with one file: says "
       "it needs two", out[-400:])

    ext = os.path.join(tmp, "ext.safetensors")
    rc, out = run("calib", "extract", cal, "-o", ext)
    ok(rc == 0, "calib extract of the twin", out)
    other = os.path.join(tmp, "other.safetensors")
    write_calib(other, ["model.layers.0.self_attn.q_proj.input_global_scale",
                        "model.layers.0.mlp.up_proj.input_global_scale"])
    rc, out = run("calib", "diff", ext, other)
    ok(rc == 1 and "share no module" in out, "calib diff of calibrations of different "
       "models: exit 1, saying they share no module", out[-600:])
    rc, out = run("calib", "diff", ext, ext)
    ok(rc == 0 and "summary:" in out and "min 1.0000" in out and "max 1.0000" in out,
       "calib diff of a file with itself: exit 0, every ratio 1 (the control)", out[-400:])

    short = os.path.join(tmp, "short.txt")
    with open(short, "w") as g:
        g.write("Only a few words here.")
    rc, out = run("calib", "run", src, "--text", short, "--tokens", "400", "-o", f)
    ok(rc == 0 and "warning" in out and "not the 400 of --tokens" in out,
       "calib run on a text shorter than --tokens: warns that it calibrates on fewer", out)
    rc, out = run("calib", "run", src, "--text", txt, "--tokens", "32", "-o", f)
    ok(rc == 0 and "warning" not in out, "calib run on a long enough text: no warning "
       "(the control)", out)

    # the GPU note: only where a GPU is usable (calib run --device cuda tells which)
    rc_gpu, gout = run("calib", "run", src, "--text", txt, "--tokens", "8", "--device",
                       "cuda", "--forward-dtype", "f32", "--quiet", "-o", f)
    rc, out = run("calib", "run", src, "--text", txt, "--tokens", "64", "-o", f)
    note = "observes on the GPU" in out
    ok(rc == 0 and note == (rc_gpu == 0), f"calib run points at the GPU only when one is "
       f"usable (GPU usable: {rc_gpu == 0}, note printed: {note})", out + gout[-300:])

    # the engine's commands given hf://: say what to do, not "config.json: No such file"
    for cmd in (["calib", "run", "hf://org/model@v1", "--text", txt, "-o", f],
                ["generate", "hf://org/model@v1", "--prompt", "hi"],
                ["compare", src, "hf://org/model@v1"],
                ["compare", "hf://org/model@v1", "--schemes", "nvfp4a16", "--text", txt]):
        rc, out = run(*cmd)
        ok(rc == 2 and "requantfs mount hf://org/model@v1 MNT" in out and
           "hf download org/model --revision v1" in out,
           f"{cmd[0]}{' run' if cmd[0] == 'calib' else ''}{' --schemes' if '--schemes' in cmd else ''}"
           f" given hf://: says to mount it or download a snapshot", out)

    # plan's --rule-scheme lines: the chosen one marked, the size column aligned
    rc, out = run("plan", src, "--rule-scheme", "fp8-dynamic")
    rows = [ln for ln in out.splitlines() if "--rule-scheme" in ln or "presented size" in ln]
    cols = {ln.index(" GB ") for ln in rows if " GB " in ln}
    ok(rc == 0 and len(rows) == 4 and len(cols) == 1 and rows[-1].endswith("(this)"),
       "plan --rule-scheme fp8-dynamic: the three sizes in the table's column, this one "
       "marked at the end", out)

    # the 08-01 form without a calibration, or with another model's
    for cmd in (["export", src, os.path.join(tmp, "e1")],
                ["mount", src, os.path.join(tmp, "mnt")]):
        rc, out = run(*cmd)
        ok(rc == 2 and "calib fetch" in out and "calib run" in out and "--rule-scheme" in out,
           f"{cmd[0]} without --calib: names calib fetch, calib run and --rule-scheme", out)
    rc, out = run("export", src, os.path.join(tmp, "e2"), "--calib", other, "--quiet")
    ok(rc == 1 and "calib run" in out and "not in" in out,
       "export with another model's calibration: says calib run can make SRC's own", out)


if __name__ == "__main__":
    sys.exit(main())
