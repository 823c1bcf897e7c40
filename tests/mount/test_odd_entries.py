#!/usr/bin/env python3
"""Odd entries in SRC (issue "Hostile inputs, third round", class 4): what
README "Only regular files inside SRC are presented" promises. TAP output.

Usage: test_odd_entries.py REQUANTFS

A dangling symlink, a symlink to itself, two symlinks pointing at each other
and (for a user who cannot read it) a mode-0000 file, none of them part of
the checkpoint, are skipped and named (export's warnings, the daemon's log):
export and the mount present the rest, equal to a clean export. A checkpoint
file (*.safetensors) that is a dangling link is refused with the file named
and what to do, with the hub hint ("re-download the snapshot") only for a
hub snapshot, where a dangling link into blobs/ is what an interrupted
download leaves. The mount needs root and /dev/fuse; the unreadable file
needs a second user (useradd), as CI has."""
import hashlib, os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402  (tests/rqtap.py: TAP, run, mounts cleaned up at exit)
from rqtap import ok, run, mounted, daemon_pid, alive, MOUNTS  # noqa: E402

USER = "rqsec"
ODD = {"dangling.txt": "nowhere", "loop.txt": "loop.txt", "la": "lb", "lb": "la"}


def read(p):
    with open(p, "rb") as f:
        return f.read()


def same_files(d, ref, extra=()):
    """(equal, what differs): d holds ref's files, byte for byte, plus extra."""
    want = sorted(list(os.listdir(ref)) + list(extra))
    have = sorted(os.listdir(d))
    bad = [f for f in os.listdir(ref) if f in have and read(os.path.join(d, f)) != read(os.path.join(ref, f))]
    return have == want and not bad, f"names {have} vs {want}; differ {bad}"


def named(out, names, what):
    return all(f"/{n} is {what}" in out for n in names)


def main():
    rqtap.init(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="rq-odd-entries-")
    os.chmod(tmp, 0o755)                 # the second user walks to SRC
    try:
        body(tmp)
    finally:
        rqtap.cleanup(tmp)
    return rqtap.finish()


