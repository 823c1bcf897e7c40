"""The frame of the tests that mount or read hf:// against the local hub
(tests/hubsrv.py), and the helpers they share:

    def body(T, hub, ep):   # T from rqtap.ckpt_dirs: T["tmp"], T["src"], T["cal"], T["ref"]
        rc, out = hfmount.mount("hf://ORG/NAME", mnt, cache, ep, "--scheme", ...)
    if __name__ == "__main__":
        sys.exit(hfmount.main("rq-NAME-", body))

main: TAP from argv[1] (rqtap.init); without root and /dev/fuse the whole test
SKIPs (root=False: the body decides what needs them); the hub and its CDN
started; a temp dir T["tmp"] (chmod mode: 0755 lets other users walk to SRC) with
a mkckpt checkpoint T["src"] and its twin T["cal"] (ckpt=False: none; ref=True:
its export T["ref"] too; a failed mkckpt skips the body); body(T, hub, ep); then,
also on failure, teardown(T, hub) (default: every mount and the temp dir
removed, rqtap.cleanup) and the servers stopped. Returns the exit code."""
import json, os, sys, time

import hubsrv
import rqtap
from rqtap import run


def main(prefix, body, root=True, ckpt=True, ref=False, mode=0o755, teardown=None):
    rqtap.init(sys.argv[1])
    if root and (os.geteuid() != 0 or not os.path.exists("/dev/fuse")):
        print("1..0 # SKIP needs root and /dev/fuse (as CI has)")
        return 77
    hub = hubsrv.Hub()
    srv, ep = hubsrv.start(hub)
    T = rqtap.ckpt_dirs(prefix, mode)
    try:
        if not ckpt or rqtap.make_ckpt(T, ref=ref):
            body(T, hub, ep)
    finally:
        if teardown:
            teardown(T, hub)
        else:
            rqtap.cleanup(T["tmp"])
        srv.shutdown()
    return rqtap.finish()


def mount(spec, mnt, cache, ep, *extra, env=None):
    """requantfs mount SPEC MNT --cache CACHE --endpoint EP EXTRA... (MNT made,
    and unmounted at exit): (exit code, output)."""
    os.makedirs(mnt, exist_ok=True)
    rqtap.MOUNTS.append(os.path.abspath(mnt))
    return run("mount", spec, mnt, "--cache", cache, "--endpoint", ep, *extra, env=env)


def umount(mnt):
    """requantfs umount MNT: (exit code, output, seconds it took)."""
    t = time.monotonic()
    rc, out = run("umount", mnt, timeout=60)
    return rc, out, time.monotonic() - t


def daemon_exit(pid, seconds=30):
    """Waits up to seconds for the daemon pid to exit: (gone, seconds waited)."""
    t = time.monotonic()
    while rqtap.alive(pid) and time.monotonic() - t < seconds:
        time.sleep(0.2)
    return not rqtap.alive(pid), time.monotonic() - t


def status(mnt):
    """The mount's .requantfs/status, {} when it cannot be read."""
    try:
        with open(os.path.join(mnt, ".requantfs", "status")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def differing(mnt, ref, listing=True):
    """Files of ref that read differently through mnt (or fail there), and with
    listing, a line when the two directories list different names."""
    bad = []
    for n in sorted(os.listdir(ref)):
        try:
            with open(os.path.join(mnt, n), "rb") as f:
                got = f.read()
        except OSError as e:
            bad.append(f"{n}: {e}")
            continue
        with open(os.path.join(ref, n), "rb") as f:
            if got != f.read():
                bad.append(n)
    if listing and sorted(os.listdir(mnt)) != sorted(os.listdir(ref)):
        bad.append("listing: %s vs %s" % (sorted(os.listdir(mnt)), sorted(os.listdir(ref))))
    return bad


def log_text(path):
    """The daemon's --log file as text ("" when it was never written)."""
    return open(path, errors="replace").read() if os.path.exists(path) else ""
