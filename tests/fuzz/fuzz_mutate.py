"""fuzz_mutate.py — the mutators of test_fuzz.py: byte-level and JSON-aware
changes to a safetensors header (8-byte length + JSON), config.json, the
index and the calibration file. Pure functions of (bytes, random.Random):
the same seed gives the same mutation, so a case is reproducible from
(RQ_FUZZ_SEED, case number) alone.

JSON is parsed into Obj (a list of (key, value) pairs, so duplicate keys and
key order survive) and written back by dump(), which can also emit Raw text
(NaN, 1e999, 100000-deep nesting, a truncated token) that no encoder would."""
import json, struct

DTYPES = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
          "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
          "C64", "F64", "I64", "U64"]
BAD_DTYPES = ["", "bf16", "F33", "BF16 ", "F8", "BFLOAT16", "I128", "\u0000", "F32\u0000"]
BAD_NAMES = ["../x", "/etc/passwd", "a/b", "", ".", "..", "config.json", "a\\b", "x" * 5000,
             "model.safetensors.index.json", "./model-00001-of-00008.safetensors",
             "model-00001-of-00008.safetensors/", "\u00e9\u4e2d", "nul\u0000byte", ".requantfs",
             "model-00001-of-00008.safetensors\n",
             # paths as users write them: space, tab, backslash, newline, non-ASCII
             "model 00001 of 00008.safetensors", "model-00001-of-00008.safetensors ",
             "tab\there.safetensors", "back\\slash.safetensors", "new\nline.safetensors",
             "\u00e9\u6a21\u578b-00001.safetensors", "m\\040odel.safetensors"]


class Obj(list):
    """a JSON object as (key, value) pairs: duplicates and order kept"""


class Raw(str):
    """text written verbatim by dump()"""


def loads(text):
    return json.loads(text, object_pairs_hook=Obj)


def dump(v, indent=None, _lvl=0):
    nl = "" if indent is None else "\n" + " " * (indent * (_lvl + 1))
    end = "" if indent is None else "\n" + " " * (indent * _lvl)
    sep = ":" if indent is None else ": "
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, Obj):
        if not v:
            return "{}"
        return "{" + ",".join(nl + json.dumps(k) + sep + dump(x, indent, _lvl + 1)
                              for k, x in v) + end + "}"
    if isinstance(v, list):
        if not v:
            return "[]"
        return "[" + ",".join(nl + dump(x, indent, _lvl + 1) for x in v) + end + "]"
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, float):
        return repr(v) if v == v and abs(v) != float("inf") else json.dumps(v)
    return json.dumps(v)


def interesting(rng):
    """a value chosen to break a reader: limits, signs, types, sizes"""
    return rng.choice([
        0, -1, 1, 2, 3, 7, 15, 16, 17, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1,
        2**32, 2**32 + 1, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**30, -2**31,
        -2**63, -2**63 - 1, 1.5, -0.0, 0.5, 1e308, 1e-320, Raw("1e999"), Raw("-1e999"),
        Raw("NaN"), Raw("Infinity"), Raw("01"), Raw("1."), Raw("-"), Raw("1e"), Raw("0x10"),
        "x", "", "\u0000", "a" * 100000, None, True, False, [], Obj(), [1, 2], [[]],
        Obj([("a", 1)]), Raw("[" * 100000 + "]" * 100000), Raw("[" * 200 + "]" * 200),
        Raw("{\"a\":" * 3000 + "1" + "}" * 3000), Raw("\"\\ud800\""), Raw("\"\\u0000\""),
        Raw("\"\xff\""), Raw("tru"), Raw("\"unterminated")])


def nodes(v, path=()):
    """every (path, value) below v; a path step is an index into an Obj's pairs
    or a list"""
    out = [(path, v)]
    if isinstance(v, (Obj, list)) and not isinstance(v, Raw):
        for i, x in enumerate(v):
            out += nodes(x[1] if isinstance(v, Obj) else x, path + (i,))
    return out


def get_parent(root, path):
    cur = root
    for i in path[:-1]:
        cur = cur[i][1] if isinstance(cur, Obj) else cur[i]
    return cur


def set_at(root, path, val):
    if not path:
        return val
    p = get_parent(root, path)
    i = path[-1]
    if isinstance(p, Obj):
        p[i] = (p[i][0], val)
    else:
        p[i] = val
    return root


