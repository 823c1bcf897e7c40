#!/usr/bin/env python3
"""A bounded mutation fuzzer over what an adversary controls in SRC: the
shard headers (8-byte length + JSON), config.json, the index and the
calibration file, run against `requantfs export`, a live mount and
`requantfs generate`. TAP output. Usage: test_fuzz.py REQUANTFS

Built for the sanitizer build (tests/fuzz/meson.build registers it only when
b_sanitize is set; tools/test runs it from build-asan). A case FAILS on:
  - an exit by signal, or an exit code other than 0, 1, 2;
  - any AddressSanitizer / LeakSanitizer / UBSan report (stderr, or the
    per-process log files: the mount daemon's stderr is /dev/null);
  - a hang: any command, or a read through the mount, over 30 s;
  - an error exit whose message names no file (of SRC or the calibration);
  - a success whose output differs from a correct tool's, where the correct
    tool is Python's `safetensors` (0.8, the reference the parser follows)
    and `json`:
      export: every DST shard loads with safetensors; every tensor it passes
        through equals the (mutated) SRC tensor as safetensors reads it; every
        tensor it adds is one of the four NVFP4 parts of a module whose BF16
        .weight it replaced, with the shapes that implies and the calibration
        file's input_global_scale; config.json is SRC's minus one ignore
        entry; the index is SRC's with each requantized .weight entry
        replaced by its four parts, total_size the sum of the shards it
        names; other files are copied. (A SRC config.json or index that
        Python's json refuses but cJSON reads is counted as its own class,
        not a failure: no correct output exists to compare with.)
        When the mutated inputs read the same as the originals to those
        tools (whitespace, padding, escapes), DST must read the same as the
        reference export.
      mount: every file read through it equals export of the same mutated
        SRC byte for byte, stat size included (or both fail: mount refuses
        or a read fails with an errno where export refused).
      generate: greedy output equal to the unmutated run when the inputs
        read the same (otherwise only the crash/sanitizer/hang checks).

Decisions:
  - Deterministic: case k's mutation is a function of (seed, k) only. The
    default seed is fixed, so CI runs the same cases on the same code and a
    red run is reproducible; explore with RQ_FUZZ_SEED=<n> or =random.
    RQ_FUZZ_SECONDS (default 90) bounds the mutation loop; RQ_FUZZ_CASE=k
    reruns one case; RQ_FUZZ_VERBOSE=1 (2) prints each case's classes (and
    last message lines); RQ_FUZZ_MOUNT_EVERY (default 5) how often a case also
    mounts (a mount costs ~10 export cases).
  - One small checkpoint (mkckpt --layers 4 --experts 4, 64 KiB shards: 8
    shards, two BF16 expert layers) and its calibration file are made once;
    a case hard-links the originals and rewrites only what it mutates.
  - ASan runs with allocator_may_return_null=1 and a 4 GiB allocation cap:
    a header claiming 2^60 elements must meet a clean ENOMEM path, as with
    glibc, not ASan's own "allocation-size-too-big" abort (and not eat the
    CI machine's memory).
  - A failing case is saved under RQ_FUZZ_SAVE (meson-logs/fuzz in the build
    dir) with its mutated SRC, calibration file, the mutation and outputs
    (the first 20 only); the loop stops after 3 hangs (30 s each) to stay
    inside the test's 300 s limit.
  - Refusing an input that reads the same as the original (e.g. the engine
    refuses BF16 data at an odd offset, which safetensors allows) is counted
    as its own class, not a failure: the issue is wrong successes.
  - LeakSanitizer sees every CLI process (export, generate, the mount's
    parent); the mount daemon ends in _exit, so its leaks are not checked
    (its ASan/UBSan reports are, through log_path).
  - tests/fuzz/ubsan.supp holds UBSan suppressions for reports already filed
    against files this test does not own; each line says where and why.
    User ASAN_OPTIONS/UBSAN_OPTIONS are appended to ours."""
