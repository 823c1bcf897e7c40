#!/usr/bin/env python3
"""Deploying a mount (issue: non-root, Docker/other users, fstab and systemd).
TAP output.

Usage: test_deploy.py REQUANTFS

With real unprivileged users made here (useradd: rqsec mounts, rqsec2 is
"another user", e.g. vLLM in a container; both removed at exit, checked),
rqsec running a copy of the binary in the test's 0755 temp dir (the checkout
may be out of its reach, e.g. a clone under Debian's 0700 /root):
  - non-root through the setuid fusermount3: refusals that say what to do
    (/dev/fuse not usable, fusermount3 missing -- simulated by binding
    /dev/null over it in a private mount namespace -- and fusermount3's own
    refusal of a sticky mount point it does not own); then mount, read every
    file (equal to export's, made as root), warm, status (passthrough off:
    no CAP_SYS_ADMIN), umount, all as the user; the log without syslog goes
    to $XDG_STATE_HOME/requantfs/mount.log;
  - without allow_other the other user gets EACCES; -o allow_other as the
    user is refused without user_allow_other in /etc/fuse.conf (named in the
    message), and with it the other user reads world-readable files;
  - fstab: `mount -t fuse.requantfs SRC MNT -o calib=...,cache=...,...` (via
    mount.fuse3), docs/mounting.md's fstab line through `mount -T`, a
    mount.fuse.requantfs link run as mount(8) runs it;
  - docs/mounting.md's systemd unit passes `systemd-analyze verify`;
  - SIGTERM and SIGINT to `mount --foreground` while reads are in flight:
    exit 0, nothing left mounted;
  - --log-level, and the per-job log line (device, seconds, MB/s).
Changes to the system, all undone at exit (also on failure): the users rqsec
and rqsec2 (useradd; userdel at exit, unless they existed before), /dev/fuse's mode
(0666 for the user's mounts, 0600 for the refusal), /etc/fuse.conf
(user_allow_other added), a /usr/local/sbin/requantfs link (mount(8) clears
PATH, so mount.fuse3's shell finds `requantfs` only on its default path).
Needs root and /dev/fuse (as CI has)."""
import json, os, pwd, re, shutil, signal, stat, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run, mounted, daemon_pid, alive, MOUNTS  # noqa: E402

rqtap.init(sys.argv[1])
RQ = rqtap.RQ
USER, USER2 = "rqsec", "rqsec2"
# the fstab line and the systemd unit users copy (docs/mounting.md)
DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "mounting.md")
LINK = "/usr/local/sbin/requantfs"
RESTORE = []           # functions undoing system changes, run at exit in reverse


def restore_all():
    while RESTORE:
        try:
            RESTORE.pop()()
        except OSError as e:
            print(f"# restore failed: {e}", file=sys.stderr)


def sh(*cmd, timeout=60, env=None):
    try:
        p = subprocess.run(list(cmd), capture_output=True, text=True, errors="replace",
                           timeout=timeout, env=env)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return -999, "TIMEOUT: " + " ".join(cmd)


def as_user(user, *cmd, timeout=60):
    return sh("runuser", "-u", user, "--", *cmd, timeout=timeout)


def user_bytes(user, path):
    p = subprocess.run(["runuser", "-u", user, "--", "cat", path], capture_output=True,
                       timeout=60)
    return p.stdout if p.returncode == 0 else None


def read(path):
    with open(path, "rb") as f:
        return f.read()


def wait_gone(pid, mnt, secs=20):
    t = time.time() + secs
    while time.time() < t and (mounted(mnt) or (pid and alive(pid))):
        time.sleep(0.05)
    return not mounted(mnt) and not (pid and alive(pid))


def mkdir_for(path, uid, gid, mode=0o755):
    os.makedirs(path, exist_ok=True)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return path


