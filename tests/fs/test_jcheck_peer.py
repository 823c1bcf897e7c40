#!/usr/bin/env python3
"""jc_check (st/jcheck.h) against Python's json, document by document.

Python's json.loads decides each document; on top of it the rules where
cJSON would read the same text differently refuse (duplicate keys, U+0000,
integers a double cannot hold, NaN/Infinity, lone surrogates, nesting past
128). The documents: hand-written edge cases plus seeded random mutations of
a config.json (byte flips, inserted whitespace and control bytes, duplicated
members, escapes). test_jcheck (the C side) gets them hex-encoded and must
decide each one the same way.

Usage: test_jcheck_peer.py TEST_JCHECK_EXE   (standard library only)"""
import json
import os
import random
import subprocess
import sys
import tempfile


class Refuse(Exception):
    pass


def pairs(kv):
    keys = [k for k, _ in kv]
    if len(set(keys)) != len(keys):
        raise Refuse("duplicate key")
    return dict(kv)


def exact_int(s):
    v = int(s)
    if float(v) != v or int(float(v)) != v:
        raise Refuse("inexact integer")
    return v


def const(s):
    raise Refuse("NaN/Infinity")


def finite_float(s):
    v = float(s)
    if v in (float("inf"), float("-inf")):
        raise Refuse("overflow")
    return v


def walk(v, depth=0):
    if isinstance(v, (list, dict)) and depth >= 128:
        raise Refuse("nested deeper than 128")
    if isinstance(v, str):
        if "\x00" in v or any(0xD800 <= ord(c) <= 0xDFFF for c in v):
            raise Refuse("NUL or lone surrogate")
    elif isinstance(v, list):
        for x in v:
            walk(x, depth + 1)
    elif isinstance(v, dict):
        for k, x in v.items():
            walk(k, depth + 1)
            walk(x, depth + 1)


def python_ok(doc: bytes) -> bool:
    try:
        text = doc.decode("utf-8")
        v = json.loads(text, object_pairs_hook=pairs, parse_int=exact_int,
                       parse_constant=const, parse_float=finite_float)
        walk(v)
        return True
    except (ValueError, Refuse, RecursionError):
        return False


BASE = b'''{
  "architectures": ["LagunaForCausalLM"],
  "hidden_size": 64,
  "rope_theta": 500000.0,
  "eps": 1e-06,
  "name": "caf\\u00e9 \\ud83d\\ude00",
  "quantization_config": {"ignore": ["lm_head", "re:.*gate$"], "format": "nvfp4-pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4}}}},
  "model_max_length": 1000000000000000019884624838656,
  "flag": true, "none": null
}
'''

EDGE = [
    b'{}', b'[]', b'"s"', b'0', b'-0', b'1.5e3', b' {"a": 1} ', b'{"a": 1}\n\n',
    b'{"a": 1, "a": 1}', b'{"a": {"b": 1, "b": 2}}', b'[{"x": 1, "y": 2, "x": 3}]',
    b'{"a\\u0062": 1, "ab": 2}', b'{"a": "\\u0000"}', b'{"a": "\\ud800"}', b'{"a": "\\udc00x"}',
    b'{"a": NaN}', b'{"a": -Infinity}', b'{"a": 9007199254740993}', b'{"a": 9007199254740992}',
    b'{"a": 123456789012345678}', b'{"a": 1e999}', b'{"a": 01}', b'{"a": 1.}', b'{"a": .5}',
    b'{"a": +1}', b'{"a":\x0c1}', b'{"a":\x0b1}', b'{"a":\x001}', b'{"a": "x\x01"}',
    b'{"a": "x\x7f"}', b'{"a": 1} 2', b'{"a": 1}{}', b'\xef\xbb\xbf{}', b'{"a": "\xc3"}',
    b'{"a": "\xed\xa0\x80"}', b'{"a": "\\/\\b\\f\\n\\r\\t\\"\\\\"}', b'{"a": "\\u00"}',
    b'{"a": "\\q"}', b'{"a": tru}', b'{"a": [1,]}', b'{"a": 1,}', b'', b' ', b'{"a" 1}',
    b'[' * 128 + b']' * 128, b'[' * 129 + b']' * 129, b'{"A": 1, "a": 2}',
    b'{"a": 1E+2, "b": -1e-2, "c": 0.0000001}', b'{"\\u00e9": 1, "\xc3\xa9": 2}',
]

MUTANTS = [b" ", b"\t", b"\x0c", b"\x00", b"\x1f", b",", b"\"", b"\\", b"\\u0000", b"}", b"]",
           b"0", b"9007199254740993", b"\xff", b"\xc3", b"NaN", b"\\ud800", b'"hidden_size": 1, ']


def mutate(rng, doc: bytes) -> bytes:
    b = bytearray(doc)
    for _ in range(rng.randint(1, 2)):
        op = rng.randrange(4)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            del b[min(i, len(b) - 1)]
        elif op == 1:
            b[i:i] = rng.choice(MUTANTS)
        elif op == 2 and b:
            b[min(i, len(b) - 1)] = rng.randrange(256)
        else:
            # duplicate a member: the text from a '"' to the next ','
            s = doc.find(b'"', rng.randrange(len(doc)))
            e = doc.find(b",", s) if s >= 0 else -1
            if s >= 0 and e > s:
                b[s:s] = doc[s:e + 1]
    return bytes(b)


def main():
    exe = sys.argv[1]
    rng = random.Random(17)
    docs = EDGE + [BASE] + [mutate(rng, BASE) for _ in range(600)]
    n_ok = 0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "cases.txt")
        with open(path, "w") as f:
            for doc in docs:
                ok = python_ok(doc)
                n_ok += ok
                f.write(("ok " if ok else "no ") + doc.hex() + "\n")
        print(f"# {len(docs)} documents, {n_ok} accepted by Python's json with the "
              f"cJSON-disagreement rules", flush=True)
        # both sides must occur, or the comparison proves little
        assert 50 < n_ok < len(docs) - 50 or len(docs) < 100, n_ok
        r = subprocess.run([exe, path])
        sys.exit(r.returncode)


if __name__ == "__main__":
    main()
