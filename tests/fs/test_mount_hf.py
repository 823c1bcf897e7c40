#!/usr/bin/env python3
"""`requantfs mount hf://ORG/NAME[@REV] MNT` against a local hub (tests/hubsrv.py:
model API, resolve with ranges and a CDN redirect, every body byte counted):
  - the Laguna fix (--calib) on a mkckpt checkpoint and --scheme nvfp4a16 on
    tests/data/tiny/llama: every file read through the mount equals `export`
    of the local copy, byte for byte;
  - mount returns having fetched only the small files and shard headers;
  - status names hf://ORG/NAME@<commit> and the remote traffic;
  - a second mount of the same revision with the same cache fetches nothing;
  - HF_HUB_OFFLINE=1 with the server stopped: @main resolved as last seen,
    everything read before served from the cache; a revision never seen refused;
  - a server failing mid-read: EIO (never a wrong byte, never a hang), and
    umount returns promptly;
  - a gated repo (401) refused at mount time saying what to do;
  - verify takes hf:// (read through the reader).
Root and /dev/fuse (CI). TAP output. Usage: test_mount_hf.py REQUANTFS"""
import json, os, shutil, struct, sys, tempfile, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hfmount  # noqa: E402
import hubsrv  # noqa: E402
from hfmount import differing, mount, status, umount  # noqa: E402
from rqtap import ok, run  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
C1, C2 = "1" * 39 + "a", "2" * 39 + "b"


