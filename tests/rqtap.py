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
import atexit, os, re, shutil, signal, subprocess, sys, time

RQ = None
n = failed = 0
MOUNTS = []        # mount points to clean up
STOPPED = []       # daemon pids stopped with SIGSTOP: continued at exit
TIMEOUT = 120      # seconds for any single command


def init(binary):
    global RQ
    RQ = os.path.abspath(binary)
    atexit.register(_remove_users_at_exit)     # runs after cleanup (atexit is LIFO)
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))


def no_venv(e):
    """For a script whose .venv packages failed to import (ImportError e): a missing
    venv fails loudly, never skips. One failing TAP line, then exit 1."""
    print("not ok 1 - %s (python %s): run tools/setup to create .venv" % (e, sys.executable))
    print("1..1")
    sys.exit(1)


def ok(cond, what, detail="", lines=30, stderr=False):
    """One TAP line; on failure the detail as '#' lines (and both on stderr
    too when asked: meson's --print-errorlogs shows stderr)."""
    global n, failed
    n += 1
    print(("ok" if cond else "not ok") + f" {n} - {what}", flush=True)
    if not cond:
        failed += 1
        if stderr:
            print(f"not ok {n} - {what}", file=sys.stderr)
        for line in str(detail).splitlines()[:lines]:
            print("#   " + line, flush=True)
            if stderr:
                print("#   " + line, file=sys.stderr, flush=True)
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


def unescape(field):
    """A mountinfo field decoded: the kernel writes space, tab, newline and
    backslash as \\040 \\011 \\012 \\134."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def _mountinfo(mnt):
    """The last mountinfo line of mount point mnt, split and decoded, or None."""
    mnt = os.path.abspath(mnt)
    found = None
    with open("/proc/self/mountinfo", errors="surrogateescape", newline="\n") as f:
        for line in f:
            a = [unescape(x) for x in line.rstrip("\n").split(" ")]
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


def cleanup(tmp=None):
    """Continues the stopped daemons, unmounts every mount in MOUNTS (and forgets
    them) and, given tmp, removes that directory."""
    for pid in STOPPED:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    for mnt in reversed(MOUNTS):
        unmount(mnt)
    MOUNTS.clear()
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


USER_MARK = "requantfs tests (removed at exit)"   # the GECOS of the users made here
MADE_USERS = []    # users made here (or left by a crashed run): removed at exit


def ensure_user(name):
    """A real unprivileged system user called name (made with useradd when
    missing, with no home and no login shell): its uid, or None when it
    cannot be made. Users made here -- and those a crashed run left, known by
    their GECOS (USER_MARK) -- are removed at exit (remove_users)."""
    import pwd
    try:
        pw = pwd.getpwnam(name)
        if pw.pw_gecos == USER_MARK and name not in MADE_USERS:
            MADE_USERS.append(name)
        return pw.pw_uid
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", "--comment", USER_MARK, name], capture_output=True)
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return None
    MADE_USERS.append(name)
    return uid


def remove_users():
    """Removes the users ensure_user made (after their mounts are gone: call
    cleanup first). Returns what could not be removed, with userdel's words."""
    import pwd
    left = []
    while MADE_USERS:
        name = MADE_USERS.pop()
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        for _ in range(50):          # a killed daemon of the user may take a moment to go
            p = subprocess.run(["userdel", name], capture_output=True, text=True,
                               errors="replace")
            if p.returncode != 8:      # 8: the user is logged in (has processes)
                break
            time.sleep(0.1)
        if p.returncode != 0:
            left.append(f"{name}: userdel exit {p.returncode}: {p.stderr.strip()}")
    return left


def _remove_users_at_exit():
    for why in remove_users():
        print(f"# could not remove a test user: {why}", file=sys.stderr, flush=True)


def user_can(user, *test_args):
    """Whether `test TEST_ARGS` succeeds as user (e.g. "-x", path)."""
    return subprocess.run(["runuser", "-u", user, "--", "test", *test_args],
                          capture_output=True, timeout=30).returncode == 0


def blocked_at(user, path):
    """Why user cannot reach path: the first directory on the way that it
    cannot traverse, with its mode and owner (or "" when none is found)."""
    import grp, pwd
    d = "/"
    for part in os.path.abspath(path).split("/")[1:-1]:
        d = os.path.join(d, part)
        if not user_can(user, "-x", d):
            st = os.stat(d)
            return (f"{d} is mode {stat_mode(st)} owned by {pwd.getpwuid(st.st_uid).pw_name}:"
                    f"{grp.getgrgid(st.st_gid).gr_name}, which {user} cannot traverse")
    return ""


def stat_mode(st):
    return "%04o" % (st.st_mode & 0o7777)


