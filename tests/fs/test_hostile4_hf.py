#!/usr/bin/env python3
"""Hostile inputs, fourth round, items 1 and 2: an hf:// SRC whose model API a
mirror or proxy fills in (tests/hubsrv.py on 127.0.0.1):

 1. No unverified byte, ever: a file listed with neither an LFS sha256 nor a git
    blob id (a small file; a shard) is refused, naming it, by plan (unless
    --remote-verify none), by export before any byte is fetched, and by mount at
    mount time (--remote-verify file, the default); mount --remote-verify none
    accepts it and serves it.
 2. Sizes are claims: tokenizer.json (~31 KB) listed at 10^12, 10^14 and 9*10^15
    bytes: its read fails EIO within seconds after a handful of requests, with one
    log line naming the file and the listed size (and the server's size when the
    server was asked), the daemon's peak RSS (VmHWM) stays small, and a
    neighbouring file read meanwhile comes promptly and right. Also with
    --remote-verify none at 10^12.

The mount parts need root and /dev/fuse (CI has them); the daemon runs under an
address-space limit, so that a build that allocates by the claimed size fails
the test instead of the machine. TAP. Usage: test_hostile4_hf.py REQUANTFS"""
import json, os, resource, shutil, subprocess, sys, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hfmount  # noqa: E402
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
C = "4" * 39 + "b"
REPO = "hostile/four"
TOK, NEIGH, SHARD = "tokenizer.json", "neighbour.json", "model.safetensors"
AS_LIMIT = 2 << 30          # the daemon's address space (RLIMIT_AS, inherited by the fork)
RSS_MAX = 300 << 20         # its peak resident set, whatever the listed sizes
PROMPT_S = 10               # "promptly": a read of a 31 KB file on 127.0.0.1


def limited(*args, timeout=120):
    """run() with RLIMIT_AS on the command and the daemon it forks."""
    def lim():
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    try:
        p = subprocess.run([rqtap.RQ, *args], capture_output=True, text=True, errors="replace",
                           timeout=timeout, preexec_fn=lim)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        return -999, f"TIMEOUT after {timeout}s: {' '.join(args)}\n{e.stdout}{e.stderr}"


def make_repo(tmp):
    """tests/data/tiny/llama + a 31 KB tokenizer.json and a neighbour."""
    d = os.path.join(tmp, "repo")
    shutil.copytree(os.path.join(ROOT, "tests", "data", "tiny", "llama"), d)
    vocab = {f"tok{i:05d}": i for i in range(2300)}
    with open(os.path.join(d, TOK), "w") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": vocab}}, f)
    with open(os.path.join(d, NEIGH), "w") as f:
        json.dump({"neighbour": list(range(20000))}, f)
    return d


def read_timed(path, seconds=60):
    """(kind, value, seconds): kind ok (bytes), err (errno) or hang."""
    res = ["hang", None]
    t = time.monotonic()

    def go():
        try:
            with open(path, "rb", buffering=0) as f:    # 1 MiB at a time: never st_size
                b = bytearray()
                while len(b) < (64 << 20) and (piece := f.read(1 << 20)):
                    b += piece
                res[:] = ["ok", bytes(b)]
        except OSError as e:
            res[:] = ["err", e.errno]
    th = threading.Thread(target=go, daemon=True)
    th.start()
    th.join(seconds)
    return res[0], res[1], time.monotonic() - t


def daemon_pid(mnt):
    return int(hfmount.status(mnt).get("pid", 0))


