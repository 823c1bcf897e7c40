"""rqtap — what the requantfs test scripts share: TAP lines, running the
binary with a time limit, and the FUSE mounts they make (found through
/proc/self/mountinfo, unmounted and their daemons killed at exit, also on
failure).

    import rqtap
    from rqtap import ok, run
    rqtap.init(sys.argv[1])          # the requantfs binary
    ...
    rqtap.MOUNTS.append(mnt)         # cleaned up at exit
    return rqtap.finish()            # prints "1..N", 0 or 1
"""
import atexit, os, signal, subprocess, sys

RQ = None
n = failed = 0
MOUNTS = []        # mount points to clean up
STOPPED = []       # daemon pids stopped with SIGSTOP: continued at exit
TIMEOUT = 120      # seconds for any single command


def init(binary):
    global RQ
    RQ = os.path.abspath(binary)
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))


def ok(cond, what, detail="", lines=30, stderr=False):
    """One TAP line; on failure the detail as '#' lines (and the line on
    stderr too when asked: meson's --print-errorlogs shows stderr)."""
    global n, failed
    n += 1
    print(("ok" if cond else "not ok") + f" {n} - {what}", flush=True)
    if not cond:
        failed += 1
        if stderr:
            print(f"not ok {n} - {what}", file=sys.stderr)
        for line in str(detail).splitlines()[:lines]:
            print("#   " + line, flush=True)
    return cond


def finish():
    print(f"1..{n}")
    return 1 if failed else 0


def run(*args, timeout=TIMEOUT, env=None):
    """(exit code, stdout + stderr) of requantfs ARGS; -999 on a time-out."""
    try:
        p = subprocess.run([RQ, *args], capture_output=True, text=True, errors="replace",
                           timeout=timeout, env=env)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        return -999, f"TIMEOUT after {timeout}s: {' '.join(args)}\n{e.stdout}{e.stderr}"


def _mountinfo(mnt):
    """The last mountinfo line of mount point mnt, split, or None."""
    mnt = os.path.abspath(mnt)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            a = line.split()
            if a[4] == mnt:
                found = a
    return found


def mounted(mnt):
    """The file system type mounted at mnt (e.g. fuse.requantfs), or None."""
    a = _mountinfo(mnt)
    return a[a.index("-") + 1] if a else None


def daemon_pid(mnt):
    """The requantfs daemon's pid, from the mount's fsname (requantfs@PID)."""
    a = _mountinfo(mnt)
    if a:
        src = a[a.index("-") + 2]
        if src.startswith("requantfs@"):
            return int(src[len("requantfs@"):])
    return 0


def alive(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except OSError:
        return False


def unmount(mnt):
    """Forced: lazy unmount, then kill the daemon."""
    if mounted(mnt):
        pid = daemon_pid(mnt)
        subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=30)
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True, timeout=30)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def cleanup():
    for pid in STOPPED:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    for mnt in reversed(MOUNTS):
        unmount(mnt)


def ensure_user(name):
    """A real unprivileged system user called name (made with useradd when
    missing): its uid, or None when it cannot be made."""
    import pwd
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", name], capture_output=True)
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def root_main(prefix, body):
    """The frame of a test that mounts as root: SKIP without root or
    /dev/fuse; a 0755 temp dir T["tmp"] with a mkckpt checkpoint T["src"] and
    its 07-22 twin T["cal"]; body(T) (return non-zero to stop); then every
    mount and the temp dir removed, also on failure. Returns the exit code."""
    import shutil, tempfile
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("1..0 # SKIP needs root and /dev/fuse (as CI has)")
        return 77
    tmp = tempfile.mkdtemp(prefix=prefix)
    os.chmod(tmp, 0o755)                     # other users may walk to SRC
    T = {"tmp": tmp, "src": os.path.join(tmp, "src"), "cal": os.path.join(tmp, "cal")}
    try:
        rc, out = run("mkckpt", T["src"], "--calib-out", T["cal"])
        if not ok(rc == 0, "mkckpt makes a checkpoint and its twin", out) or body(T):
            return 1
    finally:
        cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


def mount(src, mnt, cal, cache, *extra, env=None):
    """requantfs mount SRC MNT --calib CAL --cache CACHE EXTRA..., cleaned up at exit."""
    os.makedirs(mnt, exist_ok=True)
    MOUNTS.append(os.path.abspath(mnt))
    return run("mount", src, mnt, "--calib", cal, "--cache", cache, *extra, env=env)
