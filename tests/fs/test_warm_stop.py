#!/usr/bin/env python3
"""Ctrl-C means stop: `requantfs warm MNT` on an hf:// mount whose hub stops
answering (tests/hubsrv.py, stall=S: every resolve/CDN answer waits S seconds;
the chunk store would retry for minutes):
  - warm waits (a job is in flight, its reads parked in the daemon);
  - SIGINT: warm exits within a second, 130, saying what was done and how to
    go on; SIGTERM the same (143);
  - SIGKILL: the process is gone within two seconds (never in D state: the
    daemon answers an interrupted read EINTR, FUSE_INTERRUPT);
  - a killed reader of a data file (dd) is gone as quickly;
  - umount still returns promptly, and the daemon then exits.
Root and /dev/fuse (CI). TAP output. Usage: test_warm_stop.py REQUANTFS"""
import json, os, signal, subprocess, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hfmount  # noqa: E402
import rqtap  # noqa: E402
from rqtap import ok  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
C = "3" * 39 + "c"
PROCS = []        # every process started here: killed and reaped at exit


def state(pid):
    """The process's state letter(s) from /proc (every thread), or "gone"."""
    try:
        letters = set()
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                letters.add(f.read().rsplit(")", 1)[1].split()[0])
        return "".join(sorted(letters))
    except OSError:
        return "gone"


def start(*args):
    p = subprocess.Popen(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, errors="replace")
    PROCS.append(p)
    return p


def waits(p, mnt, seconds=2.0):
    """p still runs after seconds, with a job of the mount in flight (a worker in
    the stalled fetch): what the signal must cut short."""
    time.sleep(seconds)
    st = hfmount.status(mnt)
    return p.poll() is None and st.get("jobs_in_flight", 0) + st.get("parked_reads", 0) > 0, st


def gone_within(p, seconds):
    """(exit code or None, seconds it took, stdout + stderr so far)."""
    t = time.monotonic()
    try:
        out, err = p.communicate(timeout=seconds)
        return p.returncode, time.monotonic() - t, out + err
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - t, f"still there after {seconds} s, state {state(p.pid)}"


def signalled(p, sig, limit):
    p.send_signal(sig)
    return gone_within(p, limit)


def body(T, hub, ep):
    tiny = os.path.join(ROOT, "tests", "data", "tiny", "llama")
    hub.repos["synthetic/tiny-llama"] = {"refs": {"main": C}, "commits": {C: tiny}}
    mnt, cache = os.path.join(T["tmp"], "mnt"), os.path.join(T["tmp"], "cache")
    rc, out = hfmount.mount("hf://synthetic/tiny-llama", mnt, cache, ep, "--scheme", "nvfp4a16")
    if not ok(rc == 0, "mount hf://synthetic/tiny-llama --scheme nvfp4a16", out):
        return
    daemon = rqtap.daemon_pid(mnt)
    hub.reset(stall=300)          # the hub stops answering (the store would retry ~5 min)

    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        name = signal.Signals(sig).name
        p = start(rqtap.RQ, "warm", mnt)
        w, st = waits(p, mnt)
        ok(w, f"warm against a stalled hub waits (a job in flight)",
           json.dumps({k: st.get(k) for k in ("jobs_in_flight", "parked_reads")}))
        rc, dt, out = signalled(p, sig, 5)
        ok(rc == code and dt < 1.0, f"{name}: warm exits in {dt:.2f} s (< 1 s) with {code}",
           f"rc {rc}\n{out}")
        ok("stopped by " + name in out and "jobs ready" in out and "again to go on" in out,
           f"{name}: warm says what was done and how to go on", out)

    p = start(rqtap.RQ, "warm", mnt)
    w, st = waits(p, mnt)
    ok(w, "warm waits again", json.dumps(st)[:300])
    rc, dt, out = signalled(p, signal.SIGKILL, 2)
    ok(rc == -signal.SIGKILL and dt < 2.0, f"SIGKILL: warm is gone in {dt:.2f} s (not in D "
       "state until the store's retries end)", f"rc {rc}\n{out}")

    # a plain reader of the requantized shard (its jobs wait for the hub) killed too
    p = start("dd", f"if={os.path.join(mnt, 'model.safetensors')}", "of=/dev/null", "bs=1M")
    time.sleep(1.5)
    running = p.poll() is None
    rc, dt, out = signalled(p, signal.SIGKILL, 2)
    ok(running and rc == -signal.SIGKILL and dt < 2.0, f"a reader of a data file waiting on "
       f"the stalled hub (dd), SIGKILL: gone in {dt:.2f} s",
       f"was running: {running}; rc {rc}\n{out}")

    rc, out, dt = hfmount.umount(mnt)
    ok(rc == 0 and dt < 10, f"umount returns in {dt:.1f} s with the hub still stalled", out)
    gone, dt = hfmount.daemon_exit(daemon)
    ok(gone, f"the daemon exits after umount ({dt:.1f} s; a worker stuck in the fetch is left "
       "behind, not waited for)", f"pid {daemon}")


def teardown(T, hub):
    for p in PROCS:
        if p.poll() is None:
            p.kill()
    rqtap.cleanup(T["tmp"])       # kills the daemon: a reader stuck in it is let go
    for p in PROCS:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    hub.reset()


if __name__ == "__main__":
    sys.exit(hfmount.main("rq-warm-stop-", body, ckpt=False, teardown=teardown))
