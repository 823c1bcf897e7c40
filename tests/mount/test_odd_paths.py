#!/usr/bin/env python3
"""Paths as users write them, and mount options that are requantfs's own
(issue "Hostile inputs, third round", classes 5 and 7). TAP output.

Usage: test_odd_paths.py REQUANTFS

SRC, MNT, CALIB and the cache each hold a space, a tab, a backslash, a
newline and non-ASCII letters (mountinfo shows such a mount point as
\\040 \\011 \\134 \\012):
  - mount, status (text and --json), warm, reads equal to export's, the
    readahead applied to that mount (found through mountinfo), umount;
  - the fstab path: mount(8) -> mount.fuse3 -> requantfs SRC MNT -o ..., with
    `mount -t fuse 'REQUANTFS#SRC' MNT -o calib=...` and an fstab line whose
    fields are written with fstab's octal escapes (mount -T), unmounted by
    umount(8) and by `requantfs umount`;
  - -o fsname=, subtype=, max_read=, blkdev (what requantfs sets itself) are
    refused with the option named, on the command line and through mount(8);
    -o default_permissions is ignored with a warning.
The fstab path names this build by its absolute path in the old
`PROGRAM#SRC` form of type fuse, so no link on PATH is needed.
Needs root and /dev/fuse (as CI has)."""
import json, os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402  (tests/rqtap.py: TAP, run, mounts cleaned up at exit)
from rqtap import ok, run, mounted, daemon_pid, alive, MOUNTS  # noqa: E402

ODD = " \t\\\n\u00e9\u6a21\u578b"     # space, tab, backslash, newline, é, 模型


def read(p):
    with open(p, "rb") as f:
        return f.read()