def json_generic(root, rng):
    """one structural change anywhere in a JSON tree; returns (root, what)"""
    all_nodes = nodes(root)
    path, val = rng.choice(all_nodes)
    op = rng.randrange(8)
    if op <= 2 or not path:
        nv = interesting(rng)
        return set_at(root, path, nv), f"value at {list(path)} -> {dump(nv)[:60]}"
    parent = get_parent(root, path)
    i = path[-1]
    if op == 3:
        del parent[i]
        return root, f"delete {list(path)}"
    if op == 4:
        parent.insert(rng.randrange(len(parent) + 1), parent[i])
        return root, f"duplicate {list(path)}"
    if op == 5 and isinstance(parent, Obj):
        name = rng.choice(BAD_NAMES + [parent[rng.randrange(len(parent))][0]])
        parent[i] = (name, parent[i][1])
        return root, f"rename key at {list(path)} -> {name[:40]!r}"
    if op == 6:
        return set_at(root, path, [val]), f"wrap {list(path)} in a list"
    j = rng.randrange(len(parent))
    a = parent[i][1] if isinstance(parent, Obj) else parent[i]
    b = parent[j][1] if isinstance(parent, Obj) else parent[j]
    set_at(root, path[:-1] + (j,), a)
    set_at(root, path, b)
    return root, f"swap values {list(path)} and {j}"


def _variant(v, rng):
    """a value of v's kind that means something else: the copy a hostile file
    would repeat a key with"""
    if isinstance(v, Raw):
        return interesting(rng)
    if isinstance(v, str):
        return rng.choice([v + "x", "re:.*", "lm_head", "model-00002-of-00008.safetensors",
                           "mlx", "F32", ""])
    if isinstance(v, bool) or v is None:
        return rng.choice([True, False, None, 0])
    if isinstance(v, (int, float)):
        return rng.choice([v * 2, v + 1, 0, -v])
    if isinstance(v, Obj):
        return Obj(v[:-1]) if len(v) > 1 else Obj(list(v) + [("x", 1)])
    if isinstance(v, list):
        return rng.choice([v[:-1], v + ["re:.*"], v[::-1], []]) if v else ["re:.*"]
    return interesting(rng)


def dup_key(root, rng, prefer=()):
    """a key of some object written twice with different values (issue 17):
    cJSON reads the first, Python's json the last, so every reader must refuse
    the file. prefer: paths of keys (tuples of names) tried first, e.g.
    ("quantization_config",) or ("weight_map", None) for any key under it."""
    objs = [(p, v) for p, v in nodes(root) if isinstance(v, Obj) and v and not isinstance(v, Raw)]
    if not objs:
        return json_generic(root, rng)
    path, o = rng.choice(objs)
    for want in prefer:
        if rng.random() < 0.5:
            continue
        cur, ok = root, isinstance(root, Obj)
        for name in want[:-1]:
            i = _field(cur, name) if ok else None
            ok = i is not None and isinstance(cur[i][1], Obj)
            cur = cur[i][1] if ok else cur
        if ok and cur and (want[-1] is None or _field(cur, want[-1]) is not None):
            o = cur
            break
    i = rng.randrange(len(o))
    if prefer and rng.random() < 0.7:
        for want in prefer:
            j = _field(o, want[-1]) if want[-1] is not None else None
            if j is not None:
                i = j
                break
    k, v = o[i]
    others = [x for _, x in o if x != v]
    nv = _variant(v, rng) if rng.random() < 0.7 else rng.choice(others + [interesting(rng)])
    if nv == v and type(nv) == type(v):
        nv = [v]
    at = i + 1 if rng.random() < 0.5 else i      # the new value read last or first
    o.insert(at, (k, nv))
    return root, f"key {k[:40]!r} twice (value {dump(nv)[:40]} {'after' if at > i else 'before'})"


def _entries(root):
    return [i for i, (k, v) in enumerate(root) if k != "__metadata__" and isinstance(v, Obj)]


def _field(entry, name):
    for i, (k, _) in enumerate(entry):
        if k == name:
            return i
    return None


