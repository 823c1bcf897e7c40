#!/usr/bin/env python3
"""`HF_HUB_OFFLINE=1 requantfs plan hf://ORG/NAME@REV --cache C` answers from what a
mount of that revision left in C, with the hub gone (tests/hubsrv.py stopped):
  - the Laguna fix (mkckpt, --calib) after a --remote-verify file mount (small files
    assembled in C/remote/, shard heads in C/hf/heads/) and --scheme nvfp4a16 on
    tests/data/tiny/llama after a --remote-verify none mount (small files as chunks):
    the offline plan's JSON == the online plan's (sizes, files, modules), at the
    same commit, @main resolved as the mount last saw it;
  - without --cache: the mount's default cache ($XDG_CACHE_HOME/requantfs);
  - a revision never seen, a default cache that does not exist, a shard head
    neither kept nor stored (removed, or damaged): refused, naming what is missing
    and saying to run it online once; never a plan from wrong bytes;
  - --cache with a local SRC is a usage error; online, --cache changes nothing.
Root and /dev/fuse (it mounts). TAP output. Usage: test_plan_hf_offline.py REQUANTFS"""
import glob, json, os, shutil, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402
from hubsrv import Hub, start  # noqa: E402  (the local hub, shared)

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
C1, C2 = "1" * 39 + "a", "2" * 39 + "b"
DEAD = "http://127.0.0.1:1"      # nothing listens there: as if the hub were gone
FIGURES = ("plan_requests", "plan_fetched_bytes")   # what this plan fetched: differs


def plan_json(*args, env=None):
    rc, out = run("plan", *args, "--json", env=env)
    try:
        return rc, json.JSONDecoder().raw_decode(out[out.index("{"):])[0], out
    except ValueError:
        return rc, None, out