def vm_hwm(pid):
    """The process's peak resident set in bytes (0: not found)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def unverifiable(tmp, hub, ep, root):
    """Item 1."""
    hub.reset(no_blob={TOK})
    spec = f"hf://{REPO}"
    rc, out = run("plan", spec, "--endpoint", ep, "--scheme", "nvfp4a16")
    ok(rc == 1 and TOK in out and "cannot be verified" in out and "--remote-verify none" in out,
       f"plan: {TOK} listed with no sha256 and no blob id is refused, named, saying "
       "--remote-verify none", out)
    rc, out = run("plan", spec, "--endpoint", ep, "--scheme", "nvfp4a16", "--remote-verify", "none")
    ok(rc == 0, "plan --remote-verify none: planned (the user accepts unverified bytes)", out)
    dst = os.path.join(tmp, "out-unverified")
    hub.reset(no_blob={TOK})
    rc, out = run("export", spec, dst, "--endpoint", ep, "--scheme", "nvfp4a16", "--no-cache",
                  "--quiet")
    ok(rc == 1 and TOK in out and "cannot be verified" in out and not hub.ranges
       and not os.path.exists(dst),
       f"export refuses it before any byte is fetched ({len(hub.ranges)} ranges)", out)
    if not root:
        return
    mnt = os.path.join(tmp, "mnt-unverified")
    for names, what in (({TOK}, "a small file"), ({SHARD}, "the shard (requantized)")):
        hub.reset(no_blob=set(names), no_lfs=set(names))
        rc, out = hfmount.mount(spec, mnt, os.path.join(tmp, "cache-u"), ep, "--scheme",
                                "nvfp4a16")
        name = next(iter(names))
        mounted = daemon_pid(mnt) != 0
        ok(rc == 1 and name in out and "cannot be verified" in out and
           "--remote-verify none" in out and not mounted,
           f"mount (--remote-verify file, the default) refuses {what} it cannot verify, at "
           "mount time, naming it", out)
        if mounted:
            run("umount", mnt, timeout=60)
    hub.reset(no_blob={TOK})
    rc, out = hfmount.mount(spec, mnt, os.path.join(tmp, "cache-u2"), ep, "--scheme", "nvfp4a16",
                            "--remote-verify", "none")
    if ok(rc == 0, "mount --remote-verify none accepts it", out):
        kind, val, _ = read_timed(os.path.join(mnt, TOK))
        with open(os.path.join(hub.repos[REPO]["commits"][C], TOK), "rb") as f:
            want = f.read()
        ok(kind == "ok" and val == want, f"{TOK} served (unverified, as asked)", f"{kind}")
        run("umount", mnt, timeout=60)


def claimed(tmp, hub, ep, size, verify, k):
    """Item 2: tokenizer.json listed at size bytes."""
    repo_dir = hub.repos[REPO]["commits"][C]
    real = os.path.getsize(os.path.join(repo_dir, TOK))
    mnt = os.path.join(tmp, f"mnt-size{k}")
    os.makedirs(mnt, exist_ok=True)
    rqtap.MOUNTS.append(mnt)
    log = os.path.join(tmp, f"size{k}.log")
    hub.reset(claim_size={TOK: size})
    what = f"{TOK} listed at {size} bytes (it has {real}), --remote-verify {verify}"
    rc, out = limited("mount", f"hf://{REPO}", mnt, "--cache", os.path.join(tmp, f"cache-s{k}"),
                      "--endpoint", ep, "--scheme", "nvfp4a16", "--log", log,
                      "--remote-verify", verify)
    if not ok(rc == 0, f"mount: {what}", out):
        return
    pid = daemon_pid(mnt)
    bad = {}

    def bad_read():
        bad["r"] = read_timed(os.path.join(mnt, TOK), 120)
    th = threading.Thread(target=bad_read, daemon=True)
    th.start()
    time.sleep(0.05)
    kind, val, dt = read_timed(os.path.join(mnt, NEIGH), 60)
    with open(os.path.join(repo_dir, NEIGH), "rb") as f:
        want = f.read()
    ok(kind == "ok" and val == want and dt < PROMPT_S,
       f"{what}: a neighbouring file read meanwhile: right, in {dt:.2f} s", f"{kind} {dt:.2f}")
    th.join(125)
    bkind, bval, bdt = bad.get("r", ("hang", None, 120))
    ok(bkind == "err" and bval == 5 and bdt < PROMPT_S,
       f"{what}: its read fails EIO in {bdt:.2f} s", f"{bkind} {bval} {bdt:.2f}")
    n_req = sum(1 for r in hub.ranges if r[1] == TOK)
    ok(n_req <= 40, f"{what}: {n_req} requests for it (not one per claimed chunk)",
       "\n".join(map(str, hub.ranges[:20])))
    kind2, val2, dt2 = read_timed(os.path.join(mnt, TOK), 60)
    ok(kind2 == "err" and val2 == 5 and dt2 < PROMPT_S,
       f"{what}: a second read fails EIO at once ({dt2:.2f} s)", f"{kind2} {val2}")
    hwm = vm_hwm(pid)
    ok(0 < hwm <= RSS_MAX, f"{what}: the daemon's peak RSS {hwm >> 20} MiB "
       f"(<= {RSS_MAX >> 20} MiB)", f"pid {pid} VmHWM {hwm}")
    run("umount", mnt, timeout=60)
    text = hfmount.log_text(log)
    lines = [ln for ln in text.splitlines() if TOK in ln]
    server_said = size < (1 << 40)       # asked: the server's size named too
    ok(len(lines) == 1 and str(size) in lines[0] and (not server_said or str(real) in lines[0]),
       f"{what}: one log line naming it, the listed size"
       f"{' and the server' + chr(39) + 's' if server_said else ''}",
       f"{len(lines)} lines:\n" + "\n".join(lines[:6]) + "\n" + text[-800:])


def body(T, hub, ep):
    tmp = T["tmp"]
    root = os.geteuid() == 0 and os.path.exists("/dev/fuse")
    hub.repos[REPO] = {"refs": {"main": C}, "commits": {C: make_repo(tmp)}}
    unverifiable(tmp, hub, ep, root)
    if not root:
        print(f"ok {rqtap.n + 1} # SKIP mounts (item 2, item 1 at mount): need root and "
              "/dev/fuse (as CI has)")
        rqtap.n += 1
    else:
        cases = [(10**12, "file"), (10**14, "file"), (9 * 10**15, "file"), (10**12, "none")]
        for k, (size, verify) in enumerate(cases):
            claimed(tmp, hub, ep, size, verify, k)


if __name__ == "__main__":
    sys.exit(hfmount.main("rq-hostile4-", body, root=False, ckpt=False))
