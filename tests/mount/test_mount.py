#!/usr/bin/env python3
"""Real FUSE mounts of mkckpt checkpoints, compared byte for byte with
`requantfs export` of the same source. TAP output.

Usage: test_mount.py REQUANTFS [GROUP...]
Groups: basic hub concurrency prefetch safeopen faults bad (default: all).
Needs root or a usable /dev/fuse + fusermount3; every mount made here is
unmounted at exit, also on failure."""
import atexit, errno, json, mmap, os, re, shutil, signal, struct, subprocess, sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402  (tests/rqtap.py: TAP, run, mounts cleaned up at exit)
from rqtap import ok, run, mounted, daemon_pid, alive, MOUNTS, STOPPED, TIMEOUT  # noqa: E402

rqtap.init(sys.argv[1])
RQ = rqtap.RQ
GROUPS = sys.argv[2:] or ["basic", "hub", "concurrency", "prefetch", "safeopen", "faults", "bad"]
TMPFS = []         # tmpfs mounts to clean up


def cleanup(tmp=None):
    """rqtap.cleanup, the tmpfs mounts too (before tmp, which holds them, is removed)."""
    rqtap.cleanup()
    for t in reversed(TMPFS):
        subprocess.run(["umount", "-l", t], capture_output=True)
    TMPFS.clear()
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


def mount(src, mnt, cal, cache, *extra, expect_ok=True):
    os.makedirs(mnt, exist_ok=True)
    MOUNTS.append(os.path.abspath(mnt))
    rc, out = run("mount", src, mnt, "--calib", cal, "--cache", cache, *extra)
    if expect_ok and rc != 0:
        ok(False, f"mount {src} at {mnt}", out)
    return rc, out


def umount(mnt, timeout=60):
    return run("umount", mnt, timeout=timeout)


def status(mnt):
    with open(os.path.join(mnt, ".requantfs", "status")) as f:
        return json.load(f)


def files_of(d):
    return sorted(os.listdir(d))


def same_tree(mnt, ref, label):
    """every file of ref read through the mount, equal byte for byte."""
    bad = []
    for f in files_of(ref):
        with open(os.path.join(mnt, f), "rb") as a, open(os.path.join(ref, f), "rb") as b:
            while True:
                x, y = a.read(1 << 20), b.read(1 << 20)
                if x != y:
                    bad.append(f)
                    break
                if not x:
                    break
    return ok(not bad, f"{label}: every file equals export's byte for byte", bad)


def changed_shards(src, ref):
    out = []
    for f in files_of(ref):
        if f.endswith(".safetensors") and (os.path.getsize(os.path.join(src, f)) !=
                                           os.path.getsize(os.path.join(ref, f)) or
                                           open(os.path.join(src, f), "rb").read() !=
                                           open(os.path.join(ref, f), "rb").read()):
            out.append(f)
    return out


# ---- groups -------------------------------------------------------------------

