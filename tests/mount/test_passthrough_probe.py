#!/usr/bin/env python3
"""Kernel FUSE passthrough through fs/mount_pt.c, on tests/mount/pt_probe (TAP).

Usage: test_passthrough_probe.py PT_PROBE

Mounts pt_probe as root over real files and checks: bytes through the mount
equal the backing file (read, pread at random offsets, mmap private and
shared, 8 threads at once) with zero READ requests reaching the daemon for
a passthrough file; a copy-path file alongside; clone_fd on and off; the
kernel's io-mode rules (cached open vs passthrough open: ETXTBSY / EINVAL,
two backing ids for one inode: EBUSY; the user sees EIO); the backing file
rewritten, truncated and replaced underneath; lazy unmount and kill -9 with
opens in flight; the copy-path fallback when passthrough is not requested.
Sequential read GB/s (passthrough, copy path, native; cold and warm) are
printed as TAP comments, not judged.
"""
import mmap
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

PROBE = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
N = 0
FAILED = 0


def tap(ok, name, detail=None):
    global N, FAILED
    N += 1
    if not ok:
        FAILED += 1
    print(("ok" if ok else "not ok") + " %d - %s" % (N, name))
    if detail and not ok:
        for line in str(detail).splitlines():
            print("# " + line)
    sys.stdout.flush()
    return ok


def skip(name, why):
    global N
    N += 1
    print("ok %d - %s # SKIP %s" % (N, name, why))
    sys.stdout.flush()


def note(msg):
    for line in str(msg).splitlines():
        print("# " + line)
    sys.stdout.flush()


def errno_of(fn):
    """0 when fn() succeeds, else the OSError's errno."""
    try:
        fn()
        return 0
    except OSError as e:
        return e.errno


class Probe:
    """One pt_probe mount: MODE:NAME:PATH specs, extra flags."""

    def __init__(self, root, specs, flags=()):
        self.mnt = tempfile.mkdtemp(prefix="mnt.", dir=root)
        self.err = open(os.path.join(root, "probe.%d.log" % len(os.listdir(root))), "w+")
        self.p = subprocess.Popen([PROBE] + list(flags) + [self.mnt] + list(specs),
                                  stdout=self.err, stderr=subprocess.STDOUT)
        t0 = time.time()
        while time.time() - t0 < 10:
            if self.p.poll() is not None:
                raise RuntimeError("pt_probe exited %d: %s" % (self.p.returncode, self.log()))
            if os.path.ismount(self.mnt):
                try:
                    self.stats()
                    return
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError("pt_probe did not mount: " + self.log())

    def path(self, name):
        return os.path.join(self.mnt, name)

    def log(self):
        self.err.flush()
        self.err.seek(0)
        return self.err.read()

    def stats(self):
        with open(self.path(".stats")) as f:
            text = f.read()
        st = {"files": {}}
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if k == "file":
                w = v.split()
                st["files"][w[0]] = {w[i]: int(w[i + 1]) for i in range(1, len(w) - 1, 2)}
            else:
                st[k] = v
        return st

    def fstat(self, name):
        return self.stats()["files"][name]

    def stop(self, timeout=10):
        if self.p.poll() is None and os.path.ismount(self.mnt):
            subprocess.run(["umount", self.mnt], stderr=subprocess.DEVNULL)
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            subprocess.run(["umount", "-l", self.mnt], stderr=subprocess.DEVNULL)
            self.p.kill()
            self.p.wait()
            return False
        log = self.log()
        if self.p.returncode != 0 or "Sanitizer" in log or "runtime error" in log:
            note("pt_probe exited %d:\n%s" % (self.p.returncode, log[-2000:]))
            return False
        return True


def read_all(path, flags=0):
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        out = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(out)
            out.append(b)
    finally:
        os.close(fd)


def mmap_read(path, shared):
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED if shared else mmap.MAP_PRIVATE,
                      prot=mmap.PROT_READ)
        try:
            return bytes(m)
        finally:
            m.close()


def pread_ok(path, data, n=300, seed=1):
    rnd = random.Random(seed)
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(n):
            off = rnd.randrange(0, len(data))
            size = rnd.choice([1, 7, 4096, 65536, 1 << 20, rnd.randrange(1, 3 << 20)])
            got = os.pread(fd, size, off)
            if got != data[off:off + size]:
                return "pread(%d, %d) differs" % (off, size)
    finally:
        os.close(fd)
    return None


