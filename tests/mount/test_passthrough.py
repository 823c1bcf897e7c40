#!/usr/bin/env python3
"""Kernel FUSE passthrough in the real mount (root, as CI runs). TAP output.

Usage: test_passthrough.py REQUANTFS

Every file equals `export` through read(), pread at random offsets, mmap
MAP_PRIVATE and MAP_SHARED, with passthrough and with --passthrough off.
Proves passthrough by the daemon's own counters: a passthrough open reaches
the daemon, its reads do not. Then: warm materializes every requantized
shard (its job entries dropped: the bytes are kept once); a copy-path open
held while its shard is materialized keeps reading correct bytes and later
opens pass through; kill -9 during materialization, remount: correct bytes,
no half file used; a flipped byte in a materialized shard is detected and
the shard rebuilt; SRC rewritten under passthrough opens (what the kernel
allows, see README); umount with passthrough opens and mappings in flight;
--passthrough on refused without CAP_SYS_ADMIN (as the user rqsec, made here
with useradd and removed at exit, running a copy of the binary in the
test's 0755 temp dir: the checkout may be out of its reach).
RQ_TEST_GROUPS=user,off (names of the g_* functions) runs only those."""
import atexit, errno, json, mmap, os, pwd, random, shutil, signal, stat, struct, subprocess
import sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402  (tests/rqtap.py: TAP, run, mounts cleaned up at exit)
from rqtap import ok, run, mounted, daemon_pid, alive, mount, MOUNTS, STOPPED, TIMEOUT  # noqa: E402

rqtap.init(sys.argv[1])
RQ = rqtap.RQ
USER = "rqsec"


def status(mnt):
    with open(os.path.join(mnt, ".requantfs", "status")) as f:
        return json.load(f)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def drop_caches():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def views_equal(path, want, seed=1):
    """read(), pread at random offsets, mmap private and shared: all == want."""
    bad = []
    if read(path) != want:
        bad.append("read")
    rnd = random.Random(seed)
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(24):
            off = rnd.randrange(0, max(1, len(want)))
            ln = rnd.choice((1, 7, 4096, 65536, 1 << 20))
            if os.pread(fd, ln, off) != want[off:off + ln]:
                bad.append(f"pread {off}+{ln}")
                break
        if want:
            for flags, name in ((mmap.MAP_PRIVATE, "mmap private"), (mmap.MAP_SHARED, "mmap shared")):
                mm = mmap.mmap(fd, len(want), flags=flags, prot=mmap.PROT_READ)
                pages = list(range(0, len(want), 4096))
                rnd.shuffle(pages)
                if any(mm[p:p + 4096] != want[p:p + 4096] for p in pages) or mm[:] != want:
                    bad.append(name)
                mm.close()
    finally:
        os.close(fd)
    return bad


def tree_views(mnt, ref, label):
    bad = {}
    for f in sorted(os.listdir(ref)):
        b = views_equal(os.path.join(mnt, f), read(os.path.join(ref, f)))
        if b:
            bad[f] = b
    return ok(not bad and sorted(os.listdir(mnt)) == sorted(os.listdir(ref)),
              f"{label}: every file equals export's through read, pread, mmap private/shared", bad)


def shards(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))


def changed(src, ref):
    return [f for f in shards(ref) if read(os.path.join(src, f)) != read(os.path.join(ref, f))]


def reads(mnt):
    return status(mnt)["reads"]