def g_basic(T):
    src, cal, ref = T["src"], T["cal"], T["ref"]
    mnt, cache = os.path.join(T["tmp"], "m-basic"), os.path.join(T["tmp"], "c-basic")
    rc, out = mount(src, mnt, cal, cache)
    if not ok(rc == 0 and mounted(mnt) == "fuse.requantfs", "mount returns once mounted", out):
        return
    ok(files_of(mnt) == files_of(ref), "same names as export; .requantfs not listed",
       (files_of(mnt), files_of(ref)))
    ok(os.path.isdir(os.path.join(mnt, ".requantfs")), "hidden control directory answers lookup")
    sizes = {f: os.stat(os.path.join(mnt, f)).st_size for f in files_of(ref)}
    st0 = status(mnt)
    ok(all(sizes[f] == os.path.getsize(os.path.join(ref, f)) for f in sizes) and
       st0["jobs_run"] == 0, "stat sizes exact before any quantization",
       (sizes, st0["jobs_run"]))
    inos = {f: os.stat(os.path.join(mnt, f)).st_ino for f in files_of(ref)}
    ok(os.stat(mnt).st_ino == 1 and len(set(inos.values())) == len(inos), "root is inode 1, files unique")
    for how, mode in (("O_RDWR", os.O_RDWR), ("O_WRONLY", os.O_WRONLY)):
        try:
            os.close(os.open(os.path.join(mnt, "config.json"), mode))
            ok(False, f"open {how} refused")
        except OSError as e:
            ok(e.errno == errno.EROFS, f"open {how} fails with EROFS", e)
    try:
        open(os.path.join(mnt, "new-file"), "w").close()
        ok(False, "create refused")
    except OSError as e:
        ok(e.errno in (errno.EROFS, errno.EACCES), "create fails with EROFS", e)
    same_tree(mnt, ref, "plain")
    st = status(mnt)
    ok(st["jobs_run"] == st["jobs_total"] and st["jobs_failed"] == 0 and
       st["cache_misses"] == st["jobs_total"], "one job per module on a cold cache",
       {k: st[k] for k in ("jobs_run", "jobs_total", "jobs_failed", "cache_misses")})
    rc, out = run("status", mnt)
    ok(rc == 0 and "modules" in out and "cached" in out, "status pretty-prints", out)
    rc, out = run("status", mnt, "--json")
    ok(rc == 0 and json.loads(out)["jobs_total"] == st["jobs_total"], "status --json", out)
    pid = daemon_pid(mnt)
    rc, out = umount(mnt)
    ok(rc == 0 and not mounted(mnt) and not os.path.exists(f"/proc/{pid}/status") or
       open(f"/proc/{pid}/status").read().find("State:\tZ") >= 0,
       "umount unmounts and the daemon exits", out)

    # a warm cache: nothing is quantized again; inode numbers are stable
    rc, out = mount(src, mnt, cal, cache)
    ok(rc == 0, "remount on the warm cache", out)
    ok({f: os.stat(os.path.join(mnt, f)).st_ino for f in files_of(ref)} == inos,
       "inode numbers stable across mounts")
    rc, out = run("warm", mnt)
    st = status(mnt)
    # (with passthrough the shards were materialized and their job entries
    # dropped: the jobs count as cached through the files, not as hits)
    ok(rc == 0 and st["jobs_run"] == 0 and st["jobs_cached"] == st["jobs_total"] and
       st["cache_hits"] + st["mat_verified"] > 0, "warm on a warm cache: nothing run",
       out + json.dumps(st))
    same_tree(mnt, ref, "plain, warm cache")
    # the engine reads the mount like any model directory: the requantized
    # mount and the all-NVFP4 calibration twin hold the same weights
    rc, out = run("compare", mnt, cal, "-n", "4", "--threads", "1")
    overall = [l for l in out.splitlines() if l.startswith("overall")]
    ok(rc == 0 and overall and "KL mean 0.000e+00" in overall[0] and "max 0.000e+00" in overall[0]
       and "100.00%" in overall[0], "engine: compare mount vs twin gives KL 0, top-1 100%", out)
    rc1, g1 = run("generate", mnt, "--prompt", "def f(x):", "-n", "12", "--temperature", "0")
    rc2, g2 = run("generate", cal, "--prompt", "def f(x):", "-n", "12", "--temperature", "0")
    first = lambda t: t.split("\nprompt:")[0]
    ok(rc1 == 0 and rc2 == 0 and first(g1) == first(g2),
       "engine: greedy generation through the mount equals the twin's", (g1, g2))
    umount(mnt)


def g_hub(T):
    mnt, cache = os.path.join(T["tmp"], "m-hub"), os.path.join(T["tmp"], "c-hub")
    rc, out = mount(T["hub"], mnt, T["cal"], cache)
    if not ok(rc == 0, "mount of a hub snapshot", out):
        return
    st = status(mnt)
    ok(files_of(mnt) == files_of(T["ref"]) and st["jobs_run"] == 0, "hub: same names as export")
    rc, out = run("warm", mnt, "--parallel", "4")
    st = status(mnt)
    ok(rc == 0 and st["jobs_cached"] == st["jobs_total"] and st["jobs_run"] == st["jobs_total"],
       "hub: warm quantizes every job once and exits 0", out + json.dumps(st))
    same_tree(mnt, T["ref"], "hub")
    umount(mnt)


