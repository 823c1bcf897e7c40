#!/usr/bin/env python3
"""A hostile or changing cache directory under a real FUSE mount, compared
byte for byte with `requantfs export`. TAP output.

Usage: test_hostile_cache.py REQUANTFS
  fifo       a FIFO at an entry's name: reads complete with export's bytes,
             umount, the daemon exits within a bound
  rewrite    entries rewritten in place while mounted, mtime restored: the
             mount still serves export's bytes (page cache dropped)
  truncate   entries truncated while mounted: never a silent short file
  stuck      a worker stuck in a hung file system (the cache's xx/ directory
             is a mount whose daemon is stopped): the daemon still exits
             after umount
  perms      a group-writable cache directory is refused, with the reason
Every command has a timeout, so a hang is a failure, not a stuck suite;
every mount made here is unmounted (and its daemon killed) at exit."""
import atexit, errno, os, shutil, signal, subprocess, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402  (tests/rqtap.py: TAP, run, mounts cleaned up at exit)
from rqtap import ok, run, mounted, daemon_pid, alive, MOUNTS, STOPPED, TIMEOUT  # noqa: E402

rqtap.init(sys.argv[1])
RQ = rqtap.RQ


def mount(src, mnt, cal, cache, *extra):
    """--passthrough off: these attacks target the job entries, which a
    passthrough mount drops once a shard is materialized (the attacks on a
    materialized file are in test_passthrough.py)."""
    os.makedirs(mnt, exist_ok=True)
    MOUNTS.append(os.path.abspath(mnt))
    return run("mount", src, mnt, "--calib", cal, "--cache", cache, "--passthrough", "off",
               *extra)


def umount(mnt, timeout=60):
    return run("umount", mnt, timeout=timeout)


def gone(pid, within):
    """the process exited (or is a zombie) within `within` seconds"""
    t0 = time.time()
    while True:
        try:
            st = open(f"/proc/{pid}/status").read()
        except OSError:
            return True
        if "State:\tZ" in st:
            return True
        if time.time() - t0 > within:
            return False
        time.sleep(0.1)


def entries(cache):
    out = []
    for root, _, fs in os.walk(cache):
        out += [os.path.join(root, f) for f in fs if f.endswith(".rqc")]
    return sorted(out)


def changed_shards(src, ref):
    out = []
    for f in sorted(os.listdir(ref)):
        if f.endswith(".safetensors") and (open(os.path.join(src, f), "rb").read() !=
                                           open(os.path.join(ref, f), "rb").read()):
            out.append(f)
    return out


def drop_caches():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


# Reads every named file of the mount in a child (so a hang is a timeout):
# per file "OK", "WRONG", "SHORT <got> <stat size>" or "ERR <errno>".
READER = r'''
import os, sys
mnt, ref = sys.argv[1], sys.argv[2]
for f in sys.argv[3:]:
    p = os.path.join(mnt, f)
    want = open(os.path.join(ref, f), "rb").read()
    try:
        size = os.stat(p).st_size
        fd = os.open(p, os.O_RDONLY)
        got = bytearray()
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            got += b
        os.close(fd)
        if len(got) != size:
            print(f, "SHORT", len(got), size)
        elif bytes(got) != want:
            print(f, "WRONG")
        else:
            print(f, "OK")
    except OSError as e:
        print(f, "ERR", e.errno)
'''


def read_all(mnt, ref, files, timeout=60):
    """{file: verdict}, or {"*": "TIMEOUT"} when the reader hung (killed)."""
    try:
        p = subprocess.run([sys.executable, "-c", READER, mnt, ref, *files],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"*": "TIMEOUT"}
    res = {}
    for line in p.stdout.splitlines():
        a = line.split(" ", 1)
        res[a[0]] = a[1] if len(a) > 1 else ""
    if p.returncode:
        res["*"] = p.stderr[-500:]
    return res


def all_ok(res, files):
    return len(res) == len(files) and all(res.get(f) == "OK" for f in files)


def status(mnt):
    import json
    with open(os.path.join(mnt, ".requantfs", "status")) as f:
        return json.load(f)