def g_basic(T):
    src, cal, ref, tmp = T["src"], T["cal"], T["ref"], T["tmp"]
    ch = changed(src, ref)
    same = [f for f in sorted(os.listdir(ref)) if f not in ch and f not in
            ("config.json", "model.safetensors.index.json")]
    mnt, cache = os.path.join(tmp, "m1"), os.path.join(tmp, "c1")
    rc, out = mount(src, mnt, cal, cache)
    if not ok(rc == 0, "mount (passthrough auto, root)", out):
        return
    st = status(mnt)
    ok(st["passthrough"] is True and st["files_passthrough"] == len(same) and
       st["files_pending"] == len(ch), "status: identical files pass through, requantized "
       "shards pending", {k: st.get(k) for k in ("passthrough", "passthrough_why",
                                                 "files_passthrough", "files_pending")})
    rc, out = run("status", mnt)
    ok(rc == 0 and f"{len(ch)} requantized shards pending" in out and
       f"{len(ch)} pending: waiting for their jobs" in out and "about to be" not in out,
       "`requantfs status` before any read: the pending shards wait for their jobs", out)
    r0, o0 = reads(mnt), st["opens_passthrough"]
    for f in same:
        read(os.path.join(mnt, f))
    st = status(mnt)
    ok(st["reads"] == r0 and st["opens_passthrough"] >= o0 + len(same),
       "files identical to SRC: opens reach the daemon, their reads do not (passthrough)",
       (r0, st["reads"], o0, st["opens_passthrough"]))
    tree_views(mnt, ref, "passthrough, before warm")
    rc, out = run("status", mnt)       # every job cached: queued (or, later, materialized)
    soon = (f"{len(ch)} pending: every job cached, about to be materialized" in out and
            "waiting for their jobs" not in out)
    print("# status right after the reads: " + ("about to be materialized" if soon else "already materialized"))
    ok(rc == 0 and (soon or f"0 requantized shards pending, {len(ch)} materialized" in out),
       "`requantfs status` right after reading every file: the shards are about to be "
       "materialized, and it says so", out)
    rc, out = run("warm", mnt)
    st = status(mnt)
    ok(rc == 0 and st["files_pending"] == 0 and st["files_materialized"] == len(ch) and
       "pass through" in out, "warm materializes every requantized shard", out + json.dumps(st))
    ok(st["cache_files"] == len(ch) and st["cache_entries"] == len(ch) and
       st["jobs_cached"] == st["jobs_total"],
       "materialized: job entries dropped (bytes kept once), jobs still count as cached",
       {k: st[k] for k in ("cache_files", "cache_entries", "jobs_cached", "jobs_total")})
    r0 = reads(mnt)
    for f in ch:
        read(os.path.join(mnt, f))
    ok(reads(mnt) == r0, "materialized shards: new opens pass through (no READ reaches the "
       "daemon)", (r0, reads(mnt)))
    drop_caches()
    tree_views(mnt, ref, "passthrough, after warm, page cache dropped")
    rc, out = run("status", mnt)
    ok(rc == 0 and "pass through" in out, "status says how files are served", out)
    run("umount", mnt)
    # a warm remount: the files are verified, everything passes through
    rc, out = mount(src, mnt, cal, cache)
    rc2, out2 = run("warm", mnt)
    st = status(mnt)
    ok(rc == 0 and rc2 == 0 and st["mat_verified"] == len(ch) and st["mat_written"] == 0 and
       st["jobs_run"] == 0 and st["files_passthrough"] == len(same) + len(ch),
       "remount: materialized files verified, nothing quantized, all pass through",
       out + out2 + json.dumps(st))
    r0 = reads(mnt)
    tree_views(mnt, ref, "remount")
    ok(reads(mnt) - r0 <= 4 * 2, "remount: only config.json and the index use the copy path",
       (r0, reads(mnt)))
    run("umount", mnt)


