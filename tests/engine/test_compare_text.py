#!/usr/bin/env python3
"""compare on real text (issue 18, item 6), on the synthetic Laguna (mkckpt):

  compare A A --text FILE          ppl A == ppl B, KL 0, top-1 100 %
  compare A B --text FILE          B = export --scheme fp8-dynamic of A: KL > 0,
                                   ppl A as with A alone (A is the reference)
  compare A --schemes LIST --text  a table row per scheme through a temporary
                                   mount; a scheme A's shapes refuse gets a row
                                   saying so; no mount and no temporary
                                   directory is left behind (TMPDIR checked)
  refusals                         --schemes without --text, an unknown scheme,
                                   a missing text file (named)

usage: test_compare_text.py REQUANTFS            (standard library only)
"""
import os, re, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap
from rqtap import ok, run

TEXT = "/usr/share/common-licenses/GPL-3"


def main():
    rqtap.init(sys.argv[1])
    work = tempfile.mkdtemp(prefix="rq-cmptext-")
    try:
        a = os.path.join(work, "a")
        rc, out = run("mkckpt", a, "--dense")
        if not ok(rc == 0, "mkckpt --dense", out):
            return rqtap.finish()
        rc, out = run("compare", a, a, "--text", TEXT, "--tokens", "200")
        m = re.search(r"^ppl A (\S+) B (\S+)$", out, re.M)
        ok(rc == 0 and m and m.group(1) == m.group(2), "compare A A --text: one 'ppl A x B y' line, equal", out)
        ok(re.search(r"KL\(A\|\|B\) mean 0\.000e\+00 .*top-1 100\.00%", out), "A vs A: KL 0, top-1 100 %", out)
        ok("200 tokens (199 predicted)" in out, "the window is --tokens long", out)
        ppl_a = m.group(1) if m else None

        b = os.path.join(work, "b")
        rc, out = run("export", a, b, "--scheme", "fp8-dynamic", timeout=300)
        ok(rc == 0, "export --scheme fp8-dynamic", out)
        rc, out = run("compare", a, b, "--text", TEXT, "--tokens", "200")
        m = re.search(r"^ppl A (\S+) B (\S+)$", out, re.M)
        k = re.search(r"KL\(A\|\|B\) mean (\S+) p99 (\S+)", out)
        ok(rc == 0 and m and k and float(k.group(1)) > 0, "A vs its fp8 export: KL > 0", out)
        ok(m and m.group(1) == ppl_a, "ppl A is A's alone, whatever B is", out)

        tmp = os.path.join(work, "tmp")
        os.mkdir(tmp)
        env = dict(os.environ, TMPDIR=tmp)
        p = subprocess.run([rqtap.RQ, "compare", a, "--schemes", "fp8-dynamic,w8a16,nvfp4a16", "--text", TEXT,
                            "--tokens", "128"], capture_output=True, text=True, env=env, timeout=600)
        out = p.stdout + p.stderr
        rows = {l.split()[0]: l for l in p.stdout.splitlines() if l.split()}
        ok(p.returncode == 0, "compare --schemes exits 0", out)
        src = rows.get("source", "")
        ok(re.search(r"\d+\.\d{4}", src), "the table has the source row with its ppl", out)
        for s in ("fp8-dynamic", "nvfp4a16"):
            r = rows.get(s, "").split()
            good = len(r) >= 8 and float(r[-4]) > 0 and r[-1].endswith("%")
            ok(good, f"row {s}: presented, cache, ppl, KL mean/p99, top-1", out)
        ok("not mountable" in rows.get("w8a16", "") and "multiple of its group size" in p.stderr,
           "w8a16 (hidden 64 < group 128): a row that says so, the mount's reason on stderr", out)
        ok(os.listdir(tmp) == [], "temporary mounts and caches removed", os.listdir(tmp))
        with open("/proc/self/mountinfo") as f:
            left = [l for l in f if tmp in l]
        ok(not left, "nothing left mounted", "".join(left))

        rc, out = run("compare", a, "--schemes", "all")
        ok(rc == 2 and "--text" in out, "--schemes without --text: usage error naming --text", out)
        rc, out = run("compare", a, "--schemes", "nvfp5", "--text", TEXT)
        ok(rc == 2 and "nvfp5" in out, "an unknown scheme is named", out)
        rc, out = run("compare", a, a, "--text", os.path.join(work, "missing.txt"))
        ok(rc == 1 and "missing.txt" in out, "a missing text file is named", out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