import hashlib, json, os, random, re, shutil, signal, struct, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fuzz_mutate as fm  # noqa: E402
import rqtap  # noqa: E402  (tests/rqtap.py: TAP lines, mounts)
from rqtap import MOUNTS, daemon_pid  # noqa: E402
from rqtap import mounted as fstype  # noqa: E402


def ok(cond, what, detail=""):
    # stdout for the TAP log, stderr for `meson test --print-errorlogs` (CI)
    return rqtap.ok(cond, what, detail, lines=60, stderr=True)


def umount_all(env):
    for mnt in list(MOUNTS):
        rqtap.unmount(mnt)
        MOUNTS.remove(mnt)

RQ = os.path.abspath(sys.argv[1])
PY = sys.executable
HANG = 30
_seed = os.environ.get("RQ_FUZZ_SEED", "") or "20260801"
SEED = random.SystemRandom().randrange(1 << 32) if _seed == "random" else int(_seed)
SECONDS = float(os.environ.get("RQ_FUZZ_SECONDS", "") or 90)
ONLY = os.environ.get("RQ_FUZZ_CASE", "")
MOUNT_EVERY = int(os.environ.get("RQ_FUZZ_MOUNT_EVERY", "") or 5)
SAVE = os.environ.get("RQ_FUZZ_SAVE", "")
VERBOSE = int(os.environ.get("RQ_FUZZ_VERBOSE", "") or 0)
SUPP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ubsan.supp")
SAN_RE = re.compile(r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|LeakSanitizer|runtime error:|"
                    r"AddressSanitizer:|UndefinedBehaviorSanitizer")


def note(s):
    print("# " + s, flush=True)


def san_env(sandir):
    env = dict(os.environ)
    a = (f"detect_leaks=1:abort_on_error=1:allocator_may_return_null=1:"
         f"max_allocation_size_mb=4096:disable_coredump=1:log_path={sandir}/asan")
    u = f"print_stacktrace=1:halt_on_error=1:log_path={sandir}/ubsan"
    if os.path.exists(SUPP):
        u += f":suppressions={SUPP}"
    env["ASAN_OPTIONS"] = a + (":" + os.environ["ASAN_OPTIONS"] if os.environ.get("ASAN_OPTIONS") else "")
    env["UBSAN_OPTIONS"] = u + (":" + os.environ["UBSAN_OPTIONS"] if os.environ.get("UBSAN_OPTIONS") else "")
    env.pop("XDG_CACHE_HOME", None)
    return env


def run(args, env, timeout=HANG):
    """(rc, stdout+stderr, hung); rc < 0 is a signal"""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        o, e = p.communicate(timeout=timeout)
        return p.returncode, (o + e).decode("utf-8", "replace"), False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        o, e = p.communicate()
        return -999, (o + e).decode("utf-8", "replace"), True


def san_reports(sandir):
    out = []
    if os.path.isdir(sandir):
        for f in sorted(os.listdir(sandir)):
            out.append(f"{f}: " + open(os.path.join(sandir, f), errors="replace").read()[:4000])
    return out


# ---- the correct tools' view ------------------------------------------------------

class _Dup(Exception):
    pass


def _nodup(pairs):
    if len(set(k for k, _ in pairs)) != len(pairs):
        raise _Dup()
    return dict(pairs)


def json_view(b):
    """the value Python's json reads (a repeated key: the last one wins, as in
    every Python loader), or None"""
    try:
        return json.loads(b.decode("utf-8"))
    except (ValueError, RecursionError):
        return None


def json_has_dup(b):
    try:
        json.loads(b.decode("utf-8"), object_pairs_hook=_nodup)
        return False
    except _Dup:
        return True
    except (ValueError, RecursionError):
        return False


