#!/usr/bin/env python3
"""Peer test: st/ (safetensors parser and serializer) against the real
safetensors library (PyPI, in .venv).

  usage: test_st_peer.py ST_DUMP        (ST_DUMP = build/tests/fs/st_dump)

1. Serializer: for many random tensor sets (every dtype the Python binding
   can write, zero-size and scalar tensors, names with quotes, backslashes,
   control characters and non-ASCII, with and without __metadata__),
   safetensors.serialize and our st_layout (via st_dump write) must produce
   identical files, byte for byte.
2. safe_open reads files we write, dtypes the binding cannot write (F6_*)
   included, and sees our names, shapes, dtypes, metadata and data.
3. Parser: on valid files our parser reports what safe_open reports; on
   thousands of mutated files (random bytes and targeted JSON edits) we accept
   exactly what safetensors accepts, except where we are stricter on purpose
   (duplicate names, U+0000 in a name, more than 8 dimensions).
Prints TAP. Needs only safetensors and numpy.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402

try:
    import numpy as np
    import safetensors
    from safetensors import TensorSpec, safe_open, serialize
except ImportError as e:
    rqtap.no_venv(e)



def ok(cond, msg):
    """rqtap.ok on one line (names here may hold newlines)."""
    return rqtap.ok(cond, msg.replace("\n", " "))


# safetensors code -> (python binding name, bits); None = the binding cannot write it
DTYPES = {
    "BOOL": ("bool", 8), "F4": ("float4_e2m1fn_x2", 4), "F6_E2M3": (None, 6),
    "F6_E3M2": (None, 6), "U8": ("uint8", 8), "I8": ("int8", 8),
    "F8_E5M2": ("float8_e5m2", 8), "F8_E4M3": ("float8_e4m3fn", 8),
    "F8_E8M0": ("float8_e8m0fnu", 8), "F8_E4M3FNUZ": ("float8_e4m3fnuz", 8),
    "F8_E5M2FNUZ": ("float8_e5m2fnuz", 8), "I16": ("int16", 16), "U16": ("uint16", 16),
    "F16": ("float16", 16), "BF16": ("bfloat16", 16), "I32": ("int32", 32),
    "U32": ("uint32", 32), "F32": ("float32", 32), "C64": ("complex64", 64),
    "F64": ("float64", 64), "I64": ("int64", 64), "U64": ("uint64", 64),
}
NAME_CHARS = ("abcxyz09._-/ " + '"\\\n\t\r\b\f' + "\x01\x1f\x7f" + "é€😀ß\u2028")


def fill_bytes(fill, n):
    k = np.arange(n, dtype=np.uint64)
    return ((fill + 13 * k) & 0xFF).astype(np.uint8)


def random_name(rng, used):
    while True:
        n = rng.choice([0, 1, 3, 8, 20, 40])
        s = "".join(rng.choice(NAME_CHARS) for _ in range(n))
        if rng.random() < 0.5:
            s = "model.layers.%d.mlp.experts.%d.%s" % (rng.randrange(48), rng.randrange(256), s)
        if s not in used and s != "__metadata__":
            used.add(s)
            return s


def random_tensors(rng, writable_only=True):
    used = set()
    out = []
    for _ in range(rng.randrange(0, 14)):
        code = rng.choice([c for c, (py, _) in DTYPES.items() if py or not writable_only])
        bits = DTYPES[code][1]
        ndim = rng.choice([0, 1, 1, 2, 2, 3, 4])
        if bits < 8 and ndim == 0:
            ndim = 1
        shape = [rng.choice([0, 1, 2, 3, 5, 16]) for _ in range(ndim)]
        if bits == 4:
            shape[-1] *= 2                     # logical F4 count: two per byte
        if bits == 6:
            shape[-1] = 4 * rng.randrange(0, 3)  # 4 x 6 bits = 3 bytes
        numel = int(np.prod(shape)) if shape else 1
        out.append({"name": random_name(rng, used), "dtype": code, "shape": shape,
                    "fill": rng.randrange(256), "nbytes": numel * bits // 8})
    return out


def random_metadata(rng):
    r = rng.random()
    if r < 0.3:
        return None
    if r < 0.6:
        return {"format": "pt"}
    return {random_name(rng, set()): random_name(rng, set()) for _ in range(rng.randrange(0, 4))}


def lib_serialize(tensors, metadata):
    keep = []
    specs = {}
    for t in tensors:
        data = fill_bytes(t["fill"], max(t["nbytes"], 1))
        keep.append(data)
        shape = list(t["shape"])
        if t["dtype"] == "F4":
            shape[-1] //= 2                    # the binding doubles the storage shape
        specs[t["name"]] = TensorSpec(dtype=DTYPES[t["dtype"]][0], shape=shape,
                                      data_ptr=data.ctypes.data, data_len=t["nbytes"])
    return bytes(serialize(specs, metadata=metadata))


def raw_metadata(file_bytes):
    """The __metadata__ value exactly as the library wrote it (Rust HashMap order)."""
    n = int.from_bytes(file_bytes[:8], "little")
    text = file_bytes[8:8 + n].decode("utf-8")
    prefix = '{"__metadata__":'
    if not text.startswith(prefix):
        return None
    _, end = json.JSONDecoder().raw_decode(text, len(prefix))
    return text[len(prefix):end]


def st_dump_write(st_dump, tmp, tensors, meta_raw, out):
    spec = os.path.join(tmp, "spec.json")
    with open(spec, "w", encoding="utf-8") as f:
        json.dump({"metadata": meta_raw, "tensors": tensors}, f)
    r = subprocess.run([st_dump, "write", spec, out], capture_output=True, text=True)
    return r.returncode, r.stderr


def st_dump_parse(st_dump, paths):
    r = subprocess.run([st_dump, "parse"] + paths, capture_output=True)
    if r.returncode:
        raise RuntimeError("st_dump parse failed: %r" % r.stderr[-500:])
    lines = r.stdout.decode("utf-8", "surrogateescape").rstrip("\n").split("\n")
    assert len(lines) == len(paths), (len(lines), len(paths))
    return [json.loads(l) for l in lines]


def lib_open(path):
    """(ok, {name: (dtype, shape)}, metadata) as safetensors sees the file."""
    try:
        with safe_open(path, framework="numpy") as f:
            info = {}
            for k in f.keys():
                s = f.get_slice(k)
                info[k] = (s.get_dtype(), list(s.get_shape()))
            return True, info, f.metadata()
    except Exception as e:  # SafetensorError, and the binding's other refusals
        return False, str(e), None


# ---- 1 + 2: the serializer --------------------------------------------------

def test_serializer(st_dump, tmp):
    rng = random.Random(1234)
    same = 0
    first_diff = None
    for i in range(300):
        tensors = random_tensors(rng)
        meta = random_metadata(rng)
        if not tensors and meta == {}:
            # safetensors 0.8 writes an unreadable header here ('{},"__metadata__":{}}':
            # serde_json's serialize_map(Some(0)) closes the map at once); not a layout
            # anyone can rely on, so compare with a non-empty metadata instead.
            meta = {"format": "pt"}
        a = lib_serialize(tensors, meta)
        raw = raw_metadata(a) if meta is not None else None
        out = os.path.join(tmp, "ours.safetensors")
        rc, err = st_dump_write(st_dump, tmp, tensors, raw, out)
        b = open(out, "rb").read() if rc == 0 else b""
        if a == b:
            same += 1
        elif first_diff is None:
            first_diff = "set %d: rc=%d %s\n lib: %r\n ours: %r" % (i, rc, err, a[:300], b[:300])
    ok(same == 300, "300 random tensor sets: st_layout writes the bytes safetensors %s writes "
       "(%d identical)%s" % (safetensors.__version__, same,
                             "" if first_diff is None else "; first difference " + first_diff))

    # files only we can write (F6) and a named set, read back by safe_open + deserialize
    good = 0
    for i in range(60):
        tensors = random_tensors(rng, writable_only=False)
        meta = random_metadata(rng)
        raw = None if meta is None else json.dumps(meta, separators=(",", ":"), ensure_ascii=False)
        out = os.path.join(tmp, "ours%d.safetensors" % i)
        rc, err = st_dump_write(st_dump, tmp, tensors, raw, out)
        if rc:
            print("# write failed: %s" % err)
            continue
        lib_ok, info, lib_meta = lib_open(out)
        want = {t["name"]: (t["dtype"], t["shape"]) for t in tensors}
        data = dict(safetensors.deserialize(open(out, "rb").read()))
        data_ok = all(bytes(data[t["name"]]["data"]) ==
                      fill_bytes(t["fill"], t["nbytes"]).tobytes() for t in tensors)
        if lib_ok and info == want and lib_meta == meta and data_ok:
            good += 1
        else:
            print("# set %d: lib_ok=%s info_eq=%s meta %r vs %r data_ok=%s" %
                  (i, lib_ok, info == want if lib_ok else info, lib_meta, meta, data_ok))
    ok(good == 60, "safe_open/deserialize read 60 files we wrote (all dtypes incl. F6_*): "
       "names, dtypes, shapes, metadata and data match (%d good)" % good)


# ---- 3: the parser ------------------------------------------------------------

def header_of(file_bytes):
    n = int.from_bytes(file_bytes[:8], "little")
    return file_bytes[8:8 + n]


def with_header(text_bytes, data, pad=True):
    if pad:
        text_bytes += b" " * (-len(text_bytes) % 8)
    return len(text_bytes).to_bytes(8, "little") + text_bytes + data


def deliberate_divergence(file_bytes):
    """Why we may refuse a file safetensors accepts: duplicate names, U+0000 in
    a name, more than 8 dimensions."""
    try:
        text = header_of(file_bytes).decode("utf-8")
        dup = []

        def hook(pairs):
            keys = [k for k, _ in pairs]
            if len(keys) != len(set(keys)):
                dup.append(keys)
            return dict(pairs)
        obj = json.loads(text, object_pairs_hook=hook)
    except Exception:
        return None
    if dup:
        return "duplicate key"
    for k, v in obj.items():
        if "\x00" in k:
            return "NUL in name"
        if isinstance(v, dict) and isinstance(v.get("shape"), list) and len(v["shape"]) > 8:
            return "more than 8 dims"
    return None


def targeted_mutations(rng, good):
    """JSON-level edits of a valid file (header length kept consistent)."""
    hdr = header_of(good).decode("utf-8").rstrip(" ")
    data = good[8 + int.from_bytes(good[:8], "little"):]
    obj = json.loads(hdr)
    names = [k for k in obj if k != "__metadata__"]
    out = []

    def emit(text, d=data, pad=True):
        out.append(with_header(text.encode("utf-8"), d, pad))

    def dumps(o):
        return json.dumps(o, separators=(",", ":"), ensure_ascii=False)

    for name in names[:4]:
        e = obj[name]
        for field, val in [("data_offsets", [e["data_offsets"][0], e["data_offsets"][1] + 1]),
                           ("data_offsets", [e["data_offsets"][0] + 1, e["data_offsets"][1]]),
                           ("data_offsets", [e["data_offsets"][1], e["data_offsets"][0]]),
                           ("data_offsets", e["data_offsets"] + [0]),
                           ("data_offsets", e["data_offsets"][:1]),
                           ("shape", e["shape"] + [1]), ("shape", e["shape"] + [0]),
                           ("shape", [-1] + e["shape"]), ("shape", "x"),
                           ("shape", [2 ** 64] + e["shape"]), ("shape", [2 ** 33, 2 ** 33, 2 ** 33]),
                           ("dtype", rng.choice(list(DTYPES))), ("dtype", "F128"),
                           ("dtype", e["dtype"].lower()), ("extra", {"a": [1, 2.5, None]})]:
            o = dict(obj)
            o[name] = dict(e, **{field: val})
            emit(dumps(o))
        o = dict(obj)
        del o[name]
        emit(dumps(o))                            # a hole (or a shorter file)
        o = dict(obj)
        o[name] = dict(e)
        del o[name]["dtype"]
        emit(dumps(o))
    if names:
        n0 = names[0]
        ent = dumps(obj[n0])
        emit(hdr[:-1] + ',"%s":%s}' % (n0, ent))    # a duplicate name
        emit(hdr.replace('"dtype"', '"dtype":"F32","dtype"', 1))
        emit(hdr.replace('"shape":[', '"shape":[ 0' if rng.random() < 0.5 else '"shape":[1.0,', 1))
        emit(hdr.replace('"shape":[', '"shape":[01,', 1))
        emit(hdr.replace('"shape":[', '"shape":[-0,', 1))
        emit(hdr.replace('"shape":[', '"shape":[1e0,', 1))
        for depth in (124, 125, 126):
            emit(hdr.replace('"dtype"', '"x":%s%s,"dtype"' % ("[" * depth, "]" * depth), 1))
        emit(hdr.replace('"dtype"', '"x":1e400,"dtype"', 1))
        emit(hdr.replace('"dtype"', '"x":1e-400,"dtype"', 1))
        emit(hdr.replace('"dtype"', '"x":123456789012345678901234567890,"dtype"', 1))
        emit(hdr.replace('"dtype"', '"x":"\\ud800","dtype"', 1))
        emit(hdr.replace('"dtype"', '"x":"\\ud83d\\ude00","dtype"', 1))
        emit(hdr.replace('"dtype"', '"x":"\\q","dtype"', 1))
        emit(hdr.replace('"dtype"', '"x":"a\tb","dtype"', 1))
        emit(hdr.replace('"dtype"', '"x":tru,"dtype"', 1))
        emit(hdr.replace('"dtype"', '"x":[1,],"dtype"', 1))
        emit(hdr.replace('"' + n0 + '"' if '"' + n0 + '"' in hdr else "\x00", '"a\\u0000b"', 1))
        emit(hdr.replace('"shape":[', '"shape":[1,1,1,1,1,1,1,1,', 1))
    emit("[" + hdr + "]")
    emit(hdr + "x")
    emit(hdr + "\n\t\r ")
    emit(" \n" + hdr)
    emit("\ufeff" + hdr)
    emit(hdr, pad=False)
    emit(hdr, data + b"\0")
    emit(hdr, data[:-1])
    emit(hdr.replace('{"__metadata__":{"format":"pt"}', '{"__metadata__":{"format":1}', 1))
    emit(hdr.replace('{"__metadata__":{"format":"pt"}', '{"__metadata__":null', 1))
    emit(hdr.replace('{"__metadata__":{"format":"pt"}', '{"__metadata__":{}', 1))
    emit(hdr.replace('{"__metadata__":{"format":"pt"}', '{"__metadata__":"pt"', 1))
    emit(hdr.replace('{"__metadata__":{"format":"pt"}',
                     '{"__metadata__":{"format":"pt"},"__metadata__":{}', 1))
    emit(hdr.replace('{"__metadata__":{"format":"pt"}', '{"__metadata__":{"a":"b","a":"c"}', 1))
    emit(hdr.replace('{"__metadata__"', '{"__metadata\\u005f_"', 1))
    return out


def random_mutations(rng, good, count):
    out = []
    n = int.from_bytes(good[:8], "little")
    for _ in range(count):
        f = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            r = rng.random()
            if r < 0.05:
                f[rng.randrange(8)] = rng.randrange(256)
            elif r < 0.1:
                del f[rng.randrange(len(f)):]
            else:
                at = 8 + rng.randrange(max(1, min(n, len(f) - 8)))
                if at >= len(f):
                    continue
                choice = rng.random()
                if choice < 0.4:
                    f[at] = ord(rng.choice('{}[]",:0123456789-.eE \\u"\x00')) if rng.random() < 0.7 \
                        else rng.randrange(256)
                elif choice < 0.7:
                    f[at] ^= 1 << rng.randrange(8)
                else:
                    del f[at]
                    f[8 + n - 1:8 + n - 1] = b" "    # keep the header length right
        out.append(bytes(f))
    return out


def test_parser(st_dump, tmp):
    rng = random.Random(99)
    # valid files written by the library: same view as safe_open
    paths, expect = [], []
    for i in range(80):
        tensors = random_tensors(rng)
        meta = random_metadata(rng) if i % 4 else {"format": "pt"}
        p = os.path.join(tmp, "lib%d.safetensors" % i)
        with open(p, "wb") as f:
            f.write(lib_serialize(tensors, meta))
        paths.append(p)
        expect.append((tensors, meta))
    res = st_dump_parse(st_dump, paths)
    good = 0
    for p, r, (tensors, meta) in zip(paths, res, expect):
        lib_ok, info, lib_meta = lib_open(p)
        hdr = json.loads(header_of(open(p, "rb").read()))
        if (r["ok"] and lib_ok and
                {t[0]: (t[1], t[2]) for t in r["tensors"]} == info and
                {t[0]: [t[3], t[4]] for t in r["tensors"]} ==
                {k: v["data_offsets"] for k, v in hdr.items() if k != "__metadata__"} and
                (json.loads(r["metadata"]) if r["metadata"] is not None else None) == lib_meta and
                [t[3] for t in r["tensors"]] == sorted(t[3] for t in r["tensors"])):
            good += 1
        else:
            print("# %s: ours %r lib %r" % (p, r, info))
    ok(good == 80, "our parser reads 80 library-written files as safe_open does (%d good)" % good)

    # mutated files: accept exactly what safetensors accepts
    base = []
    for i in range(12):
        tensors = random_tensors(rng)
        while not tensors:
            tensors = random_tensors(rng)
        base.append(lib_serialize(tensors, {"format": "pt"}))
    cases = []
    for good_file in base:
        cases += targeted_mutations(rng, good_file)
        cases += random_mutations(rng, good_file, 250)
    agree = stricter = 0
    problems = []
    accepted = 0
    for start in range(0, len(cases), 400):
        chunk = cases[start:start + 400]
        paths = []
        for j, c in enumerate(chunk):
            p = os.path.join(tmp, "m%d.safetensors" % j)
            with open(p, "wb") as f:
                f.write(c)
            paths.append(p)
        ours = st_dump_parse(st_dump, paths)
        for c, p, r in zip(chunk, paths, ours):
            lib_ok, info, lib_meta = lib_open(p)
            accepted += lib_ok
            if r["ok"] == lib_ok:
                if lib_ok and {t[0]: (t[1], t[2]) for t in r["tensors"]} != info:
                    problems.append("both accept, views differ: %r" % c[:200])
                else:
                    agree += 1
            elif lib_ok and not r["ok"] and deliberate_divergence(c):
                stricter += 1
            else:
                problems.append("lib %s, ours %s (%s): %r" % (
                    "accepts" if lib_ok else "refuses: " + info,
                    "accepts" if r["ok"] else "refuses", r.get("error", ""), c[:240]))
            if not r["ok"] and not (r["code"] == -71 and p in r["error"]):
                problems.append("refusal without -EPROTO naming the file: %r" % r)
    for pr in problems[:8]:
        print("# " + pr.replace("\n", "\\n"))
    ok(not problems and accepted > 50,
       "%d mutated files: accept/refuse agrees with safetensors on %d, %d deliberately "
       "stricter (duplicate names etc.), %d disagreements; library accepted %d" %
       (len(cases), agree, stricter, len(problems), accepted))


def main():
    if len(sys.argv) != 2:
        print("usage: test_st_peer.py ST_DUMP", file=sys.stderr)
        return 2
    st_dump = sys.argv[1]
    print("# safetensors %s, numpy %s" % (safetensors.__version__, np.__version__))
    with tempfile.TemporaryDirectory(prefix="rq-st-peer-") as tmp:
        test_serializer(st_dump, tmp)
        test_parser(st_dump, tmp)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