def warm_cache(T, cache):
    mnt = os.path.join(T["tmp"], "m-warmup")
    rc, out = mount(T["src"], mnt, T["cal"], cache)
    rc2, out2 = run("warm", mnt) if rc == 0 else (rc, "")
    umount(mnt)
    return rc == 0 and rc2 == 0 and len(entries(cache)) > 0, out + out2


def flip_in_place(p):
    """one payload byte flipped in place; atime/mtime restored (ns)"""
    st = os.stat(p)
    with open(p, "r+b") as f:
        f.seek(64 + (st.st_size - 80) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))


def truncate_in_place(p):
    st = os.stat(p)
    os.truncate(p, st.st_size // 3)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))


# ---- cases ----------------------------------------------------------------

def c_fifo(T):
    cache = os.path.join(T["tmp"], "c-fifo")
    good, out = warm_cache(T, cache)
    if not ok(good, "a warm cache for the FIFO case", out):
        return
    ents = entries(cache)
    p = ents[len(ents) // 2]
    os.unlink(p)
    os.mkfifo(p, 0o644)
    mnt, log = os.path.join(T["tmp"], "m-fifo"), os.path.join(T["tmp"], "fifo.log")
    rc, out = mount(T["src"], mnt, T["cal"], cache, "--log", log)
    if not ok(rc == 0, "mount over a cache with a FIFO at an entry's name", out):
        return
    pid = daemon_pid(mnt)
    res = read_all(mnt, T["ref"], T["shards"], timeout=60)
    ok(all_ok(res, T["shards"]), "reads of the dependent shards complete with export's bytes",
       res)
    st = status(mnt)
    ok(st["cache_corrupt"] == 1 and st["jobs_run"] == 1, "the FIFO was a corrupt entry, rebuilt "
       "by one job", {k: st[k] for k in ("cache_corrupt", "jobs_run")})
    logtxt = open(log).read()
    ok("FIFO" in logtxt and os.path.basename(p) in logtxt, "the log names the entry and says "
       "FIFO", logtxt[-1500:])
    rc, out = umount(mnt, timeout=30)
    ok(rc == 0 and not mounted(mnt), "umount", out)
    ok(gone(pid, 20), "the daemon exits within 20 s of the umount")
    ok(os.path.isfile(p) and not os.path.islink(p), "the entry's name holds a regular file again")


def c_changed(T, label, how):
    cache = os.path.join(T["tmp"], f"c-{label}")
    good, out = warm_cache(T, cache)
    if not ok(good, f"a warm cache for the {label} case", out):
        return
    mnt, log = os.path.join(T["tmp"], f"m-{label}"), os.path.join(T["tmp"], f"{label}.log")
    rc, out = mount(T["src"], mnt, T["cal"], cache, "--log", log)
    if not ok(rc == 0, f"mount for the {label} case", out):
        return
    res = read_all(mnt, T["ref"], T["shards"])
    st = status(mnt)
    ok(all_ok(res, T["shards"]) and st["jobs_run"] == 0, f"{label}: first read served from the "
       "verified cache, export's bytes", (res, st["jobs_run"]))
    ents = entries(cache)
    for p in ents:
        how(p)
    drop_caches()                # the mount's page cache holds the good bytes
    res = read_all(mnt, T["ref"], T["shards"])
    return mnt, log, res, ents


def c_rewrite(T):
    r = c_changed(T, "rewrite", flip_in_place)
    if not r:
        return
    mnt, log, res, ents = r
    ok(all_ok(res, T["shards"]), f"every entry rewritten in place (mtime restored) while "
       "mounted: the mount still serves export's bytes", res)
    st = status(mnt)
    ok(st["cache_corrupt"] >= 1 and st["jobs_run"] >= 1, "the rewritten entries were detected "
       "and rebuilt", {k: st[k] for k in ("cache_corrupt", "jobs_run")})
    ok("changed after it was verified" in open(log).read(), "the log says so",
       open(log).read()[-1500:])
    umount(mnt)


def c_truncate(T):
    r = c_changed(T, "truncate", truncate_in_place)
    if not r:
        return
    mnt, log, res, ents = r
    never_short = len(res) == len(T["shards"]) and \
        all(v == "OK" or v == f"ERR {errno.EIO}" for v in res.values())
    ok(never_short, "every entry truncated while mounted: each read is export's bytes or EIO, "
       "never short or wrong", res)
    ok(all_ok(res, T["shards"]), "and in fact rebuilt: export's bytes", res)
    umount(mnt)


def c_stuck(T):
    """The cache's xx/ subdirectory of one entry is the mount point of a
    second requantfs mount whose daemon we SIGSTOP: a lookup there hangs in
    the kernel (a hung file system). umount must still end the daemon."""
    cache = os.path.join(T["tmp"], "c-stuck")
    good, out = warm_cache(T, cache)
    if not ok(good, "a warm cache for the stuck-worker case", out):
        return
    sub = os.path.dirname(entries(cache)[0])
    shutil.rmtree(sub)
    os.mkdir(sub, 0o755)
    rc, out = mount(T["src"], sub, T["cal"], os.path.join(T["tmp"], "c-stuck-b"))
    if not ok(rc == 0, "a second mount on the cache's subdirectory", out):
        return
    bpid = daemon_pid(sub)
    mnt, log = os.path.join(T["tmp"], "m-stuck"), os.path.join(T["tmp"], "stuck.log")
    rc, out = mount(T["src"], mnt, T["cal"], cache, "--log", log)
    if not ok(rc == 0, "mount over it", out):
        return
    pid = daemon_pid(mnt)
    os.kill(bpid, signal.SIGSTOP)   # now every request to the second mount hangs
    STOPPED.append(bpid)
    reader = subprocess.Popen([sys.executable, "-c", READER, mnt, T["ref"], *T["shards"]],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.time()
    stuck = False
    while time.time() - t0 < 20 and not stuck:
        time.sleep(0.2)
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                wchan = open(f"/proc/{pid}/task/{t}/wchan").read()
            except OSError:
                continue
            if "fuse" in wchan or "request_wait" in wchan:
                stuck = True
    ok(stuck, "a worker of the mount is stuck in a request to the stopped file system")
    reader.kill()                   # its last reader gives up (a FUSE wait is killable)
    reader.wait(timeout=30)
    t0 = time.time()
    rc, out = umount(mnt, timeout=30)
    ok(rc == 0 and not mounted(mnt), "umount with a stuck worker", out)
    ok(gone(pid, 30), "the daemon exits within 30 s of the umount (bounded wait for workers)",
       f"after {time.time() - t0:.1f} s")
    ok("is stuck in job" in open(log).read(), "the log names the stuck worker and its job", open(log).read()[-1500:])
    os.kill(bpid, signal.SIGCONT)
    STOPPED.remove(bpid)
    umount(sub)


def c_perms(T):
    cache = os.path.join(T["tmp"], "c-perm")
    os.mkdir(cache)
    os.chmod(cache, 0o775)
    mnt = os.path.join(T["tmp"], "m-perm")
    rc, out = mount(T["src"], mnt, T["cal"], cache)
    ok(rc == 1 and cache in out and "chmod go-w" in out and "--cache" in out and
       not mounted(mnt), "mount refuses a group-writable cache directory, says why and what "
       "to do", f"rc={rc}\n{out}")
    os.chmod(cache, 0o755)
    rc, out = mount(T["src"], mnt, T["cal"], cache)
    ok(rc == 0, "and accepts it once chmod go-w", out)
    umount(mnt)


def main():
    if rqtap.no_fuse():
        return 77
    if os.geteuid() != 0:
        print("1..0 # SKIP needs root (drop_caches, a second mount on the cache)")
        return 77
    T = rqtap.ckpt_dirs("rq-hostile-")
    try:
        if not rqtap.make_ckpt(T, ref=True):
            return 1
        T["shards"] = changed_shards(T["src"], T["ref"])
        cases = sys.argv[2:] or ["fifo", "rewrite", "truncate", "stuck", "perms"]
        for c in cases:
            globals()["c_" + c](T)
    finally:
        rqtap.cleanup(T["tmp"])
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