def seq_gbps(path, size):
    buf = bytearray(1 << 20)
    fd = os.open(path, os.O_RDONLY)
    t0 = time.perf_counter()
    n = 0
    with os.fdopen(fd, "rb", buffering=0) as f:
        while True:
            k = f.readinto(buf)
            if not k:
                break
            n += k
    dt = time.perf_counter() - t0
    assert n == size, (path, n, size)
    return n / dt / 1e9


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def sigbus_after_truncate(path, backing, newsize, off):
    """In a child: maps all of path (shared), truncates backing to newsize,
    touches byte `off`. (died of SIGBUS, returncode)."""
    code = ("import mmap,os,sys\nf=open(sys.argv[1],'rb')\n"
            "m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\n"
            "m[int(sys.argv[4])]\nos.truncate(sys.argv[2],int(sys.argv[3]))\n"
            "print(m[int(sys.argv[4])])\n")
    r = subprocess.run([sys.executable, "-c", code, path, backing, str(newsize), str(off)],
                       capture_output=True)
    return r.returncode == -signal.SIGBUS, r.returncode


def main():
    if PROBE is None or not os.access(PROBE, os.X_OK):
        print("1..0 # SKIP pt_probe not given (meson passes it)")
        return 0
    if os.geteuid() != 0:
        print("1..0 # SKIP passthrough needs CAP_SYS_ADMIN: run as root")
        return 0
    if not os.path.exists("/dev/fuse"):
        print("1..0 # SKIP /dev/fuse is missing")
        return 0

    root = tempfile.mkdtemp(prefix="ptprobe.", dir=os.environ.get("TMPDIR", "/var/tmp"))
    rnd = random.Random(7)
    A = os.urandom(8 << 20) + b"tail-not-page-aligned"
    B = os.urandom(3 << 20)
    C = bytes(rnd.getrandbits(8) for _ in range(100000))
    pa, pb, pc = (os.path.join(root, n) for n in ("a.bin", "b.bin", "c.bin"))
    for p, d in ((pa, A), (pb, B), (pc, C)):
        with open(p, "wb") as f:
            f.write(d)
    probes = []
    try:
        run(root, A, B, C, pa, pb, pc, probes)
    finally:
        for pr in probes:
            if pr.p.poll() is None:
                pr.stop(5)
        subprocess.run(["rm", "-rf", root])
    print("1..%d" % N)
    return 1 if FAILED else 0


