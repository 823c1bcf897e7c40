#!/usr/bin/env python3
"""The mount and export as an attacker meets them (issue: a root mount let
any local user read any file through SRC symlinks). TAP output.

Usage: test_security.py REQUANTFS

Reproduces, with a real unprivileged user made here (useradd rqsec, removed
at exit; it runs only cat, head and ls, on the mount), on a root
mount with default options and with -o allow_other:
  - SRC/notes.txt -> /etc/shadow, SRC/secret.txt mode 0600: never readable
    by the other user (absent / EACCES), while the mount's owner reads what
    SRC lets it read; presented modes/owners follow SRC;
  - a FIFO and a link out of a hub snapshot's blobs/ are not presented; a
    checkpoint file (config.json) linking out of SRC and an index naming
    "../x" are refused with the file named;
  - export writes only what the mount presents, with SRC's modes;
  - /.requantfs is the owner's alone and accepts only canonical job names;
  - a SRC shard rewritten in place with size and mtime restored (ctime
    moves): a live mount fails its reads (EIO), a remount on the same cache
    serves the new bytes (equal to a fresh export), never old entries.
Needs root and /dev/fuse (as CI has)."""
import atexit, errno, json, os, pwd, shutil, signal, stat, struct, subprocess, sys
import tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402  (tests/rqtap.py: TAP, run, mounts cleaned up at exit)
from rqtap import ok, run, mounted, daemon_pid, alive, mount, MOUNTS, STOPPED, TIMEOUT  # noqa: E402

rqtap.init(sys.argv[1])
RQ = rqtap.RQ
USER = "rqsec"


def as_user(*cmd, timeout=30):
    """(rc, output) of cmd run as the unprivileged user."""
    try:
        p = subprocess.run(["runuser", "-u", USER, "--", *cmd], capture_output=True, errors="replace",
                           text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return -999, "TIMEOUT"


def read(path):
    with open(path, "rb") as f:
        return f.read()


def same_tree(a, b):
    bad = [f for f in sorted(os.listdir(b)) if read(os.path.join(a, f)) != read(os.path.join(b, f))]
    return not bad and sorted(os.listdir(a)) == sorted(os.listdir(b)), bad


def shards(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))


def rewritten_shard(src, ref):
    for f in shards(ref):
        if read(os.path.join(src, f)) != read(os.path.join(ref, f)):
            return f
    return None


def expert_weight_offset(path):
    """Absolute offset of the first BF16 routed-expert .weight in a shard."""
    with open(path, "rb") as f:
        hl = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(hl))
    for name, t in sorted(h.items()):
        if name != "__metadata__" and ".experts." in name and name.endswith(".weight") and \
                t["dtype"] == "BF16":
            return 8 + hl + t["data_offsets"][0]
    return None


