#!/usr/bin/env python3
"""`requantfs export hf://ORG/NAME@REV OUT` against a local hub (tests/hubsrv.py), issue 20:
no byte the hub sent reaches OUT or a cache key unverified.
  - a clean export (--no-cache) equals export of the local copy, each SRC byte fetched
    about once, its temporary store next to OUT removed, at most 3 SRC files on disk
    (the next fetched ahead while export works on one);
  - one wrong answer for a requantized and an unchanged shard: fetched again, export
    succeeds and equals the local export;
  - wrong answers for ever: export fails naming the file, the hub's sha256 and what
    came; OUT holds no file (no wrong byte), nothing left next to OUT;
  - a wrong header by range (valid JSON, not the file's): export fails naming the file;
    when it fails so while the next file is being fetched ahead (stalled by the hub),
    export returns promptly (the prefetch cancelled), nothing in or next to OUT;
  - --cache C: the store lives in C/remote/ and is empty again after the export;
  - a shard without LFS sha256 is checked by its git blob id; a file with neither hash
    is refused;
  - cache keys: a --remote-verify none mount's entries (root, /dev/fuse) are not taken
    by export --cache of the same cache; a file-mode mount's are.
Standard library only. TAP output. Usage: test_export_hf.py REQUANTFS"""
import glob, hashlib, json, os, re, shutil, struct, subprocess, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hfmount  # noqa: E402
import hubsrv  # noqa: E402
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402

C1 = "3" * 39 + "c"
SPEC = "hf://synthetic/ckpt"


def header_len(path):
    with open(path, "rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def differing(out, ref):
    """Files of ref that OUT lacks or holds with other bytes, and extra files of OUT."""
    if not os.path.isdir(out):
        return ["OUT missing"]
    bad = [n for n in sorted(os.listdir(ref))
           if not os.path.isfile(os.path.join(out, n)) or read(os.path.join(out, n)) !=
           read(os.path.join(ref, n))]
    return bad + ["extra: " + n for n in sorted(set(os.listdir(out)) - set(os.listdir(ref)))]


def left_next_to(out):
    """What an export left beside OUT: its temporary store."""
    return glob.glob(os.path.join(os.path.dirname(out), "." + os.path.basename(out) +
                                  ".requantfs-fetch-*"))


def export(T, ep, out, *extra):
    return run("export", SPEC, out, "--calib", T["cal"], "--endpoint", ep, *extra, timeout=300)


def shard_kinds(T):
    """(unchanged, requantized) shard names of the checkpoint."""
    same, changed = [], []
    for n in sorted(os.listdir(T["src"])):
        if n.endswith(".safetensors"):
            (same if read(os.path.join(T["src"], n)) == read(os.path.join(T["ref"], n))
             else changed).append(n)
    return same, changed


def held(out):
    """(files, bytes) export says it held at most, from its summary line."""
    m = re.search(r"at most (\d+) files \(([\d.]+) (B|KiB|MiB|GiB)\) on disk at once", out)
    if not m:
        return None, None
    mult = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[3]]
    return int(m[1]), float(m[2]) * mult