WORKER = r'''
import mmap, os, random, sys
mnt, ref, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = sys.argv[4:]
rng = random.Random(seed)
bad = []
for f in rng.sample(files, len(files)):
    want = open(os.path.join(ref, f), "rb").read()
    p = os.path.join(mnt, f)
    mode = seed % 4
    if mode == 0:                                   # sequential read()
        got = open(p, "rb").read()
        if got != want: bad.append(("read", f))
    elif mode == 1:                                 # pread at random offsets
        fd = os.open(p, os.O_RDONLY)
        for _ in range(64):
            o = rng.randrange(len(want)); l = rng.choice([1, 7, 4096, 65536, 1 << 20])
            if os.pread(fd, l, o) != want[o:o + l]: bad.append(("pread", f, o, l)); break
        os.close(fd)
    else:                                           # mmap, shared or private
        fd = os.open(p, os.O_RDONLY)
        flags = mmap.MAP_SHARED if mode == 2 else mmap.MAP_PRIVATE
        m = mmap.mmap(fd, 0, flags=flags, prot=mmap.PROT_READ)
        idx = list(range(0, len(want), 4096)); rng.shuffle(idx)
        for o in idx:
            if m[o:o + 4096] != want[o:o + 4096]: bad.append(("mmap", f, o)); break
        m.close(); os.close(fd)
print("BAD" if bad else "OK", bad[:3])
'''


def g_concurrency(T):
    mnt, cache = os.path.join(T["tmp"], "m-conc"), os.path.join(T["tmp"], "c-conc")
    rc, out = mount(T["src"], mnt, T["cal"], cache, "--workers", "2", "--prefetch", "2")
    if not ok(rc == 0, "mount for the concurrency test", out):
        return
    shards = changed_shards(T["src"], T["ref"])
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, mnt, T["ref"], str(i), *shards],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(10)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append("TIMEOUT")
    ok(all(o.startswith("OK") for o in outs),
       f"10 processes (read, pread, mmap shared/private) on {len(shards)} cold shards: all bytes "
       "correct", "\n".join(outs))
    st = status(mnt)
    ok(st["jobs_run"] == st["jobs_total"] and st["cache_misses"] == st["jobs_total"] and
       st["jobs_failed"] == 0, "exactly one job per module under concurrency",
       {k: st[k] for k in ("jobs_run", "jobs_total", "cache_misses", "jobs_failed", "parked_reads")})
    ok(st["parked_reads"] > 0, "readers were parked on jobs", st["parked_reads"])
    umount(mnt)


def settle(mnt):
    t0 = time.time()
    while time.time() - t0 < 30:
        st = status(mnt)
        if st["jobs_in_flight"] == 0 and st["jobs_queued"] == 0:
            return st
        time.sleep(0.02)
    return status(mnt)


def g_prefetch(T):
    shard = changed_shards(T["src"], T["ref"])[0]
    with open(os.path.join(T["ref"], shard), "rb") as f:
        hl = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(hl))
    packed = sorted(k for k in hdr if re.match(r"model\.layers\.4[0-7]\..*\.weight_packed$", k))
    if not ok(len(packed) >= 12, f"{shard} has enough modules for the prefetch test", len(packed)):
        return

    def touch(mnt, names):
        # O_DIRECT: exactly one byte of each tensor, no kernel readahead
        fd = os.open(os.path.join(mnt, shard), os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, 4096)
        for k in names:
            os.preadv(fd, [memoryview(buf)[:1]], 8 + hl + hdr[k]["data_offsets"][0])
        os.close(fd)

    for label, names, extra, want in (
            ("reads walking modules in name order queue the next 4 jobs",
             packed[0:2], ["--prefetch", "4"], lambda r: r == 6),
            ("random reads (far apart) prefetch nothing", [packed[0], packed[-1]],
             ["--prefetch", "4"], lambda r: r == 2),
            ("--prefetch 0: walking reads run only their own jobs", packed[0:2],
             ["--prefetch", "0"], lambda r: r == 2)):
        mnt, cache = os.path.join(T["tmp"], "m-pf"), os.path.join(T["tmp"], "c-pf")
        shutil.rmtree(cache, ignore_errors=True)
        rc, out = mount(T["src"], mnt, T["cal"], cache, *extra)
        if rc:
            continue
        touch(mnt, names)
        st = settle(mnt)
        ok(want(st["jobs_run"]), label, st["jobs_run"])
        umount(mnt)