def header_targeted(root, rng):
    """a change that a safetensors reader must police: dtype, shape, offsets,
    names, metadata"""
    ents = _entries(root)
    if not isinstance(root, Obj) or not ents:
        return json_generic(root, rng)
    ti = rng.choice(ents)
    name, e = root[ti]
    op = rng.randrange(11)
    if op == 10:
        return dup_key(root, rng, prefer=[("__metadata__", None), (name, "dtype"),
                                          (name, "shape"), (name, "data_offsets")])
    fi = _field(e, "dtype")
    if op == 0 and fi is not None:
        d = rng.choice(DTYPES + BAD_DTYPES)
        e[fi] = ("dtype", d)
        return root, f"{name}: dtype -> {d!r}"
    si = _field(e, "shape")
    oi = _field(e, "data_offsets")
    if op in (1, 2) and si is not None:
        s = e[si][1] if isinstance(e[si][1], list) else [1]
        sh = rng.choice([[], [0], [2**32, 2**32], [-1], [2**63], [2**64], ["a"], [2**31] * 3,
                         [2**21] * 3, s + [1], s[:-1], s[::-1], [x * 2 for x in s if isinstance(x, int)],
                         [1] * 9, [1] * 40, [2**16, 2**16, 2**16, 2**16], [1.0] * len(s), None,
                         [s[0] if s else 1, 0]])
        e[si] = ("shape", sh)
        return root, f"{name}: shape -> {str(sh)[:60]}"
    if op in (3, 4, 5) and oi is not None and isinstance(e[oi][1], list) and len(e[oi][1]) == 2:
        b, en = e[oi][1]
        others = [root[j][1][_field(root[j][1], "data_offsets")][1] for j in ents
                  if j != ti and _field(root[j][1], "data_offsets") is not None]
        o = rng.choice(others) if others else [0, 0]
        do = rng.choice([[en, b], [b, b], [0, 2**64 - 1], [2**64 - 1, 2**64 - 1], [b, en + 1],
                         [b, en - 1], [b - 1, en - 1], [b + 1, en + 1], [b, 2**63], [-1, en],
                         [b, en, en], [b], [], list(o), [o[0], en] if o else [0, en],
                         [b, 10**9], [2**64, 2**64 + 4], [b * 1.0, en]])
        e[oi] = ("data_offsets", do)
        return root, f"{name}: data_offsets -> {str(do)[:60]}"
    if op == 6:
        nn = rng.choice(BAD_NAMES + [root[rng.choice(ents)][0], "__metadata__", name + "x"])
        root[ti] = (nn, e)
        return root, f"rename tensor {name} -> {nn[:40]!r}"
    if op == 7:
        mi = _field(root, "__metadata__")
        md = rng.choice([interesting(rng), Obj([("format", "pt"), ("x", 1)]), Obj(),
                         Obj([("format", interesting(rng))]), None])
        if mi is None:
            root.insert(0, ("__metadata__", md))
        else:
            root[mi] = ("__metadata__", md)
        return root, f"__metadata__ -> {dump(md)[:60]}"
    if op == 8:
        k = rng.randrange(len(e) + 1)
        extra = rng.choice([("dtype", "F32"), ("shape", [1]), ("data_offsets", [0, 4]),
                            ("extra", 1), ("", None)])
        e.insert(k, extra)
        return root, f"{name}: add field {extra}"
    return json_generic(root, rng)


def index_targeted(root, rng):
    wmi = _field(root, "weight_map") if isinstance(root, Obj) else None
    if wmi is None or not isinstance(root[wmi][1], Obj) or not root[wmi][1]:
        return json_generic(root, rng)
    wm = root[wmi][1]
    op = rng.randrange(7)
    if op == 6:
        return dup_key(root, rng, prefer=[("weight_map", None), ("metadata", "total_size")])
    i = rng.randrange(len(wm))
    k, v = wm[i]
    if op <= 2:
        nv = rng.choice(BAD_NAMES + [wm[rng.randrange(len(wm))][1], "missing.safetensors",
                                     "model-00009-of-00008.safetensors", interesting(rng)])
        wm[i] = (k, nv)
        return root, f"weight_map[{k}] -> {dump(nv)[:60]}"
    if op == 3:
        del wm[i]
        return root, f"weight_map: drop {k}"
    if op == 4:
        nk = rng.choice(["model.layers.2.mlp.experts.0.down_proj.weight", "no.such.tensor",
                         k, "model.layers.99.mlp.experts.0.gate_proj.weight"])
        wm.insert(rng.randrange(len(wm) + 1), (nk, v))
        return root, f"weight_map: add {nk} -> {v}"
    mi = _field(root, "metadata")
    nv = interesting(rng)
    if mi is not None and isinstance(root[mi][1], Obj):
        root[mi] = ("metadata", Obj([("total_size", nv)]))
    return root, f"metadata.total_size -> {dump(nv)[:60]}"


