#!/usr/bin/env python3
"""A warmed hf:// mount serves its shards by kernel passthrough (root, as CI
runs). TAP output. Usage: test_passthrough_hf.py REQUANTFS

What `bench mount --remote` takes for granted when it compares warm reads
through the mount with native reads: after `warm` and a remount with the
same cache, once the mount has settled (status: nothing pending or being
verified), every safetensors shard passes through (requantized shards from
their materialized files, shards identical to SRC from the store's
assembled, verified copies), and only the files the mount rewrites without
a job (config.json, the index) go the copy path; the materialized shards
are verified in file order (the order a loader opens them in). Proved by the daemon's own
counters: reading every shard whole, its page caches dropped first, adds no
FUSE read at the daemon; reading everything adds at most the copy-path
files' bytes; every byte equals `export` of the local copy. The local hub is
tests/hubsrv.py."""
import json, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hfmount  # noqa: E402
from hfmount import status  # noqa: E402
from rqtap import ok, run  # noqa: E402

C1 = "3" * 39 + "c"


def drop(path):
    """Evicts every file under path from the page cache (as the bench does)."""
    for root, _, names in os.walk(path):
        for n in names:
            try:
                fd = os.open(os.path.join(root, n), os.O_RDONLY)
            except OSError:
                continue
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def settle(mnt, seconds=60):
    """The mount's status once nothing is pending or materializing (or at the deadline)."""
    end = time.monotonic() + seconds
    st = status(mnt)
    while time.monotonic() < end and not (st.get("files_pending") == 0 and
                                          st.get("files_materializing") == 0 and
                                          st.get("remote_pending") == []):
        time.sleep(0.1)
        st = status(mnt)
    return st


def mount(mnt, cache, ep, cal, *extra):
    return hfmount.mount("hf://synthetic/ckpt", mnt, cache, ep, "--calib", cal, *extra)


def body(T, hub, ep):
    tmp = T["tmp"]
    hub.repos["synthetic/ckpt"] = {"refs": {"main": C1}, "commits": {C1: T["src"]}}
    ref = os.path.join(tmp, "ref")
    rc, out = run("export", T["src"], ref, "--calib", T["cal"], "--no-cache", "--quiet")
    if not ok(rc == 0, "export of the local checkpoint (the reference)", out):
        return 1
    names = sorted(os.listdir(ref))
    shards = [n for n in names if n.endswith(".safetensors")]
    # what the copy path serves: files the mount rewrites that no job makes
    copy = [n for n in names if not n.endswith(".safetensors") and
            (not os.path.exists(os.path.join(T["src"], n)) or
             read(os.path.join(ref, n)) != read(os.path.join(T["src"], n)))]
    copy_bytes = sum(os.path.getsize(os.path.join(ref, n)) for n in copy)
    changed = [n for n in shards if read(os.path.join(ref, n)) != read(os.path.join(T["src"], n))]
    ok(changed and len(changed) < len(shards) and copy,
       f"the checkpoint has requantized shards ({len(changed)}), shards identical to SRC "
       f"({len(shards) - len(changed)}) and rewritten small files ({', '.join(copy)})")

    cache, mnt = os.path.join(tmp, "cache"), os.path.join(tmp, "mnt")
    rc, out = mount(mnt, cache, ep, T["cal"])
    if not ok(rc == 0, "mount hf://synthetic/ckpt --calib", out):
        return 1
    rc, out = run("warm", mnt)
    ok(rc == 0, "warm: every shard fetched, quantized, materialized or assembled", out)
    rc, out = run("umount", mnt)
    ok(rc == 0, "umount", out)

    # the warmed cache, mounted again
    hub.reset()
    log = os.path.join(tmp, "mount.log")
    rc, out = mount(mnt, cache, ep, T["cal"], "--log", log)
    if not ok(rc == 0, "remount with the warmed cache", out):
        return 1
    st = settle(mnt)
    # found materialized shards are verified first and in file order (the order a
    # loader opens them in): the first one opened is the first verified
    mark = "verified the materialized "
    order = [ln.split(mark, 1)[1].split(" ", 1)[0] for ln in open(log).read().splitlines()
             if mark in ln] if os.path.exists(log) else []
    ok(order == sorted(changed), "the materialized shards are verified in file order",
       f"{order} vs {sorted(changed)}")
    keys = ("passthrough", "passthrough_why", "files", "files_passthrough", "files_copy",
            "files_pending", "files_materializing", "mat_verified", "remote_pending")
    if not ok(st.get("passthrough") is True,
              "kernel passthrough is on (root, Linux >= 6.9 with FUSE passthrough)",
              json.dumps({k: st.get(k) for k in keys})):
        run("umount", mnt)
        return 1
    ok(st.get("files_pending") == 0 and st.get("files_materializing") == 0 and
       st.get("files_copy") == len(copy) and
       st.get("files_passthrough") == len(names) - len(copy) and
       st.get("mat_verified") == len(changed) and st.get("remote_pending") == [],
       f"settled: {len(names) - len(copy)} files pass through (every shard), {len(copy)} "
       f"on the copy path, the {len(changed)} materialized shards verified",
       json.dumps({k: st.get(k) for k in keys}))

    drop(cache)
    drop(mnt)
    st0 = status(mnt)
    bad = [n for n in shards if read(os.path.join(mnt, n)) != read(os.path.join(ref, n))]
    st1 = status(mnt)
    shard_bytes = sum(os.path.getsize(os.path.join(ref, n)) for n in shards)
    ok(not bad and st1.get("reads") == st0.get("reads") and
       st1.get("opens_passthrough", 0) >= st0.get("opens_passthrough", 0) + len(shards),
       f"every shard ({shard_bytes / 1e6:.1f} MB, page caches dropped) read whole == export "
       f"with {st1.get('reads', 0) - st0.get('reads', 0)} FUSE reads at the daemon "
       "(passthrough)", json.dumps({"differ": bad, "before": {k: st0.get(k) for k in (
           "reads", "opens_passthrough", "opens_copy")}, "after": {k: st1.get(k) for k in (
           "reads", "opens_passthrough", "opens_copy")}}))

    drop(cache)
    drop(mnt)
    bad = [n for n in names if read(os.path.join(mnt, n)) != read(os.path.join(ref, n))]
    st2 = status(mnt)
    got = st2.get("read_bytes", 0) - st1.get("read_bytes", 0)
    ok(not bad and 0 < got <= copy_bytes,
       f"every file == export; the daemon served {got} bytes (<= the {copy_bytes} bytes of "
       f"the copy-path files {', '.join(copy)})", json.dumps({"differ": bad}))
    ok(hub.sent == 0, f"nothing fetched by the warmed mount ({hub.sent} bytes)")
    rc, out = run("umount", mnt)
    ok(rc == 0, "umount", out)
    return 0


if __name__ == "__main__":
    sys.exit(hfmount.main("rq-pt-hf-", body))
