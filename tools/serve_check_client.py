#!/usr/bin/env python3
"""tools/serve_check_client.py — the client half of tools/serve-check (stdlib only).

  wait URL --pid PID --timeout S     poll URL/health until 200; exits 1 if PID died first
                                     (prints the seconds it took on stdout)
  chat URL MODEL --out FILE [--concurrency 4] [--max-tokens 32]
                                     the 8 fixed prompts as chat completions, temperature 0,
                                     CONCURRENCY at a time; writes {prompt: answer} as JSON
  compare A.json B.json              exits 1 (printing each difference) unless equal
  error LOGFILE                      the line of a vLLM log that says why it stopped
  ignores MODEL_DIR SCHEME           the --ignore arguments (one a line) the scheme needs on
                                     that model: requantfs's defaults, plus the Linear weights
                                     whose input columns are not a multiple of the scheme's
                                     group (128 for w4a16/w8a16, 16 for nvfp4a16), which
                                     `requantfs mount --scheme` refuses (docs/schemes.md)

Talks only to the URL it is given (tools/serve-check gives http://127.0.0.1:PORT).
"""
import json, os, re, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor

PROMPTS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Write one sentence about the sea.",
    "What is 12 times 12?",
    "Give a synonym for 'happy'.",
    "What does a CPU do?",
    "Translate 'good morning' into Spanish.",
    "List two planets of the solar system.",
]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    # a zombie (our child that exited) counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait(url, pid, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pid and not alive(pid):
            print(f"{time.monotonic() - t0:.1f}")
            sys.stderr.write("server exited before it was ready\n")
            return 1
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    print(f"{time.monotonic() - t0:.1f}")
                    return 0
        except OSError:
            pass
        time.sleep(0.5)
    print(f"{time.monotonic() - t0:.1f}")
    sys.stderr.write(f"not ready after {timeout} s\n")
    return 1


def ask(url, model, prompt, max_tokens):
    body = json.dumps({"model": model, "temperature": 0, "max_tokens": max_tokens, "seed": 0,
                       "messages": [{"role": "user", "content": prompt}]}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    return out["choices"][0]["message"]["content"]


def chat(url, model, out, concurrency, max_tokens, n):
    prompts = PROMPTS[:n]
    t0 = time.monotonic()
    with ThreadPoolExecutor(concurrency) as ex:
        answers = list(ex.map(lambda p: ask(url, model, p, max_tokens), prompts))
    dt = time.monotonic() - t0
    with open(out, "w") as f:
        json.dump(dict(zip(prompts, answers)), f, indent=1, ensure_ascii=False)
    for p, a in zip(prompts, answers):
        print(f"  {p!r} -> {a[:70]!r}{'...' if len(a) > 70 else ''}")
    print(f"  {len(prompts)} requests, {concurrency} at a time: {dt:.1f} s")
    return 0


def compare(a, b):
    A, B = json.load(open(a)), json.load(open(b))
    bad = [p for p in A if A[p] != B.get(p)]
    for p in bad:
        print(f"  DIFFERENT for {p!r}:\n    {A[p]!r}\n    {B.get(p)!r}")
    print(f"  {len(A) - len(bad)}/{len(A)} answers equal")
    return 1 if bad or set(A) != set(B) else 0


def error(log):
    """Why vLLM stopped: the first exception line of the log that is not one of vLLM's
    generic wrappers (the root cause), with the indented reason lines that follow it."""
    try:
        raw = open(log, errors="replace").read().splitlines()
    except OSError:
        print("(no log)")
        return 0
    # "(Worker pid=1) ERROR 12-06 08:27:41 [file.py:953] text" -> "text"
    pre = re.compile(r"^\([\w ]+pid=\d+\)\s+(?:[A-Z]+\s+\d\d-\d\d [\d:]+ \[[^\]]+\] ?)?")
    lines = [pre.sub("", l) for l in raw]
    exc = re.compile(r"^(?:[\w.]+(?:Error|Exception)|NotImplementedError|AssertionError)\b.*")
    generic = ("Engine core initialization failed", "EngineCore failed to start",
               "Failed core proc", "APIServer")
    for i, l in enumerate(lines):
        if exc.match(l) and not any(g in l for g in generic):
            out = [l.strip()]
            for nxt in lines[i + 1:i + 6]:
                if nxt.startswith(" ") and nxt.strip() and not nxt.strip().startswith(("File ", "^")):
                    out.append(nxt.strip())
                else:
                    break
            print(" | ".join(out)[:600])
            return 0
    hits = [l.strip() for l in lines if exc.match(l)]
    print(hits[-1][:400] if hits else "(no error line; last line: %s)" % (raw[-1] if raw else ""))
    return 0


GROUP = {"w4a16": 128, "w8a16": 128, "nvfp4a16": 16, "nvfp4": 16}
DEFAULT_IGNORE = ["lm_head", r"re:.*embed_tokens$", r"re:.*\.gate$"]


def ignores(model, scheme):
    import glob, struct
    g = GROUP.get(scheme)
    bad, seen = {}, {}
    for shard in sorted(glob.glob(os.path.join(model, "*.safetensors"))):
        with open(shard, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
        for name, t in hdr.items():
            if name == "__metadata__" or not name.endswith(".weight") or len(t["shape"]) != 2:
                continue
            mod = name[:-len(".weight")]
            leaf = mod.rsplit(".", 1)[-1]
            if "norm" in leaf or "embed" in leaf or leaf == "lm_head":
                continue
            seen.setdefault(leaf, []).append(mod)
            if g and t["shape"][1] % g:
                bad.setdefault(leaf, []).append(mod)
    out = list(DEFAULT_IGNORE)
    whole = sorted(l for l in bad if len(bad[l]) == len(seen[l]))
    if whole:
        out.append(r"re:.*\.(%s)$" % "|".join(re.escape(l) for l in whole))
    for l in sorted(set(bad) - set(whole)):
        out += bad[l]
    print("\n".join(out))
    return 0


def main(a):
    def opt(name, default=None, conv=str):
        if name in a:
            i = a.index(name)
            v = a[i + 1]
            del a[i:i + 2]
            return conv(v)
        return default
    cmd = a.pop(0) if a else ""
    if cmd == "wait":
        pid, timeout = opt("--pid", 0, int), opt("--timeout", 900, float)
        return wait(a[0], pid, timeout)
    if cmd == "chat":
        out, conc = opt("--out"), opt("--concurrency", 4, int)
        mt, n = opt("--max-tokens", 32, int), opt("--prompts", len(PROMPTS), int)
        return chat(a[0], a[1], out, conc, mt, n)
    if cmd == "compare":
        return compare(a[0], a[1])
    if cmd == "ignores":
        return ignores(a[0], a[1])
    if cmd == "error":
        return error(a[0])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