def header_len(path):
    with open(path, "rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]


def small_budget(d):
    """Bytes the plan may fetch: whole non-safetensors files and shard headers."""
    n = 0
    for f in os.listdir(d):
        p = os.path.join(d, f)
        n += header_len(p) if f.endswith(".safetensors") else os.path.getsize(p)
    return n


def read_with_deadline(path, seconds):
    """("ok", bytes) / ("err", errno) / ("hang", None) for a whole read of path."""
    res = ["hang", None]

    def go():
        try:
            with open(path, "rb") as f:
                res[:] = ["ok", f.read()]
        except OSError as e:
            res[:] = ["err", e.errno]
    th = threading.Thread(target=go, daemon=True)
    th.start()
    th.join(seconds)
    return res


def shards(ref, src):
    """(unchanged, requantized) shard names: byte-identical to SRC or not."""
    same, changed = [], []
    for n in sorted(os.listdir(ref)):
        if n.endswith(".safetensors"):
            with open(os.path.join(ref, n), "rb") as f, open(os.path.join(src, n), "rb") as g:
                (same if f.read() == g.read() else changed).append(n)
    return same, changed


def read_ref(ref, n):
    with open(os.path.join(ref, n), "rb") as f:
        return f.read()


def no_wrong_byte(mnt, ref, src, failed):
    """Reads every file of ref through mnt: (files read with wrong bytes, files that
    should read right but did not). Requantized shards may fail EIO (a module of theirs
    may come from a failed SRC file); the failed files and nothing else must."""
    wrong, bad = [], []
    for n in sorted(os.listdir(ref)):
        want = read_ref(ref, n)
        kind, val = read_with_deadline(os.path.join(mnt, n), 90)
        unchanged = os.path.exists(os.path.join(src, n)) and read_ref(src, n) == want
        if kind == "ok" and val != want:
            wrong.append(n)
        elif kind == "ok" and n in failed:
            bad.append(f"{n}: read although it failed before")
        elif kind != "ok" and n not in failed and (unchanged or not n.endswith(".safetensors")):
            bad.append(f"{n}: {kind} {val}")
    return wrong, bad


def verify_faults(T, hub, ep, ref_l):
    """--remote-verify file (the default) against a server returning wrong bytes:
    never a wrong byte; none: the trade-off, shown."""
    tmp = T["tmp"]
    mnt = os.path.join(tmp, "mnt-v")
    same, changed = shards(ref_l, T["src"])
    if not ok(len(same) >= 2 and len(changed) >= 3, "the checkpoint has unchanged and "
              "requantized shards", f"{same} {changed}"):
        return
    X, X2, Y, Z = same[0], changed[-1], changed[0], changed[1]
    log = os.path.join(tmp, "verify.log")
    hub.reset()
    rc, out = mount("hf://synthetic/ckpt", mnt, os.path.join(tmp, "cache-v1"), ep, "--calib",
                    T["cal"], "--passthrough", "off", "--log", log)
    if not ok(rc == 0, "mount (--remote-verify file, the default) for the wrong-bytes tests",
              out):
        return
    ok(status(mnt).get("remote", {}).get("verify") == "file", "status: verify file",
       json.dumps(status(mnt).get("remote")))
    # every range of X and X2 answered with wrong bytes, one of Y and U1 (armed after the
    # mount: the heads were right; all at once: a read fetches the next files too)
    U1 = same[1]
    hub.reset(wrong={X: 10**6, X2: 10**6, Y: 1, U1: 1})
    # a. one wrong answer: refetched, the right bytes (a requantized and an unchanged shard)
    for n in (Y, U1):
        kind, val = read_with_deadline(os.path.join(mnt, n), 90)
        ok(kind == "ok" and val == read_ref(ref_l, n) and hub.wrong[n] == 0,
           f"{n}: one wrong answer from the server: refetched, the right bytes",
           f"{kind} wrong left {hub.wrong}")
    # b. wrong bytes for ever: an unchanged shard and a requantized one (its BF16 never
    # quantized)
    for n in (X, X2):
        kind, val = read_with_deadline(os.path.join(mnt, n), 90)
        ok(kind == "err" and val == 5, f"{n}: the server's bytes always wrong: the read fails "
           "EIO, never a wrong byte", f"{kind} {val if kind != 'ok' else len(val)}")
    text = open(log).read() if os.path.exists(log) else ""
    ok(X in text and X2 in text and "sha256" in text and "not the hub's" in text,
       "the log names the file and that the hub's bytes do not match its sha256", text[-1500:])
    hub.reset()
    kind, val = read_with_deadline(os.path.join(mnt, X), 60)
    ok(kind == "err" and val == 5, f"{X}: still EIO with the server right again (failed twice: "
       "remount to retry)", f"{kind}")
    wrong, bad = no_wrong_byte(mnt, ref_l, T["src"], (X, X2))
    ok(not wrong and not bad, "every file read is == export (a requantized shard with a "
       f"module from {X2} may fail EIO); every other unchanged file reads right",
       "\n".join(wrong + bad))
    umount(mnt)

    # c. a wrong header by range at mount (valid JSON, not the file's bytes): EIO, not wrong
    cache = os.path.join(tmp, "cache-v2")
    hub.reset(wrong_head=Z)
    rc, out = mount("hf://synthetic/ckpt", mnt, cache, ep, "--calib", T["cal"],
                    "--passthrough", "off", "--log", log)
    if ok(rc == 0, "mount with a wrong header served for " + Z, out):
        kind, val = read_with_deadline(os.path.join(mnt, Z), 90)
        ok(kind == "err" and val == 5, f"{Z}: its header by range differs from its verified "
           "bytes: EIO, not a wrong byte", f"{kind} {val if kind != 'ok' else len(val)}")
        text = open(log).read()
        ok("does not match the file's sha256" in text and Z in text and "remount" in text,
           "the log says the hub served a header that does not match the file's sha256",
           text[-1200:])
        sha = hubsrv.sha256_of(os.path.join(T["src"], Z))
        heads = os.listdir(os.path.join(cache, "hf", "heads"))
        ok(not any(h.startswith(sha) for h in heads) and len(heads) > 0,
           "the kept head of that shard is deleted", " ".join(heads))
        wrong, bad = no_wrong_byte(mnt, ref_l, T["src"], (Z,))
        ok(not wrong and not bad, "every file read is == export; every unchanged file reads "
           "right", "\n".join(wrong + bad))
        umount(mnt)
        hub.reset()
        rc, out = mount("hf://synthetic/ckpt", mnt, cache, ep, "--calib", T["cal"],
                        "--passthrough", "off")
        kind, val = read_with_deadline(os.path.join(mnt, Z), 90)
        ok(rc == 0 and kind == "ok" and val == read_ref(ref_l, Z),
           f"remounted: {Z}'s header comes from its verified copy, the right bytes",
           f"{out} {kind}")
        umount(mnt)

    # d. --remote-verify none: a wrong answer is served (the documented trade-off),
    # then caught when the file is whole and dropped
    hub.reset()
    rc, out = mount("hf://synthetic/ckpt", mnt, os.path.join(tmp, "cache-v3"), ep, "--calib",
                    T["cal"], "--passthrough", "off", "--remote-verify", "none")
    if ok(rc == 0, "mount --remote-verify none", out):
        U = same[0]
        hub.reset(wrong={U: 1})
        kind, val = read_with_deadline(os.path.join(mnt, U), 90)
        want = read_ref(ref_l, U)
        ok(kind == "ok" and val != want and len(val) == len(want) and val[1:] == want[1:],
           f"--remote-verify none: {U}'s one wrong answer IS served (its first byte) -- the "
           "risk --help and the README state", f"{kind}")
        st = status(mnt)
        ok(st.get("remote", {}).get("verify") == "none", "status: verify none",
           json.dumps(st.get("remote")))
        t = time.monotonic()
        while st.get("remote", {}).get("refetches", 0) < 1 and time.monotonic() - t < 20:
            time.sleep(0.2)
            st = status(mnt)
        ok(st.get("remote", {}).get("refetches", 0) >= 1, "none: the store's whole-file check "
           "then drops and refetches it", json.dumps(st.get("remote")))
        umount(mnt)
    rc, out = run("mount", "hf://synthetic/ckpt", mnt, "--calib", T["cal"], "--endpoint", ep,
                  "--remote-verify", "sometimes")
    ok(rc == 2 and "--remote-verify" in out, "--remote-verify takes file or none", out)


def slow_file_test(T, hub, ep, ref_l, mode):
    """A stalled server for shard A and 24 readers of A at distinct offsets (more than
    the 16 FUSE threads): a read of an already-verified shard B through the same mount
    completes at once; umount returns promptly; A's readers end EIO (never a hang)."""
    tmp = T["tmp"]
    mnt = os.path.join(tmp, "mnt-s")
    same, _ = shards(ref_l, T["src"])
    A, B = same[0], same[1]
    hub.reset()
    env = dict(os.environ, HF_HUB_DOWNLOAD_TIMEOUT="6")
    extra = ("--remote-verify", mode) if mode else ()
    rc, out = mount("hf://synthetic/ckpt", mnt, os.path.join(tmp, f"cache-s{mode}"), ep,
                    "--calib", T["cal"], "--passthrough", "off", *extra, env=env)
    if not ok(rc == 0, f"mount for the slow-file test ({mode or 'default'})", out):
        return
    kind, val = read_with_deadline(os.path.join(mnt, B), 60)
    ok(kind == "ok" and val == read_ref(ref_l, B), f"{B} read (fetched and verified)", kind)
    hub.reset(stall=30, stall_file=A)
    size = os.path.getsize(os.path.join(ref_l, A))
    n, res = 24, []
    lock = threading.Lock()

    def reader(k):
        try:
            fd = os.open(os.path.join(mnt, A), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)   # one FUSE read each
                off = (size // n) * k // 4096 * 4096
                got = os.pread(fd, 4096, off)
                r = ("ok", got == read_ref(ref_l, A)[off:off + 4096])
            finally:
                os.close(fd)
        except OSError as e:
            r = ("err", e.errno)
        with lock:
            res.append(r)
    ths = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(n)]
    for th in ths:
        th.start()
    time.sleep(1.5)
    got = {}

    def other():   # the control file and B, from the daemon (B's pages dropped first)
        got["parked"] = status(mnt).get("parked_reads", 0)
        fd = os.open(os.path.join(mnt, B), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            got["b"] = os.pread(fd, 1 << 24, 0)
        finally:
            os.close(fd)
    t = time.monotonic()
    th = threading.Thread(target=other, daemon=True)
    th.start()
    th.join(3)
    dt = time.monotonic() - t
    parked = got.get("parked", -1)
    with lock:
        waiting = n - len(res)
    ok(got.get("b") == read_ref(ref_l, B) and dt < 3 and waiting == n,
       f"{mode or 'default'}: {waiting} readers wait on stalled {A}; status and {B} "
       f"(verified) read through the same mount in {dt:.2f} s", f"parked {parked} {res}")
    if not mode:
        ok(parked >= n, f"the {n} reads of {A} are parked on its fetch ({parked} parked), "
           "no FUSE thread waits", str(parked))
    hub.reset()        # (the answers already stalled stay so: retries then succeed)
    rc, out, dt = umount(mnt)
    ok(rc == 0 and dt < 10, f"umount with {A}'s fetch stalled returns in {dt:.1f} s", out)
    for th in ths:
        th.join(90)
    ok(len(res) == n and all(r == ("err", 5) or r == ("ok", True) for r in res),
       f"the readers of {A} end (right bytes after a retry, or EIO), none with a wrong byte",
       str(res))


def body(T, hub, ep):
    tmp = T["tmp"]
    tiny = os.path.join(ROOT, "tests", "data", "tiny", "llama")
    hub.repos["synthetic/ckpt"] = {"refs": {"main": C1}, "commits": {C1: T["src"]}}
    hub.repos["synthetic/tiny-llama"] = {"refs": {"main": C2}, "commits": {C2: tiny}}
    ref_l, ref_t = os.path.join(tmp, "ref-laguna"), os.path.join(tmp, "ref-tiny")
    rc, out = run("export", T["src"], ref_l, "--calib", T["cal"], "--no-cache", "--quiet")
    ok(rc == 0, "export of the local Laguna-like checkpoint (the reference)", out)
    rc, out = run("export", tiny, ref_t, "--scheme", "nvfp4a16", "--no-cache", "--quiet")
    ok(rc == 0, "export of tests/data/tiny/llama --scheme nvfp4a16 (the reference)", out)

    # 1. the Laguna fix, mounted from the hub
    cache, mnt = os.path.join(tmp, "cache"), os.path.join(tmp, "mnt")
    hub.reset()
    t = time.monotonic()
    rc, out = mount("hf://synthetic/ckpt", mnt, cache, ep, "--calib", T["cal"])
    dt = time.monotonic() - t
    ok(rc == 0, f"mount hf://synthetic/ckpt --calib (in {dt:.1f} s)", out)
    mount_sent = hub.sent
    budget = small_budget(T["src"])
    total = sum(os.path.getsize(os.path.join(T["src"], n)) for n in os.listdir(T["src"]))
    ok(hub.sent <= budget, f"mount fetched {hub.sent} of {total} bytes: only small files and "
       f"shard headers (<= {budget})", "\n".join(map(str, hub.ranges[:30])))
    ok(all(x[0] == C1 for x in hub.ranges), "every range asked for the pinned commit",
       "\n".join(map(str, hub.ranges[:10])))
    st = status(mnt)
    ok(st.get("src") == f"hf://synthetic/ckpt@{C1}", "status: src is hf://ORG/NAME@<commit>",
       json.dumps(st)[:600])
    bad = differing(mnt, ref_l)
    ok(not bad, "Laguna fix: every file through the hf:// mount == export of the local copy",
       "\n".join(bad))
    # every SRC byte fetched once: jobs read through chunks that also hold presented
    # bytes, readahead skips chunks of requantized weights only (the headers the mount
    # fetched exactly are the only bytes that may come twice)
    ok(hub.sent <= total + mount_sent, f"mount and a read of everything fetched {hub.sent} "
       f"bytes for {total} bytes of SRC (<= SRC + the {mount_sent} the mount fetched)",
       "\n".join(map(str, hub.ranges[:40])))
    st = status(mnt)
    r = st.get("remote", {})
    ok(r.get("fetched_bytes", 0) > 0 and r.get("read_errors", 1) == 0,
       "status: remote traffic (bytes fetched, chunks, no read errors)", json.dumps(r))
    rc, out, dt = umount(mnt)
    ok(rc == 0, f"umount ({dt:.1f} s)", out)

    # 2. the same revision again, same cache: nothing fetched for the mount
    hub.reset()
    rc, out = mount("hf://synthetic/ckpt@main", mnt, cache, ep, "--calib", T["cal"])
    ok(rc == 0 and hub.sent == 0, f"second mount of the revision: {hub.sent} bytes fetched "
       "(the headers and small files come from the cache)", out)
    for n in ("config.json", "model.safetensors.index.json"):
        if os.path.exists(os.path.join(ref_l, n)):
            with open(os.path.join(mnt, n), "rb") as f, open(os.path.join(ref_l, n), "rb") as g:
                ok(f.read() == g.read() and hub.sent == 0,
                   f"second mount: {n} read from the cache ({hub.sent} bytes fetched)")
    rc, out = run("warm", mnt)
    st = status(mnt)
    ok(rc == 0 and " 0 remote files not assembled" in out and st.get("remote_pending") == [] and
       (not st.get("passthrough") or st.get("files_passthrough", 0) + st.get("files_copy", 0)
        == st.get("files")), "Laguna fix: warm assembles every file identical to SRC; "
       "nothing pending", out + json.dumps({k: st.get(k) for k in (
           "remote_pending", "files", "files_passthrough", "files_copy", "files_pending")}))
    bad = differing(mnt, ref_l)
    ok(not bad, "after warm: every file (assembled, materialized) == export", "\n".join(bad))
    # what the store keeps: the files presented unchanged, once, and the plan's own
    # inputs (SRC's config.json and index: a second mount and offline plan from them);
    # no BF16 of the requantized shards (dropped once the shards are materialized)
    same = [n for n in os.listdir(ref_l) if os.path.exists(os.path.join(T["src"], n)) and
            open(os.path.join(ref_l, n), "rb").read() ==
            open(os.path.join(T["src"], n), "rb").read()]
    unchanged = sum(os.path.getsize(os.path.join(ref_l, n)) for n in same) + \
        sum(os.path.getsize(os.path.join(T["src"], n)) for n in
            ("config.json", "model.safetensors.index.json") if n not in same)
    r = st.get("remote", {})
    ok(r.get("bytes_on_disk", -1) <= unchanged,
       f"after warm the store holds {r.get('bytes_on_disk')} bytes <= the {unchanged} bytes "
       "presented unchanged + SRC's config and index (no BF16 kept)", json.dumps(r) + " " + " ".join(sorted(same)))
    umount(mnt)

    # 2b. the Laguna story: --calib hf:// too (the scales fetched as `calib fetch` does)
    hub.repos["synthetic/cal"] = {"refs": {"main": C2}, "commits": {C2: T["cal"]}}
    rc, out = mount("hf://synthetic/ckpt@main", mnt, os.path.join(tmp, "cache-cal"), ep,
                    "--calib", "hf://synthetic/cal", "--passthrough", "off")
    ok(rc == 0, "mount hf://synthetic/ckpt --calib hf://synthetic/cal --passthrough off", out)
    bad = differing(mnt, ref_l) if rc == 0 else ["not mounted"]
    ok(not bad, "--calib hf://: every file == export of the local copy", "\n".join(bad))
    # without passthrough too: shards materialized, the SRC files they needed whole dropped
    rc, out = run("warm", mnt)
    r = status(mnt).get("remote", {})
    ok(rc == 0 and r.get("bytes_on_disk", -1) <= unchanged, f"--passthrough off, after warm the "
       f"store holds {r.get('bytes_on_disk')} bytes <= the {unchanged} presented unchanged (the "
       "requantized shards' SRC files dropped)", out + json.dumps(r))
    bad = differing(mnt, ref_l)
    ok(not bad, "after the drop: every file == export", "\n".join(bad))
    umount(mnt)

    # 3. --scheme on the tiny llama
    cache2, mnt2 = os.path.join(tmp, "cache2"), os.path.join(tmp, "mnt2")
    hub.reset()
    rc, out = mount("hf://synthetic/tiny-llama", mnt2, cache2, ep, "--scheme", "nvfp4a16")
    ok(rc == 0, "mount hf://synthetic/tiny-llama --scheme nvfp4a16", out)
    budget = small_budget(tiny)
    ok(hub.sent <= budget, f"mount fetched {hub.sent} bytes (<= {budget}: config, header)",
       "\n".join(map(str, hub.ranges[:30])))
    bad = differing(mnt2, ref_t)
    ok(not bad, "--scheme: every file through the hf:// mount == export of the local copy",
       "\n".join(bad))
    # warm: everything fetched and quantized, one progress bar, remote files assembled
    rc, out = run("warm", mnt2, "--progress")
    ok(rc == 0 and "fetched" in out and " 0 remote files not assembled" in out,
       "warm of an hf:// mount: fetched, quantized, every remote file assembled", out)
    st = status(mnt2)
    ok(st.get("remote_pending") == [] and st.get("files_pending") == 0,
       "after warm: no remote file left to assemble, no shard pending",
       json.dumps({k: st.get(k) for k in ("remote_pending", "passthrough", "files",
                                           "files_passthrough", "files_pending")}))
    rc, out = run("status", mnt2)
    ok(rc == 0 and f"hf://synthetic/tiny-llama@{C2}" in out and "remote" in out,
       "status names hf://ORG/NAME@<commit> and the remote traffic", out)
    umount(mnt2)

    # 4. faults mid-read: EIO, not a wrong byte, not a hang; umount promptly
    cache3, mnt3 = os.path.join(tmp, "cache3"), os.path.join(tmp, "mnt3")
    hub.reset()
    rc, out = mount("hf://synthetic/tiny-llama", mnt3, cache3, ep, "--scheme", "nvfp4a16",
                    "--passthrough", "off")
    ok(rc == 0, "mount of the tiny llama for the fault test", out)
    hub.reset(fail=500)
    shard = os.path.join(mnt3, "model.safetensors")
    kind, val = read_with_deadline(shard, 90)
    with open(os.path.join(ref_t, "model.safetensors"), "rb") as f:
        want = f.read()
    ok(kind == "err" and val == 5, "a server answering 500 mid-read: the read fails EIO "
       "(not a wrong byte, not a hang)", f"{kind} {val if kind != 'ok' else len(val)}")
    hub.reset(fail=0)
    kind, val = read_with_deadline(shard, 90)
    ok(kind == "ok" and val == want, "the server back: the same read gives the right bytes",
       f"{kind}")
    hub.reset(fail=503)
    rc, out, dt = umount(mnt3)
    ok(rc == 0 and dt < 30, f"umount with the server failing returns promptly ({dt:.1f} s)", out)

    # 4a. connections dropped part way through every body
    cache7 = os.path.join(tmp, "cache7")
    hub.reset()
    rc, out = mount("hf://synthetic/ckpt", mnt3, cache7, ep, "--calib", T["cal"],
                    "--passthrough", "off")
    ok(rc == 0, "mount for the mid-file fault test", out)
    big = max((n for n in os.listdir(ref_l) if n.endswith(".safetensors")),
              key=lambda n: os.path.getsize(os.path.join(ref_l, n)))
    hub.reset(cut=True)
    kind, val = read_with_deadline(os.path.join(mnt3, big), 90)
    ok(kind == "err" and val == 5 and hub.sent > 0,
       f"{big}: every body cut in the middle ({hub.sent} bytes sent): EIO after the retries, "
       "not a wrong byte, not a hang", f"{kind} {val if kind != 'ok' else len(val)}")
    hub.reset()
    with open(os.path.join(mnt3, big), "rb") as f, open(os.path.join(ref_l, big), "rb") as g:
        ok(f.read() == g.read(), f"{big}: read again with the server back: the right bytes")
    rc, out, dt = umount(mnt3)

    # 4b. a stalled server with a read in flight: umount returns at once (the mount is
    # detached while the file is open), the read ends EIO once the deadline passes
    cache6 = os.path.join(tmp, "cache6")
    hub.reset()
    env = dict(os.environ, HF_HUB_DOWNLOAD_TIMEOUT="2")
    rc, out = mount("hf://synthetic/ckpt", mnt3, cache6, ep, "--calib", T["cal"],
                    "--passthrough", "off", env=env)
    ok(rc == 0, "mount for the stalled-server test (HF_HUB_DOWNLOAD_TIMEOUT=2)", out)
    hub.reset(stall=30)
    res = ["hang", None]

    def stalled_read():
        try:
            with open(os.path.join(mnt3, "model-00001-of-00007.safetensors"), "rb") as f:
                res[:] = ["ok", f.read()]
        except OSError as e:
            res[:] = ["err", e.errno]
    th = threading.Thread(target=stalled_read, daemon=True)
    th.start()
    time.sleep(1.5)
    rc, out, dt = umount(mnt3)
    ok(rc == 0 and dt < 10, f"umount with a fetch stalled in flight returns in {dt:.1f} s", out)
    th.join(90)
    ok(res[0] == "err" and res[1] == 5, "the stalled read ends EIO (deadline, retries), "
       "not a hang and not a wrong byte", str(res[0]) + " " + str(res[1] if res[0] != "ok"
                                                              else len(res[1])))
    hub.reset()

    # 5. HF_HUB_OFFLINE=1: resolved as last seen, served from the cache alone
    hub.reset(fail=503)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    dead = "http://127.0.0.1:1"     # no server there: as if the hub were gone
    rc, out = mount("hf://synthetic/tiny-llama@main", mnt2, cache2, dead, "--scheme",
                    "nvfp4a16", env=env)
    ok(rc == 0 and hub.sent == 0 and not hub.ranges, "HF_HUB_OFFLINE=1, no server: @main mounts "
       "from the cache", out)
    st = status(mnt2)
    ok(st.get("src") == f"hf://synthetic/tiny-llama@{C2}", "offline: @main resolved to the "
       "commit last seen", json.dumps(st)[:400])
    bad = differing(mnt2, ref_t) if rc == 0 else ["not mounted"]
    ok(not bad and not hub.ranges, "offline, server failing: every file (warmed before) "
       "served from the cache alone, == export", "\n".join(bad))
    umount(mnt2)
    # offline, a cache that never saw the shard's bytes: EIO naming file, range, offline
    log, cache5 = os.path.join(tmp, "offline.log"), os.path.join(tmp, "cache5")
    hub.reset()
    rc, out = mount("hf://synthetic/tiny-llama", mnt3, cache5, ep, "--scheme", "nvfp4a16")
    ok(rc == 0, "a mount that fetches only the headers (then unmounted)", out)
    umount(mnt3)
    hub.reset(fail=503)
    rc, out = mount("hf://synthetic/tiny-llama@main", mnt3, cache5, dead, "--scheme",
                    "nvfp4a16", "--log", log, env=env)
    if rc == 0:
        kind, val = read_with_deadline(os.path.join(mnt3, "model.safetensors"), 60)
        umount(mnt3)
        text = open(log).read() if os.path.exists(log) else ""
        ok(kind == "err" and val == 5 and "HF_HUB_OFFLINE" in text and
           "model.safetensors bytes" in text,
           "offline, bytes never fetched: EIO, the log names the file, range and offline",
           f"{kind} {val if kind != 'ok' else len(val)}\n{text[-1500:]}")
    else:
        ok(False, "offline mount of a revision seen before (for the EIO check)", out)
    rc, out = mount("hf://synthetic/ckpt@nobranch", mnt2, cache2, ep, "--calib", T["cal"],
                    env=env)
    ok(rc == 1 and "HF_HUB_OFFLINE" in out and "nobranch" in out,
       "offline: a revision never seen is refused, saying so", out)

    # 6. verify takes hf:// (through the reader): the remote copy == the local files
    hub.reset()
    rc, out = run("verify", "hf://synthetic/tiny-llama", "--against", tiny, "--endpoint", ep)
    ok(rc == 0 and "differ" in out and " 0 differ" in out,
       "verify hf://synthetic/tiny-llama --against the local copy: every tensor equal", out)
    rc, out = run("verify", "hf://synthetic/ckpt", "--against", ref_l, "--endpoint", ep,
                  "--quiet", "--tensors", r"layers\.40\.mlp\.experts\.[01]\.")
    ok(rc == 0 and "6 of 6 BF16 modules reproduced" in out and "fp32" in out,
       "verify hf://SRC --against its export: every module's BF16 (fetched by range) "
       "reproduces the NVFP4 bytes", out[-1500:])

    # 6b. --remote-verify: wrong bytes from the server never served (file), or shown (none)
    verify_faults(T, hub, ep, ref_l)

    # 6c. a slow file never blocks readers of another (no FUSE thread waits on the hub)
    slow_file_test(T, hub, ep, ref_l, None)
    slow_file_test(T, hub, ep, ref_l, "none")

    # 7. a gated repo: refused at mount time, saying what to do
    hub.reset(token="hf_secretTestToken")
    env = dict(os.environ, HF_TOKEN="", HF_TOKEN_PATH=os.path.join(tmp, "no-token"))
    rc, out = mount("hf://synthetic/tiny-llama", mnt2, os.path.join(tmp, "c4"), ep,
                    "--scheme", "nvfp4a16", env=env)
    ok(rc == 1 and "401" in out and "HF_TOKEN" in out,
       "a gated repo without a token: mount refused, saying to set HF_TOKEN", out)
    # with HF_TOKEN: the hub sees it, the CDN (another host and port) never does
    env["HF_TOKEN"] = "hf_secretTestToken"
    mnt5 = os.path.join(tmp, "mnt5")
    rc, out = mount("hf://synthetic/tiny-llama", mnt5, os.path.join(tmp, "c5"), ep,
                    "--scheme", "nvfp4a16", env=env)
    if ok(rc == 0, "a gated repo with HF_TOKEN: mounted", out):
        bad = differing(mnt5, ref_t)
        ok(not bad, "with a token: every file through the mount == export", "\n".join(bad))
        umount(mnt5)
    ok(hub.cdn_auth and all(a is None for a in hub.cdn_auth),
       f"the token is sent to the hub, never across the redirect to the CDN "
       f"({len(hub.cdn_auth)} CDN requests, port {hub.cdn_port})", str(hub.cdn_auth[:5]))
    rc, out = run("mount", T["src"], mnt2, "--calib", T["cal"], "--endpoint", ep)
    ok(rc == 2 and "--endpoint" in out, "--endpoint without hf:// is a usage error", out)
    return 0


if __name__ == "__main__":
    sys.exit(hfmount.main("rq-mount-hf-", body))