def has_dup(f, b):
    """a key written twice in JSON file f (contents b), or in the header of
    safetensors file f: cJSON and Python read it differently (issue 17), so
    every command must refuse it"""
    if f.endswith(".json"):
        return json_has_dup(b)
    sp = fm.st_split(bytearray(b))
    return bool(sp) and json_has_dup(sp[1])


def st_view(b):
    """{name: (dtype, shape, bytes)} and the metadata as safetensors reads the
    file, or None if it refuses; 'dup' for repeated names (we refuse those)"""
    from safetensors import deserialize
    try:
        ts = deserialize(bytes(b))
        hn = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + hn].decode("utf-8"))
    except Exception:
        return None
    if json_has_dup(b[8:8 + hn]):
        return "dup"
    return ({k: (v["dtype"], tuple(v["shape"]), bytes(v["data"])) for k, v in ts},
            json.dumps(h.get("__metadata__"), sort_keys=True))


def file_view(path):
    b = open(path, "rb").read()
    if path.endswith(".safetensors"):
        return st_view(b)
    if path.endswith(".json"):
        # compared as text: Python's True == 1 == 1.0 must not hide a change
        v = json_view(b)
        return None if v is None else json.dumps(v, sort_keys=True)
    return b


def dir_view(d):
    return {f: file_view(os.path.join(d, f)) for f in sorted(os.listdir(d))}


# ---- checks of a successful export ------------------------------------------------

PARTS = (".weight_packed", ".weight_scale", ".weight_global_scale", ".input_global_scale")


