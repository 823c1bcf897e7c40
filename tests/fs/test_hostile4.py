#!/usr/bin/env python3
"""Hostile inputs, fourth round, items 4, 5 and 6, end to end through the
requantfs binary on a small hand-written checkpoint:

 4. Names from SRC (a local directory, or a hub's siblings) that are not file
    names -- ".", "..", a "\\" in them -- or that are requantfs's own
    (.requantfs, .requantfs-export.json, *.requantfs-tmp) are skipped with a
    warning naming them, alike by plan, export and mount; a model API answer
    holding \\u0000 (a NUL no name can hold) is refused, saying so.
 5. A SRC file named as export's temporaries were (.config.json.requantfs-tmp)
    or as its record (.requantfs-export.json) changes nothing: config.json is
    the rewritten one, verify reports no false change; a dead export's
    temporaries in DST are named when export refuses DST.
 6. verify of an export --link notices a linked file rewritten in place with
    its size and mtime restored (the ctime moved), and verify --full compares
    the bytes with the hash export took: a chmod alone passes --full, a
    rewrite does not; hard links pass right after export; an older manifest
    (no hashes) is refused by --full, saying what to do.

Usage: test_hostile4.py REQUANTFS   (standard library only; the mount cases
need root and /dev/fuse and say so when they cannot run)"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import rqtap  # noqa: E402
from rqtap import ok, run, mounted  # noqa: E402
import hubsrv  # noqa: E402

rqtap.init(sys.argv[1])

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32}
W = "model.layers.0.mlp.down_proj.weight"
GOOD = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json"]
# name -> bytes: what a hostile SRC adds next to the checkpoint
DECOY_CONFIG = b'{"decoy": "these are not config.json\'s bytes"}'
DECOY_MANIFEST = json.dumps({"format": 1, "link": "symbolic", "src": "/", "linked": [
    {"name": "tokenizer.json", "target": "/x", "size": "1", "mtime_ns": "1", "ino": "1"}]}).encode()
HOSTILE_LOCAL = {".config.json.requantfs-tmp": DECOY_CONFIG,
                 ".requantfs-export.json": DECOY_MANIFEST,
                 ".requantfs": b"not our control directory",
                 "a\\b.json": b"a path on another system"}
HOSTILE_HUB = dict(HOSTILE_LOCAL, **{"..": b"dot dot", ".": b"dot"})
SCHEME = ["--scheme", "fp8-dynamic"]


def ckpt(d, extra=None):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    h = json.dumps({W: {"dtype": "BF16", "shape": [32, 32], "data_offsets": [0, 2048]},
                    "__metadata__": {"format": "pt"}}).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"\x11" * 2048)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        f.write('{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}}\n')
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        f.write('{"bos_token_id": 1, "eos_token_id": 2}\n')
    for name, b in (extra or {}).items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(b)
    return d


def warned(out, names):
    """Every name appears in a warning line."""
    lines = [x for x in out.splitlines() if "warning" in x or "not presented" in x]
    return all(any(n in x for x in lines) for n in names)


def rewritten_config(path):
    try:
        with open(path) as f:
            return "quantization_config" in json.load(f)
    except (OSError, ValueError):
        return False


def can_mount():
    return os.geteuid() == 0 and os.path.exists("/dev/fuse")


def ls_a(d):
    """Every name readdir gives, '.' and '..' included (os.listdir hides them)."""
    p = subprocess.run(["ls", "-a1", d], capture_output=True, text=True, timeout=60)
    return p.stdout.splitlines()


def mount_case(label, src, tmp, env=None, args=()):
    if not can_mount():
        ok(True, f"# SKIP {label}: mounting needs root and /dev/fuse")
        return
    mnt = os.path.join(tmp, "mnt-" + label.split()[0])
    os.makedirs(mnt)
    rqtap.MOUNTS.append(os.path.abspath(mnt))
    log = os.path.join(tmp, "log-" + label.split()[0])
    rc, out = run("mount", src, mnt, *SCHEME, "--cache", os.path.join(tmp, "cache"),
                  "--device", "cpu", "--log", log, *args, env=env)
    if not ok(rc == 0 and mounted(mnt), f"{label}: mounted", out):
        return
    names = ls_a(mnt)
    ok(sorted(names) == sorted([".", ".."] + GOOD),
       f"{label}: the mount lists . and .. once each and only the checkpoint's names", names)
    ok(rewritten_config(os.path.join(mnt, "config.json")),
       f"{label}: the mount's config.json is the rewritten one")
    subprocess.run(["umount", mnt], capture_output=True, timeout=60)
    time.sleep(0.2)
    with open(log, errors="replace") as f:
        text = f.read()
    ok(warned(text, [".requantfs-export.json", ".config.json.requantfs-tmp"]),
       f"{label}: the mount's log names the entries it did not present", text)


def item45_local(tmp):
    src = ckpt(os.path.join(tmp, "src"), HOSTILE_LOCAL)
    rc, out = run("plan", src, *SCHEME)
    ok(rc == 0 and "files: 4," in out and warned(out, list(HOSTILE_LOCAL)),
       "plan of a local SRC: 4 files presented, each hostile name skipped with a warning", out)
    dst = os.path.join(tmp, "out")
    rc, out = run("export", src, dst, *SCHEME, "--device", "cpu", "--no-cache", "--quiet")
    ok(rc == 0 and warned(out, list(HOSTILE_LOCAL)), "export: done, the same warnings", out)
    names = sorted(os.listdir(dst)) if os.path.isdir(dst) else []
    ok(names == GOOD, "export: DST holds the checkpoint's files only (none of SRC's "
       "hostile names, no temporary left)", names)
    ok(rewritten_config(os.path.join(dst, "config.json")),
       "export: DST/config.json is the rewritten one, not SRC's .config.json.requantfs-tmp")
    rc, out = run("verify", dst, "--against", dst)
    ok(rc == 0 and "CHANGED" not in out,
       "verify DST: SRC's .requantfs-export.json did not become DST's record (no false change)", out)
    mount_case("local mount", src, tmp)

    left = os.path.join(tmp, "dead")
    os.makedirs(os.path.join(left, ".requantfs-tmp.Ab12Cd"))
    rc, out = run("export", src, left, *SCHEME, "--device", "cpu", "--no-cache", "--quiet")
    ok(rc == 1 and ".requantfs-tmp.Ab12Cd" in out and "did not finish" in out,
       "export into a DST holding a dead export's temporaries: refused, naming them", out)


def item4_hub(tmp):
    d = ckpt(os.path.join(tmp, "hubsrc"))
    hub = hubsrv.Hub()
    commit = "a" * 40
    hub.repos["org/name"] = {"refs": {"main": commit}, "commits": {commit: d}}
    hub.reset(extra=dict(HOSTILE_HUB))
    srv, endpoint = hubsrv.start(hub)
    env = dict(os.environ, HF_ENDPOINT=endpoint, XDG_CACHE_HOME=os.path.join(tmp, "xdg"))
    try:
        rc, out = run("plan", "hf://org/name", *SCHEME, env=env)
        ok(rc == 0 and "files: 4," in out and warned(out, ['"."', '".."', ".requantfs-export.json",
                                                          ".config.json.requantfs-tmp",
                                                          '".requantfs"', "a\\b.json"]),
           "plan hf://: siblings '.', '..', '.requantfs', 'a\\b.json' and our temporaries' "
           "names skipped with a warning each; 4 files presented", out)
        dst = os.path.join(tmp, "hubout")
        rc, out = run("export", "hf://org/name", dst, *SCHEME, "--device", "cpu",
                      "--no-cache", "--quiet", env=env)
        names = sorted(os.listdir(dst)) if os.path.isdir(dst) else []
        ok(rc == 0 and names == GOOD and rewritten_config(os.path.join(dst, "config.json")),
           "export hf://: DST holds the checkpoint's files only, config.json rewritten",
           f"{names}\n{out}")
        mount_case("hub mount", "hf://org/name", tmp, env=env)
        hub.reset(extra={"config.json\0.evil": b"{}"})
        rc, out = run("plan", "hf://org/name", *SCHEME, env=env)
        ok(rc == 1 and "\\u0000" in out and "NUL" in out,
           "plan hf:// of a model API answer naming a file with \\u0000: refused, saying so", out)
    finally:
        srv.shutdown()


def set_bytes_keep_times(path, data):
    """Rewrites path in place (same inode), then sets its mtime back."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return os.stat(path)