def user_binary(user, tmp):
    """The requantfs binary as the unprivileged user may run it: a copy in
    tmp/user-bin (0755), since the checkout itself may sit where other users
    cannot walk (a clone under /root, mode 0700 on Debian). tmp must be
    reachable by user. Prints a failing TAP line naming what blocks it and
    returns None when user still cannot execute the copy."""
    d = os.path.join(tmp, "user-bin")
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o755)
    exe = os.path.join(d, "requantfs")
    if not os.path.exists(exe):
        shutil.copy2(RQ, exe)
        os.chmod(exe, 0o755)
    if user_can(user, "-x", exe):
        return exe
    why = blocked_at(user, exe) or "runuser -u %s -- test -x %s fails" % (user, exe)
    ok(False, f"user {user} can run the copy of requantfs at {exe}",
       f"{why}; the temp directory must be reachable by other users: set TMPDIR to "
       f"a directory every user can traverse (the default /tmp is)", stderr=True)
    return None


def selected(groups):
    """The test groups (functions g_*) to run: all of groups, or those named in
    RQ_TEST_GROUPS (comma-separated, without the g_ prefix), in that order.
    An unknown name is a usage error (exit 2)."""
    want = os.environ.get("RQ_TEST_GROUPS", "")
    if not want:
        return list(groups)
    byname = {g.__name__[2:]: g for g in groups}
    bad = [w for w in want.split(",") if w not in byname]
    if bad:
        print(f"RQ_TEST_GROUPS names unknown groups {bad}; known: {sorted(byname)}",
              file=sys.stderr)
        sys.exit(2)
    return [byname[w] for w in want.split(",")]


def no_fuse():
    """Without /dev/fuse: the SKIP plan printed and its exit code; else None."""
    if os.path.exists("/dev/fuse"):
        return None
    print("1..0 # SKIP /dev/fuse is missing (modprobe fuse)")
    return 77


def ckpt_dirs(prefix, mode=None):
    """A new temp dir T["tmp"] (named prefix..., chmod mode if given) and the paths a
    mount test works with in it: T["src"] (a mkckpt checkpoint), T["cal"] (its 07-22
    twin), T["ref"] (what export makes of it)."""
    import tempfile
    tmp = tempfile.mkdtemp(prefix=prefix)
    if mode is not None:
        os.chmod(tmp, mode)
    return {"tmp": tmp, "src": os.path.join(tmp, "src"), "cal": os.path.join(tmp, "cal"),
            "ref": os.path.join(tmp, "ref")}


def make_ckpt(T, ref=False):
    """mkckpt T["src"] with its twin T["cal"]; with ref, also its export T["ref"] (the
    reference bytes). A TAP line each; whether all worked."""
    rc, out = run("mkckpt", T["src"], "--calib-out", T["cal"])
    if not ok(rc == 0, "mkckpt makes a checkpoint and its twin", out):
        return False
    if ref:
        rc, out = run("export", T["src"], T["ref"], "--calib", T["cal"], "--quiet")
        return ok(rc == 0, "export of the same checkpoint (the reference)", out)
    return True


def root_main(prefix, body):
    """The frame of a test that mounts as root: SKIP without root or
    /dev/fuse; a 0755 temp dir T["tmp"] with a mkckpt checkpoint T["src"] and
    its 07-22 twin T["cal"]; body(T) (return non-zero to stop); then every
    mount and the temp dir removed, also on failure. Returns the exit code."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("1..0 # SKIP needs root and /dev/fuse (as CI has)")
        return 77
    T = ckpt_dirs(prefix, 0o755)             # other users may walk to SRC
    try:
        if not make_ckpt(T) or body(T):
            return 1
    finally:
        cleanup(T["tmp"])
    return finish()


def st_header(path):
    """A safetensors file's header: (the JSON dict, where the data starts)."""
    import json, struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


# safetensors' dtypes in its order (save_file writes the later ones first)
ST_DTYPES = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
             "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
             "C64", "F64", "I64", "U64"]


def st_order(names, dtype):
    """names in the order save_file writes them: dtype(name) by ST_DTYPES, the last
    first, then the names' bytes."""
    return sorted(names, key=lambda k: (-ST_DTYPES.index(dtype(k)), k.encode()))


def st_agrees(path, bytes_of=()):
    """Whether the safetensors library reads path as st_tensors does: the same names,
    dtypes and shapes, and the same bytes for the dtypes in bytes_of."""
    from safetensors import safe_open
    t, good = st_tensors(path), True
    with safe_open(path, framework="numpy") as f:
        good &= sorted(f.keys()) == sorted(t)
        for k in f.keys():
            sl = f.get_slice(k)
            good &= sl.get_dtype() == t[k][0] and list(sl.get_shape()) == t[k][1]
            if t[k][0] in bytes_of:
                good &= f.get_tensor(k).tobytes() == t[k][2]
    return good


def st_tensors(path):
    """A safetensors file's tensors: name -> (dtype, shape, bytes)."""
    h, start = st_header(path)
    out = {}
    with open(path, "rb") as f:
        for k, v in h.items():
            if k == "__metadata__":
                continue
            b, e = v["data_offsets"]
            f.seek(start + b)
            out[k] = (v["dtype"], v["shape"], f.read(e - b))
    return out


def mount(src, mnt, cal, cache, *extra, env=None):
    """requantfs mount SRC MNT --calib CAL --cache CACHE EXTRA..., cleaned up at exit."""
    os.makedirs(mnt, exist_ok=True)
    MOUNTS.append(os.path.abspath(mnt))
    return run("mount", src, mnt, "--calib", cal, "--cache", cache, *extra, env=env)