def check_export(src, dst, cal, sv, lenient=None):
    """problems with a successful export of src (sv = its views) into dst;
    SRC JSON files that Python's json refuses (cJSON is lenient: trailing
    bytes, invalid UTF-8, 01, 1.) go to lenient: there is no correct output
    to compare with, only the pass-through checks"""
    bad = []
    lenient = [] if lenient is None else lenient
    if sorted(os.listdir(src)) != sorted(os.listdir(dst)):
        return [f"DST files {sorted(os.listdir(dst))} != SRC files {sorted(os.listdir(src))}"]
    calv = st_view(open(cal, "rb").read())
    if not isinstance(calv, tuple):
        bad.append("export succeeded with a calibration file safetensors refuses (or repeats a name)")
    dv, requantized = {}, set()
    for f in sorted(os.listdir(dst)):
        p = os.path.join(dst, f)
        if f.endswith(".safetensors"):
            dv[f] = v = st_view(open(p, "rb").read())
            if not isinstance(v, tuple):
                bad.append(f"DST {f} does not load with safetensors")
                continue
            s = sv[f]
            if not isinstance(s, tuple):
                bad.append(f"export accepted SRC {f}, which safetensors refuses or which repeats a name")
                continue
            st, dt = s[0], v[0]
            for name, t in dt.items():
                if name in st:
                    if st[name] != t:
                        bad.append(f"{f}: {name} passed through but differs from SRC")
                    continue
                m = next((name[:-len(x)] for x in PARTS if name.endswith(x)), None)
                w = st.get(m + ".weight") if m else None
                if not w or m + ".weight" in dt:
                    bad.append(f"{f}: {name} is neither in SRC nor a part of a requantized module")
                    continue
                rows, cols = w[1] if len(w[1]) == 2 else (0, 0)
                want = {".weight_packed": ("U8", (rows, cols // 2)),
                        ".weight_scale": ("F8_E4M3", (rows, cols // 16)),
                        ".weight_global_scale": ("F32", (1,)), ".input_global_scale": ("F32", (1,))}
                part = name[len(m):]
                if w[0] != "BF16" or (t[0], t[1]) != want[part]:
                    bad.append(f"{f}: {name} {t[0]}{list(t[1])} from {m}.weight {w[0]}{list(w[1])}")
                requantized.add((f, m))
                if part == ".input_global_scale" and isinstance(calv, tuple) and \
                        calv[0].get(name, (0, 0, None))[2] != t[2]:
                    bad.append(f"{f}: {name} is not the calibration file's value")
            for name in st:
                if name not in dt and not (name.endswith(".weight") and
                                           name[:-len(".weight")] + PARTS[0] in dt):
                    bad.append(f"{f}: SRC tensor {name} missing from DST")
            if s[1] != v[1]:
                bad.append(f"{f}: __metadata__ changed")
        elif f == "config.json":
            a, b = json_view(open(os.path.join(src, f), "rb").read()), json_view(open(p, "rb").read())
            ign = lambda c: ((c.get("quantization_config") or {}).get("ignore")
                             if isinstance(c, dict) and isinstance(c.get("quantization_config"), dict)
                             else None)
            ia, ib = ign(a), ign(b)
            cj = lambda x: json.dumps(x, sort_keys=True)
            qa = a.get("quantization_config") if isinstance(a, dict) else None
            qb = b.get("quantization_config") if isinstance(b, dict) else None
            same_rest = isinstance(qa, dict) and isinstance(qb, dict) and \
                cj({k: v for k, v in a.items() if k != "quantization_config"}) == \
                cj({k: v for k, v in b.items() if k != "quantization_config"}) and \
                cj({k: v for k, v in qa.items() if k != "ignore"}) == \
                cj({k: v for k, v in qb.items() if k != "ignore"})
            one_less = isinstance(ia, list) and isinstance(ib, list) and len(ia) == len(ib) + 1 and \
                any(cj(ia[:i] + ia[i + 1:]) == cj(ib) for i in range(len(ia)))
            if a is None:
                lenient.append("config.json")
            elif not (same_rest and one_less):
                bad.append("DST config.json is not SRC's minus one ignore entry (as json reads them)")
        elif f != "model.safetensors.index.json":
            if open(p, "rb").read() != open(os.path.join(src, f), "rb").read():
                bad.append(f"{f} not copied byte for byte")
    ip = os.path.join(dst, "model.safetensors.index.json")
    if os.path.exists(ip):
        # export rewrites SRC's index: each requantized module's .weight entry
        # becomes its four parts in the same shard, total_size is recomputed,
        # every other entry is kept (even one that does not match the shards)
        idx = json_view(open(ip, "rb").read())
        sidx = json_view(open(os.path.join(src, "model.safetensors.index.json"), "rb").read())
        wm = idx.get("weight_map") if isinstance(idx, dict) else None
        swm = sidx.get("weight_map") if isinstance(sidx, dict) else None
        if not isinstance(wm, dict):
            bad.append("DST index has no weight_map object (as json reads it)")
        elif sidx is None:
            lenient.append("model.safetensors.index.json")
        elif not isinstance(swm, dict):
            bad.append("export succeeded although SRC's index has no weight_map (as json reads it)")
        else:
            want = dict(swm)
            for f, m in requantized:
                want.pop(m + ".weight", None)
                want.update({m + x: f for x in PARTS})
            if wm != want:
                diff = sorted(k for k in set(wm) | set(want) if wm.get(k) != want.get(k))
                bad.append("DST index weight_map is not SRC's with the requantized modules' "
                           f"parts: {diff[:3]}")
            used = set(x for x in wm.values() if isinstance(x, str))
            total = sum(len(t[2]) for f, v in dv.items() if isinstance(v, tuple) and f in used
                        for t in v[0].values())
            md = idx.get("metadata")
            if isinstance(md, dict) and md.get("total_size") != total:
                bad.append(f"DST index total_size {md.get('total_size')!s:.40} != {total}")
    return bad


# ---- one case -------------------------------------------------------------------

def names_a_file(out, known, src):
    """the message names a file of SRC, the calibration file, a shard the index
    names, or a path inside SRC"""
    return any(k[:64] in out for k in known) or re.search(re.escape(src) + r"/[^\s:]", out)


def classify(rc, out, hung, sans, known, mutated, src):
    """(failure or None, class)"""
    if hung:
        return f"hang (> {HANG} s)", "hang"
    if sans or SAN_RE.search(out):
        return "sanitizer report", "sanitizer"
    if rc < 0:
        return f"killed by signal {-rc}", "signal"
    if rc not in (0, 1, 2):
        return f"exit code {rc}", "exit"
    if rc:
        if not names_a_file(out, known, src):
            return "error exit names no file", "unnamed"
        return None, "error naming the mutated file" if any(m in out for m in mutated) \
            else "error naming another file"
    return None, "success"


READER = r"""
import hashlib, json, os, sys
m, out = sys.argv[1], {}
for f in sorted(os.listdir(m)):
    try:
        h, k = hashlib.sha256(), 0
        with open(os.path.join(m, f), "rb") as fh:
            sz = os.fstat(fh.fileno()).st_size
            while True:
                x = fh.read(1 << 20)
                if not x:
                    break
                h.update(x)
                k += len(x)
        out[f] = [h.hexdigest(), sz, k]
    except OSError as e:
        out[f] = "ERR " + (e.strerror or str(e))
print(json.dumps(out))
"""


def sha_tree(d):
    return {f: hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest()
            for f in sorted(os.listdir(d))}


def mount_case(cd, src, cal, env, known, mutated, exp_rc, dst):
    mnt = os.path.join(cd, "mnt")
    os.makedirs(mnt)
    MOUNTS.append(mnt)
    try:
        rc, out, hung = run([RQ, "mount", src, mnt, "--calib", cal, "--cache",
                             os.path.join(cd, "cache"), "--log", os.path.join(cd, "daemon.log"),
                             "--threads", "1"], env)
        fail, cls = classify(rc, out, hung, [], known, mutated, src)
        if fail:
            return fail, cls, out
        if rc:
            if fstype(mnt):
                return "mount failed but left MNT mounted", "wrong", out
            if exp_rc == 0:
                return "mount refused what export accepted", "mismatch", out
            return None, "both refused", out
        p = subprocess.Popen([PY, "-c", READER, mnt], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
        try:
            ro, re_ = p.communicate(timeout=HANG)
        except subprocess.TimeoutExpired:
            umount_all(env)
            p.kill()
            p.communicate()
            return f"a read through the mount hung (> {HANG} s)", "hang", out
        try:
            got = json.loads(ro)
        except ValueError:
            return "reader failed", "wrong", out + ro.decode() + re_.decode()
        urc, uout, uhung = run([RQ, "umount", mnt], env)
        out += uout
        if uhung or urc != 0 or fstype(mnt):
            return f"umount failed (rc {urc})", "umount", out
        errs = {f: v for f, v in got.items() if isinstance(v, str)}
        if exp_rc == 0:
            want = sha_tree(dst)
            sizes = {f: os.path.getsize(os.path.join(dst, f)) for f in want}
            diff = [f for f in sorted(set(want) | set(got))
                    if f not in got or f not in want or isinstance(got[f], str) or
                    got[f][0] != want[f] or got[f][1] != sizes[f] or got[f][2] != sizes[f]]
            if diff:
                return "mount differs from export: " + ", ".join(
                    f"{f} {got.get(f, 'absent')!s:.60}" for f in diff[:6]), "mismatch", out
            return None, "success, equal to export", out
        if errs:
            return None, "both refused (a read failed: " + sorted(errs.values())[0] + ")", out
        return "mount served every file although export refused", "mismatch", out
    finally:
        umount_all(env)


SAVED = []


def save_case(k, cd, what, results):
    if not SAVE or len(SAVED) >= 20:
        return "(not saved: RQ_FUZZ_SAVE unset, or 20 saved already)"
    SAVED.append(k)
    dest = os.path.join(SAVE, f"case-{SEED}-{k}")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    shutil.copytree(os.path.join(cd, "src"), os.path.join(dest, "src"))
    shutil.copy(os.path.join(cd, "cal.safetensors"), dest)
    for f in ("san", "daemon.log"):
        p = os.path.join(cd, f)
        if os.path.isdir(p):
            shutil.copytree(p, os.path.join(dest, f))
        elif os.path.exists(p):
            shutil.copy(p, dest)
    with open(os.path.join(dest, "CASE.txt"), "w") as f:
        f.write(f"RQ_FUZZ_SEED={SEED} RQ_FUZZ_CASE={k}\nmutation: {what}\n\n")
        for t, (fail, cls, out) in results.items():
            f.write(f"== {t}: {cls} {fail or ''}\n{out}\n")
        f.write(f"\nreproduce:\n  {RQ} export src dst --calib cal.safetensors\n"
                f"  {RQ} generate src -n 2 --prompt hi --temperature 0 --seed 1 --threads 1\n"
                f"  mkdir mnt; {RQ} mount src mnt --calib cal.safetensors --cache cache -f\n")
    return dest


def one_case(k, T, stats, failures):
    rng = random.Random(f"{SEED}/{k}")
    cd = os.path.join(T["tmp"], f"case-{k}")
    src, cal, sandir = os.path.join(cd, "src"), os.path.join(cd, "cal.safetensors"), os.path.join(cd, "san")
    os.makedirs(src)
    os.makedirs(sandir)
    env = san_env(sandir)
    files = T["files"]
    shards = [f for f in files if f.endswith(".safetensors")]
    contents = {}
    whats = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        r = rng.random()
        f = (rng.choice(shards) if r < 0.45 else "config.json" if r < 0.62 else
             "model.safetensors.index.json" if r < 0.8 else "cal.safetensors")
        cur = contents.get(f) or open(T["cal"] if f == "cal.safetensors" else
                                      os.path.join(T["src"], f), "rb").read()
        if f.endswith(".safetensors"):
            b, what = fm.mutate_safetensors(cur, rng, is_calib=f == "cal.safetensors")
        else:
            b, what = fm.mutate_json_file(cur, rng, fm.config_targeted if f == "config.json"
                                          else fm.index_targeted)
        contents[f] = b
        whats.append(f"{f}: {what}")
    for f in files:
        if f in contents:
            open(os.path.join(src, f), "wb").write(contents[f])
        else:
            os.link(os.path.join(T["src"], f), os.path.join(src, f))
    if "cal.safetensors" in contents:
        open(cal, "wb").write(contents["cal.safetensors"])
    else:
        os.link(T["cal"], cal)
    what = " | ".join(whats)
    mutated = sorted(contents)
    known = set(files) | {"cal.safetensors"}
    iv = json_view(contents.get("model.safetensors.index.json", b"")) \
        if "model.safetensors.index.json" in contents else None
    if isinstance(iv, dict) and isinstance(iv.get("weight_map"), dict):
        known |= {x for x in iv["weight_map"].values() if isinstance(x, str) and len(x) > 2}
    sv = {f: (file_view(os.path.join(src, f)) if f in contents else T["views"][f]) for f in files}
    calv = st_view(contents["cal.safetensors"]) if "cal.safetensors" in contents else T["calview"]
    same = all(sv[f] == T["views"][f] and not (f.endswith(".json") and json_has_dup(contents[f]))
               for f in mutated if f != "cal.safetensors") and calv == T["calview"]
    results = {}
    dup_in = [f for f in mutated if has_dup(f, contents[f])]
    dup_fail = (f"accepted {', '.join(dup_in)} with a key written twice (cJSON reads the "
                "first, Python's json the last)", "wrong")

    dst = os.path.join(cd, "dst")
    rc, out, hung = run([RQ, "export", src, dst, "--calib", cal, "--quiet", "--threads", "1"], env)
    fail, cls = classify(rc, out, hung, san_reports(sandir), known, mutated, src)
    if not fail and rc == 0:
        lenient = []
        bad = check_export(src, dst, cal, sv, lenient)
        if same and not bad and dir_view(dst) != T["refview"]:
            bad = ["inputs read the same as the originals, DST does not read as the reference export"]
        fail, cls = ("wrong output: " + "; ".join(bad[:5]), "wrong") if bad else \
            (None, "success, equal to the reference" if same else
             "success on a SRC " + " and ".join(lenient) + " that Python's json refuses"
             if lenient else "success, checked")
    elif not fail and os.path.isdir(dst) and [f for f in os.listdir(dst) if not f.startswith(".")]:
        fail, cls = "export failed but left files under their names in DST", "wrong"
    elif not fail and same:
        cls = "refused an input that reads as the original"
    if not fail and rc == 0 and dup_in:
        fail, cls = dup_fail
    results["export"] = (fail, cls, out)
    exp_rc = rc

    rc, out, hung = run([RQ, "generate", src, "-n", "2", "--prompt", "hi", "--temperature", "0",
                         "--seed", "1", "--threads", "1", "--device", "cpu"], env)
    fail, cls = classify(rc, out, hung, san_reports(sandir), known, mutated, src)
    if not fail and rc == 0:
        if same:
            first = out.split("\nprompt:")[0]
            fail, cls = (None, "success, equal to the unmutated run") if first == T["gen"] else \
                ("wrong output: differs from the unmutated run", "wrong")
        else:
            cls = "success (no reference)"
    elif not fail and same:
        cls = "refused an input that reads as the original"
    if not fail and rc == 0 and [f for f in dup_in if f != "cal.safetensors"]:
        fail, cls = dup_fail
    results["generate"] = (fail, cls, out)

    if T["fuse"] and (k % MOUNT_EVERY == 0 or ONLY):
        fail, cls, out = mount_case(cd, src, cal, env, known, mutated, exp_rc, dst)
        sans = san_reports(sandir)
        if not fail and sans:
            fail, cls = "sanitizer report (daemon or parent)", "sanitizer"
        results["mount"] = (fail, cls, out)

    for t, (fail, cls, out) in results.items():
        stats.setdefault(t, {}).setdefault(("FAIL " if fail else "") + cls, 0)
        stats[t][("FAIL " if fail else "") + cls] += 1
    if VERBOSE:
        note(f"case {k}: {what[:200]} -> " + "; ".join(f"{t}: {r[1]}" for t, r in results.items()))
        if VERBOSE > 1:
            for t, r in results.items():
                note(f"  {t}: " + r[2].strip().splitlines()[-1][:300] if r[2].strip() else "")
    bad = {t: r for t, r in results.items() if r[0]}
    if bad:
        path = save_case(k, cd, what, results)
        failures.append((k, what, bad, path, san_reports(sandir)))
    elif ONLY:
        for t, (fail, cls, out) in results.items():
            note(f"{t}: {cls}")
            for line in out.splitlines()[-5:]:
                note("  " + line)
    shutil.rmtree(cd, ignore_errors=True)


def main():
    tmp = tempfile.mkdtemp(prefix="rq-fuzz-")
    T = {"tmp": tmp, "src": os.path.join(tmp, "src"), "twin": os.path.join(tmp, "twin"),
         "cal": os.path.join(tmp, "cal.safetensors"), "fuse": os.path.exists("/dev/fuse")}
    note(f"seed {SEED} (RQ_FUZZ_SEED), {SECONDS:g} s of mutations (RQ_FUZZ_SECONDS), "
         f"a mount every {MOUNT_EVERY} cases; failing cases saved under {SAVE or '(nowhere)'}")
    if os.path.exists(SUPP):
        sup = [l.split("#")[0].strip() for l in open(SUPP)]
        note("UBSan suppressions in effect: " + (", ".join(s for s in sup if s) or "none"))
    if not T["fuse"]:
        note("/dev/fuse is missing: the mount target is not exercised")
    try:
        env = san_env(os.path.join(tmp, "san0"))
        os.makedirs(os.path.join(tmp, "san0"))
        rc, out, _ = run([RQ, "mkckpt", T["src"], "--calib-out", T["twin"], "--layers", "4",
                          "--experts", "4", "--shard-size", "64K"], env, timeout=120)
        if not ok(rc == 0, "mkckpt makes the seed checkpoint and its twin", out):
            return 1
        rc, out, _ = run([RQ, "calib", "extract", T["twin"], "-o", T["cal"]], env)
        if not ok(rc == 0, "calib extract writes the seed calibration file", out):
            return 1
        T["files"] = sorted(os.listdir(T["src"]))
        T["views"] = dir_view(T["src"])
        T["calview"] = st_view(open(T["cal"], "rb").read())
        ref = os.path.join(tmp, "ref")
        rc, out, _ = run([RQ, "export", T["src"], ref, "--calib", T["cal"], "--quiet"], env)
        good = rc == 0 and not check_export(T["src"], ref, T["cal"], T["views"])
        if not ok(good and not san_reports(os.path.join(tmp, "san0")),
                  "export of the seed passes the checks", out + "\n".join(
                      check_export(T["src"], ref, T["cal"], T["views"]) if rc == 0 else [])):
            return 1
        T["refview"] = dir_view(ref)
        rc, out, _ = run([RQ, "generate", T["src"], "-n", "2", "--prompt", "hi", "--temperature",
                          "0", "--seed", "1", "--threads", "1", "--device", "cpu"], env)
        T["gen"] = out.split("\nprompt:")[0]
        if not ok(rc == 0, "generate on the seed", out):
            return 1
        ok(not san_reports(os.path.join(tmp, "san0")), "no sanitizer report on the seed",
           "\n".join(san_reports(os.path.join(tmp, "san0"))))

        stats, failures = {}, []
        cases = [int(ONLY)] if ONLY else None
        t0 = time.time()
        k = 0
        while (cases and k < len(cases)) or (not cases and time.time() - t0 < SECONDS):
            one_case(cases[k] if cases else k, T, stats, failures)
            k += 1
            hangs = sum(c for t in stats.values() for cls, c in t.items() if cls == "FAIL hang")
            if hangs >= 3:
                note("stopping after 3 hangs: each costs 30 s of the test's time limit")
                break
        el = time.time() - t0
        note(f"{k} cases in {el:.1f} s")
        for t in ("export", "generate", "mount"):
            if t not in stats:
                continue
            total = sum(stats[t].values())
            note(f"{t}: {total} cases")
            for cls, c in sorted(stats[t].items(), key=lambda x: -x[1]):
                note(f"  {c:5d}  {cls}")
        for t in ("export", "generate", "mount"):
            if t not in stats and not (t == "mount" and T["fuse"]):
                continue
            fs = [(c, w, b[t], p, s) for c, w, b, p, s in failures if t in b]
            detail = []
            for c, w, (fail, cls, out), p, s in fs[:8]:
                detail += [f"case {c}: {w[:300]}", f"  -> {fail}", f"  saved: {p}"]
                detail += ["  | " + l[:300] for l in (out.splitlines() + "\n".join(s).splitlines())[:25]]
            if fs:
                detail.insert(0, f"{len(fs)} failing cases; rerun one with RQ_FUZZ_SEED={SEED} "
                              f"RQ_FUZZ_CASE=<case> {PY} {os.path.abspath(__file__)} {RQ}")
            ok(not fs and t in stats, f"{t}: {sum(stats.get(t, {}).values())} mutated cases, no "
               "crash, sanitizer report, hang, unnamed error or wrong output", "\n".join(detail))
    finally:
        umount_all(None)
        shutil.rmtree(tmp, ignore_errors=True)
    return rqtap.finish()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    sys.exit(main())
