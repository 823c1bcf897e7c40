#!/usr/bin/env python3
"""`mount hf://... --cache-max SIZE`: the remote chunk store and the quantized
cache share the limit (remote/rstore.c "Disk budget"), against the local hub
(tests/hubsrv.py):
  - every file read through the mount (in two mounts of the same cache, in
    two orders) equals `export` of the local copy, under a limit well below
    what the mount presents;
  - the cache directory's bytes (the store's chunks and files, the cache's
    entries and materialized files; walked on disk after every file read)
    stay <= the limit + one chunk being written (here a whole small file);
  - status: the store's bytes_on_disk + cache_bytes <= the limit;
  - files were evicted (the log names the store's evictions), and bytes
    evicted were fetched again (the second pass fetched from the hub).
All that with --remote-verify none (chunks served as they come, or served
and not kept when over the limit). The default, --remote-verify file, serves
a file only from its whole verified copy, which must then fit: with a limit
of what the mount presents + the largest SRC file every read is right and
the disk stays under the limit; with the tight limit a file that cannot be
stored whole fails EIO (never unverified bytes) and the log says to raise
--cache-max.
Root and /dev/fuse (CI). TAP output. Usage: test_mount_hf_budget.py REQUANTFS"""
import json, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hfmount  # noqa: E402
from hfmount import status  # noqa: E402
from rqtap import ok, run  # noqa: E402

C1 = "3" * 39 + "c"
CHUNK = 16 << 20      # the store's default chunk size: a whole file here


def du(d):
    """Bytes the disk holds under d: allocated blocks, at most each file's size."""
    n = 0
    for root, _, files in os.walk(d):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            n += min(st.st_blocks * 512, st.st_size)
    return n


def budgeted(cache):
    """What --cache-max covers: everything but hf/ (the model API's answers and
    the shard heads: a few KB per shard, kept for offline mounts)."""
    return sum(du(os.path.join(cache, e)) for e in os.listdir(cache) if e != "hf")


def body(T, hub, ep):
    tmp = T["tmp"]
    hub.repos["synthetic/ckpt"] = {"refs": {"main": C1}, "commits": {C1: T["src"]}}
    ref = os.path.join(tmp, "ref")
    rc, out = run("export", T["src"], ref, "--calib", T["cal"], "--no-cache", "--quiet")
    ok(rc == 0, "export of the local checkpoint (the reference)", out)
    names = sorted(os.listdir(ref))
    presented = sum(os.path.getsize(os.path.join(ref, n)) for n in names)
    limit = presented * 2 // 5
    cache, mnt, log = (os.path.join(tmp, x) for x in ("cache", "mnt", "mount.log"))
    worst, bad, refetched = 0, [], 0
    for rnd, order in enumerate((names, list(reversed(names)))):
        # the second pass on a fresh mount of the same cache (the first one's page
        # cache would answer it): what was evicted is fetched again
        hub.reset()
        rc, out = hfmount.mount("hf://synthetic/ckpt", mnt, cache, ep, "--calib", T["cal"],
                                "--cache-max", str(limit), "--log", log, "--remote-verify", "none")
        if not ok(rc == 0, f"mount {rnd + 1} of hf://synthetic/ckpt --cache-max {limit} "
                  f"--remote-verify none (the mount presents {presented} bytes)", out):
            return 1
        for n in order:
            with open(os.path.join(mnt, n), "rb") as f, open(os.path.join(ref, n), "rb") as g:
                if f.read() != g.read():
                    bad.append(f"pass {rnd + 1}: {n}")
            worst = max(worst, budgeted(cache))
        if rnd:
            refetched = hub.sent
            break
        rc, out = run("umount", mnt, timeout=60)
        ok(rc == 0, "umount", out)
    ok(not bad, "every file read twice through the mount == export, under the limit",
       "\n".join(bad))
    # one chunk in flight: a whole SRC file here (each is smaller than a chunk)
    chunk = min(CHUNK, max(os.path.getsize(os.path.join(T["src"], n))
                           for n in os.listdir(T["src"])))
    ok(0 < worst <= limit + chunk, f"the cache directory held at most {worst} bytes on disk "
       f"(limit {limit} + one chunk being written, {chunk})")
    st = status(mnt)
    r = st.get("remote", {})
    both = r.get("bytes_on_disk", 1 << 60) + st.get("cache_bytes", 1 << 60)
    ok(both <= limit, f"status: store {r.get('bytes_on_disk')} + cache {st.get('cache_bytes')} "
       f"= {both} <= {limit}", json.dumps(r))
    time.sleep(0.2)
    text = open(log).read() if os.path.exists(log) else ""
    ok("evicted from the cache" in text or st.get("cache_evicted", 0) > 0,
       "files were evicted to stay under the limit" f" (cache_evicted "
       f"{st.get('cache_evicted')}; store evictions logged: "
       f"{text.count('evicted from the cache')})", text[-1500:])
    ok(refetched > 0, f"the second pass fetched {refetched} bytes again (evicted, not kept)")
    rc, out = run("umount", mnt, timeout=60)
    ok(rc == 0, "umount", out)
    return file_mode(T, ep, ref, names, presented, limit)


def file_mode(T, ep, ref, names, presented, tight):
    """--remote-verify file (the default) under --cache-max."""
    tmp = T["tmp"]
    largest = max(os.path.getsize(os.path.join(T["src"], n)) for n in os.listdir(T["src"]))
    for what, limit in (("enough", presented + largest), ("tight", tight)):
        cache, mnt, log = (os.path.join(tmp, f"{x}-{what}") for x in ("cache", "mnt", "log"))
        rc, out = hfmount.mount("hf://synthetic/ckpt", mnt, cache, ep, "--calib", T["cal"],
                                "--cache-max", str(limit), "--log", log)
        if not ok(rc == 0, f"--remote-verify file: mount with --cache-max {limit} ({what})", out):
            return 1
        worst, bad, failed = 0, [], []
        for n in names:
            try:
                with open(os.path.join(mnt, n), "rb") as f, open(os.path.join(ref, n), "rb") as g:
                    if f.read() != g.read():
                        bad.append(n)
            except OSError as e:
                failed.append(f"{n}: {e.strerror}")
            worst = max(worst, budgeted(cache))
        time.sleep(0.2)
        text = open(log).read() if os.path.exists(log) else ""
        if what == "enough":
            ok(not bad and not failed, f"--remote-verify file, --cache-max = what the mount "
               f"presents + the largest SRC file ({limit}): every file == export",
               "\n".join(bad + failed) + text[-1500:])
            ok(0 < worst <= limit + CHUNK, f"... the cache directory held at most {worst} bytes "
               f"(limit {limit})")
        else:
            ok(not bad and failed and "--cache-max" in text, f"--remote-verify file, --cache-max "
               f"{limit} (below what must be whole at once): {len(failed)} of {len(names)} files "
               f"fail EIO, none with wrong bytes ({len(bad)}), the log says to raise --cache-max",
               "\n".join(bad + failed) + text[-1500:])
        rc, out = run("umount", mnt, timeout=60)
        ok(rc == 0, "umount", out)
    return 0


if __name__ == "__main__":
    sys.exit(hfmount.main("rq-mount-hf-budget-", body))