def same_plan(online, offline):
    """The whole JSON but what the plan itself fetched."""
    a, b = dict(online), dict(offline)
    a["remote"] = {k: v for k, v in a.get("remote", {}).items() if k not in FIGURES}
    b["remote"] = {k: v for k, v in b.get("remote", {}).items() if k not in FIGURES}
    diff = {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
    return a == b and bool(a.get("file_list")), json.dumps(diff)[:2000]


def mount_umount(spec, mnt, ep, *extra, env=None):
    os.makedirs(mnt, exist_ok=True)
    rqtap.MOUNTS.append(os.path.abspath(mnt))
    rc, out = run("mount", spec, mnt, "--endpoint", ep, *extra, env=env)
    if rc == 0:
        names = sorted(os.listdir(mnt))       # the tree is there: the plan was built
        rc2, out2 = run("umount", mnt, timeout=60)
        return rc2 == 0 and bool(names), out + out2
    return False, out


def main():
    rqtap.init(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="rq-plan-hf-off-")
    hub = Hub()
    srv, ep = start(hub)
    up = True
    try:
        src, cal = os.path.join(tmp, "src"), os.path.join(tmp, "cal")
        rc, out = run("mkckpt", src, "--calib-out", cal)
        ok(rc == 0, "mkckpt makes a checkpoint and its twin", out)
        tiny = os.path.join(ROOT, "tests", "data", "tiny", "llama")
        hub.repos["synthetic/ckpt"] = {"refs": {"main": C1}, "commits": {C1: src}}
        hub.repos["synthetic/tiny-llama"] = {"refs": {"main": C2}, "commits": {C2: tiny}}
        c1, c2 = os.path.join(tmp, "cache1"), os.path.join(tmp, "cache2")
        xdg = os.path.join(tmp, "xdg")
        lag, sch = ("--calib", cal), ("--scheme", "nvfp4a16")

        # online: the plans to match, and the mounts that fill the caches
        rc, on1, out = plan_json("hf://synthetic/ckpt", *lag, "--endpoint", ep)
        ok(rc == 0 and on1, "online plan hf://synthetic/ckpt (Laguna fix)", out)
        rc, on2, out = plan_json("hf://synthetic/tiny-llama", *sch, "--endpoint", ep)
        ok(rc == 0 and on2, "online plan hf://synthetic/tiny-llama --scheme nvfp4a16", out)
        rc, on2c, out = plan_json("hf://synthetic/tiny-llama", *sch, "--endpoint", ep,
                                  "--cache", os.path.join(tmp, "unused"))
        ok(rc == 0 and on2 and on2c and same_plan(on2, on2c)[0] and
           not os.path.exists(os.path.join(tmp, "unused")),
           "online, --cache changes nothing (the hub is asked, the cache not made)", out)
        good, out = mount_umount("hf://synthetic/ckpt", os.path.join(tmp, "m1"), ep, *lag,
                                 "--cache", c1)
        ok(good, "mount hf://synthetic/ckpt --cache C1 (--remote-verify file), umount", out)
        good, out = mount_umount("hf://synthetic/tiny-llama", os.path.join(tmp, "m2"), ep, *sch,
                                 "--cache", c2, "--remote-verify", "none")
        ok(good, "mount hf://synthetic/tiny-llama --cache C2 --remote-verify none, umount", out)
        env = dict(os.environ, XDG_CACHE_HOME=xdg)
        good, out = mount_umount("hf://synthetic/tiny-llama", os.path.join(tmp, "m3"), ep, *sch,
                                 env=env)
        ok(good and os.path.isdir(os.path.join(xdg, "requantfs", "hf")),
           "mount without --cache fills the default cache $XDG_CACHE_HOME/requantfs", out)
        srv.shutdown()
        srv.server_close()
        up = False
        hub.reset()

        # offline, the hub gone: the same plans from the caches alone
        off = dict(os.environ, HF_HUB_OFFLINE="1", HF_ENDPOINT=DEAD)
        t = time.monotonic()
        rc, p1, out = plan_json("hf://synthetic/ckpt", *lag, "--cache", c1, env=off)
        dt = time.monotonic() - t
        ok(rc == 0 and p1, f"offline plan hf://synthetic/ckpt --cache C1 runs ({dt:.2f} s)", out)
        if on1 and p1:
            same, diff = same_plan(on1, p1)
            ok(same, "offline (verify file cache) == online plan: sizes, files, modules, JSON",
               diff)
            r = p1.get("remote", {})
            ok(p1["src"] == f"hf://synthetic/ckpt@{C1}" and r.get("commit") == C1 and
               r.get("plan_requests") == 0 and r.get("plan_fetched_bytes") == 0,
               "offline: main resolved to the commit the mount saw, nothing fetched",
               json.dumps(r))
        rc, p2, out = plan_json("hf://synthetic/tiny-llama@main", *sch, "--cache", c2,
                                "--endpoint", DEAD, env=off)
        ok(rc == 0 and p2 and on2 and same_plan(on2, p2)[0],
           "offline (verify none cache: small files as chunks) == online plan, @main",
           same_plan(on2, p2)[1] if p2 and on2 else out)
        rc, p3, out = plan_json(f"hf://synthetic/tiny-llama@{C2}", *sch,
                                env=dict(off, XDG_CACHE_HOME=xdg))
        ok(rc == 0 and p3 and on2 and same_plan(on2, p3)[0],
           "offline without --cache: the default cache answers, == online plan", out)
        rc, out = run("plan", "hf://synthetic/ckpt", *lag, "--cache", c1, env=off)
        ok(rc == 0 and f"commit {C1}" in out and "a mount downloads:" in out,
           "offline table: the commit and what a mount downloads", out)

        # what is missing offline is named, with what to do
        rc, out = run("plan", "hf://synthetic/ckpt@nobranch", *lag, "--cache", c1, env=off)
        ok(rc == 1 and "HF_HUB_OFFLINE" in out and "nobranch" in out and "online" in out,
           "offline, a revision never seen: refused, named, run it online once", out)
        rc, out = run("plan", "hf://synthetic/ckpt", *lag, "--cache", c2, env=off)
        ok(rc == 1 and "HF_HUB_OFFLINE" in out and "main" in out and c2 in out,
           "offline, a cache that never saw this repo: refused, naming the cache", out)
        nox = os.path.join(tmp, "no-xdg")
        rc, out = run("plan", "hf://synthetic/ckpt", *lag, env=dict(off, XDG_CACHE_HOME=nox))
        ok(rc == 1 and os.path.join(nox, "requantfs") in out and "--cache" in out and
           "HF_HUB_OFFLINE" in out and not os.path.exists(nox),
           "offline, no default cache: refused naming it (and not created)", out)
        rc, out = run("plan", "hf://synthetic/ckpt", *lag, "--cache",
                      os.path.join(tmp, "absent"), env=off)
        ok(rc == 1 and "absent" in out and not os.path.exists(os.path.join(tmp, "absent")),
           "offline, --cache DIR that does not exist: refused naming it", out)
        # C2's shard head removed: its bytes are nowhere else (verify none fetched it
        # exactly, not stored); then damaged: not used
        c2b = os.path.join(tmp, "cache2b")
        shutil.copytree(c2, c2b, symlinks=True)
        heads = glob.glob(os.path.join(c2b, "hf", "heads", "*.head"))
        ok(len(heads) == 1, "the verify-none mount kept the one shard's head", str(heads))
        for h in heads:
            os.unlink(h)
        rc, out = run("plan", "hf://synthetic/tiny-llama", *sch, "--cache", c2b, env=off)
        ok(rc == 1 and "model.safetensors bytes 0-7" in out and "HF_HUB_OFFLINE" in out and
           "mount it once online" in out and c2b in out,
           "offline, a shard head neither kept nor stored: fails naming file, range, cache "
           "and what to do", out)
        shutil.rmtree(c2b)
        shutil.copytree(c2, c2b, symlinks=True)
        for h in glob.glob(os.path.join(c2b, "hf", "heads", "*.head")):
            with open(h, "r+b") as f:
                f.seek(20)
                b = f.read(1)
                f.seek(20)
                f.write(bytes([b[0] ^ 0x40]))
        rc, out = run("plan", "hf://synthetic/tiny-llama", *sch, "--cache", c2b, env=off)
        ok(rc == 1 and "model.safetensors" in out and "HF_HUB_OFFLINE" in out,
           "offline, a damaged head (its SHA-256 fails): not used, fails naming the shard",
           out)
        rc, out = run("plan", tiny, *sch, "--cache", c1)
        ok(rc == 2 and "--cache" in out and "hf://" in out,
           "--cache with a local SRC is a usage error", out)
        rc, out = run("plan", "hf://synthetic/tiny-llama", *sch, "--cache", c2,
                      "--measure", "1", env=off)
        ok(rc == 2 and "--measure" in out, "offline, --measure: still a usage error", out)
    finally:
        if up:
            srv.shutdown()
        rqtap.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
