#!/usr/bin/env python3
"""--fast, the CPU engine's fast mode (issue 33 item 2), through the commands
that take it, on the synthetic dense Laguna (mkckpt --dense):

  generate --fast          runs, says 'fast mode' on stderr; refused with --device cuda
  compare A A --fast       B on the fast mode, A the oracle: ppl within 1e-5,
                           KL mean < 1e-6, top-1 >= 99 %; without --fast KL is 0
  calib run --fast         scales within 1e-4 of the oracle's, __metadata__
                           calib_device cpu-fast; refused with --device cuda
  bench engine --fast      the oracle-vs-fast table, a row with both figures

usage: test_fast_cli.py REQUANTFS            (standard library only)
"""
import json, os, re, shutil, struct, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap
from rqtap import ok, run

TEXT = "/usr/share/common-licenses/GPL-3"


def scales(path):
    """{name: float} of a calibration file (F32 [1] tensors) and its __metadata__."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    meta = h.pop("__metadata__", {})
    return {k: struct.unpack("<f", data[v["data_offsets"][0]:v["data_offsets"][0] + 4])[0]
            for k, v in h.items()}, meta


def main():
    rqtap.init(sys.argv[1])
    work = tempfile.mkdtemp(prefix="rq-fastcli-")
    try:
        a = os.path.join(work, "a")
        rc, out = run("mkckpt", a, "--dense")
        if not ok(rc == 0, "mkckpt --dense", out):
            return rqtap.finish()

        rc, out = run("generate", a, "--prompt", "Hello", "-n", "8", "--temperature", "0",
                      "--device", "cpu", "--fast")
        ok(rc == 0 and "fast mode" in out, "generate --fast: runs, stderr says fast mode", out)
        rc, out = run("generate", a, "--prompt", "Hello", "--device", "cuda", "--fast")
        ok(rc == 2 and "--fast" in out and "--device cpu" in out,
           "generate --fast --device cuda: refused, naming --fast and what to do", out)

        rc, out = run("compare", a, a, "--text", TEXT, "--tokens", "200", "--fast")
        m = re.search(r"^ppl A (\S+) B (\S+)$", out, re.M)
        k = re.search(r"KL\(A\|\|B\) mean (\S+) .*top-1 (\S+)%", out)
        good = rc == 0 and m and k and abs(float(m.group(2)) / float(m.group(1)) - 1) <= 1e-5 \
            and float(k.group(1)) < 1e-6 and float(k.group(2)) >= 99
        ok(good, "compare A A --fast: ppl within 1e-5, KL mean < 1e-6, top-1 >= 99 %", out)
        ok(m and k and float(k.group(1)) > 0,
           "compare A A --fast: B is not the oracle (KL > 0; A A alone gives 0)", out)

        fo, ff = os.path.join(work, "o.safetensors"), os.path.join(work, "f.safetensors")
        rc1, out1 = run("calib", "run", a, "--text", TEXT, "--tokens", "128", "-o", fo,
                        "--device", "cpu", "--quiet")
        rc2, out2 = run("calib", "run", a, "--text", TEXT, "--tokens", "128", "-o", ff,
                        "--device", "cpu", "--quiet", "--fast")
        if ok(rc1 == 0 and rc2 == 0, "calib run, with and without --fast", out1 + out2):
            so, mo = scales(fo)
            sf, mf = scales(ff)
            worst = max(abs(sf[n] / so[n] - 1) for n in so) if so.keys() == sf.keys() else 1
            ok(so and worst <= 1e-4, f"calib run --fast: the same modules, scales within 1e-4 "
               f"(worst {worst:.2e})", f"{len(so)} / {len(sf)} modules")
            ok(mf.get("calib_device") == "cpu-fast" and mo.get("calib_device") == "cpu",
               "__metadata__ calib_device: cpu-fast with --fast, cpu without", f"{mo} {mf}"[:600])
        rc, out = run("calib", "run", a, "--text", TEXT, "-o", ff, "--device", "cuda", "--fast")
        ok(rc == 2 and "--fast" in out, "calib run --fast --device cuda: refused, naming --fast", out)

        rc, out = run("bench", "engine", "--fast", "--prompt-tokens", "16", "--decode-tokens", "4",
                      timeout=600)
        row = re.search(r"as loaded\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", out)
        ok(rc == 0 and "oracle vs fast mode" in out and row and float(row.group(2)) > 0
           and float(row.group(5)) > 0, "bench engine --fast: a row with oracle and fast figures", out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
