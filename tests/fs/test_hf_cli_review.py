#!/usr/bin/env python3
"""hf:// as a user meets it outside the mount (issue 20 items 3 and 4), against a
local hub (tests/hubsrv.py) that counts every request:
  - HF_HUB_OFFLINE=1 (huggingface_hub's meaning: connect to nothing): plan, export
    and verify of hf://, `--calib hf://` and `calib fetch` are refused at once,
    saying so and what to do, and the hub sees no request (before: they went online,
    and with the server down waited out every retry);
  - the same plan online works (the control); status --help names the pinned commit,
    bench --help bench mount --remote;
  - mount of a local SRC with --remote-verify: a usage error;
  - a gated repo answering 403 to a token without access: plan, export and mount
    refused naming HTTP 403, where the token came from and what to do.
Stdlib only; the mount line needs root and /dev/fuse. TAP output.
Usage: test_hf_cli_review.py REQUANTFS"""
import os, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hubsrv  # noqa: E402
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402

C1, C2 = "1" * 39 + "a", "3" * 39 + "c"


def offline(tmp, hub, ep):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    spec = "hf://synthetic/ckpt"
    cases = [
        ("plan hf://", ["plan", spec, "--calib", "CAL", "--endpoint", ep]),
        ("export hf://", ["export", spec, os.path.join(tmp, "out"), "--calib", "CAL",
                          "--endpoint", ep, "--quiet"]),
        ("verify hf://", ["verify", spec, "--against", "SRC", "--endpoint", ep, "--quiet"]),
        ("plan --calib hf://", ["plan", "SRC", "--calib", "hf://synthetic/cal",
                                "--endpoint", ep]),
        ("calib fetch", ["calib", "fetch", "synthetic/cal", "-o",
                         os.path.join(tmp, "f.safetensors"), "--endpoint", ep]),
    ]
    for what, args in cases:
        args = [{"CAL": os.path.join(tmp, "cal"), "SRC": os.path.join(tmp, "src")}.get(a, a)
                for a in args]
        hub.reset()
        t = time.monotonic()
        rc, out = run(*args, env=env, timeout=60)
        dt = time.monotonic() - t
        asked = len(hub.ranges) + (hub.api_sent > 0)
        ok(rc == 1 and "HF_HUB_OFFLINE=1" in out and asked == 0 and dt < 5,
           f"HF_HUB_OFFLINE=1: {what} refused in {dt:.1f} s, saying why, "
           f"{asked} request(s) to the hub", out)


def main():
    rqtap.init(sys.argv[1])
    hub = hubsrv.Hub()
    srv, ep = hubsrv.start(hub)
    tmp = tempfile.mkdtemp(prefix="rq-hf-cli-")
    try:
        body(tmp, hub, ep)
    finally:
        rqtap.cleanup(tmp)
        srv.shutdown()
    return rqtap.finish()


def body(tmp, hub, ep):
    src, cal = os.path.join(tmp, "src"), os.path.join(tmp, "cal")
    rc, out = run("mkckpt", src, "--calib-out", cal, "--layers", "4", "--experts", "4")
    if not ok(rc == 0, "mkckpt makes a checkpoint and its 07-22 twin", out):
        return
    hub.repos["synthetic/ckpt"] = {"refs": {"main": C1}, "commits": {C1: src}}
    hub.repos["synthetic/cal"] = {"refs": {"main": C2}, "commits": {C2: cal}}
    env = dict(os.environ, HF_TOKEN="", HF_TOKEN_PATH=os.path.join(tmp, "no-token"))
    env.pop("HF_HUB_OFFLINE", None)

    rc, out = run("status", "--help")
    ok(rc == 0 and "hf://ORG/NAME@<commit>" in out, "status --help says an hf:// SRC shows "
       "its pinned commit", out)
    rc, out = run("bench", "--help")
    ok(rc == 0 and "--remote" in out, "bench --help names bench mount --remote (issue 20's "
       "bench)", out)
    hub.reset()
    rc, out = run("plan", "hf://synthetic/ckpt", "--calib", cal, "--endpoint", ep, env=env)
    ok(rc == 0 and f"commit {C1}" in out, "online: plan hf:// works (the control)", out)

    offline(tmp, hub, ep)
    rc, out = run("plan", "hf://synthetic/ckpt@main", "--calib", cal, "--endpoint", ep,
                  env=dict(env, HF_HUB_OFFLINE="1"))
    ok(rc == 1 and "HF_HUB_OFFLINE=1" in out and "synthetic/ckpt" in out and
       ("mount it once online" in out or "--cache DIR" in out),
       "offline plan hf:// of a revision no mount's cache has seen: refused, saying what to "
       "do (plan_hf_offline covers one that was seen)", out)

    # options that make no sense for the SRC given: usage errors before any work
    mrv = os.path.join(tmp, "mnt-rv")
    os.makedirs(mrv)
    rqtap.MOUNTS.append(mrv)       # unmounted at exit should it mount
    rc, out = run("mount", src, mrv, "--calib", cal, "--remote-verify", "none", env=env)
    ok(rc == 2 and "--remote-verify is for an hf://" in out,
       "mount of a local SRC with --remote-verify: a usage error (like --endpoint)", out)

    # a gated repo: a token that has no access gets 403
    tok = dict(env, HF_TOKEN="hf_noAccess")
    hub.reset(forbid=True)
    for what, args in (("plan", ["plan", "hf://synthetic/ckpt", "--calib", cal]),
                       ("export", ["export", "hf://synthetic/ckpt", os.path.join(tmp, "o2"),
                                   "--calib", cal, "--quiet"])):
        rc, out = run(*args, "--endpoint", ep, env=tok)
        ok(rc == 1 and "403" in out and "$HF_TOKEN" in out and "request access" in out,
           f"403 with a token: {what} refused naming the token's source and what to do", out)
    if os.geteuid() == 0 and os.path.exists("/dev/fuse"):
        mnt = os.path.join(tmp, "mnt")
        os.makedirs(mnt)
        rqtap.MOUNTS.append(mnt)
        rc, out = run("mount", "hf://synthetic/ckpt", mnt, "--calib", cal, "--endpoint", ep,
                      "--cache", os.path.join(tmp, "cache"), env=tok)
        ok(rc == 1 and "403" in out and "$HF_TOKEN" in out and "request access" in out
           and not rqtap.mounted(mnt), "403 with a token: mount refused at mount time, "
           "naming the token's source and what to do", out)
    else:
        ok(True, "# SKIP the mount line needs root and /dev/fuse (as CI has)")
    hub.reset(forbid=True)
    rc, out = run("plan", "hf://synthetic/ckpt", "--calib", cal, "--endpoint", ep, env=env)
    ok(rc == 1 and "403" in out and "set HF_TOKEN" in out,
       "403 without a token: refused, saying to set HF_TOKEN", out)
    hub.reset()


if __name__ == "__main__":
    sys.exit(main())