def body(tmp):
    src, cal, ref = (os.path.join(tmp, x) for x in ("src", "cal", "ref"))
    rc, out = run("mkckpt", src, "--calib-out", cal)
    if not ok(rc == 0, "mkckpt makes a checkpoint and its twin", out):
        return
    rc, out = run("export", src, ref, "--calib", cal, "--quiet")
    if not ok(rc == 0, "export of the clean SRC: the reference", out):
        return
    for name, target in ODD.items():
        os.symlink(target, os.path.join(src, name))

    # export: the odd links skipped and named, the rest exported
    dst = os.path.join(tmp, "dst")
    rc, out = run("export", src, dst, "--calib", cal, "--quiet")
    good, why = same_files(dst, ref) if rc == 0 else (False, "")
    ok(good, "export of a SRC with a dangling symlink and symlink loops: the checkpoint, "
       "equal to a clean export", out + why)
    ok(named(out, ["dangling.txt"], "a dangling symlink") and
       named(out, ["loop.txt", "la", "lb"], "a symlink loop") and out.count("not presented") == 4,
       "each odd entry named in a warning (dangling, loop), 'not presented'", out)
    shutil.rmtree(dst, ignore_errors=True)

    # the mount: the same, and the daemon's log names them
    if os.geteuid() == 0 and os.path.exists("/dev/fuse"):
        mnt, log = os.path.join(tmp, "mnt"), os.path.join(tmp, "mount.log")
        os.makedirs(mnt)
        MOUNTS.append(mnt)
        rc, out = run("mount", src, mnt, "--calib", cal, "--cache", os.path.join(tmp, "cache"),
                      "--log", log)
        if ok(rc == 0 and mounted(mnt) == "fuse.requantfs",
              "mount of that SRC (not refused as a whole)", out):
            good, why = same_files(mnt, ref)
            ok(good, "the mount presents the checkpoint, equal to a clean export", why)
            text = open(log, errors="replace").read()
            ok(named(text, ["dangling.txt"], "a dangling symlink") and
               named(text, ["loop.txt", "la", "lb"], "a symlink loop"),
               "the daemon's log names each skipped entry", text[-1500:])
            pid = daemon_pid(mnt)
            rc, out = run("umount", mnt)
            t = time.time() + 20
            while time.time() < t and alive(pid):
                time.sleep(0.05)
            ok(rc == 0 and not mounted(mnt), "umount", out)
    else:
        ok(True, "# SKIP the mount: needs root and /dev/fuse")

    # a checkpoint file that is a dangling link: refused, with the right hint
    bad = os.path.join(src, "extra.safetensors")
    os.symlink("missing-shard", bad)
    rc, out = run("export", src, os.path.join(tmp, "dst-bad"), "--calib", cal, "--quiet")
    ok(rc == 1 and "extra.safetensors" in out and "dangling symlink" in out and
       "remove the link" in out and "hub" not in out,
       "a dangling *.safetensors link in a plain SRC: refused, named, no hub hint", out)
    os.unlink(bad)

    # a hub snapshot: links into blobs/; a dangling one there is an interrupted download
    repo = os.path.join(tmp, "hub", "models--synthetic--odd")
    snap = os.path.join(repo, "snapshots", "0123456789abcdef0123456789abcdef01234567")
    os.makedirs(snap)
    os.makedirs(os.path.join(repo, "blobs"))
    for f in os.listdir(src):
        p = os.path.join(src, f)
        if os.path.islink(p):
            continue
        h = hashlib.sha256(read(p)).hexdigest()
        shutil.copyfile(p, os.path.join(repo, "blobs", h))
        os.symlink(os.path.join("..", "..", "blobs", h), os.path.join(snap, f))
    os.symlink("../../blobs/" + "0" * 64, os.path.join(snap, "README.md"))
    rc, out = run("export", snap, os.path.join(tmp, "dst-hub"), "--calib", cal, "--quiet")
    good, why = same_files(os.path.join(tmp, "dst-hub"), ref) if rc == 0 else (False, "")
    ok(good and named(out, ["README.md"], "a dangling symlink"),
       "hub snapshot: a dangling README.md link skipped and named, the rest exported", out + why)
    os.symlink("../../blobs/" + "1" * 64, os.path.join(snap, "extra.safetensors"))
    rc, out = run("export", snap, os.path.join(tmp, "dst-hub2"), "--calib", cal, "--quiet")
    ok(rc == 1 and "extra.safetensors" in out and "re-download the snapshot" in out,
       "hub snapshot: a dangling *.safetensors link refused: re-download the snapshot", out)

    # a file the user cannot read (mode 0000, root's): skipped for that user
    uid = rqtap.ensure_user(USER)
    if not ok(uid is not None, f"the unprivileged user {USER} exists (useradd)"):
        return
    secret = os.path.join(src, "secret.txt")
    with open(secret, "w") as f:
        f.write("root only\n")
    subprocess.run(["chmod", "-R", "a+rX", src, cal], check=True)
    os.chmod(secret, 0)
    udst = os.path.join(tmp, "udst")
    os.makedirs(udst)
    os.chown(udst, uid, -1)
    udst = os.path.join(udst, "out")
    exe = rqtap.user_binary(USER, tmp)   # the checkout may be where USER cannot walk
    if exe is None:
        return
    p = subprocess.run(["runuser", "-u", USER, "--", exe, "export", src, udst, "--calib", cal,
                        "--quiet"], capture_output=True, text=True, errors="replace", timeout=120)
    out = p.stdout + p.stderr
    good, why = same_files(udst, ref) if p.returncode == 0 else (False, "")
    ok(good and named(out, ["secret.txt"], "a file that cannot be read") and
       "Permission denied" in out,
       "export as a user who cannot read secret.txt (0000): skipped and named, the rest "
       "exported", out + why)


if __name__ == "__main__":
    sys.exit(main())