def sh(*cmd, timeout=120):
    try:
        p = subprocess.run(list(cmd), capture_output=True, text=True, errors="replace",
                           timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return -999, "TIMEOUT: " + " ".join(map(repr, cmd))


def wait_gone(pid, mnt, secs=20):
    t = time.time() + secs
    while time.time() < t and (mounted(mnt) or (pid and alive(pid))):
        time.sleep(0.05)
    return not mounted(mnt) and not (pid and alive(pid))


def fstab_escape(s):
    """A field of an fstab line: space, tab, newline and backslash as octal."""
    return "".join("\\%03o" % ord(c) if c in " \t\n\\" else c for c in s)


def same_as(mnt, ref):
    names = sorted(os.listdir(ref))
    bad = [f for f in names if read(os.path.join(mnt, f)) != read(os.path.join(ref, f))]
    return sorted(os.listdir(mnt)) == names and not bad, bad


def main():
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("1..0 # SKIP needs root and /dev/fuse (as CI has)")
        return 77
    rqtap.init(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="rq-odd-paths-")
    try:
        body(tmp)
    finally:
        rqtap.cleanup(tmp)
    return rqtap.finish()


def body(tmp):
    plain_src, plain_cal = os.path.join(tmp, "src"), os.path.join(tmp, "cal")
    rc, out = run("mkckpt", plain_src, "--calib-out", plain_cal)
    if not ok(rc == 0, "mkckpt makes a checkpoint and its twin", out):
        return
    ref = os.path.join(tmp, "ref")
    rc, out = run("export", plain_src, ref, "--calib", plain_cal, "--quiet")
    if not ok(rc == 0, "export of the plain paths: the reference bytes", out):
        return
    src = os.path.join(tmp, "s r c" + ODD)
    caldir = os.path.join(tmp, "c a l" + ODD)
    os.rename(plain_src, src)
    os.makedirs(caldir)
    cal = os.path.join(caldir, "cal" + ODD)
    os.rename(plain_cal, cal)
    cache = os.path.join(tmp, "c a c h e" + ODD)
    mnt = os.path.join(tmp, "m n t" + ODD)
    os.makedirs(mnt)

    # export with odd SRC, CALIB and DST
    dst = os.path.join(tmp, "d s t" + ODD)
    rc, out = run("export", src, dst, "--calib", cal, "--quiet")
    good, bad = same_as(dst, ref) if rc == 0 else (False, out)
    ok(good, "export SRC DST --calib CALIB with odd paths: export's bytes", bad)
    shutil.rmtree(dst, ignore_errors=True)

    # mount, status, warm, readahead, umount
    MOUNTS.append(mnt)
    rc, out = run("mount", src, mnt, "--calib", cal, "--cache", cache)
    if not ok(rc == 0 and mounted(mnt) == "fuse.requantfs",
              "mount with a space, tab, backslash, newline and non-ASCII in SRC, MNT, CALIB "
              "and the cache", out):
        return
    pid = daemon_pid(mnt)
    ok(pid > 0 and alive(pid), "its daemon is found through mountinfo (decoded)", pid)
    good, bad = same_as(mnt, ref)
    ok(good, "every file read through the mount equals export's", bad)
    rc, out = run("status", mnt)
    ok(rc == 0 and src in out, "status MNT names SRC", out)
    rc, out = run("status", mnt, "--json")
    try:
        j = json.loads(out)
    except ValueError:
        j = {}
    ok(rc == 0 and j.get("src") == src and j.get("mountpoint") == mnt,
       "status --json: src and mountpoint exactly as given", out[:800])
    rc, out = run("warm", mnt)
    ok(rc == 0 and "ready" in out, "warm MNT", out)
    info = rqtap._mountinfo(mnt)
    ra = None
    if info:
        try:
            ra = open(f"/sys/class/bdi/{info[2]}/read_ahead_kb").read().strip()
        except OSError as e:
            ra = str(e)
    ok(ra == "8192", "the mount's readahead was raised to --readahead's default (8192 KiB): "
       "the daemon found its own mount in mountinfo", ra)
    rc, out = run("umount", mnt)
    ok(rc == 0 and wait_gone(pid, mnt), "umount MNT: unmounted, daemon gone", out)

    # our own FUSE options: refused, nothing mounted (a plain mount point of
    # their own: these cases do not depend on the ones above)
    mnt = os.path.join(tmp, "own")
    os.makedirs(mnt)
    MOUNTS.append(mnt)
    for opt in ("fsname=evil", "subtype=evil", "max_read=4096", "blkdev"):
        rc, out = run("mount", src, mnt, "--calib", cal, "--cache", cache, "-o",
                      "allow_other," + opt)
        ok(rc == 2 and f"-o {opt}: not allowed" in out and not mounted(mnt),
           f"-o {opt} is refused (usage error, the option named), nothing mounted", out)
        if mounted(mnt):
            rqtap.unmount(mnt)
    rc, out = run("mount", src, mnt, "--calib", cal, "--cache", cache, "-o",
                  "default_permissions")
    ok(rc == 0 and "warning: -o default_permissions" in out and
       mounted(mnt) == "fuse.requantfs", "-o default_permissions: mounted, with a warning", out)
    pid = daemon_pid(mnt)
    rc, out = run("umount", mnt)
    ok(rc == 0 and wait_gone(pid, mnt), "umount", out)

    # the fstab path: mount(8) -> mount.fuse3 -> requantfs SRC MNT -o OPTS
    if not ok(shutil.which("mount.fuse3"), "mount.fuse3 is installed (fuse3)"):
        return
    rq = rqtap.RQ
    opts = f"calib={cal},cache={cache},allow_other,nofail"
    mnt = os.path.join(tmp, "f m n t" + ODD)
    os.makedirs(mnt)
    MOUNTS.append(mnt)
    rc, out = sh("mount", "-t", "fuse", f"{rq}#{src}", mnt, "-o", opts)
    if ok(rc == 0 and mounted(mnt) == "fuse.requantfs",
          "mount -t fuse 'REQUANTFS#SRC' MNT -o calib=...: mount.fuse3 runs requantfs with "
          "the odd paths", out):
        pid = daemon_pid(mnt)
        ok(read(os.path.join(mnt, "config.json")) == read(os.path.join(ref, "config.json")),
           "the fstab-path mount reads export's bytes")
        rc, out = sh("umount", mnt)
        ok(rc == 0 and wait_gone(pid, mnt), "umount(8) MNT: unmounted, daemon gone", out)
    fstab = os.path.join(tmp, "fstab")
    with open(fstab, "w") as f:
        f.write(f"# odd paths, escaped as fstab(5) says\n{fstab_escape(rq + '#' + src)} "
                f"{fstab_escape(mnt)} fuse {fstab_escape(opts)} 0 0\n")
    rc, out = sh("mount", "-T", fstab, mnt)
    if ok(rc == 0 and mounted(mnt) == "fuse.requantfs",
          "an fstab line with \\040 \\011 \\012 \\134 in SRC, MNT and calib= (mount -T)",
          out + open(fstab).read()):
        pid = daemon_pid(mnt)
        rc, out = run("umount", mnt)
        ok(rc == 0 and wait_gone(pid, mnt), "requantfs umount of the fstab mount", out)
    mnt = os.path.join(tmp, "own")
    for opt in ("fsname=evil", "subtype=evil"):
        rc, out = sh("mount", "-t", "fuse", f"{rq}#{src}", mnt, "-o", f"{opts},{opt}")
        ok(rc != 0 and f"-o {opt}: not allowed" in out and not mounted(mnt),
           f"fstab path: -o {opt} refused, the option named, nothing mounted", out)
        if mounted(mnt):
            rqtap.unmount(mnt)


if __name__ == "__main__":
    sys.exit(main())