def config_targeted(root, rng):
    if not isinstance(root, Obj):
        return json_generic(root, rng)
    top = [i for i, (k, _) in enumerate(root)]
    if rng.random() < 0.1:
        return dup_key(root, rng, prefer=[("quantization_config",),
                                          ("quantization_config", "ignore"),
                                          ("quantization_config", "config_groups"),
                                          ("num_hidden_layers",), ("hidden_size",)])
    if rng.random() < 0.05:
        # hostile inputs, fourth round: a float where the engine reads a token id
        # (truncated onto another token before), a rope length of 0
        k, v = rng.choice([("eos_token_id", [2, 24.5]), ("eos_token_id", 2.5),
                           ("eos_token_id", 1e10), ("original_max_position_embeddings", 0)])
        i = _field(root, k)
        if i is None:
            root.append((k, v))
        else:
            root[i] = (k, v)
        return root, f"{k} -> {dump(v)}"
    qi = _field(root, "quantization_config")
    if qi is not None and isinstance(root[qi][1], Obj) and rng.random() < 0.35:
        q = root[qi][1]
        ii = _field(q, "ignore")
        if ii is not None and isinstance(q[ii][1], list) and rng.random() < 0.6:
            ign = q[ii][1]
            op = rng.randrange(5)
            if op == 0 and ign:
                del ign[rng.randrange(len(ign))]
                return root, "ignore: drop an entry"
            pat = rng.choice(["re:(", "re:^model\\.layers\\.(?=4)", "re:.*", "re:", "",
                              "re:^model\\.layers\\.[2-3]\\.mlp\\.experts(\\..*)?$",
                              "re:^model\\.layers\\.[0-3]\\.mlp\\.experts(\\..*)?$",
                              "re:^model\\.layers\\.2\\.mlp\\.experts\\..*$", "re:a{99999}",
                              "re:(a*)*$", "re:\\", "re:[", "re:" + "(" * 500 + ")" * 500,
                              "lm_head", 5, None, "re:\\d\\w\\s(?:x)", "re:(?P<n>x)",
                              # catastrophic backtracking on module names: each must
                              # fail the plan fast, naming config.json (PCRE2 limits)
                              "re:(.+.+)+y$", "re:(\\w+\\.?)+\\.$", "re:(a|aa)*$",
                              "re:(x+x+)+y", "re:(.{1,200}){1,200}y$", "re:(.*.*)*\\d$",
                              "re:(model|m\\w+)*(\\.\\w+)*x$",
                              # Python syntax PCRE2 spells differently, or refused
                              "re:(?i)MODEL\\.LAYERS\\.[2-3]\\.MLP\\.EXPERTS(\\..*)?$",
                              "re:[\\S]+", "re:\\N{DIGIT ONE}", "re:(*LIMIT_MATCH=1)a",
                              "re:(?x)a b", "re:model\\.layers\\.\u0663"])
            if op in (1, 2) or not ign:
                ign.insert(rng.randrange(len(ign) + 1), pat)
            else:
                ign[rng.randrange(len(ign))] = pat
            return root, f"ignore: put {pat!r:.50}"
        q, what = json_generic(q, rng)
        root[qi] = ("quantization_config", q)
        return root, "quantization_config: " + what
    i = rng.choice(top)
    nv = interesting(rng) if rng.random() < 0.7 else rng.choice(
        [0, 1, 2, 3, 4, 5, 8, 32, 63, 64, 65, 128, 4096, 10**6])
    root[i] = (root[i][0], nv)
    return root, f"{root[i][0]} -> {dump(nv)[:60]}"


# ---- byte level -----------------------------------------------------------------

TOKENS = [b"{", b"}", b"[", b"]", b",", b":", b"\"", b"\\", b"0", b"-", b"e", b"\x00", b"\xff",
          b"\xc3", b"\xed\xa0\x80", b" ", b"\n", b"null", b"1e999", b"18446744073709551616"]


def bytes_mutate(b, lo, hi, rng):
    """one byte-level change inside [lo, hi) of b (a bytearray); returns what"""
    hi = max(min(hi, len(b)), lo)
    pos = rng.randrange(lo, hi) if hi > lo else lo
    op = rng.randrange(7)
    if op == 0 and hi > lo:
        for _ in range(rng.randint(1, 8)):
            p = rng.randrange(lo, hi)
            b[p] ^= 1 << rng.randrange(8)
        return "bit flips"
    if op == 1 and hi > lo:
        b[pos] = rng.choice([0, 0xff, 0x7f, 0x80, ord('"'), ord('{'), ord('}'), ord(','),
                             ord(':'), ord('9'), ord('-'), ord('\\')])
        return f"byte {pos} set"
    if op == 2:
        t = rng.choice(TOKENS) * rng.choice([1, 1, 2, 100])
        b[pos:pos] = t
        return f"insert {t[:20]!r} at {pos}"
    if op == 3 and hi > lo:
        k = rng.randint(1, max(1, min(64, hi - pos)))
        del b[pos:pos + k]
        return f"delete {k} bytes at {pos}"
    if op == 4 and hi > lo:
        k = rng.randint(1, max(1, min(256, hi - pos)))
        b[pos:pos] = b[pos:pos + k]
        return f"duplicate {k} bytes at {pos}"
    if op == 5:
        del b[pos:]
        return f"truncate at {pos}"
    b.extend(rng.choice([b" " * 8, b"\x00" * 3, b"garbage", b"}" * 4]))
    return "append bytes"