def body(T, hub, ep):
    src, ref, tmp = T["src"], T["ref"], T["tmp"]
    hub.repos["synthetic/ckpt"] = {"refs": {"main": C1}, "commits": {C1: src}}
    same, changed = shard_kinds(T)
    if not ok(same and changed, "the checkpoint has unchanged and requantized shards",
              (same, changed)):
        return
    U, X = same[0], changed[0]
    sizes = sorted((os.path.getsize(os.path.join(src, n)) for n in os.listdir(src)),
                   reverse=True)
    total = sum(sizes)

    # 1. clean: == the local export, each byte fetched about once, <= 2 files held
    out = os.path.join(tmp, "out1")
    # what dead exports to the same OUT left beside it (their owner gone, or no
    # owner file and old), and a live one's: swept, and left alone
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = {}
    for tag, owner, age in (("dead", str(dead.pid), 0), ("old", None, 7200),
                            ("live", str(os.getpid()), 7200)):
        d = os.path.join(tmp, ".out1.requantfs-fetch-" + tag)
        os.makedirs(os.path.join(d, "remote"))
        if owner:
            with open(os.path.join(d, "owner"), "w") as f:
                f.write(owner + "\n")
        if age:
            os.utime(d, (time.time() - age, time.time() - age))
        stale[tag] = d
    hub.reset()
    rc, o = export(T, ep, out, "--no-cache")
    ok(rc == 0, "export hf://synthetic/ckpt OUT --no-cache", o)
    bad = differing(out, ref)
    ok(rc == 0 and not bad, "every file equals export of the local copy", "\n".join(bad))
    ok(re.search(r"fetched %d SRC files of hf://synthetic/ckpt@%s" % (len(sizes), C1), o) and
       "fetched " + X in o, "export says what it fetched (per shard, and in all)", o)
    nf, nb = held(o)
    ok(nf is not None and nf <= 3 and nb <= sizes[0] + sizes[1] + sizes[2] + 1024,
       "at most 3 SRC files on disk at once (dropped once written; the one export finishes, "
       "the one it works on, the next, fetched meanwhile)", o[-600:])
    m = re.search(r"(\d+) fetched ahead while export worked", o)
    ok(m and int(m[1]) >= len([n for n in sizes if n]) // 2,
       "most SRC files were fetched ahead, while export worked on the one before", o[-600:])
    ok(hub.sent <= total + 2 * 1024 * 1024, f"about each SRC byte fetched once: {hub.sent} "
       f"bytes for {total} of SRC (+ headers)")
    left = left_next_to(out)
    ok(left == [stale["live"]], "the temporary store next to OUT is removed, and those of "
       "dead exports (owner gone, or no owner and an hour old); a live export's kept", left)
    shutil.rmtree(stale["live"])

    # 2. one wrong answer each for a requantized and an unchanged shard: fetched again
    start = max(header_len(os.path.join(src, n)) for n in (U, X)) + 100
    out = os.path.join(tmp, "out2")
    hub.reset(wrong={X: 1, U: 1}, wrong_from=start)
    rc, o = export(T, ep, out, "--no-cache")
    bad = differing(out, ref)
    ok(rc == 0 and not bad and hub.wrong == {X: 0, U: 0},
       f"one wrong answer for {X} and {U}: fetched again, export equals the local one",
       f"rc {rc} wrong left {hub.wrong}\n" + "\n".join(bad) + "\n" + o[-1500:])
    answers = [r for r in hub.ranges if r[1] == X and r[3] >= start]
    ok(len(answers) >= 2, f"{X}'s data was fetched twice (the spoiled copy not used)",
       hub.ranges)

    # 3. wrong for ever: fails naming the file and both hashes, nothing in OUT
    out = os.path.join(tmp, "out3")
    hub.reset(wrong={X: 10 ** 6}, wrong_from=start)
    rc, o = export(T, ep, out, "--no-cache")
    b = bytearray(read(os.path.join(src, X)))
    b[start] ^= 0xFF
    got, want = hashlib.sha256(b).hexdigest(), hubsrv.sha256_of(os.path.join(src, X))
    ok(rc == 1 and X in o and want in o and got in o,
       f"{X} always wrong: export fails naming it, the hub's sha256 and what came", o[-1500:])
    files = os.listdir(out) if os.path.isdir(out) else []
    ok(not files, "OUT holds nothing (no wrong byte, no partial file)", files)
    ok(not left_next_to(out), "nothing left next to OUT", left_next_to(out))

    # 4. a wrong header by range: the plan's head differs from the verified file's
    Z = next((n for n in same + changed
              if read(os.path.join(src, n))[header_len(os.path.join(src, n)) - 1:
                                           header_len(os.path.join(src, n))] == b" "), None)
    if ok(Z is not None, "a shard whose header ends in padding (for wrong_head)"):
        out = os.path.join(tmp, "out4")
        hub.reset(wrong_head=Z)
        rc, o = export(T, ep, out, "--no-cache")
        files = os.listdir(out) if os.path.isdir(out) else []
        ok(rc == 1 and Z in o and "header" in o and not files,
           f"{Z}'s header answered wrong by range: export fails naming it, OUT empty",
           f"rc {rc} files {files}\n{o[-1500:]}")

    # 4b. export fails while the next file is being fetched ahead: the prefetch
    # (stalled by the hub for longer than the test waits) is cancelled, export
    # returns promptly with the error, nothing in OUT or next to it
    shards = sorted(same + changed)
    Z = next((n for n in shards[:-1]
              if read(os.path.join(src, n))[header_len(os.path.join(src, n)) - 1:
                                           header_len(os.path.join(src, n))] == b" "), None)
    if ok(Z is not None, "a shard but the last whose header ends in padding"):
        Y = shards[shards.index(Z) + 1]
        # Z's header is checked right after Y's prefetch thread starts, so on
        # a loaded machine export can fail and cancel before that thread's
        # first request reaches the hub: a race the product handles either
        # way, but this case is about the request in flight, so it is tried
        # until the hub holds Y's request (each try is checked the same way)
        for attempt in range(1, 6):
            out = os.path.join(tmp, f"out4b.{attempt}")
            hub.reset(wrong_head=Z, stall=60, stall_file=Y,
                      stall_from=header_len(os.path.join(src, Y)) + 1)
            t0 = time.monotonic()
            rc, o = export(T, ep, out, "--no-cache")
            dt = time.monotonic() - t0
            files = os.listdir(out) if os.path.isdir(out) else []
            if Y in hub.stalled or rc != 1 or files or left_next_to(out) or dt >= 20:
                break
        ok(Y in hub.stalled, f"{Y} was being fetched ahead when export of {Z} failed "
           f"(try {attempt} of at most 5)", hub.stalled)
        ok(rc == 1 and Z in o and "header" in o and dt < 20,
           f"export fails naming {Z} in {dt:.1f} s (the prefetch of {Y}, stalled 60 s by the "
           "hub, cancelled, not waited for)", f"rc {rc}\n{o[-1500:]}")
        ok(not files and not left_next_to(out), "OUT empty, nothing left next to OUT",
           (files, left_next_to(out)))

    # 5. --cache C: the store in C/remote/, empty again after the export
    out, cache = os.path.join(tmp, "out5"), os.path.join(tmp, "cache5")
    hub.reset()
    rc, o = export(T, ep, out, "--cache", cache)
    bad = differing(out, ref)
    ok(rc == 0 and not bad, "export --cache C equals the local export", o[-800:])
    kept = [os.path.relpath(os.path.join(d, f), cache) for d, _, fs in
            os.walk(os.path.join(cache, "remote")) for f in fs]
    ok(os.path.isdir(os.path.join(cache, "remote")) and not kept,
       "the fetched SRC files lived in C/remote/ and were dropped once written", kept)

    # 5b. a shard without LFS sha256 is checked by its git blob id; a file with
    # neither hash is refused, named (its bytes could not be verified)
    out = os.path.join(tmp, "out5b")
    hub.reset(no_lfs={X})
    rc, o = export(T, ep, out, "--no-cache")
    ok(rc == 0 and not differing(out, ref) and re.search(re.escape(X) + r".*git blob id checked",
                                                         o),
       f"{X} listed without LFS sha256: checked by its git blob id, export == local", o[-800:])
    out = os.path.join(tmp, "out5c")
    hub.reset(no_blob={"tokenizer.json"})
    rc, o = export(T, ep, out, "--no-cache")
    files = os.listdir(out) if os.path.isdir(out) else []
    ok(rc == 1 and "tokenizer.json" in o and "cannot be verified" in o and not files,
       "a file listed with no sha256 and no blob id: export refuses, naming it", o[-800:])

    # 6. cache keys: a --remote-verify none mount's entries are its own
    none_mode_keys(T, hub, ep)

    rc, o = run("verify", "--help")
    ok(rc == 0 and "not sha256-verified" in o, "verify --help says hf:// bytes compared are "
       "not sha256-verified", o[-800:])


