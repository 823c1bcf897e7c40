#!/usr/bin/env python3
"""Hub repo ids (ORG/NAME[@REV]) as SRC and --calib, resolved in a local hub
cache made by `mkckpt --hub` (plan/hub_cache.c, cli/cli.c). TAP output.

Usage: test_hub_ids.py REQUANTFS
The hub cache holds one repo, synthetic/laguna-s-2.1-nvfp4, with two
snapshots: refs/main (the 08-01 form) and its 07-22 twin (no ref, reached by
hash). Every export or mount by id must equal the export of the snapshot
directory byte for byte; the cache is found through HF_HUB_CACHE, the legacy
HUGGINGFACE_HUB_CACHE, HF_HOME, XDG_CACHE_HOME and ~/.cache; unknown repos and
revisions, ambiguous hash prefixes and absent calibration snapshots are
refused with what to run; an existing path named like an id wins. The mounts
need /dev/fuse (root or fusermount3); without it they are skipped, the
exports still run."""
import json, os, re, shutil, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402  (tests/rqtap.py: TAP, run, mounts cleaned up at exit)
from rqtap import ok, run, mounted  # noqa: E402

rqtap.init(sys.argv[1])
ID = "synthetic/laguna-s-2.1-nvfp4"
REPO = "models--synthetic--laguna-s-2.1-nvfp4"
# verify compares only these tensors: resolution is what is tested here, and a
# whole-checkpoint verify is slow under meson's MALLOC_PERTURB_
FEW = ("--tensors", r"layers\.(0|40)\.self_attn\.")
HF_VARS = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")


def env_with(**kv):
    """The environment without any hub variable, plus kv."""
    e = {k: v for k, v in os.environ.items() if k not in HF_VARS}
    e.update(kv)
    return e


def diff_trees(a, b):
    """Names whose bytes differ (or that exist in only one of a, b)."""
    fa, fb = sorted(os.listdir(a)), sorted(os.listdir(b))
    if fa != fb:
        return [("names", fa, fb)]
    bad = []
    for f in fa:
        with open(os.path.join(a, f), "rb") as x, open(os.path.join(b, f), "rb") as y:
            if x.read() != y.read():
                bad.append(f)
    return bad


def main():
    tmp = tempfile.mkdtemp(prefix="rq-hubids-")
    try:
        return body(tmp)
    finally:
        rqtap.cleanup(tmp)