def g_safeopen(T):
    try:
        from safetensors import safe_open
    except ImportError as e:
        ok(False, "safetensors is importable (run tools/setup to create .venv)", e)
        return
    mnt, cache = os.path.join(T["tmp"], "m-so"), os.path.join(T["tmp"], "c-so")
    rc, out = mount(T["src"], mnt, T["cal"], cache)
    if not ok(rc == 0, "mount for safe_open", out):
        return

    def view(path):
        res = {}
        with open(path, "rb") as fh:
            hl = struct.unpack("<Q", fh.read(8))[0]
            hdr = json.loads(fh.read(hl))
            with safe_open(path, framework="numpy") as f:
                for k in f.keys():
                    s = f.get_slice(k)
                    b, e = hdr[k]["data_offsets"]
                    fh.seek(8 + hl + b)
                    raw = fh.read(e - b)
                    if s.get_dtype() in ("F32", "U8", "I32", "I64", "F16"):
                        raw2 = f.get_tensor(k).tobytes()     # safetensors' own mmap read
                        if raw2 != raw:
                            raw = b"MISMATCH"
                    res[k] = (s.get_dtype(), list(s.get_shape()), raw)
                meta = f.metadata()
        return res, meta

    bad = []
    count = 0
    for f in files_of(T["ref"]):
        if not f.endswith(".safetensors"):
            continue
        a, b = view(os.path.join(mnt, f)), view(os.path.join(T["ref"], f))
        count += len(a[0])
        if a != b:
            bad.append(f)
    ok(not bad and count > 0, f"safe_open over every shard of the mount: {count} tensors' dtype, "
       "shape, bytes and metadata equal export's", bad)
    umount(mnt)