def run(root, A, B, C, pa, pb, pc, probes):
    # ---- basic: passthrough file + copy file, clone_fd on (default) -------
    pr = Probe(root, ["pt:a:" + pa, "copy:b:" + pb])
    probes.append(pr)
    st = pr.stats()
    note("negotiated: enabled=%s kernel 7.%s splice_write=%s why=%r"
         % (st["enabled"], st["kernel_minor"], st["splice_write"], st.get("why", "")))
    have_pt = st["enabled"] == "1"
    if not have_pt:
        note("passthrough is off: " + st.get("why", ""))
        # only a kernel that does not offer it excuses us
        tap("does not offer" in st.get("why", ""), "passthrough negotiated whenever the "
            "kernel offers it", st)
    else:
        tap(True, "passthrough negotiated (kernel 7.%s, clone_fd)" % st["kernel_minor"])
    tap(read_all(pr.path("a")) == A, "read(): passthrough file equals its backing file")
    tap(pread_ok(pr.path("a"), A) is None, "pread at random offsets: passthrough file",
        pread_ok(pr.path("a"), A))
    tap(mmap_read(pr.path("a"), False) == A, "mmap MAP_PRIVATE: passthrough file")
    tap(mmap_read(pr.path("a"), True) == A, "mmap MAP_SHARED: passthrough file")
    tap(read_all(pr.path("b")) == B, "read(): copy-path file alongside")
    tap(pread_ok(pr.path("b"), B, 100) is None, "pread at random offsets: copy-path file")
    tap(mmap_read(pr.path("b"), True) == B, "mmap MAP_SHARED: copy-path file")
    fa, fb = pr.fstat("a"), pr.fstat("b")
    if have_pt:
        tap(fa["reads"] == 0 and fa["pt_opens"] >= 4 and fa["copy_opens"] == 0,
            "passthrough really happened: 0 READ requests for the passthrough file", fa)
    else:
        skip("passthrough really happened", "passthrough is off")
    tap(fb["reads"] > 0 and fb["pt_opens"] == 0, "the copy-path file was served by READ "
        "requests (%d)" % fb["reads"], fb)

    # 8 threads, both files, at once (clone_fd channels)
    errs = []

    def worker(i):
        try:
            for name, data in (("a", A), ("b", B)):
                e = pread_ok(pr.path(name), data, 60, seed=100 + i)
                if e:
                    errs.append(name + ": " + e)
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append(repr(e))
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    tap(not errs, "8 threads pread both files at once", errs)
    if have_pt:
        tap(pr.fstat("a")["reads"] == 0, "still 0 READ requests for the passthrough file")
    else:
        skip("still 0 READ requests", "passthrough is off")

    # ---- backing file changed underneath ---------------------------------
    if have_pt:
        backing_changes(root, pr, A, pa)
    else:
        skip("backing file changed underneath", "passthrough is off")
    tap(pr.stop(), "unmount: daemon exits cleanly")

    # ---- clone_fd off ------------------------------------------------------
    pr = Probe(root, ["pt:c:" + pc], ["--no-clone"])
    probes.append(pr)
    ok = read_all(pr.path("c")) == C and mmap_read(pr.path("c"), True) == C
    fc = pr.fstat("c")
    tap(ok and (not have_pt or fc["reads"] == 0), "clone_fd off: passthrough file equals "
        "backing, %d READ requests" % fc["reads"], fc)
    tap(pr.stop(), "unmount (clone_fd off)")

    # ---- io-mode rules -----------------------------------------------------
    if have_pt:
        io_mode_rules(root, probes, A, B, pa, pb)
    else:
        skip("io-mode rules (ETXTBSY, EINVAL, EBUSY)", "passthrough is off")

    # ---- unmount with opens in flight --------------------------------------
    if have_pt:
        opens_in_flight(root, probes, A, B, pa, pb)
    else:
        skip("unmount with opens in flight", "passthrough is off")

    # ---- fallback: passthrough not requested -------------------------------
    pr = Probe(root, ["pt:a:" + pa, "copy:b:" + pb], ["--no-pt"])
    probes.append(pr)
    st = pr.stats()
    tap(st["enabled"] == "0" and "not requested" in st.get("why", ""),
        "--no-pt: passthrough off, reason given (%r)" % st.get("why", ""), st)
    ok = (read_all(pr.path("a")) == A and mmap_read(pr.path("a"), True) == A and
          pread_ok(pr.path("a"), A, 100) is None and read_all(pr.path("b")) == B)
    fa = pr.fstat("a")
    tap(ok and fa["reads"] > 0 and fa["pt_opens"] == 0 and fa["copy_opens"] > 0,
        "--no-pt: the pt file falls back to the copy path and reads right (%d READs)"
        % fa["reads"], fa)
    tap(pr.stop(), "unmount (--no-pt)")

    # ---- figures -------------------------------------------------------------
    if os.environ.get("PT_PROBE_NO_BENCH"):
        skip("sequential read GB/s", "PT_PROBE_NO_BENCH is set")
    else:
        bench(root, probes, have_pt)


def backing_changes(root, pr, A, pa):
    # rewritten in place while a passthrough fd is open: the read goes to the
    # backing file, so the new bytes show at once (no stale FUSE page cache)
    fd = os.open(pr.path("a"), os.O_RDONLY)
    try:
        os.pread(fd, 4096, 0)
        new = os.urandom(65536)
        wfd = os.open(pa, os.O_WRONLY)
        os.pwrite(wfd, new, 1 << 20)
        os.close(wfd)
        got = os.pread(fd, 65536, 1 << 20)
        tap(got == new, "backing rewritten in place: an open passthrough fd reads the new "
            "bytes at once")
        m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        tap(m[1 << 20:(1 << 20) + 65536] == new, "backing rewritten in place: a mapping "
            "shows the new bytes (it maps the backing file)")
        m.close()
        A2 = A[:1 << 20] + new + A[(1 << 20) + 65536:]

        # truncated underneath: reads stop at the backing file's new end
        half = len(A2) // 2
        bus, rc = sigbus_after_truncate(pr.path("a"), pa, half, half + 8192)
        tap(bus, "backing truncated under a mapping of the passthrough file: touching past "
            "the new end raises SIGBUS", "rc %s" % rc)
        got = b""
        off = 0
        while True:
            b = os.pread(fd, 1 << 20, off)
            if not b:
                break
            got += b
            off += len(b)
        tap(got == A2[:half], "backing truncated to %d: reads through the open fd end "
            "there (%d bytes)" % (half, len(got)))
        fsz = os.fstat(fd).st_size
        note("after truncation: fstat through the mount says %d (daemon attr, TTL 1 s), "
             "backing is %d" % (fsz, half))
        time.sleep(1.2)
        note("after the attr TTL: stat says %d" % os.stat(pr.path("a")).st_size)
    finally:
        os.close(fd)
    # replaced by rename: the daemon keeps its fd on the old inode, and the
    # kernel keeps the inode's backing file; new opens still show old bytes
    tmp = pa + ".new"
    with open(tmp, "wb") as f:
        f.write(b"R" * 4096)
    os.rename(tmp, pa)
    got = read_all(pr.path("a"))
    tap(got == A2[:half], "backing replaced by rename: the mount keeps serving the old "
        "inode (daemon holds its fd)", "got %d bytes" % len(got))
    with open(pa, "wb") as f:
        f.write(A)