def item6(tmp):
    src = ckpt(os.path.join(tmp, "lsrc"))
    dst = os.path.join(tmp, "linked")
    rc, out = run("export", src, dst, *SCHEME, "--device", "cpu", "--no-cache", "--quiet",
                  "--link")
    ok(rc == 0 and os.path.islink(os.path.join(dst, "tokenizer.json")), "export --link", out)
    with open(os.path.join(dst, ".requantfs-export.json")) as f:
        man = json.load(f)
    ok(all("ctime_ns" in e and len(e.get("xxh3_128", "")) == 32 for e in man["linked"]) and
       len(man["linked"]) == 2, "the manifest records each linked file's ctime and XXH3-128",
       json.dumps(man, indent=1))
    rc, out = run("verify", dst)
    ok(rc == 0 and "2 of 2" in out, "verify: 2 of 2 links good right after export", out)
    rc, out = run("verify", dst, "--full")
    ok(rc == 0 and "2 of 2" in out and "XXH3-128" in out, "verify --full: 2 of 2, bytes hashed", out)

    gen = os.path.join(src, "generation_config.json")
    os.chmod(gen, 0o600)
    rc, out = run("verify", dst)
    ok(rc == 0 and "2 of 2" in out, "a chmod of a linked file (ctime moved, bytes the same): "
       "verify passes", out)
    rc, out = run("verify", dst, "--full")
    ok(rc == 0 and "CHANGED" not in out, "... verify --full: its bytes are those exported", out)

    tok = os.path.join(src, "tokenizer.json")
    before = os.stat(tok)
    with open(tok, "rb") as f:
        old = f.read()
    new = old.replace(b'"a": 0', b'"z": 0')
    after = set_bytes_keep_times(tok, new)
    ok(after.st_size == before.st_size and after.st_mtime_ns == before.st_mtime_ns and
       after.st_ino == before.st_ino, "tokenizer.json rewritten in place: same size, inode, mtime")
    rc, out = run("verify", dst)
    ok(rc == 1 and "CHANGED tokenizer.json" in out and "rewritten in place" in out and
       "generation_config.json" not in out,
       "verify notices the rewrite (its ctime moved, its bytes differ): exit 1, naming it", out)
    rc, out = run("verify", dst, "--full")
    ok(rc == 1 and "CHANGED tokenizer.json" in out and "not those exported" in out and
       "generation_config.json" not in out,
       "verify --full: the rewritten file's bytes differ; the chmod'ed one still passes", out)

    hard = os.path.join(tmp, "hard")
    rc, out = run("export", src, hard, *SCHEME, "--device", "cpu", "--no-cache", "--quiet",
                  "--link=hard")
    ok(rc == 0, "export --link=hard", out)
    rc, out = run("verify", hard)
    ok(rc == 0 and "2 of 2" in out, "verify of hard links right after export: 2 of 2 (the ctime "
       "linking moved is the one recorded)", out)
    rc, out = run("export", src, os.path.join(tmp, "hard2"), *SCHEME, "--device", "cpu",
                  "--no-cache", "--quiet", "--link=hard")
    rc2, out2 = run("verify", hard)
    ok(rc == 0 and rc2 == 0 and "2 of 2" in out2, "another hard-link export of the same SRC "
       "(the ctimes move again): the first still verifies", out + out2)

    old_man = os.path.join(hard, ".requantfs-export.json")
    with open(old_man) as f:
        man = json.load(f)
    man["format"] = 1
    for e in man["linked"]:
        e.pop("ctime_ns", None)
        e.pop("xxh3_128", None)
    with open(old_man, "w") as f:
        json.dump(man, f)
    rc, out = run("verify", hard)
    ok(rc == 0, "an older export's manifest (format 1) is still checked", out)
    rc, out = run("verify", hard, "--full")
    ok(rc == 1 and "no hash" in out and "export again" in out,
       "verify --full of an older manifest: refused, saying what to do", out)
    rc, out = run("verify", os.path.join(tmp, "out"), "--full")
    ok(rc == 2 and "--full" in out, "verify --full of a DIR not made by export --link: a usage "
       "error", out)
    rc, out = run("verify", "--help")
    ok(rc == 0 and "--full" in out and "ctime" in out, "verify --help documents --full", out)


def main():
    tmp = tempfile.mkdtemp(prefix="rq-hostile4-", dir="/var/tmp")
    try:
        item45_local(tmp)
        item4_hub(tmp)
        item6(tmp)
    finally:
        rqtap.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