def none_mode_keys(T, hub, ep):
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        rqtap.n += 1
        print(f"ok {rqtap.n} # SKIP --remote-verify none cache keys: needs root and /dev/fuse "
              "to mount (CI has them); tests/fs/test_job_key.c covers the keys without a mount")
        return
    tmp = T["tmp"]
    for mode in ("none", "file"):
        mnt, cache = os.path.join(tmp, "m-" + mode), os.path.join(tmp, "c-" + mode)
        hub.reset()
        rc, o = hfmount.mount(SPEC, mnt, cache, ep, "--calib", T["cal"], "--remote-verify", mode)
        if not ok(rc == 0, f"mount --remote-verify {mode}", o):
            continue
        rc, w = run("warm", mnt, timeout=300)
        with open(os.path.join(mnt, ".requantfs", "status")) as f:
            st = json.load(f)
        run("umount", mnt, timeout=60)
        ok(rc == 0 and st.get("jobs_run") == st.get("jobs_total") > 0,
           f"{mode}: warm quantized every job into the cache", (w[-500:], st.get("jobs_run")))
        rc, o = export(T, ep, os.path.join(tmp, "out-" + mode), "--cache", cache)
        m = re.search(r"(\d+) jobs quantized, (\d+) jobs and (\d+) files taken from the cache", o)
        bad = differing(os.path.join(tmp, "out-" + mode), T["ref"])
        if mode == "none":
            ok(rc == 0 and m and m[2] == "0" and m[3] == "0" and not bad,
               "export --cache of a --remote-verify none mount's cache takes none of its "
               "entries (unverified keys), quantizes, equals the local export", o[-800:])
        else:
            ok(rc == 0 and m and (int(m[2]) + int(m[3])) > 0 and not bad,
               "export --cache of a file-mode mount's cache takes its entries (same keys as "
               "verified), equals the local export", o[-800:])


if __name__ == "__main__":
    sys.exit(hfmount.main("rq-export-hf-", body, root=False, ref=True))