def io_mode_rules(root, probes, A, B, pa, pb):
    pr = Probe(root, ["mixed:m:" + pa, "fresh:f:" + pb])
    probes.append(pr)
    m = pr.path("m")
    # cached-mode open first (O_NOATIME asks pt_probe for the copy path)
    c = os.open(m, os.O_RDONLY | os.O_NOATIME)
    cached_seen = pr.fstat("m")["copy_opens"] == 1
    e = errno_of(lambda: os.close(os.open(m, os.O_RDONLY)))
    tap(cached_seen and e == 5, "cached open held, then passthrough open of the same "
        "inode: EIO (kernel ETXTBSY)", "errno %d, stats %s" % (e, pr.fstat("m")))
    tap(os.pread(c, 4096, 4096) == A[4096:8192], "the cached-mode fd still reads right")
    os.close(c)
    p = os.open(m, os.O_RDONLY)
    e2 = errno_of(lambda: os.close(os.open(m, os.O_RDONLY | os.O_NOATIME)))
    tap(e2 == 5, "passthrough open held, then cached open of the same inode: EIO "
        "(kernel EINVAL: all opens must be passthrough)", "errno %d" % e2)
    e3 = errno_of(lambda: os.close(os.open(m, os.O_RDONLY)))
    tap(e3 == 0 and os.pread(p, 4096, 0) == A[:4096], "a second passthrough open with the "
        "same backing id is fine", "errno %d" % e3)
    os.close(p)
    time.sleep(0.2)   # release is asynchronous
    c = os.open(m, os.O_RDONLY | os.O_NOATIME)
    tap(os.pread(c, 4096, 0) == A[:4096], "after the last passthrough close, cached opens "
        "work again")
    os.close(c)
    time.sleep(0.2)
    fm = pr.fstat("m")
    note("mixed file: %s (a refused open is still replied by the daemon, then RELEASEd by "
         "the kernel)" % fm)
    tap(fm["releases"] == fm["pt_opens"] + fm["copy_opens"], "every open the daemon "
        "replied got its RELEASE, refused ones included", fm)

    # two backing ids for one inode: a new id per open
    f = pr.path("f")
    x = os.open(f, os.O_RDONLY)
    e = errno_of(lambda: os.close(os.open(f, os.O_RDONLY)))
    tap(e == 5, "passthrough open held with id 1, second open with id 2: EIO (kernel EBUSY)",
        "errno %d" % e)
    tap(os.pread(x, 65536, 12345) == B[12345:12345 + 65536], "the first fd still reads "
        "right")
    os.close(x)
    time.sleep(0.2)
    tap(read_all(f) == B, "after it is closed, an open with a new id works")
    ff = pr.fstat("f")
    tap(ff["reads"] == 0, "fresh-id file: 0 READ requests", ff)
    time.sleep(0.2)
    st = pr.stats()
    note("backing ids: opened %s, closed %s (fresh ids are closed at RELEASE)"
         % (st["backing_open"], st["backing_close"]))
    tap(st["backing_close"] == str(pr.fstat("f")["pt_opens"]), "every fresh id was closed "
        "at its RELEASE", st)
    tap(pr.stop(), "unmount (io-mode rules)")

    # closing the id right after the reply races with the kernel's lookup
    pr = Probe(root, ["early:e:" + pa])
    probes.append(pr)
    fails = bad = 0
    for i in range(40):
        try:
            fd = os.open(pr.path("e"), os.O_RDONLY)
        except OSError:
            fails += 1
            continue
        if os.pread(fd, 4096, i * 4096) != A[i * 4096:(i + 1) * 4096]:
            bad += 1
        os.close(fd)
        time.sleep(0.01)
    note("backing id closed right after the OPEN reply: %d of 40 opens failed with EIO "
         "(the kernel looks the id up after our write returns)" % fails)
    tap(bad == 0, "opens that won the race read right although their id is closed")
    tap(pr.stop(), "unmount (early close)")


