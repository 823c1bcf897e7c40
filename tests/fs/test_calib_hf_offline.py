#!/usr/bin/env python3
"""`mount hf://ORG/NAME --calib hf://ORG/CAL@REV` keeps the scales it fetched in the
mount's cache (per commit, next to the kept model API answers), so the same command
works again with HF_HUB_OFFLINE=1, as huggingface_hub serves any cached file
(tests/hubsrv.py: a local hub; its answers counted):
  - online: every file read; the scales kept under hf/models--ORG--CAL/calib/;
  - a second online mount of the same commit fetches no scale again;
  - HF_HUB_OFFLINE=1, the hub failing: the same command mounts, no request made, every
    file == the online bytes; @<commit> too;
  - HF_HUB_OFFLINE=1 and scales never fetched into that cache (a branch never seen, or
    a cache that saw only the SRC): refused, saying what to do.
Root and /dev/fuse (CI). TAP output. Usage: test_calib_hf_offline.py REQUANTFS"""
import os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hfmount  # noqa: E402
from rqtap import ok, run  # noqa: E402

C1, C2 = "4" * 39 + "d", "5" * 39 + "e"


def mount(mnt, cache, ep, calib, env=None):
    return hfmount.mount("hf://synthetic/ckpt@main", mnt, cache, ep, "--calib", calib,
                         "--passthrough", "off", env=env)


def read_all(mnt):
    got = {}
    for n in sorted(os.listdir(mnt)):
        try:
            with open(os.path.join(mnt, n), "rb") as f:
                got[n] = f.read()
        except OSError as e:
            got[n] = f"error {e}"
    return got


def body(T, hub, ep):
    hub.repos["synthetic/ckpt"] = {"refs": {"main": C1}, "commits": {C1: T["src"]}}
    hub.repos["synthetic/cal"] = {"refs": {"main": C2}, "commits": {C2: T["cal"]}}
    tmp = T["tmp"]
    mnt, cache = os.path.join(tmp, "mnt"), os.path.join(tmp, "cache")
    cal = "hf://synthetic/cal@main"

    rc, out = mount(mnt, cache, ep, cal)
    if not ok(rc == 0, "online: mount hf://synthetic/ckpt@main --calib hf://synthetic/cal@main",
              out):
        return 1
    online = read_all(mnt)
    ok(online and all(isinstance(v, bytes) for v in online.values()), "online: every file "
       "read", "\n".join(f"{k}: {v}" for k, v in online.items() if not isinstance(v, bytes)))
    run("umount", mnt)
    kept = os.path.join(cache, "hf", "models--synthetic--cal", "calib", C2 + ".calib")
    ok(os.path.isfile(kept), "the scales are kept in the cache, per commit", kept)

    hub.reset()
    rc, out = mount(mnt, cache, ep, cal)
    cal_ranges = [r for r in hub.ranges if r[0] == C2]
    ok(rc == 0 and not cal_ranges, "online again, the same commit: no scale fetched again",
       out + "\n" + "\n".join(map(str, cal_ranges[:10])))
    run("umount", mnt)

    off = dict(os.environ, HF_HUB_OFFLINE="1")
    hub.reset(fail=503)
    rc, out = mount(mnt, cache, ep, cal, env=off)
    ok(rc == 0 and hub.sent == 0 and hub.api_sent == 0 and not hub.ranges,
       "HF_HUB_OFFLINE=1, the hub failing: the same command mounts, nothing asked of the hub",
       out + f"\nsent {hub.sent} api {hub.api_sent} ranges {hub.ranges[:5]}")
    got = read_all(mnt) if rc == 0 else {}
    bad = [n for n in online if got.get(n) != online[n]]
    ok(rc == 0 and not bad, "offline: every file == the online bytes", "\n".join(bad))
    run("umount", mnt)
    rc, out = mount(mnt, cache, ep, f"hf://synthetic/cal@{C2}", env=off)
    ok(rc == 0, "offline: --calib hf://synthetic/cal@<commit> seen before mounts", out)
    got = read_all(mnt) if rc == 0 else {}
    ok(rc == 0 and all(got.get(n) == online[n] for n in online), "offline @<commit>: every "
       "file == the online bytes")
    run("umount", mnt)

    rc, out = mount(mnt, cache, ep, "hf://synthetic/cal@nobranch", env=off)
    ok(rc != 0 and "nobranch" in out and "HF_HUB_OFFLINE=1" in out and "online" in out,
       "offline, a branch never resolved: refused saying what to do", out)
    # a cache that saw the SRC (mounted with the scales from a file), never these scales
    cache2 = os.path.join(tmp, "cache2")
    hub.reset()
    rc, out = mount(mnt, cache2, ep, T["cal"])
    ok(rc == 0, "a mount of the same SRC with --calib DIR (the scales never fetched)", out)
    run("umount", mnt)
    hub.reset(fail=503)
    rc, out = mount(mnt, cache2, ep, cal, env=off)
    ok(rc != 0 and "HF_HUB_OFFLINE=1" in out and "calib fetch" in out and "synthetic/cal" in out,
       "offline, scales never fetched into this cache: refused saying what to do", out)
    hub.reset()
    return 0


if __name__ == "__main__":
    sys.exit(hfmount.main("rq-calib-hf-offline-", body))