def g_held(T):
    """A copy-path open held while its shard is materialized."""
    src, cal, ref, tmp = T["src"], T["cal"], T["ref"], T["tmp"]
    sh = changed(src, ref)[0]
    want = read(os.path.join(ref, sh))
    mnt, cache = os.path.join(tmp, "m2"), os.path.join(tmp, "c2")
    rc, out = mount(src, mnt, cal, cache)
    if not ok(rc == 0, "mount", out):
        return
    fd1 = os.open(os.path.join(mnt, sh), os.O_RDONLY)
    head = os.pread(fd1, 4096, 0)
    mm1 = mmap.mmap(fd1, len(want), flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    rc, out = run("warm", mnt)
    st = status(mnt)
    ok(rc == 0 and st["files_materialized"] >= 1, "warm materializes while a copy-path open "
       "of the shard is held", out)
    c0, p0 = st["opens_copy"], st["opens_passthrough"]
    fd2 = os.open(os.path.join(mnt, sh), os.O_RDONLY)
    st = status(mnt)
    ok(st["opens_copy"] == c0 + 1 and st["opens_passthrough"] == p0,
       "a new open while the copy-path open is held goes the copy path (kernel rule)",
       (c0, p0, st["opens_copy"], st["opens_passthrough"]))
    data1 = head + os.pread(fd1, len(want), 4096)[:len(want) - 4096]
    ok(data1 == want and mm1[:] == want and os.pread(fd2, len(want), 0) == want,
       "both copy-path opens (read and mmap) read export's bytes")
    mm1.close()
    os.close(fd1)
    os.close(fd2)
    time.sleep(0.2)       # RELEASE is asynchronous
    p0, r0 = status(mnt)["opens_passthrough"], reads(mnt)
    got = read(os.path.join(mnt, sh))
    st = status(mnt)
    ok(got == want and st["opens_passthrough"] == p0 + 1 and st["reads"] == r0,
       "once they are closed, the next open passes through", (p0, st["opens_passthrough"]))
    run("umount", mnt)


def g_kill(T):
    """kill -9 during materialization, remount."""
    src, cal, ref, tmp = T["src"], T["cal"], T["ref"], T["tmp"]
    mnt, cache = os.path.join(tmp, "m3"), os.path.join(tmp, "c3")
    env = dict(os.environ, REQUANTFS_TEST_MAT_PAUSE_MS="40")
    rc, out = mount(src, mnt, cal, cache, env=env)
    if not ok(rc == 0, "mount with a slow materializer", out):
        return
    pid = daemon_pid(mnt)
    w = subprocess.Popen([RQ, "warm", mnt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = False
    for _ in range(200):
        time.sleep(0.05)
        try:
            st = status(mnt)
        except OSError:
            break
        if st["files_materializing"] > 0 and st["jobs_cached"] == st["jobs_total"]:
            seen = True
            break
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    w.wait(timeout=60)
    ok(seen, "the daemon was killed in the middle of materializing")
    run("umount", mnt)
    fdir = os.path.join(cache, "files")
    names = os.listdir(fdir) if os.path.isdir(fdir) else []
    rc, out = mount(src, mnt, cal, cache)
    rc2, out2 = run("warm", mnt)
    st = status(mnt)
    ok(rc == 0 and rc2 == 0 and st["files_pending"] == 0, "remount + warm completes",
       out + out2 + json.dumps(st))
    tree_views(mnt, ref, "after kill -9 during materialization")
    ok(all(not x.endswith(".bin") or x[:-4] + ".sum" in os.listdir(fdir) for x in os.listdir(fdir)),
       "no materialized file without its checksum is left in use", (names, os.listdir(fdir)))
    run("umount", mnt)


def g_flip(T):
    """A flipped byte in a materialized shard."""
    src, cal, ref, tmp = T["src"], T["cal"], T["ref"], T["tmp"]
    cache = os.path.join(tmp, "c1")            # materialized by g_basic
    mnt = os.path.join(tmp, "m4")
    fdir = os.path.join(cache, "files")
    bins = sorted(x for x in os.listdir(fdir) if x.endswith(".bin")) if os.path.isdir(fdir) else []
    if not ok(bins, "materialized files exist in the cache", os.listdir(cache)):
        return
    victim = os.path.join(fdir, bins[0])
    st0 = os.stat(victim)
    with open(victim, "r+b") as f:
        f.seek(st0.st_size // 2)
        b = f.read(1)
        f.seek(st0.st_size // 2)
        f.write(bytes([b[0] ^ 0x40]))
    os.utime(victim, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    rc, out = mount(src, mnt, cal, cache, "--log", os.path.join(tmp, "m4.log"))
    rc2, out2 = run("warm", mnt)
    st = status(mnt)
    log = open(os.path.join(tmp, "m4.log")).read()
    ok(rc == 0 and rc2 == 0 and st["cache_corrupt"] >= 1 and st["files_pending"] == 0 and
       "rebuilding" in log, "the flipped byte is detected before use and the shard rebuilt",
       out + out2 + json.dumps(st) + log[-2000:])
    tree_views(mnt, ref, "after a flipped byte")
    run("umount", mnt)


def g_src(T):
    """SRC rewritten in place under passthrough opens."""
    src, cal, tmp = T["src2"], T["cal"], T["tmp"]
    ref = os.path.join(tmp, "ref2")
    run("export", src, ref, "--calib", cal, "--quiet")
    ch = changed(src, ref)
    same = [f for f in shards(ref) if f not in ch]
    mnt, cache = os.path.join(tmp, "m5"), os.path.join(tmp, "c5")
    rc, out = mount(src, mnt, cal, cache)
    run("warm", mnt)
    if not ok(rc == 0 and ch and same, "mount + warm", out):
        return
    u, s = same[0], ch[0]
    fu = os.open(os.path.join(mnt, u), os.O_RDONLY)
    fs = os.open(os.path.join(mnt, s), os.O_RDONLY)
    want_s = read(os.path.join(ref, s))
    for name in (u, s):                      # same size, new bytes, mtime restored
        p = os.path.join(src, name)
        st0 = os.stat(p)
        with open(p, "r+b") as f:
            f.seek(st0.st_size - 64)
            f.write(b"\x55" * 64)
        os.utime(p, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    time.sleep(1.5)
    got_u = os.pread(fu, os.stat(os.path.join(src, u)).st_size, 0)
    ok(got_u == read(os.path.join(src, u)),
       "identical file, open before the rewrite: the kernel reads SRC itself (new bytes)")
    ok(os.pread(fs, len(want_s), 0) == want_s,
       "materialized shard, open before the rewrite: still its materialized bytes (export's)")
    for name in (u, s):
        try:
            os.close(os.open(os.path.join(mnt, name), os.O_RDONLY))
            ok(False, f"new open of {name} after the rewrite fails")
        except OSError as e:
            ok(e.errno == errno.EIO, f"new open of {name} after the rewrite: EIO", e)
    st = status(mnt)
    # (and those of shards made partly from it: a gate/up pair may span two shards)
    ok(not st["src_ok"] and st["files_materialized"] <= len(ch) - 1,
       "status: SRC changed; the rewritten shard's materialized file dropped", st)
    os.close(fu)
    os.close(fs)
    run("umount", mnt)


def g_umount(T):
    """umount with passthrough opens and mappings in flight."""
    src, cal, ref, tmp = T["src"], T["cal"], T["ref"], T["tmp"]
    mnt = os.path.join(tmp, "m6")
    rc, out = mount(src, mnt, cal, os.path.join(tmp, "c1"))
    run("warm", mnt)
    if not ok(rc == 0, "mount on the warm cache", out):
        return
    pid = daemon_pid(mnt)
    fds, maps = [], []
    for f in shards(ref)[:3]:
        fd = os.open(os.path.join(mnt, f), os.O_RDONLY)
        fds.append((f, fd))
        maps.append((f, mmap.mmap(fd, os.path.getsize(os.path.join(ref, f)),
                                  flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)))
    rc, out = run("umount", mnt, timeout=60)
    ok(rc == 0 and not mounted(mnt), "umount returns with passthrough opens in flight", out)
    ok(all(os.pread(fd, 1 << 24, 0) == read(os.path.join(ref, f)) for f, fd in fds) and
       all(m[:] == read(os.path.join(ref, f)) for f, m in maps),
       "open files and mappings still read export's bytes")
    for _, m in maps:
        m.close()
    for _, fd in fds:
        os.close(fd)
    for _ in range(100):
        if not alive(pid):
            break
        time.sleep(0.1)
    ok(not alive(pid), "the daemon exits once they are closed")


def g_off(T):
    src, cal, ref, tmp = T["src"], T["cal"], T["ref"], T["tmp"]
    mnt, cache = os.path.join(tmp, "m7"), os.path.join(tmp, "c7")
    rc, out = mount(src, mnt, cal, cache, "--passthrough", "off")
    if not ok(rc == 0, "mount --passthrough off", out):
        return
    st = status(mnt)
    ok(st["passthrough"] is False and "off" in st["passthrough_why"] and
       st["files_passthrough"] == 0, "status: passthrough off, and why", st)
    r0 = reads(mnt)
    tree_views(mnt, ref, "--passthrough off")
    ok(reads(mnt) > r0, "--passthrough off: reads reach the daemon (copy path)")
    rc, out = run("warm", mnt)
    st = status(mnt)
    ok(rc == 0 and st["files_materialized"] == 0 and st["cache_files"] == 0 and
       "passthrough off" in out, "--passthrough off: warm fills job entries, materializes nothing",
       out + json.dumps(st))
    drop_caches()
    tree_views(mnt, ref, "--passthrough off, warm cache")
    run("umount", mnt)
    rc, out = mount(src, mnt, cal, cache, "--passthrough", "on")
    ok(rc == 0 and status(mnt)["passthrough"] is True, "--passthrough on as root", out)
    run("umount", mnt)


def g_user(T):
    """--passthrough on without CAP_SYS_ADMIN (the user rqsec, running its own
    copy of the binary: the checkout may be out of its reach): refused, says why."""
    src, cal, tmp = T["src"], T["cal"], T["tmp"]
    uid = rqtap.ensure_user(USER)
    if not ok(uid is not None, f"the unprivileged user {USER} exists (useradd)"):
        return
    exe = rqtap.user_binary(USER, tmp)
    if exe is None:
        return
    um, uc = os.path.join(tmp, "m-user"), os.path.join(tmp, "c-user")
    os.makedirs(um)
    os.makedirs(uc)
    os.chown(um, uid, -1)
    os.chown(uc, uid, -1)
    p = subprocess.run(["runuser", "-u", USER, "--", exe, "mount", src, um, "--calib", cal,
                        "--cache", uc, "--passthrough", "on"], capture_output=True, text=True,
                       timeout=60)
    MOUNTS.append(um)
    ok(p.returncode == 1 and "CAP_SYS_ADMIN" in p.stderr and not mounted(um),
       "--passthrough on without CAP_SYS_ADMIN: refused, says why", p.stdout + p.stderr)


def g_rewrite(T):
    """A materialized file rewritten in place / truncated while mounted."""
    src, cal, ref, tmp = T["src"], T["cal"], T["ref"], T["tmp"]
    mnt, cache = os.path.join(tmp, "m8"), os.path.join(tmp, "c8")
    rc, out = mount(src, mnt, cal, cache, "--log", os.path.join(tmp, "m8.log"))
    rc2, out2 = run("warm", mnt)
    fdir = os.path.join(cache, "files")
    bins = sorted(os.path.join(fdir, x) for x in os.listdir(fdir) if x.endswith(".bin")) \
        if os.path.isdir(fdir) else []
    if not ok(rc == 0 and rc2 == 0 and len(bins) >= 2, "mount + warm: materialized files",
              out + out2):
        return
    st0 = os.stat(bins[0])
    with open(bins[0], "r+b") as f:          # rewritten in place, mtime restored
        f.seek(st0.st_size // 3)
        b = f.read(1)
        f.seek(st0.st_size // 3)
        f.write(bytes([b[0] ^ 0x01]))
    os.utime(bins[0], ns=(st0.st_atime_ns, st0.st_mtime_ns))
    os.truncate(bins[1], os.path.getsize(bins[1]) // 2)
    drop_caches()
    tree_views(mnt, ref, "materialized files rewritten/truncated while mounted")
    st = status(mnt)
    log = open(os.path.join(tmp, "m8.log")).read()
    ok(st["cache_corrupt"] >= 2 and "dropped" in log,
       "both changes detected at the next open; the shards served through their jobs", log[-1500:])
    run("umount", mnt)


def body(T):
    tmp = T["tmp"]
    T.update({"ref": os.path.join(tmp, "ref"), "src2": os.path.join(tmp, "src2")})
    shutil.copytree(T["src"], T["src2"])
    rc, out = run("export", T["src"], T["ref"], "--calib", T["cal"], "--quiet")
    if not ok(rc == 0, "export (the reference)", out):
        return 1
    for g in rqtap.selected((g_basic, g_held, g_kill, g_flip, g_src, g_umount, g_rewrite, g_off,
                             g_user)):
        g(T)
    rqtap.cleanup()                         # the mounts first: then the user may go
    left = rqtap.remove_users()
    ok(not left, f"the user {USER} is removed again (if this test made it)", left)
    return 0


def main():
    return rqtap.root_main("rq-pt-", body)


if __name__ == "__main__":
    sys.exit(main())