def opens_in_flight(root, probes, A, B, pa, pb):
    # lazy unmount with a passthrough fd, a mapping and a copy fd open
    pr = Probe(root, ["pt:a:" + pa, "copy:b:" + pb])
    probes.append(pr)
    fa = os.open(pr.path("a"), os.O_RDONLY)
    fb = os.open(pr.path("b"), os.O_RDONLY)
    mp = mmap.mmap(fa, 0, prot=mmap.PROT_READ)
    r = subprocess.run(["umount", "-l", pr.mnt], capture_output=True, text=True)
    tap(r.returncode == 0, "umount -l with opens in flight", r.stderr)
    ok = (os.pread(fa, 4096, 5 << 20) == A[5 << 20:(5 << 20) + 4096] and
          mp[(7 << 20):(7 << 20) + 100] == A[(7 << 20):(7 << 20) + 100] and
          os.pread(fb, 4096, 1 << 20) == B[1 << 20:(1 << 20) + 4096])
    tap(ok, "after the lazy unmount, open fds and mappings still read right")
    alive = pr.p.poll() is None
    mp.close()
    os.close(fa)
    os.close(fb)
    try:
        pr.p.wait(10)
        gone = True
    except subprocess.TimeoutExpired:
        gone = False
    tap(alive and gone, "the daemon serves until the last close, then exits (rc %s)"
        % pr.p.returncode)

    # kill -9 of the daemon with a passthrough fd open
    pr = Probe(root, ["pt:a:" + pa, "copy:b:" + pb])
    probes.append(pr)
    fa = os.open(pr.path("a"), os.O_RDONLY)
    fb = os.open(pr.path("b"), os.O_RDONLY)   # nothing of b is cached yet
    pr.p.kill()
    pr.p.wait()
    ea = errno_of(lambda: os.pread(fa, 4096, 0))
    eb = errno_of(lambda: os.pread(fb, 4096, 2 << 20))
    note("after kill -9 of the daemon: passthrough fd read -> %s, copy fd read -> %s"
         % (ea and os.strerror(ea) or "data", eb and os.strerror(eb) or "data"))
    tap(eb == 107, "after kill -9, a copy-path read fails with ENOTCONN",
        "errno %d" % eb)
    os.close(fa)
    os.close(fb)
    r = subprocess.run(["umount", pr.mnt], capture_output=True, text=True)
    if r.returncode:
        subprocess.run(["umount", "-l", pr.mnt])
    tap(not os.path.ismount(pr.mnt), "the dead mount unmounts")


def bench(root, probes, have_pt):
    size = 512 << 20
    big = os.path.join(root, "big.bin")
    with open(big, "wb") as f:
        blk = os.urandom(1 << 20)
        for i in range(size >> 20):
            f.write(i.to_bytes(8, "little") + blk[8:])
    pr = Probe(root, ["pt:pt:" + big, "copy:copy:" + big])
    probes.append(pr)
    can_drop = drop_caches()
    res = {}
    for name, path in (("native", big), ("passthrough", pr.path("pt")),
                       ("copy", pr.path("copy"))):
        if name == "passthrough" and not have_pt:
            continue
        cold = None
        if can_drop:
            drop_caches()
            cold = seq_gbps(path, size)
        seq_gbps(path, size)                  # warm the backing file
        warm = max(seq_gbps(path, size) for _ in range(2))
        res[name] = (cold, warm)
    for name, (cold, warm) in res.items():
        note("seq read 512 MiB %-12s cold %s GB/s   warm %.2f GB/s   (warm / native %.2f)"
             % (name, "%.2f" % cold if cold else "n/a", warm, warm / res["native"][1]))
    if not can_drop:
        note("cold figures need writing /proc/sys/vm/drop_caches (root, not in a container "
             "that forbids it)")
    st = pr.fstat("pt")
    tap(not have_pt or st["reads"] == 0, "benchmark: passthrough file took 0 READ requests "
        "(copy took %d)" % pr.fstat("copy")["reads"], st)
    pr.stop()
    os.unlink(big)


if __name__ == "__main__":
    sys.exit(main())