def st_split(b):
    """(header length, header text bytes, data bytes) or None"""
    if len(b) < 8:
        return None
    n = struct.unpack("<Q", bytes(b[:8]))[0]
    if n > len(b) - 8:
        return None
    return n, bytes(b[8:8 + n]), bytes(b[8 + n:])


def mutate_safetensors(orig, rng, is_calib=False):
    """one change to a safetensors file: its header (JSON-aware or bytes, length
    kept consistent or not), its length prefix, or (rarely) its data"""
    b = bytearray(orig)
    sp = st_split(b)
    r = rng.random()
    if sp and r < 0.5:
        n, htext, data = sp
        try:
            root = loads(htext)
        except ValueError:
            root = None
        if root is not None:
            root, what = (header_targeted if rng.random() < 0.7 else json_generic)(root, rng)
            ht = dump(root).encode("utf-8", "surrogatepass")
            if rng.random() < 0.15:
                ht += b" " * rng.randrange(1, 9)        # padding the spec allows
            nn = len(ht)
            if rng.random() < 0.1:
                nn = rng.choice([nn + 1, nn - 1, nn + 8, 0, 2**64 - 1, 100 * 1024 * 1024 + 1])
                what += f"; length prefix {nn}"
            return bytes(struct.pack("<Q", nn) + ht + data), "header JSON: " + what
    if sp and r < 0.62:
        n, htext, data = sp
        # whitespace between tokens, length fixed up: the same file to a correct reader
        pos = rng.randrange(0, n + 1)
        ws = rng.choice([b" ", b"\n", b"\t", b"\r\n  "])
        ht = htext[:pos] + ws + htext[pos:]
        return bytes(struct.pack("<Q", len(ht)) + ht + data), f"whitespace {ws!r} at header byte {pos}"
    if r < 0.70:
        n = sp[0] if sp else 0
        nn = rng.choice([0, 1, 2, n - 1, n + 1, n + 7, n + 8, len(b), len(b) - 8, 2**63,
                         2**64 - 1, 100 * 1024 * 1024, 100 * 1024 * 1024 + 1, 2**32 + n])
        b[:8] = struct.pack("<Q", nn % 2**64)
        return bytes(b), f"length prefix {n} -> {nn}"
    if sp and (r < 0.93 or not is_calib):
        n = sp[0]
        what = bytes_mutate(b, 8, 8 + n, rng)
        if rng.random() < 0.5 and len(b) >= 8:
            # keep the prefix pointing at the end of the (changed) header
            b[:8] = struct.pack("<Q", max(0, n + len(b) - len(orig)))
            what += "; length prefix adjusted"
        return bytes(b), "header bytes: " + what
    if sp and len(sp[2]) >= 4:
        n = sp[0]
        off = 8 + n + 4 * rng.randrange(len(sp[2]) // 4)
        val = rng.choice([b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f", b"\x00\x00\x80\xff",
                          b"\x00\x00\x00\x00", b"\x00\x00\x00\x80", b"\x01\x00\x00\x00",
                          b"\xff\xff\x7f\x7f", b"\x00\x00\x80\xbf"])
        b[off:off + 4] = val
        return bytes(b), f"data bytes at {off} -> {val.hex()}"
    what = bytes_mutate(b, 0, len(b), rng)
    return bytes(b), "data: " + what


def mutate_json_file(orig, rng, targeted):
    """one change to a JSON file (config.json or the index)"""
    r = rng.random()
    if r < 0.6:
        try:
            root = loads(orig.decode("utf-8"))
        except ValueError:
            root = None
        if root is not None:
            root, what = (targeted if rng.random() < 0.75 else json_generic)(root, rng)
            return dump(root, indent=rng.choice([None, 2, 2])).encode("utf-8", "surrogatepass"), what
    b = bytearray(orig)
    what = bytes_mutate(b, 0, len(b), rng)
    return bytes(b), "bytes: " + what
