#!/usr/bin/env python3
"""tools/llama_compare_report.py — the table of tools/llama-compare (stdlib only).

  llama_compare_report.py RUNDIR --prompt P --gen G --threads T --reps R
                          [--load-start "1.0 2.0 3.0"] [--date D] [--cpu NAME] [--fast]

RUNDIR holds one round's outputs per file, as tools/llama-compare writes them:

  r<K>-<fmt>-ours.txt    `requantfs bench engine --model M ...` (its "prefill N tokens: X tok/s"
                         and "decode N tokens: X tok/s" lines, each already best of 3)
  r<K>-<fmt>-llama.json  `llama-bench ... -o json` (one object with n_prompt=P, n_gen=0 and one
                         with n_prompt=0, n_gen=G; their samples_ts, one per repetition)

with <fmt> one of bf16, nvfp4, fp8. Prints the machine (CPU model, cores, load average at the
start and now, date) and one markdown table, each figure the best over the rounds (and over
llama-bench's repetitions): prefill P tok/s and decode G tok/s, ours / llama.cpp, and the ratio.
--fast: the outputs are `bench engine --fast`'s; our figures are then its fast mode's (the
"oracle vs fast" table's row), the oracle's beside them in the table.
A file that is missing, or says something else than expected, is named on stderr: exit 1.
"""
import argparse, glob, json, os, re, sys, time

FORMATS = [  # (fmt, our side, llama.cpp's side)
    ("bf16", "BF16 (the HF directory)", "BF16"),
    ("nvfp4", "NVFP4 (`--scheme nvfp4a16` mount)", "Q4_0"),
    ("fp8", "FP8 (`--scheme fp8-dynamic` mount)", "Q8_0"),
]
OURS = re.compile(r"^\s*(?:\S+\s+)?(prefill|decode)\s+(\d+) tokens:\s+([0-9.]+) tok/s", re.M)
# bench engine --fast: "as loaded  prefill/s fast x  decode/s fast x"
FAST = re.compile(r"^\s*as loaded\s+([0-9.]+)\s+([0-9.]+)\s+[0-9.]+\s+([0-9.]+)\s+([0-9.]+)\s", re.M)


class Bad(Exception):
    pass


def ours(path, p, g, fast=False):
    """(prefill tok/s, decode tok/s) of one `requantfs bench engine` output (fast: of its fast
    mode, then the oracle's prefill and decode)."""
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        raise Bad(f"{path}: {e.strerror}")
    got = {}
    for kind, n, ts in OURS.findall(text):
        got[kind] = (int(n), float(ts))
    for kind, want in (("prefill", p), ("decode", g)):
        if kind not in got:
            raise Bad(f"{path}: no '{kind} N tokens: X tok/s' line (did requantfs bench engine fail? "
                      "its output is this file)")
        if got[kind][0] != want:
            raise Bad(f"{path}: {kind} of {got[kind][0]} tokens, expected {want}")
    if not fast:
        return got["prefill"][1], got["decode"][1]
    m = FAST.search(text)
    if not m:
        raise Bad(f"{path}: no 'as loaded' row of bench engine --fast's oracle-vs-fast table")
    return float(m.group(2)), float(m.group(4)), float(m.group(1)), float(m.group(3))


def llama(path, p, g):
    """(prefill tok/s, decode tok/s) of one `llama-bench -o json` output: the best repetition."""
    try:
        with open(path, encoding="utf-8") as f:
            runs = json.load(f)
    except OSError as e:
        raise Bad(f"{path}: {e.strerror}")
    except ValueError as e:
        raise Bad(f"{path}: not llama-bench's JSON ({e}); did llama-bench fail? its stderr is "
                  f"{os.path.splitext(path)[0]}.err")
    if not isinstance(runs, list):
        raise Bad(f"{path}: not llama-bench's JSON (expected a list of runs)")

    def best(n_prompt, n_gen, what):
        for r in runs:
            if isinstance(r, dict) and r.get("n_prompt") == n_prompt and r.get("n_gen") == n_gen:
                s = r.get("samples_ts") or [r.get("avg_ts")]
                if not all(isinstance(x, (int, float)) for x in s):
                    raise Bad(f"{path}: {what}: samples_ts is not a list of numbers")
                return max(s)
        raise Bad(f"{path}: no run with n_prompt={n_prompt}, n_gen={n_gen} ({what})")
    return best(p, 0, f"pp{p}"), best(0, g, f"tg{g}")


def cpu_model():
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def loadavg():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "unknown"


def main(argv):
    ap = argparse.ArgumentParser(prog="llama_compare_report.py")
    ap.add_argument("rundir")
    ap.add_argument("--prompt", type=int, required=True)
    ap.add_argument("--gen", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, required=True)
    ap.add_argument("--load-start", default=None)
    ap.add_argument("--date", default=time.strftime("%Y-%m-%d %H:%M %Z"))
    ap.add_argument("--cpu", default=None)
    ap.add_argument("--fast", action="store_true")
    a = ap.parse_args(argv)
    P, G = a.prompt, a.gen
    rounds = sorted({int(m.group(1)) for f in glob.glob(os.path.join(a.rundir, "r*-*"))
                     for m in [re.match(r"r(\d+)-", os.path.basename(f))] if m})
    if not rounds:
        print(f"llama_compare_report: {a.rundir}: no round outputs (r<K>-<fmt>-ours.txt)",
              file=sys.stderr)
        return 1
    rows, bad = [], []
    for fmt, us, them in FORMATS:
        best = [0.0] * 6    # ours prefill, decode; llama.cpp prefill, decode; (--fast) oracle's
        for k in rounds:
            base = os.path.join(a.rundir, f"r{k}-{fmt}")
            try:
                o, l = ours(base + "-ours.txt", P, G, a.fast), llama(base + "-llama.json", P, G)
            except Bad as e:
                bad.append(str(e))
                continue
            o = o + (0.0, 0.0) if len(o) == 2 else o
            best = [max(x, y) for x, y in zip(best, o[:2] + l + o[2:])]
        rows.append((us, them, best))
    if bad:
        for b in bad:
            print(f"llama_compare_report: {b}", file=sys.stderr)
        return 1
    print(f"machine: {a.cpu or cpu_model()}, {os.cpu_count()} cores; load average "
          f"{a.load_start + ' at the start, ' if a.load_start else ''}{loadavg()} at the end")
    print(f"date: {a.date}; {a.threads} threads both; best of {len(rounds)} interleaved rounds "
          f"(ours: best of bench engine's 3 runs; llama.cpp: best of llama-bench's {a.reps} repetitions)")
    print()
    ours_is = "ours (fast mode)" if a.fast else "ours"
    print(f"| ours / llama.cpp | prefill {P} tok/s: {ours_is} / llama.cpp | ratio "
          f"| decode {G} tok/s: {ours_is} / llama.cpp | ratio |"
          + (" oracle prefill / decode (same runs) |" if a.fast else ""))
    print("|---|---|---|---|---|" + ("---|" if a.fast else ""))
    for us, them, (op, od, lp, ld, xp, xd) in rows:
        rp = f"{op / lp:.2f}" if lp > 0 else "—"
        rd = f"{od / ld:.2f}" if ld > 0 else "—"
        print(f"| {us} / {them} | {op:.1f} / {lp:.1f} | {rp} | {od:.1f} / {ld:.1f} | {rd} |"
              + (f" {xp:.1f} / {xd:.1f} |" if a.fast else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