def g_leak(T):
    """The reproducer of the issue, with and without allow_other."""
    src, cal, tmp = T["src"], T["cal"], T["tmp"]
    os.symlink("/etc/shadow", os.path.join(src, "notes.txt"))
    with open(os.path.join(src, "secret.txt"), "w") as f:
        f.write("root's secret\n")
    os.chmod(os.path.join(src, "secret.txt"), 0o600)
    os.symlink("config.json", os.path.join(src, "config-link.json"))   # stays inside SRC
    os.mkfifo(os.path.join(src, "pipe"))
    sh = shards(src)
    os.chmod(os.path.join(src, sh[0]), 0o600)                          # root's only
    uid = pwd.getpwnam(USER).pw_uid
    os.chown(os.path.join(src, sh[1]), uid, 0)                         # the user's own
    os.chmod(os.path.join(src, sh[1]), 0o640)

    rc, out = as_user("cat", os.path.join(src, "secret.txt"))
    rc2, out2 = as_user("head", "-1", os.path.join(src, "notes.txt"))
    ok(rc != 0 and rc2 != 0, "the originals are denied to the other user", out + out2)

    # export: only what the plan presents, with SRC's modes
    dst = os.path.join(tmp, "dst")
    rc, out = run("export", src, dst, "--calib", cal, "--quiet")
    names = sorted(os.listdir(dst)) if rc == 0 else []
    ok(rc == 0 and "notes.txt" not in names and "pipe" not in names and
       "secret.txt" in names and "config-link.json" in names,
       "export: link out of SRC and FIFO not written; in-SRC link and secret are", out + str(names))
    ok("notes.txt" in out and "out of SRC" in out and "pipe" in out,
       "export: each skipped entry is named in a warning", out)
    if rc == 0:
        modes = {f: stat.S_IMODE(os.stat(os.path.join(dst, f)).st_mode) for f in names}
        want = {f: stat.S_IMODE(os.stat(os.path.join(src, f)).st_mode) for f in names}
        ok(modes == want, "export: every file has its SRC file's mode", (modes, want))
        ok(read(os.path.join(dst, "config-link.json")) == read(os.path.join(src, "config.json")),
           "export: the in-SRC link is exported as its target's bytes")
        rc, out = as_user("cat", os.path.join(dst, "secret.txt"))
        ok(rc != 0 and "Permission denied" in out, "export: the secret stays 0600 in DST", out)

    # default options: no allow_other, so the other user cannot enter at all
    mnt, cache = os.path.join(tmp, "m1"), os.path.join(tmp, "c1")
    rc, out = mount(src, mnt, cal, cache)
    if not ok(rc == 0, "root mount with default options", out):
        return
    opts = [l for l in open("/proc/self/mountinfo") if f" {os.path.abspath(mnt)} " in l]
    ok(opts and "allow_other" not in opts[-1] and "default_permissions" in opts[-1],
       "no allow_other added; default_permissions on", opts)
    for f in ("notes.txt", "secret.txt", "config.json"):
        rc, out = as_user("cat", os.path.join(mnt, f))
        ok(rc != 0 and "Permission denied" in out, f"without allow_other: {f} -> EACCES", out)
    ok(not os.path.exists(os.path.join(mnt, "notes.txt")) and
       not os.path.exists(os.path.join(mnt, "pipe")), "the link to /etc/shadow and the FIFO "
       "are absent from the mount")
    ok(same_tree(mnt, dst)[0], "the mount presents exactly export's files and bytes",
       same_tree(mnt, dst)[1])
    logf = os.path.join(tmp, "m1.log")
    umount_ok = run("umount", mnt)[0] == 0
    ok(umount_ok, "umount")

    # -o allow_other: the modes decide, through default_permissions
    mnt = os.path.join(tmp, "m2")
    rc, out = mount(src, mnt, cal, cache, "-o", "allow_other", "--log", logf)
    if not ok(rc == 0, "root mount with -o allow_other", out):
        return
    log = open(logf).read() if os.path.exists(logf) else ""
    ok("notes.txt" in log and "out of SRC" in log and "pipe" in log and "FIFO" in log,
       "the daemon logs every entry it does not present", log)
    rc, out = as_user("head", "-2", os.path.join(mnt, "notes.txt"))
    ok(rc != 0 and "No such file" in out and "root:" not in out,
       "allow_other: notes.txt (-> /etc/shadow) does not exist", out)
    rc, out = as_user("cat", os.path.join(mnt, "secret.txt"))
    ok(rc != 0 and "Permission denied" in out and "secret" not in out.split(":")[-1],
       "allow_other: secret.txt (0600 root) -> EACCES", out)
    rc, out = as_user("cat", os.path.join(mnt, "config.json"))
    ok(rc == 0 and out.encode() == read(os.path.join(dst, "config.json")),
       "allow_other: a world-readable file reads as export's", out[:200])
    rc, out = as_user("ls", "-a", mnt)
    ok(rc == 0 and "notes.txt" not in out and "pipe" not in out and ".requantfs" not in out,
       "allow_other: listing shows neither the link nor the FIFO", out)
    for f, u, g, m in ((sh[0], 0, 0, 0o600), (sh[1], uid, 0, 0o640),
                       ("secret.txt", 0, 0, 0o600)):
        st = os.stat(os.path.join(mnt, f))
        ok((st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (u, g, m),
           f"{f}: presented owner/group/mode follow SRC", (st.st_uid, st.st_gid, oct(st.st_mode)))
    rc, out = as_user("cat", os.path.join(mnt, sh[0]))
    ok(rc != 0 and "Permission denied" in out, "allow_other: a 0600 root shard -> EACCES", out)
    p = subprocess.run(["runuser", "-u", USER, "--", "cat", os.path.join(mnt, sh[1])],
                       capture_output=True, timeout=60)
    ok(p.returncode == 0 and p.stdout == read(os.path.join(dst, sh[1])),
       "allow_other: the user's own shard reads as export's", p.stderr)
    for f in ("status", "jobs/0"):
        rc, out = as_user("cat", os.path.join(mnt, ".requantfs", f))
        ok(rc != 0 and "Permission denied" in out,
           f"allow_other: /.requantfs/{f} is the mount owner's alone", out)
    st = os.stat(os.path.join(mnt, ".requantfs"))
    ok(stat.S_IMODE(st.st_mode) == 0o500 and st.st_uid == 0, "/.requantfs is 0500, owner root")
    jobs = os.path.join(mnt, ".requantfs", "jobs")
    bad = [a for a in (" 1", "+1", "-0", "01", "1 ", "0x1", "1e0", "18446744073709551617")
           if os.path.exists(os.path.join(jobs, a))]
    ok(not bad and os.path.exists(os.path.join(jobs, "0")) and os.path.exists(os.path.join(jobs, "1")),
       "jobs/: only canonical names resolve", bad)
    run("umount", mnt)


def g_refuse(T):
    """Checkpoint files leading out of SRC and index names out of SRC are refused."""
    src, cal, tmp = T["pristine"], T["cal"], T["tmp"]
    s2 = os.path.join(tmp, "src-cfglink")
    shutil.copytree(src, s2)
    os.unlink(os.path.join(s2, "config.json"))
    os.symlink(os.path.join(src, "config.json"), os.path.join(s2, "config.json"))
    for cmd in (("export", s2, os.path.join(tmp, "d2"), "--calib", cal),
                ("mount", s2, os.path.join(tmp, "m3"), "--calib", cal, "--cache",
                 os.path.join(tmp, "c3"))):
        os.makedirs(os.path.join(tmp, "m3"), exist_ok=True)
        MOUNTS.append(os.path.join(tmp, "m3"))
        rc, out = run(*cmd)
        ok(rc == 1 and "config.json" in out and "out of SRC" in out and "refused" in out,
           f"{cmd[0]}: config.json linking out of SRC is refused, named", out)
    s3 = os.path.join(tmp, "src-index")
    shutil.copytree(src, s3)
    ip = os.path.join(s3, "model.safetensors.index.json")
    idx = json.load(open(ip))
    k = sorted(idx["weight_map"])[0]
    for evil in ("../src/" + idx["weight_map"][k], "/etc/passwd", "..", ""):
        idx["weight_map"][k] = evil
        json.dump(idx, open(ip, "w"), indent=2)
        rc, out = run("export", s3, os.path.join(tmp, "d3"), "--calib", cal)
        ok(rc == 1 and "not a file name inside SRC" in out and "index" in out,
           f"export: index naming {evil!r} is refused", out)
    ok(not os.path.exists(os.path.join(tmp, "d3")) or not os.listdir(os.path.join(tmp, "d3")),
       "nothing written for refused SRCs")
    # a hub snapshot: links into its own blobs/ are followed, others are not
    rc, out = run("mkckpt", os.path.join(tmp, "hubroot"), "--hub")
    snaps = [l.strip() for l in out.splitlines() if "/snapshots/" in l and os.path.isdir(l.strip())]
    if not ok(rc == 0 and snaps, "mkckpt --hub", out):
        return
    snap = snaps[-1]
    other = os.path.join(tmp, "hubroot-other", "blobs")
    os.makedirs(other)
    with open(os.path.join(other, "f" * 64), "w") as f:
        f.write("another repo's blob\n")
    os.symlink(os.path.join(other, "f" * 64), os.path.join(snap, "README.md"))
    os.symlink("/etc/shadow", os.path.join(snap, "shadow.txt"))
    d4 = os.path.join(tmp, "d4")
    rc, out = run("export", snap, d4, "--calib", cal, "--quiet")
    names = sorted(os.listdir(d4)) if rc == 0 else []
    ok(rc == 0 and "README.md" not in names and "shadow.txt" not in names and
       "config.json" in names and shards(d4), "hub: links into its blobs/ followed, links "
       "elsewhere not presented", out + str(names))


def g_ctime(T):
    """A SRC shard rewritten in place with size and mtime restored."""
    src, cal, tmp = T["ctime"], T["cal"], T["tmp"]
    ref0 = os.path.join(tmp, "ref-ctime0")
    run("export", src, ref0, "--calib", cal, "--quiet")
    sh = rewritten_shard(src, ref0)
    path = os.path.join(src, sh)
    off = expert_weight_offset(path)
    if not ok(sh and off, "a rewritten shard with a BF16 expert weight", (sh, off)):
        return
    mnt, cache = os.path.join(tmp, "m-ct"), os.path.join(tmp, "c-ct")
    rc, out = mount(src, mnt, cal, cache)
    if not ok(rc == 0, "mount", out):
        return
    rc, out = run("warm", mnt)
    ok(rc == 0 and read(os.path.join(mnt, sh)) == read(os.path.join(ref0, sh)),
       "warm; the shard equals export's", out)
    st0 = os.stat(path)
    time.sleep(0.05)
    with open(path, "r+b") as f:            # same size, same inode
        f.seek(off)
        f.write(b"\x00\x43\x00\x43")       # two BF16 128.0: new amax, new scales
    os.utime(path, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    st1 = os.stat(path)
    ok(st1.st_size == st0.st_size and st1.st_mtime_ns == st0.st_mtime_ns and
       st1.st_ino == st0.st_ino and st1.st_ctime_ns != st0.st_ctime_ns,
       "the rewrite kept size, mtime and inode (only ctime moved)")
    time.sleep(1.5)                          # the monitor's period
    subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], capture_output=True)
    try:
        read(os.path.join(mnt, sh))
        ok(False, "live mount: reads of the rewritten shard fail")
    except OSError as e:
        ok(e.errno == errno.EIO, "live mount: reads of the rewritten shard fail with EIO", e)
    run("umount", mnt)
    ref1 = os.path.join(tmp, "ref-ctime1")
    rc, out = run("export", src, ref1, "--calib", cal, "--quiet")
    ok(rc == 0 and read(os.path.join(ref1, sh)) != read(os.path.join(ref0, sh)),
       "a fresh export of the rewritten SRC differs", out)
    rc, out = mount(src, mnt, cal, cache)
    if not ok(rc == 0, "remount on the same cache", out):
        return
    ok(read(os.path.join(mnt, sh)) == read(os.path.join(ref1, sh)),
       "remount: the new bytes are served (no entry of the old bytes reused)")
    st = json.load(open(os.path.join(mnt, ".requantfs", "status")))
    ok(st["jobs_run"] > 0, "remount: the rewritten modules were quantized again", st)
    run("umount", mnt)


def body(T):
    if rqtap.ensure_user(USER) is None:
        return not ok(False, f"cannot create the unprivileged user {USER} (useradd)")
    tmp = T["tmp"]
    T.update({"pristine": os.path.join(tmp, "pristine"), "ctime": os.path.join(tmp, "src-ctime")})
    shutil.copytree(T["src"], T["pristine"], symlinks=True)
    shutil.copytree(T["src"], T["ctime"], symlinks=True)
    os.chmod(T["src"], 0o755)
    g_leak(T)
    g_refuse(T)
    g_ctime(T)
    rqtap.cleanup()                         # the mounts first: then the user may go
    left = rqtap.remove_users()
    ok(not left, f"the user {USER} is removed again (if this test made it)", left)
    return 0


def main():
    return rqtap.root_main("rq-sec-", body)


if __name__ == "__main__":
    sys.exit(main())