def flip_entry(cache):
    ents = []
    for root, _, fs in os.walk(cache):
        ents += [os.path.join(root, f) for f in fs if f.endswith(".rqc")]
    ents.sort()
    p = ents[len(ents) // 2]
    b = bytearray(open(p, "rb").read())
    b[len(b) // 2] ^= 0x40
    with open(p, "r+b") as f:
        f.write(b)
    return p, len(ents)


def g_faults(T):
    src, cal, ref, tmp = T["src"], T["cal"], T["ref"], T["tmp"]
    # a checkpoint with 1024 jobs, so that warm and reads take a while
    bsrc, bcal, bref = (os.path.join(tmp, x) for x in ("big", "big-cal", "big-ref"))
    rc, out = run("mkckpt", bsrc, "--calib-out", bcal, "--experts", "64")
    rc2, out2 = run("export", bsrc, bref, "--calib", bcal, "--quiet")
    if not ok(rc == 0 and rc2 == 0, "a 64-expert checkpoint and its export", out + out2):
        return
    # kill -9 of the daemon during warm, remount, warm again. These cases are
    # about job entries: --passthrough off, since a passthrough mount drops
    # them once shards are materialized (test_passthrough.py has its own).
    mnt, cache = os.path.join(tmp, "m-kill"), os.path.join(tmp, "c-kill")
    PTOFF = ("--passthrough", "off")
    rc, out = mount(bsrc, mnt, bcal, cache, "--workers", "1", *PTOFF)
    if ok(rc == 0, "mount for the kill test", out):
        pid = daemon_pid(mnt)
        w = subprocess.Popen([RQ, "warm", mnt, "--parallel", "2"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        t0 = time.time()
        while time.time() - t0 < 60 and status(mnt)["jobs_run"] < 2:
            time.sleep(0.01)
        os.kill(pid, signal.SIGSTOP)               # freeze it mid-warm, then kill
        st_run = open(f"/proc/{pid}/status").read()
        ok(w.poll() is None, "warm is still running when the daemon is killed", st_run[:200])
        os.kill(pid, signal.SIGKILL)
        try:
            wout = w.communicate(timeout=60)[0]
            ok(w.returncode == 1, "warm fails (does not hang) when the daemon is killed", wout)
        except subprocess.TimeoutExpired:
            w.kill()
            ok(False, "warm fails (does not hang) when the daemon is killed", "TIMEOUT")
        rc, out = mount(bsrc, mnt, bcal, cache, *PTOFF, expect_ok=False)
        ok(rc == 1 and "umount" in out, "mount over the dead mount refuses, says to umount", out)
        rc, out = umount(mnt)
        ok(rc == 0 and not mounted(mnt), "umount cleans up the dead mount", out)
        rc, out = mount(bsrc, mnt, bcal, cache, *PTOFF)
        rc2, out2 = run("warm", mnt)
        st = status(mnt)
        ok(rc == 0 and rc2 == 0 and st["jobs_cached"] == st["jobs_total"] and
           st["cache_corrupt"] == 0 and 0 < st["cache_hits"] < st["jobs_total"],
           "remount and warm again completes (reusing what was cached before the kill)",
           out + out2 + json.dumps(st))
        same_tree(mnt, bref, "after kill -9 and remount")
        umount(mnt)

        # flip a byte in a cache entry: detected, rebuilt, bytes correct
        path, nent = flip_entry(cache)
        rc, out = mount(bsrc, mnt, bcal, cache, *PTOFF)
        same_tree(mnt, bref, "with a corrupted cache entry")
        st = status(mnt)
        ok(st["cache_corrupt"] == 1 and st["jobs_run"] == 1, "the flipped entry was detected "
           "and rebuilt (one job run)", json.dumps(st))
        umount(mnt)

    # a cache too small for anything: ENOSPC degrades to serving from memory
    tiny = os.path.join(tmp, "c-tiny")
    os.makedirs(tiny)
    # mode=0755: a tmpfs root is 1777 by default, which the cache refuses
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", tiny],
                       capture_output=True, text=True)
    if ok(r.returncode == 0, "a 64 KiB tmpfs for the cache", r.stderr):
        TMPFS.append(tiny)
        mnt = os.path.join(tmp, "m-tiny")
        rc, out = mount(src, mnt, cal, tiny, "--mem-max", "1M", "--log",
                        os.path.join(tmp, "tiny.log"))
        if ok(rc == 0, "mount with the tiny cache", out):
            same_tree(mnt, ref, "cache full (ENOSPC), small memory")
            st = status(mnt)
            ok(st["cache_put_failed"] > 0 and st["jobs_failed"] == 0, "puts failed, reads did not",
               json.dumps(st))
            log = open(os.path.join(tmp, "tiny.log")).read()
            ok("warning: the cache cannot store" in log, "a warning was logged", log[-2000:])
            umount(mnt)

    # SRC rewritten under the mount: EIO, never stale bytes
    src2 = os.path.join(tmp, "src-rw")
    shutil.copytree(src, src2)
    mnt, cache = os.path.join(tmp, "m-rw"), os.path.join(tmp, "c-rw")
    rc, out = mount(src2, mnt, cal, cache, "--log", os.path.join(tmp, "rw.log"))
    if ok(rc == 0, "mount of a copy of SRC", out):
        shard = changed_shards(src, ref)[0]
        plain = [f for f in files_of(ref) if f.endswith(".safetensors") and
                 f not in changed_shards(src, ref)]
        with open(os.path.join(mnt, shard), "rb") as f:
            f.read(4096)                            # header cached by the kernel
        p = os.path.join(src2, shard)
        b = bytearray(open(p, "rb").read())
        b[-1] ^= 1
        with open(p, "r+b") as f:                   # in place: same inode, new mtime
            f.write(b)
        time.sleep(2.5)                             # the monitor drops cached pages
        errs = []
        try:
            with open(os.path.join(mnt, shard), "rb") as f:
                f.read()
            errs.append("read succeeded")
        except OSError as e:
            errs.append(e.errno)
        ok(errs == [errno.EIO], "reading the virtual shard of a rewritten SRC fails with EIO",
           errs)
        if plain:
            ok(open(os.path.join(mnt, plain[0]), "rb").read() ==
               open(os.path.join(ref, plain[0]), "rb").read(), "other files still read fine")
        st = status(mnt)
        ok(not st["src_ok"] and any(shard in s for s in st["src_changed"]),
           "status names the changed SRC file", json.dumps(st))
        ok(shard in open(os.path.join(tmp, "rw.log")).read(), "the log names it")
        umount(mnt)

    # a job that fails (NaN in a weight): EIO naming the tensor, retried by a later read
    src3 = os.path.join(tmp, "src-nan")
    shutil.copytree(src, src3)
    wm = json.load(open(os.path.join(src3, "model.safetensors.index.json")))["weight_map"]
    expert = sorted(k for k in wm if re.match(
        r"model\.layers\.4[0-7]\.mlp\.experts\.\d+\.down_proj\.weight$", k))[0]
    p = os.path.join(src3, wm[expert])
    with open(p, "rb") as f:
        hl = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(hl))
    with open(p, "r+b") as f:
        f.seek(8 + hl + h[expert]["data_offsets"][0] + 6)
        f.write(struct.pack("<H", 0x7FC0))
    mnt, cache = os.path.join(tmp, "m-nan"), os.path.join(tmp, "c-nan")
    rc, out = mount(src3, mnt, cal, cache, "--log", os.path.join(tmp, "nan.log"))
    if ok(rc == 0, "mount of a SRC with a NaN weight (found only when quantized)", out):
        errs = []
        for _ in range(2):
            try:
                with open(os.path.join(mnt, wm[expert]), "rb") as f:
                    f.read()
                errs.append("read succeeded")
            except OSError as e:
                errs.append(e.errno)
        st = status(mnt)
        log = open(os.path.join(tmp, "nan.log")).read()
        module = expert[: -len(".weight")]
        ok(errs == [errno.EIO, errno.EIO] and st["jobs_failed"] >= 2,
           "a failed job answers EIO and is retried by the next read", (errs, st["jobs_failed"]))
        ok(module in log and "NaN" in log, "the log names the tensor", log[-1500:])
        good = [f for f in changed_shards(src, ref) if f != wm[expert]]
        if good:
            ok(open(os.path.join(mnt, good[0]), "rb").read() ==
               open(os.path.join(ref, good[0]), "rb").read(), "other shards still read fine")
        umount(mnt)

    # unmount with readers in flight: no hang
    mnt, cache = os.path.join(tmp, "m-busy"), os.path.join(tmp, "c-busy")
    rc, out = mount(bsrc, mnt, bcal, cache, "--workers", "1", "--prefetch", "0")
    if ok(rc == 0, "mount for unmount-while-reading", out):
        pid = daemon_pid(mnt)
        shards = changed_shards(bsrc, bref)
        readers = [subprocess.Popen([sys.executable, "-c", WORKER, mnt, bref, str(4 * i), *shards],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                   for i in range(4)]
        t0 = time.time()
        while time.time() - t0 < 30 and status(mnt)["parked_reads"] == 0:
            time.sleep(0.01)
        inflight = status(mnt)["jobs_cached"] < status(mnt)["jobs_total"]
        t0 = time.time()
        rc, out = umount(mnt, timeout=30)
        ok(rc == 0 and time.time() - t0 < 30 and not mounted(mnt) and inflight,
           "umount returns at once with reads in flight", out)
        hung, outs = 0, []
        for p in readers:
            try:
                outs.append(p.communicate(timeout=120)[0])
            except subprocess.TimeoutExpired:
                p.kill()
                hung += 1
        ok(hung == 0, "no reader hangs", hung)
        # files already open keep being served by the detached mount; opening
        # one after the umount finds the empty directory (ENOENT): never wrong bytes
        ok(all(o.startswith("OK") or "FileNotFoundError" in o for o in outs),
           "readers in flight got correct bytes or ENOENT after the detach, never wrong ones",
           "\n".join(outs))
        t0 = time.time()
        while time.time() - t0 < 60 and os.path.exists(f"/proc/{pid}") and \
                "State:\tZ" not in open(f"/proc/{pid}/status").read():
            time.sleep(0.1)
        ok(not os.path.exists(f"/proc/{pid}") or "State:\tZ" in open(f"/proc/{pid}/status").read(),
           "the daemon exits after its last reader")


def g_bad(T):
    src, cal, tmp = T["src"], T["cal"], T["tmp"]
    mnt = os.path.join(tmp, "m-bad")
    os.makedirs(mnt, exist_ok=True)
    cache = os.path.join(tmp, "c-bad")

    def refuse(label, args, code, words):
        MOUNTS.append(mnt)
        rc, out = run("mount", *args)
        # a word may be a tuple of alternatives
        has = lambda w: any(x in out for x in w) if isinstance(w, tuple) else w in out
        ok(rc == code and all(has(w) for w in words) and not mounted(mnt),
           f"mount refuses {label} (exit {code}, names {words})", f"rc={rc}\n{out}")

    refuse("a missing SRC", [os.path.join(tmp, "nope"), mnt, "--calib", cal, "--cache", cache],
           1, ["nope"])
    bad = os.path.join(tmp, "src-bad")
    shutil.copytree(src, bad)
    shard = changed_shards(src, T["ref"])[0]
    with open(os.path.join(bad, shard), "r+b") as f:
        f.seek(8)
        f.write(b"{garbage!!!!")
    refuse("a corrupt SRC header", [bad, mnt, "--calib", cal, "--cache", cache], 1, [shard])
    c2 = os.path.join(tmp, "cal-missing")
    shutil.copytree(cal, c2)
    cwm = json.load(open(os.path.join(c2, "model.safetensors.index.json")))["weight_map"]
    scale = sorted(k for k in cwm if re.match(
        r"model\.layers\.4[0-7]\.mlp\.experts\.\d+\.down_proj\.input_global_scale$", k))[0]
    os.remove(os.path.join(c2, cwm[scale]))
    refuse("missing calibration", [src, mnt, "--calib", c2, "--cache", cache], 1,
           ["cal-missing", (cwm[scale], "input_global_scale")])
    refuse("a missing mount point", [src, os.path.join(tmp, "no-mnt"), "--calib", cal], 1,
           ["does not exist"])
    full = os.path.join(tmp, "m-full")
    os.makedirs(full)
    open(os.path.join(full, "x"), "w").close()
    rc, out = run("mount", src, full, "--calib", cal, "--cache", cache)
    ok(rc == 1 and "not empty" in out and not mounted(full), "mount refuses a non-empty MNT", out)
    afile = os.path.join(tmp, "a-file")
    open(afile, "w").close()
    refuse("an unusable cache directory", [src, mnt, "--calib", cal, "--cache", afile], 1,
           ["a-file", "--cache"])
    refuse("a bad --device", [src, mnt, "--calib", cal, "--device", "tpu"], 2, ["--device"])
    refuse("a bad --prefetch", [src, mnt, "--calib", cal, "--prefetch", "x"], 2, ["--prefetch"])
    refuse("an unknown option", [src, mnt, "--calib", cal, "--bogus"], 2, ["--bogus"])
    refuse("a missing --calib", [src, mnt], 2, ["--calib"])
    refuse("bad -o options", [src, mnt, "--calib", cal, "--cache", cache, "-o", "nonsense_opt"],
           1, ["-o"])
    if not os.path.exists("/dev/nvidia0"):
        refuse("--device cuda without a GPU", [src, mnt, "--calib", cal, "--cache", cache,
                                               "--device", "cuda"], 1, ["cuda"])
    for cmd in ("mount", "umount", "warm", "status"):
        rc, out = run(cmd, "--help")
        ok(rc == 0 and "usage" in out, f"{cmd} --help")
    rc, out = run("umount", mnt)
    ok(rc == 1 and "not mounted" in out, "umount of a directory that is not mounted", out)
    rc, out = run("status", mnt)
    ok(rc == 1 and "not a requantfs mount" in out, "status of a plain directory", out)


def main():
    if rqtap.no_fuse():
        return 77
    T = rqtap.ckpt_dirs("rq-mount-")
    tmp = T["tmp"]
    try:
        if not rqtap.make_ckpt(T, ref=True):
            return 1
        if "hub" in GROUPS:
            rc, out = run("mkckpt", os.path.join(tmp, "hubroot"), "--hub")
            snaps = [l for l in out.splitlines() if "/snapshots/" in l and os.path.isdir(l.strip())]
            T["hub"] = snaps[-1].strip() if rc == 0 and snaps else ""
            ok(rc == 0 and os.path.isdir(T["hub"]), "mkckpt --hub", out)
        for g in GROUPS:
            if g == "hub" and not os.path.isdir(T.get("hub", "")):
                continue
            globals()["g_" + g](T)
    finally:
        cleanup(tmp)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
