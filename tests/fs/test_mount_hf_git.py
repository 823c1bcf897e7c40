#!/usr/bin/env python3
"""`mount hf://...` of a repo whose shard is a plain git file (no LFS: the model
API lists only its git blob id, as small test repos do), against the local hub
(tests/hubsrv.py with no_lfs):
  - the mount keeps the shard's head under <cache>/hf/heads/git-<blob id>-<size>.head
    (rq_rs_file_id), so a second mount fetches nothing;
  - with HF_HUB_OFFLINE=1 and no server, the revision mounts from the cache (the
    plan from the kept heads) and serves everything warmed before, == export;
  - the shard's bytes are checked against its blob id: served right.
Root and /dev/fuse (CI). TAP output. Usage: test_mount_hf_git.py REQUANTFS"""
import os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hfmount  # noqa: E402
import hubsrv  # noqa: E402
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
C = "7" * 39 + "a"
SHARD = "model.safetensors"


def differing(mnt, ref):
    return hfmount.differing(mnt, ref, listing=False)


def body(T, hub, ep):
    tmp = T["tmp"]
    tiny = os.path.join(ROOT, "tests", "data", "tiny", "llama")
    hub.repos["plain/tiny"] = {"refs": {"main": C}, "commits": {C: tiny}}
    hub.reset(no_lfs={SHARD})
    ref = os.path.join(tmp, "ref")
    rc, out = run("export", tiny, ref, "--scheme", "nvfp4a16", "--no-cache", "--quiet")
    ok(rc == 0, "export of tests/data/tiny/llama --scheme nvfp4a16 (the reference)", out)
    cache, mnt = os.path.join(tmp, "cache"), os.path.join(tmp, "mnt")
    os.makedirs(mnt)
    rqtap.MOUNTS.append(mnt)

    def mount(endpoint, env=None):
        return run("mount", "hf://plain/tiny", mnt, "--cache", cache, "--endpoint", endpoint,
                   "--scheme", "nvfp4a16", env=env)

    rc, out = mount(ep)
    ok(rc == 0, f"mount hf://plain/tiny ({SHARD} listed without lfs: a git blob id only)", out)
    blob = hubsrv.git_blob_id(os.path.join(tiny, SHARD))
    head = os.path.join(cache, "hf", "heads",
                        f"git-{blob}-{os.path.getsize(os.path.join(tiny, SHARD))}.head")
    ok(os.path.isfile(head), f"its head kept for offline use: hf/heads/{os.path.basename(head)}",
       "\n".join(os.listdir(os.path.join(cache, "hf", "heads")))
       if os.path.isdir(os.path.join(cache, "hf", "heads")) else "no hf/heads")
    rc, out = run("warm", mnt)
    bad = differing(mnt, ref)
    ok(rc == 0 and not bad, "warm; every file == export (the shard checked by its blob id)",
       out + "\n".join(bad))
    run("umount", mnt, timeout=60)

    hub.reset(no_lfs={SHARD})
    rc, out = mount(ep)
    ok(rc == 0 and hub.sent == 0 and not hub.ranges,
       f"a second mount of the revision fetched {hub.sent} bytes (the head from the cache)",
       out + "\n" + "\n".join(map(str, hub.ranges[:10])))
    run("umount", mnt, timeout=60)

    env = dict(os.environ, HF_HUB_OFFLINE="1")
    rc, out = mount("http://127.0.0.1:1", env=env)
    ok(rc == 0, "HF_HUB_OFFLINE=1, no server: the revision mounts from the cache", out)
    bad = differing(mnt, ref) if rc == 0 else ["not mounted"]
    ok(not bad, "offline: every file served from the cache == export", "\n".join(bad))
    run("umount", mnt, timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(hfmount.main("rq-mount-hf-git-", body, ckpt=False))
