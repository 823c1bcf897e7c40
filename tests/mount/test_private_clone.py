#!/usr/bin/env python3
"""The user-switching tests from a checkout no other user can enter (issue
23: a clone under Debian's 0700 /root failed fs/passthrough and fs/deploy
with "runuser: failed to execute .../build/requantfs: Permission denied").
TAP output.

Usage: test_private_clone.py REQUANTFS

Makes a 0700 directory (as /root is on Debian) holding what a clone there
holds for these tests: requantfs/build/requantfs (a copy of REQUANTFS),
requantfs/tests/rqtap.py, requantfs/tests/mount/test_deploy.py and
test_passthrough.py, requantfs/docs/mounting.md (test_deploy reads its fstab
line and systemd unit). Checks that the user rqsec cannot reach that binary, then
runs from there, as tools/test would:
  - test_deploy.py, whole (rqsec and rqsec2 mount, read, warm, umount);
  - test_passthrough.py's user group (rqsec refused --passthrough on);
each must pass (their failing lines are shown here). Then the same
passthrough group with TMPDIR inside the 0700 directory, where no copy can
help: it must fail, and its own output must name the directory that blocks
the user. Makes the user rqsec (removed at exit, as the tests run here
remove theirs). Needs root and /dev/fuse (as CI has)."""
import os, shutil, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import rqtap  # noqa: E402
from rqtap import ok  # noqa: E402

rqtap.init(sys.argv[1])
USER = "rqsec"


def clone(home):
    """Copies what the user-switching tests need into home/requantfs; the
    path of the copied binary."""
    root = os.path.join(home, "requantfs")
    src = os.path.abspath(os.path.join(HERE, "..", ".."))
    for rel in ("tests/rqtap.py", "tests/mount/test_deploy.py",
                "tests/mount/test_passthrough.py", "docs/mounting.md"):
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(os.path.join(src, rel), os.path.join(root, rel))
    exe = os.path.join(root, "build", "requantfs")
    os.makedirs(os.path.dirname(exe))
    shutil.copy2(rqtap.RQ, exe)
    return root, exe


def run_tap(script, exe, env_extra, timeout):
    """(exit code, its output, its failing TAP lines with their '#' lines)."""
    env = dict(os.environ, **env_extra)
    try:
        p = subprocess.run([sys.executable, script, exe], capture_output=True, text=True,
                           errors="replace", timeout=timeout, env=env)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = -999, str(e.stdout or ""), f"TIMEOUT after {timeout}s"
    fails, keep = [], False
    for line in out.splitlines():
        if line.startswith("not ok"):
            keep = True
        elif not line.startswith("#"):
            keep = False
        if keep:
            fails.append(line)
    return rc, out, "\n".join(fails + err.splitlines()[-10:])


def main():
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("1..0 # SKIP needs root and /dev/fuse (as CI has)")
        return 77
    home = tempfile.mkdtemp(prefix="rq-home-")
    os.chmod(home, 0o700)
    try:
        if not ok(rqtap.ensure_user(USER) is not None, f"the user {USER} exists (useradd)"):
            return rqtap.finish()
        root, exe = clone(home)
        ok(not rqtap.user_can(USER, "-x", exe) and "cannot traverse" in rqtap.blocked_at(USER, exe),
           f"{USER} cannot reach the clone's binary (the 0700 directory blocks it)",
           rqtap.blocked_at(USER, exe))
        tests = os.path.join(root, "tests", "mount")
        rc, out, why = run_tap(os.path.join(tests, "test_deploy.py"), exe, {}, 240)
        ok(rc == 0 and "not ok" not in out and "\n1..0" not in "\n" + out,
           "test_deploy.py from the 0700 clone passes (non-root mounts as rqsec)",
           f"exit {rc}\n{why}", lines=60)
        rc, out, why = run_tap(os.path.join(tests, "test_passthrough.py"), exe,
                               {"RQ_TEST_GROUPS": "user"}, 240)
        ok(rc == 0 and "not ok" not in out and "CAP_SYS_ADMIN" in out,
           "test_passthrough.py's user group from the 0700 clone passes",
           f"exit {rc}\n{why}", lines=60)
        tmp = os.path.join(home, "tmp")
        os.makedirs(tmp, mode=0o755)
        rc, out, why = run_tap(os.path.join(tests, "test_passthrough.py"), exe,
                               {"RQ_TEST_GROUPS": "user", "TMPDIR": tmp}, 240)
        ok(rc != 0 and f"{home} is mode 0700" in why and "cannot traverse" in why
           and "set TMPDIR" in why,
           "with TMPDIR inside the 0700 directory the test fails, naming the directory in its "
           "own output", f"exit {rc}\n{out[-3000:]}", lines=60)
    finally:
        rqtap.cleanup(home)
    left = rqtap.remove_users()
    ok(not left, f"the user {USER} is removed again (if this test made it)", left)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