def body(tmp):
    home = os.path.join(tmp, "hfhome")
    hub = os.path.join(home, "hub")
    rc, out = run("mkckpt", hub, "--hub", "--calib-out", hub)
    snaps = [l.strip() for l in out.splitlines() if "/snapshots/" in l]
    if not ok(rc == 0 and len(snaps) == 2 and all(map(os.path.isdir, snaps)),
              "mkckpt --hub --calib-out into one repo: two snapshots", out):
        return rqtap.finish()
    snap, twin = snaps
    rev, trev = os.path.basename(snap), os.path.basename(twin)
    with open(os.path.join(hub, REPO, "refs", "main")) as f:
        ok(f.read().strip() == rev and not os.path.exists(os.path.join(hub, REPO, "refs", trev)),
           "refs/main names the 08-01 snapshot; the twin has no ref")
    ref = os.path.join(tmp, "ref")
    rc, out = run("export", snap, ref, "--calib", twin, "--quiet")
    if not ok(rc == 0, "export of the snapshot directory (the reference)", out):
        return rqtap.finish()
    E = env_with(HF_HUB_CACHE=hub)
    n = [0]

    def export_eq(src, cal, env, what):
        n[0] += 1
        dst = os.path.join(tmp, f"x{n[0]}")
        rc, out = run("export", src, dst, "--calib", cal, "--quiet", env=env)
        return ok(rc == 0 and not diff_trees(dst, ref), what,
                  out if rc else diff_trees(dst, ref))

    # ---- export by id, the cache found each way huggingface_hub finds it
    export_eq(ID, f"{ID}@{trev[:10]}", E,
              "export ORG/NAME --calib ORG/NAME@<10-digit prefix> ($HF_HUB_CACHE) == export "
              "of the dirs")
    export_eq(f"{ID}@main", f"{ID}@{trev}", env_with(HF_HOME=home),
              "export ORG/NAME@main --calib @<full hash> ($HF_HOME/hub)")
    export_eq(f"{ID}@{rev[:7]}", twin, env_with(HUGGINGFACE_HUB_CACHE=hub),
              "export ORG/NAME@<7-digit prefix> ($HUGGINGFACE_HUB_CACHE, legacy)")
    xdg = os.path.join(tmp, "xdg")
    os.makedirs(xdg)
    os.symlink(home, os.path.join(xdg, "huggingface"))
    export_eq(f"{ID}@{rev.upper()[:12]}", twin, env_with(XDG_CACHE_HOME=xdg),
              "export ORG/NAME@<PREFIX in capitals> ($XDG_CACHE_HOME/huggingface/hub, "
              "through a symlink)")
    fake_home = os.path.join(tmp, "home")
    os.makedirs(os.path.join(fake_home, ".cache"))
    os.symlink(home, os.path.join(fake_home, ".cache", "huggingface"))
    rc, out = run("verify", ID, "--against", snap, *FEW, "--quiet", env=env_with(HOME=fake_home))
    ok(rc == 0 and "0 differ" in out, "the default ~/.cache/huggingface/hub", out)
    empty = os.path.join(tmp, "empty-hub")
    os.makedirs(empty)
    rc, out = run("verify", ID, "--against", snap, *FEW,
                  env=env_with(HF_HUB_CACHE=empty, HF_HOME=home))
    ok(rc == 1 and empty in out and "$HF_HUB_CACHE" in out and f"hf download {ID}" in out,
       "$HF_HUB_CACHE wins over $HF_HOME (and the refusal names it)", out)
    rc, out = run("verify", ID, "--against", snap, *FEW,
                  env=env_with(HF_HUB_CACHE=empty, HUGGINGFACE_HUB_CACHE=hub))
    ok(rc == 1 and empty in out, "$HF_HUB_CACHE wins over $HUGGINGFACE_HUB_CACHE", out)
    rc, out = run("verify", ID, "--against", snap, *FEW, "--quiet",
                  env=env_with(HF_HUB_CACHE="", HF_HOME=home))
    ok(rc == 0, "an empty $HF_HUB_CACHE counts as unset", out)

    # a calibration snapshot holding only the shards with the scales it is asked
    # for (layers 40-47 here), as a partial `hf download --include` leaves it
    with open(os.path.join(twin, "model.safetensors.index.json")) as f:
        wm = json.load(f)["weight_map"]
    need = {v for k, v in wm.items() if k.endswith(".input_global_scale") and
            re.search(r"\.layers\.4[0-7]\.", k)}
    gone = sorted(set(wm.values()) - need)
    saved = {g: os.readlink(os.path.join(twin, g)) for g in gone}
    for g in gone:
        os.unlink(os.path.join(twin, g))
    if ok(gone and need, "the twin snapshot made partial", (need, gone)):
        export_eq(ID, f"{ID}@{trev[:7]}", E, f"--calib of a partial snapshot ({len(gone)} of "
                  f"{len(set(wm.values()))} shards absent)")
    for g, target in saved.items():
        os.symlink(target, os.path.join(twin, g))

    # ---- the other commands that read model directories
    rc, out = run("verify", f"{ID}@{trev[:8]}", "--against", twin, *FEW, "--quiet", env=E)
    ok(rc == 0 and "0 differ" in out, "verify DIR as ORG/NAME@<prefix>", out)
    rc, out = run("verify", ref, "--against", f"{ID}@{trev[:8]}", "--source", ID,
                  "--tensors", r"layers\.40\.mlp\.experts\.0\.", "--quiet", env=E)
    ok(rc == 0 and "reproduced" in out, "verify --against and --source as repo ids", out)
    g = [run("generate", d, "--prompt", "def f(x):", "-n", "6", "--temperature", "0", env=E)
         for d in (ID, snap)]
    first = lambda t: t.split("\nprompt:")[0]
    ok(g[0][0] == 0 and g[1][0] == 0 and first(g[0][1]) == first(g[1][1]),
       "generate ORG/NAME == generate of the snapshot directory", g)
    rc, out = run("compare", ID, f"{ID}@main", "-n", "4", env=E)
    ok(rc == 0 and "top-1 100.00%" in out, "compare of two ids naming one snapshot", out)

    # ---- refusals
    rc, out = run("export", "nobody/nothing", os.path.join(tmp, "r1"), "--calib", twin, env=E)
    ok(rc == 1 and "not in the hub cache" in out and hub in out and
       "`hf download nobody/nothing`" in out, "an unknown repo: where it looked, what to run", out)
    rc, out = run("export", f"{ID}@v9.9", os.path.join(tmp, "r2"), "--calib", twin, env=E)
    ok(rc == 1 and "revision v9.9" in out and rev[:10] in out and
       f"hf download {ID} --revision v9.9" in out,
       "an unknown revision: what the cache holds, what to run", out)
    rc, out = run("export", f"{ID}@{'0' * 40}", os.path.join(tmp, "r3"), "--calib", twin, env=E)
    ok(rc == 1 and "revision " + "0" * 40 in out, "an unknown full hash", out)
    rc, out = run("export", f"{ID}@{rev[:6]}", os.path.join(tmp, "r4"), "--calib", twin, env=E)
    ok(rc == 1 and "not in the hub cache" in out, "a 6-digit prefix is not taken as a hash", out)
    twin_id = f"{ID}@deadbeef00"
    for cmd in ("export", "mount"):
        rc, out = run(cmd, ID, os.path.join(tmp, "r5"), "--calib", twin_id, env=E)
        ok(rc == 1 and f"calibration {twin_id} is not in the local hub cache" in out and
           f"`requantfs calib fetch {twin_id} -o calib.safetensors`" in out and
           not mounted(os.path.join(tmp, "r5")),
           f"{cmd}: --calib of a snapshot not in the cache says to run calib fetch", out)
    rc, out = run("export", ID, os.path.join(tmp, "r6"), "--calib", "nobody/calib", env=E)
    ok(rc == 1 and "requantfs calib fetch nobody/calib" in out,
       "--calib of a repo not in the cache says to run calib fetch", out)
    rc, out = run("export", "no/such/dir", os.path.join(tmp, "r7"), "--calib", twin, env=E)
    ok(rc == 1 and "no/such/dir" in out and "hub cache" not in out,
       "a path with two slashes is a path, refused as before", out)
    # a second snapshot sharing 8 digits with refs/main's: ambiguous
    c = "1" if rev[8] == "0" else "0"
    fake = os.path.join(hub, REPO, "snapshots", rev[:8] + c * 32)
    os.makedirs(fake)
    rc, out = run("export", f"{ID}@{rev[:8]}", os.path.join(tmp, "r8"), "--calib", twin, env=E)
    ok(rc == 1 and "ambiguous" in out and rev in out and os.path.basename(fake) in out,
       "an ambiguous prefix is refused, both snapshots named", out)
    export_eq(f"{ID}@{rev[:9]}", twin, E, "one more digit makes it unique")
    rc, out = run("export", ID, os.path.join(tmp, "r9"), "--calib", f"{ID}@{rev[:8]}", env=E)
    ok(rc == 1 and "--calib" in out and "ambiguous" in out and "calib fetch" not in out,
       "an ambiguous --calib prefix is refused as ambiguous", out)
    os.rmdir(fake)
    # refs/main naming a snapshot that is gone
    main_ref = os.path.join(hub, REPO, "refs", "main")
    with open(main_ref, "w") as f:
        f.write("f" * 40)
    rc, out = run("export", ID, os.path.join(tmp, "r10"), "--calib", twin, env=E)
    ok(rc == 1 and "refs/main names commit " + "f" * 40 in out and "interrupted" in out,
       "refs/main naming a missing snapshot", out)
    with open(main_ref, "w") as f:
        f.write("../../../etc\n")
    rc, out = run("export", ID, os.path.join(tmp, "r11"), "--calib", twin, env=E)
    ok(rc == 1 and "not a commit hash" in out, "a refs/ file that is not a hash is refused", out)
    with open(main_ref, "w") as f:
        f.write(rev)   # huggingface_hub writes no newline

    # ---- an existing directory named like the id wins
    cwd = os.path.join(tmp, "cwd")
    local = os.path.join(cwd, ID)
    shutil.copytree(snap, local)          # the links' targets, copied as plain files
    with open(os.path.join(local, "generation_config.json"), "a") as f:
        f.write("\n")
    old = os.getcwd()
    os.chdir(cwd)
    try:
        rc, out = run("export", ID, os.path.join(tmp, "x-local"), "--calib", twin, "--quiet", env=E)
    finally:
        os.chdir(old)
    d = diff_trees(os.path.join(tmp, "x-local"), ref) if rc == 0 else out
    ok(rc == 0 and d == ["generation_config.json"],
       "an existing directory named ORG/NAME wins over the hub cache", d)

    if not os.path.exists("/dev/fuse"):
        ok(True, "mounts by repo id # SKIP /dev/fuse is missing (modprobe fuse)")
        return rqtap.finish()
    # ---- mounts by id: every file == the export of the snapshot
    cache = os.path.join(tmp, "cache")
    forms = [(ID, twin, E, "ORG/NAME"), (f"{ID}@main", f"{ID}@{trev[:7]}", E,
                                          "ORG/NAME@main --calib ORG/NAME@<7-digit prefix>"),
             (f"{ID}@{rev}", f"{ID}@{trev}", env_with(HF_HOME=home),
              "ORG/NAME@<full hash> --calib @<full hash>, $HF_HOME"),
             (f"{ID}@{rev[:7]}", twin, E, "ORG/NAME@<7-digit prefix>")]
    for i, (src, cal, env, what) in enumerate(forms):
        mnt = os.path.join(tmp, f"m{i}")
        rc, out = rqtap.mount(src, mnt, cal, cache, env=env)
        if not ok(rc == 0 and mounted(mnt) == "fuse.requantfs", f"mount {what}", out):
            continue
        ok(os.path.realpath(snap) in out, f"mount {what}: names the snapshot it serves", out)
        d = diff_trees(mnt, ref)
        ok(not d, f"mount {what}: every file equals export's byte for byte", d)
        rc, out = run("umount", mnt, timeout=60)
        ok(rc == 0 and not mounted(mnt), f"umount after {what}", out)
    mnt = os.path.join(tmp, "m-bad")
    for src, cal, want, what in (("nobody/nothing", twin, "hf download nobody/nothing",
                                  "an unknown repo"),
                                 (f"{ID}@v9.9", twin, "revision v9.9", "an unknown revision"),
                                 (ID, "nobody/calib@0123abc", "requantfs calib fetch nobody/calib",
                                  "an absent --calib id")):
        rc, out = rqtap.mount(src, mnt, cal, cache, env=E)
        ok(rc == 1 and want in out and not mounted(mnt), f"mount refuses {what}", out)
    mnt = os.path.join(tmp, "m-local")
    os.chdir(cwd)
    try:
        rc, out = rqtap.mount(ID, mnt, twin, cache, env=E)
    finally:
        os.chdir(old)
    if ok(rc == 0, "mount of an existing directory named like the id", out):
        with open(os.path.join(mnt, "generation_config.json"), "rb") as a, \
                open(os.path.join(local, "generation_config.json"), "rb") as b:
            ok(a.read() == b.read(), "mount: the local directory wins over the hub cache")
        run("umount", mnt, timeout=60)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