def user_exists(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def set_fuse_mode(mode):
    os.chmod("/dev/fuse", mode)


def g_nonroot(T):
    """Refusals, then mount/read/warm/status/umount as the user."""
    tmp, src, cal, ref = T["tmp"], T["src"], T["cal"], T["ref"]
    uid, gid, urq = T["uid"], T["gid"], T["urq"]
    mnt = mkdir_for(os.path.join(tmp, "u-mnt"), uid, gid)
    cache = mkdir_for(os.path.join(tmp, "u-cache"), uid, gid, 0o700)
    state = mkdir_for(os.path.join(tmp, "u-state"), uid, gid, 0o700)
    MOUNTS.append(mnt)
    args = [urq, "mount", src, mnt, "--calib", cal, "--cache", cache]
    env = ["env", f"XDG_STATE_HOME={state}"]

    set_fuse_mode(0o600)
    rc, out = as_user(USER, *args)
    ok(rc == 1 and "/dev/fuse" in out and "chmod 0666 /dev/fuse" in out and not mounted(mnt),
       "non-root, /dev/fuse 0600: refused, the message says what to do", out)
    set_fuse_mode(0o666)

    sticky = mkdir_for(os.path.join(tmp, "u-sticky"), 0, 0, 0o1777)
    MOUNTS.append(sticky)
    rc, out = as_user(USER, urq, "mount", src, sticky, "--calib", cal, "--cache", cache)
    ok(rc == 1 and "fusermount3" in out and "refused" in out and "mount point you own" in out
       and not mounted(sticky), "non-root, sticky mount point owned by root: fusermount3's "
       "refusal, and what to do", out)

    rc, out = sh("unshare", "-m", "sh", "-c", "mount --bind /dev/null /usr/bin/fusermount3 && "
                 "exec runuser -u " + USER + " -- \"$@\"", "sh", *args)
    ok(rc == 1 and "fusermount3 is not installed" in out and "apt-get install fuse3" in out,
       "non-root, fusermount3 missing: refused, the message says what to do", out)

    rc, out = as_user(USER, *env, *args)
    if not ok(rc == 0 and mounted(mnt) == "fuse.requantfs", "non-root mount through "
              "fusermount3 (runuser -u rqsec)", out):
        return
    logf = os.path.join(state, "requantfs", "mount.log")
    ok(f"log {logf}" in out or os.path.exists("/dev/log"),
       "no syslog socket: the daemon logs to $XDG_STATE_HOME/requantfs/mount.log, said", out)
    info = [l for l in open("/proc/self/mountinfo") if f" {mnt} " in l]
    ok(info and f"user_id={uid}" in info[-1] and "allow_other" not in info[-1],
       "the mount is the user's (user_id), no allow_other", info)
    names = sorted(os.listdir(ref))
    rc, out = as_user(USER, "ls", mnt)
    ok(rc == 0 and sorted(out.split()) == names, "the user lists export's files", out)
    bad = [f for f in names if user_bytes(USER, os.path.join(mnt, f)) != read(os.path.join(ref, f))]
    ok(not bad, f"the user reads all {len(names)} files, each equal to export's (root)", bad)
    rc, out = as_user(USER2, "cat", os.path.join(mnt, "config.json"))
    ok(rc != 0 and "Permission denied" in out, "without allow_other: another user -> EACCES", out)
    rc, out = as_user(USER, urq, "warm", mnt)
    ok(rc == 0 and "ready" in out, "warm as the user", out)
    rc, out = as_user(USER, "cat", os.path.join(mnt, ".requantfs", "status"))
    try:
        st = json.loads(out)
    except ValueError:
        st = {}
    ok(rc == 0 and st.get("passthrough") is False and
       "CAP_SYS_ADMIN" in st.get("passthrough_why", ""),
       "status: passthrough off, because of CAP_SYS_ADMIN (the copy path)", out[:600])
    rc, out = as_user(USER, urq, "status", mnt)
    ok(rc == 0 and "passthrough off" in out and "CAP_SYS_ADMIN" in out,
       "`requantfs status` as the user says so", out)
    log = open(logf).read() if os.path.exists(logf) else ""
    ok("ready" in log and re.search(r"job \d+ \(\S+\) quantized on cpu \(\d+ threads?\) in "
                                    r"[0-9.]+ s, [0-9.]+ MB, \d+ MB/s", log),
       "the log file has the mount and one line per job (device, seconds, MB/s)", log[-1500:])
    pid = daemon_pid(mnt)
    rc, out = as_user(USER, urq, "umount", mnt)
    ok(rc == 0 and wait_gone(pid, mnt), "umount as the user: unmounted, daemon gone", out)

    # allow_other as the user: refused without user_allow_other, then allowed
    rc, out = as_user(USER, *args, "-o", "allow_other")
    ok(rc == 1 and "add user_allow_other to /etc/fuse.conf (or mount as root)" in out and
       not mounted(mnt), "non-root -o allow_other without user_allow_other: refused, said", out)
    with open("/etc/fuse.conf", "a") as f:
        f.write("\nuser_allow_other\n")
    rc, out = as_user(USER, *env, *args, "-o", "allow_other")
    if ok(rc == 0 and mounted(mnt), "with user_allow_other in /etc/fuse.conf: mounted", out):
        shard = sorted(f for f in names if f.endswith(".safetensors"))[0]
        ok(user_bytes(USER2, os.path.join(mnt, "config.json")) == read(os.path.join(ref, "config.json"))
           and user_bytes(USER2, os.path.join(mnt, shard)) == read(os.path.join(ref, shard)),
           "allow_other: another user reads world-readable files (equal to export's)")
        rc, out = as_user(USER2, "cat", os.path.join(mnt, ".requantfs", "status"))
        ok(rc != 0, "allow_other: /.requantfs stays the mounting user's", out)
        pid = daemon_pid(mnt)
        rc, out = as_user(USER, urq, "umount", mnt)
        ok(rc == 0 and wait_gone(pid, mnt), "umount", out)
    RESTORE.pop()()        # /etc/fuse.conf back now (and checked)
    ok(read("/etc/fuse.conf") == T["fuse_conf"], "/etc/fuse.conf restored byte for byte")


def g_fstab(T):
    """mount -t fuse.requantfs (mount.fuse3), docs/mounting.md's fstab line, the helper link."""
    tmp, src, cal, ref = T["tmp"], T["src"], T["cal"], T["ref"]
    names = sorted(os.listdir(ref))
    if os.path.lexists(LINK) and os.path.realpath(LINK) != RQ:
        ok(True, f"# SKIP fstab via mount(8): {LINK} exists and is not this build")
        return
    if not os.path.lexists(LINK):       # (a link to this build is a crashed run's)
        os.symlink(RQ, LINK)
    RESTORE.append(lambda: os.path.islink(LINK) and os.unlink(LINK))
    mnt, cache = os.path.join(tmp, "f-mnt"), os.path.join(tmp, "f-cache")
    os.makedirs(mnt)
    MOUNTS.append(mnt)
    logf = os.path.join(tmp, "f.log")
    rc, out = sh("mount", "-t", "fuse.requantfs", src, mnt, "-o",
                 f"calib={cal},cache={cache},allow_other,nofail,_netdev,noauto,"
                 f"x-systemd.automount,log={logf},log_level=warn,threads=1")
    if ok(rc == 0 and mounted(mnt) == "fuse.requantfs",
          "mount -t fuse.requantfs SRC MNT -o calib=...,cache=...,allow_other,nofail,...", out):
        info = [l for l in open("/proc/self/mountinfo") if f" {mnt} " in l][-1]
        ok("allow_other" in info and " ro," in info and "nosuid" in info and "nodev" in info and
           "x-systemd" not in info and "nofail" not in info,
           "fstab options: allow_other kept, mount(8)'s dropped, read-only nodev nosuid", info)
        bad = [f for f in names if read(os.path.join(mnt, f)) != read(os.path.join(ref, f))]
        ok(not bad, "fstab mount: every file equals export's", bad)
        log = open(logf).read() if os.path.exists(logf) else ""
        ok("quantized on" not in log and "ready" not in log,
           "log_level=warn: neither job nor ready lines in the log", log[-800:])
        pid = daemon_pid(mnt)
        rc, out = sh("umount", mnt)
        ok(rc == 0 and wait_gone(pid, mnt), "umount(8): unmounted, daemon gone", out)
    rc, out = sh("mount", "-t", "fuse.requantfs", src, mnt, "-o", f"calib={cal},threads=many")
    ok(rc != 0 and "--threads needs a number" in out and not mounted(mnt),
       "a bad fstab value is named", out)

    # docs/mounting.md's fstab line, paths substituted, through an fstab file of our own
    lines = [l.strip() for l in open(DOC) if "fuse.requantfs" in l and
             l.strip().startswith("/models/")]
    if ok(len(lines) == 1, "docs/mounting.md has one fstab line of type fuse.requantfs", lines):
        line = (lines[0].replace("/models/Laguna-S-2.1-NVFP4-0801", src)
                .replace("/mnt/laguna", mnt).replace("/models/laguna-calib.safetensors", cal)
                .replace("/var/cache/requantfs", cache))
        fstab = os.path.join(tmp, "fstab")
        with open(fstab, "w") as f:
            f.write(line + "\n")
        rc, out = sh("mount", "-T", fstab, mnt)
        ok(rc == 0 and mounted(mnt) and read(os.path.join(mnt, names[-1])) ==
           read(os.path.join(ref, names[-1])), "docs/mounting.md's fstab line mounts (mount -T)", line + "\n" + out)
        sh("umount", mnt)
        ok(wait_gone(0, mnt), "and unmounts")

    # a mount.fuse.requantfs link, run with mount(8)'s helper arguments
    helper = os.path.join(tmp, "bin", "mount.fuse.requantfs")
    os.makedirs(os.path.dirname(helper))
    os.symlink(RQ, helper)
    rc, out = sh(helper, src, mnt, "-n", "-o", f"rw,calib={cal},cache={cache}")
    ok(rc == 0 and mounted(mnt) and read(os.path.join(mnt, "config.json")) ==
       read(os.path.join(ref, "config.json")), "mount.fuse.requantfs SRC MNT -n -o rw,calib=..."
       " (mount(8)'s helper form; rw dropped)", out)
    pid = daemon_pid(mnt)
    run("umount", mnt)
    ok(wait_gone(pid, mnt), "umount")


def g_systemd(T):
    """docs/mounting.md's unit, ExecStart pointed at this build, by systemd-analyze verify."""
    text = open(DOC).read().splitlines()
    start = [i for i, l in enumerate(text) if l.strip() == "# /etc/systemd/system/requantfs-laguna.service"]
    if not ok(len(start) == 1, "docs/mounting.md has the unit requantfs-laguna.service"):
        return
    unit = []
    for l in text[start[0] + 1:]:
        if l.strip() and not l.startswith("    "):
            break
        unit.append(l[4:])
    body = "\n".join(unit).strip() + "\n"
    ok("/opt/requantfs/build/requantfs" in body and "[Service]" in body, "the unit names the binary", body)
    path = os.path.join(T["tmp"], "requantfs-laguna.service")
    with open(path, "w") as f:
        f.write(body.replace("/opt/requantfs/build/requantfs", RQ))
    if not ok(shutil.which("systemd-analyze"), "systemd-analyze is installed (tools/setup installs systemd)"):
        return
    rc, out = sh("systemd-analyze", "verify", path)
    mine = [l for l in out.splitlines() if "requantfs-laguna" in l]
    ok(rc == 0 and not mine, "systemd-analyze verify: docs/mounting.md's unit is valid", out)


def reader(mnt, names, stop, errs):
    while not stop.is_set():
        for f in names:
            try:
                fd = os.open(os.path.join(mnt, f), os.O_RDONLY)
                try:
                    while os.read(fd, 1 << 16):
                        if stop.is_set():
                            break
                finally:
                    os.close(fd)
            except OSError as e:
                errs.append(e.errno)
                return


def g_signals(T):
    """SIGTERM / SIGINT to --foreground while reads are in flight."""
    names = sorted(f for f in os.listdir(T["ref"]) if f.endswith(".safetensors"))
    for sig in (signal.SIGTERM, signal.SIGINT):
        mnt = os.path.join(T["tmp"], f"s-mnt-{sig.name}")
        os.makedirs(mnt)
        MOUNTS.append(mnt)
        cache = os.path.join(T["tmp"], f"s-cache-{sig.name}")    # fresh: reads park on jobs
        p = subprocess.Popen([RQ, "mount", T["src"], mnt, "--calib", T["cal"], "--cache", cache,
                              "--foreground", "--workers", "1", "--threads", "1", "--prefetch", "0",
                              "--log-level", "debug"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        t = time.time() + 20
        while time.time() < t and not os.path.exists(os.path.join(mnt, ".requantfs", "status")):
            time.sleep(0.02)
        if not ok(mounted(mnt), f"--foreground mount ({sig.name})"):
            p.kill()
            continue
        stop, errs = threading.Event(), []
        th = [threading.Thread(target=reader, args=(mnt, names, stop, errs), daemon=True)
              for _ in range(4)]
        for x in th:
            x.start()
        time.sleep(0.3)
        p.send_signal(sig)
        try:
            out, _ = p.communicate(timeout=20)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            out, rc = "TIMEOUT", -999
        stop.set()
        for x in th:
            x.join(10)
        ok(rc == 0, f"{sig.name} to --foreground with reads in flight: exit 0", out[-1500:])
        ok(not mounted(mnt) and os.path.isdir(mnt) and not os.listdir(mnt),
           f"{sig.name}: unmounted, no dead mount left (the mount point is a plain empty dir)")
        ok(not any(x.is_alive() for x in th), f"{sig.name}: no reader hangs", errs)
        ok(f"stopping on signal {int(sig)}" in out, f"{sig.name}: the log says why it stopped", out[-800:])


def g_loglevel(T):
    rc, out = run("mount", T["src"], os.path.join(T["tmp"], "nomnt"), "--calib", T["cal"],
                  "--log-level", "loud")
    ok(rc == 2 and "--log-level must be error, warn, info or debug" in out, "a bad --log-level", out)


def main():
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("1..0 # SKIP needs root and /dev/fuse (as CI has)")
        return 77
    uid = rqtap.ensure_user(USER)
    if uid is None or rqtap.ensure_user(USER2) is None:
        print(f"not ok 1 - cannot create the unprivileged users {USER}, {USER2} (useradd)")
        print("1..1")
        return 1
    fuse_mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
    RESTORE.append(lambda: set_fuse_mode(fuse_mode))
    fuse_conf = read("/etc/fuse.conf") if os.path.exists("/etc/fuse.conf") else None

    def restore_conf():
        if fuse_conf is None:
            os.path.exists("/etc/fuse.conf") and os.unlink("/etc/fuse.conf")
        else:
            with open("/etc/fuse.conf", "wb") as f:
                f.write(fuse_conf)
    RESTORE.append(restore_conf)
    tmp = tempfile.mkdtemp(prefix="rq-deploy-")
    os.chmod(tmp, 0o755)                     # the users may walk to SRC and bin/
    T = {"tmp": tmp, "src": os.path.join(tmp, "src"), "cal": os.path.join(tmp, "cal"),
         "ref": os.path.join(tmp, "ref"), "uid": uid, "gid": pwd.getpwnam(USER).pw_gid,
         "fuse_conf": fuse_conf}
    try:
        rc, out = run("mkckpt", T["src"], "--calib-out", T["cal"])
        if not ok(rc == 0, "mkckpt makes a checkpoint and its twin", out):
            return 1
        subprocess.run(["chmod", "-R", "a+rX", T["src"], T["cal"]], check=True)
        T["urq"] = rqtap.user_binary(USER, tmp)   # the checkout may be out of their reach
        if T["urq"] is None:
            return 1
        rc, out = run("export", T["src"], T["ref"], "--calib", T["cal"], "--quiet")
        if not ok(rc == 0, "export (as root): the reference bytes", out):
            return 1
        g_nonroot(T)
        g_fstab(T)
        g_systemd(T)
        g_signals(T)
        g_loglevel(T)
    finally:
        rqtap.cleanup()
        restore_all()
        shutil.rmtree(tmp, ignore_errors=True)
    made = list(rqtap.MADE_USERS)
    left = rqtap.remove_users()
    ok(not left and not [u for u in made if user_exists(u)],
       f"the users this test made ({', '.join(made) or 'none'}) are removed", left)
    ok(stat.S_IMODE(os.stat("/dev/fuse").st_mode) == fuse_mode and
       (fuse_conf is None or read("/etc/fuse.conf") == fuse_conf) and
       not (os.path.islink(LINK) and os.path.realpath(LINK) == RQ),
       "the system is as it was: /dev/fuse mode, /etc/fuse.conf, no link left")
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
