#!/usr/bin/env python3
"""Hostile inputs, third round (issue 17), classes 1, 6 and 8, end to end
through the requantfs binary on small hand-written checkpoints:

 1. JSON that cJSON and Python's json would read differently is refused,
    naming the file and the key: duplicate keys in config.json (plan, export
    and mount), in model.safetensors.index.json, in a shard header's
    __metadata__; data after config.json's object; an integer a double cannot
    hold. The same files without the fault are accepted (the control).
 6. Messages never echo file contents or raw control bytes: a tensor name
    with ESC [ and a newline comes out escaped; a refs/main that links to a
    root-only file is refused without a byte of that file; a refs/main full
    of control bytes does not put them on the terminal.
 8. Each refusal gives the true reason: a zero-sized weight is called
    zero-sized (not "not a multiple of the group size"); a refs/main that is
    a FIFO or a directory is called that (not "no refs/main").

Usage: test_hostile3.py REQUANTFS   (standard library only; the mount case
needs root and /dev/fuse and says so when it cannot run)"""
import json
import os
import stat
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run, mounted  # noqa: E402

rqtap.init(sys.argv[1])

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32}
W = "model.layers.0.mlp.down_proj.weight"


def header_bytes(tensors, meta=None):
    """A header as json.dumps writes it, and the data length."""
    h, off = {}, 0
    for name, (dt, shape) in tensors.items():
        n = 2
        for d in shape:
            n *= d
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    if meta is not None:
        h["__metadata__"] = meta
    return json.dumps(h).encode(), off


def write_st(path, raw_header, data_len):
    raw_header += b" " * (-len(raw_header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw_header)) + raw_header + b"\x11" * data_len)


def ckpt(d, config=None, header=None, data_len=None, tensors=None, index=None):
    """A checkpoint in d: config.json (text), one shard (raw header text or
    built from tensors), and an index (text) when given."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "wb") as f:
        f.write(config if config is not None else json.dumps(CONFIG, indent=2).encode())
    tensors = tensors or {W: ("BF16", [32, 32]), "model.embed_tokens.weight": ("BF16", [8, 32])}
    h, n = header_bytes(tensors, {"format": "pt"})
    shard = "model-00001-of-00001.safetensors" if index is not None else "model.safetensors"
    write_st(os.path.join(d, shard), header if header is not None else h,
             data_len if data_len is not None else n)
    if index is not None:
        with open(os.path.join(d, "model.safetensors.index.json"), "wb") as f:
            f.write(index)
    return d


def plan(src, env=None):
    return run("plan", src, "--scheme", "fp8-dynamic", env=env)


def refused(label, src, words, env=None, absent=()):
    rc, out = plan(src, env=env)
    good = rc == 1 and all(w in out for w in words) and not any(a in out for a in absent)
    ok(good, f"{label}: refused, naming {', '.join(words)}", out)
    return out


def class1(tmp):
    good = ckpt(os.path.join(tmp, "good"))
    rc, out = plan(good)
    ok(rc == 0, "control: the same checkpoint without faults is planned", out)
    idx_text = json.dumps({"metadata": {"total_size": 2560}, "weight_map": {
        W: "model-00001-of-00001.safetensors",
        "model.embed_tokens.weight": "model-00001-of-00001.safetensors"}}, indent=2).encode()
    sharded = ckpt(os.path.join(tmp, "sharded"), index=idx_text)
    rc, out = plan(sharded)
    ok(rc == 0, "control: the sharded checkpoint with its index is planned", out)

    dup = (b'{\n  "architectures": ["LlamaForCausalLM"],\n  "model_type": "llama",\n'
           b'  "hidden_size": 32,\n  "hidden_size": 64\n}\n')
    src = ckpt(os.path.join(tmp, "dupcfg"), config=dup)
    refused("config.json with hidden_size twice", src,
            ["config.json", '"hidden_size" appears twice', "top-level object"])
    rc, out = run("export", src, os.path.join(tmp, "dupcfg-out"), "--scheme", "fp8-dynamic",
                  "--quiet", "--device", "cpu")
    ok(rc == 1 and '"hidden_size" appears twice' in out and "config.json" in out
       and not os.path.exists(os.path.join(tmp, "dupcfg-out", "config.json")),
       "export refuses the same config.json", out)
    if os.geteuid() == 0 and os.path.exists("/dev/fuse"):
        mnt = os.path.join(tmp, "mnt")
        os.makedirs(mnt)
        rqtap.MOUNTS.append(os.path.abspath(mnt))
        rc, out = run("mount", src, mnt, "--scheme", "fp8-dynamic", "--cache",
                      os.path.join(tmp, "cache"), "--device", "cpu")
        ok(rc == 1 and '"hidden_size" appears twice' in out and not mounted(mnt),
           "mount refuses the same config.json and mounts nothing", out)
    else:
        ok(True, "# SKIP mount case: needs root and /dev/fuse")

    nested = (b'{"model_type": "llama", "hidden_size": 32, "quantization_config": '
              b'{"ignore": ["lm_head"], "ignore": ["re:.*"]}}')
    refused("config.json with a nested duplicate", ckpt(os.path.join(tmp, "dupnest"),
            config=nested), ["config.json", '"ignore" appears twice', "quantization_config"])
    trail = json.dumps(CONFIG).encode() + b'\n{"hidden_size": 64}\n'
    refused("config.json with a second object after the first", ckpt(
        os.path.join(tmp, "trail"), config=trail), ["config.json", "data after the JSON value"])
    big = b'{"model_type": "llama", "hidden_size": 32, "vocab_size": 9007199254740993}'
    refused("config.json with an integer a double cannot hold", ckpt(
        os.path.join(tmp, "bigint"), config=big), ["config.json", "9007199254740993",
                                                   "vocab_size"])
    ff = b'{"model_type":\x0c"llama", "hidden_size": 32}'
    refused("config.json with a form feed as whitespace", ckpt(os.path.join(tmp, "ff"),
            config=ff), ["config.json", "not strict JSON", "byte 14"])

    idx = idx_text.replace(b'  "weight_map": {\n',
                           b'  "weight_map": {\n    "%s": "model-00002-of-00002.safetensors",\n'
                           % W.encode())
    src = ckpt(os.path.join(tmp, "dupidx"), index=idx)
    refused("index with a tensor mapped twice", src,
            ["model.safetensors.index.json", '"%s" appears twice' % W, "weight_map"])

    h, n = header_bytes({W: ("BF16", [32, 32])})
    h = h[:-1] + b', "__metadata__": {"format": "pt", "format": "mlx"}}'
    refused("shard header with __metadata__.format twice", ckpt(os.path.join(tmp, "dupmeta"),
            header=h, data_len=n), ["model.safetensors", "__metadata__",
                                    '"format" appears twice'])


def engine_files(tmp):
    """generate (the engine reads the checkpoint itself) refuses a key twice
    in each JSON file it reads, naming the file and the key."""
    base = os.path.join(tmp, "mk")
    rc, out = run("mkckpt", base, "--layers", "2", "--experts", "2", "--bf16-layers", "1-1")
    if not ok(rc == 0, "mkckpt of a small checkpoint with its tokenizer", out):
        return
    gen = ("generate", "-n", "2", "--prompt", "hi", "--temperature", "0", "--threads", "1",
           "--device", "cpu")
    rc, out = run(gen[0], base, *gen[1:])
    ok(rc == 0, "control: generate runs on it", out)
    cases = [("config.json", "num_hidden_layers", "99"),
             ("generation_config.json", "top_k", "1"),
             ("tokenizer.json", "model", "{}"),
             ("model.safetensors.index.json", "metadata", "{}")]
    for f, key, val in cases:
        d = os.path.join(tmp, "mk-" + f)
        os.makedirs(d)
        for g in os.listdir(base):
            if g != f:
                os.link(os.path.join(base, g), os.path.join(d, g))
        with open(os.path.join(base, f), "rb") as fh:
            text = fh.read()
        # the key written again, last: Python's json would read this value
        i = text.rindex(b"}")
        with open(os.path.join(d, f), "wb") as fh:
            fh.write(text[:i].rstrip() + b',\n  "%s": %s\n}\n' % (key.encode(), val.encode()))
        rc, out = run(gen[0], d, *gen[1:])
        ok(rc == 1 and f in out and '"%s" appears twice' % key in out,
           f"generate refuses {f} with \"{key}\" twice, naming both", out)


def hub_answers(tmp):
    """calib fetch reads the index as the hub sends it: a key twice is refused
    with the URL and the key named; the hub's X-Error-Message is printed with
    its control bytes escaped."""
    import http.server
    import threading
    index = (b'{"metadata": {"total_size": 8}, "weight_map": {\n'
             b'  "model.layers.0.mlp.down_proj.input_global_scale": "a.safetensors",\n'
             b'  "model.layers.0.mlp.down_proj.input_global_scale": "b.safetensors"}}\n')

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path.startswith("/org/dup/resolve/main/model.safetensors.index.json"):
                code, body, hdr = 200, index, []
            else:
                code, body = 404, b"Entry not found"
                hdr = [("X-Error-Message", "Entry \x1b[31mnot found\x1b[0m\rFAKE")]
            self.send_response(code)
            for k, v in hdr:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env["HF_ENDPOINT"] = f"http://127.0.0.1:{srv.server_address[1]}"
    env["HF_HOME"] = os.path.join(tmp, "hf-empty")        # no token file
    try:
        rc, out = run("calib", "fetch", "org/dup@main", "-o", os.path.join(tmp, "c1"), env=env)
        ok(rc == 1 and "model.safetensors.index.json" in out and
           '"model.layers.0.mlp.down_proj.input_global_scale" appears twice' in out,
           "calib fetch refuses the hub's index with a key twice, naming URL and key", out)
        rc, out = run("calib", "fetch", "org/gone@main", "-o", os.path.join(tmp, "c2"), env=env)
        ok(rc == 1 and "\x1b" not in out and "\r" not in out and "\\x1b[31mnot found" in out,
           "the hub's X-Error-Message comes out escaped", repr(out))
    finally:
        srv.shutdown()


def hub_repo(tmp, name):
    """HF_HUB_CACHE with models--org--NAME/{refs,snapshots/<hash>} (a good
    snapshot) and the environment that points at it."""
    hub = os.path.join(tmp, "hub-" + name)
    repo = os.path.join(hub, "models--org--" + name)
    snap = os.path.join(repo, "snapshots", "a" * 40)
    ckpt(snap)
    os.makedirs(os.path.join(repo, "refs"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env["HF_HUB_CACHE"] = hub
    return os.path.join(repo, "refs", "main"), env


def class6(tmp):
    name = "model.layers.0.\x1b[31mred\nfake line.weight"
    h, n = header_bytes({name: ("BF16", [4, 4])})
    h = h.replace(b"[4, 4]", b"[4, 5]")      # its offsets now span too few bytes
    out = refused("a tensor name with ESC [ and a newline (shape and offsets disagree)",
                  ckpt(os.path.join(tmp, "escname"), header=h, data_len=n),
                  ["model.safetensors", "\\x1b[31mred\\nfake line.weight"])
    ok("\x1b" not in out and "\nfake line" not in out,
       "... and no raw ESC or newline from the name reaches the output", repr(out))

    ref, env = hub_repo(tmp, "secret")
    with open(ref, "w") as f:
        f.write("a" * 40)
    rc, out = plan("org/secret", env=env)
    ok(rc == 0, "control: org/secret resolves through refs/main", out)
    os.unlink(ref)
    secret = os.path.join(tmp, "root-only")
    with open(secret, "w") as f:
        f.write("SECRET-FIRST-LINE hunter2\nmore\n")
    os.chmod(secret, 0o600)
    os.symlink(secret, ref)
    rc, out = plan("org/secret", env=env)
    ok(rc == 1 and "refs/main" in out and "not a commit hash" in out and "SECRET" not in out
       and "hunter2" not in out, "refs/main linking to a root-only file: refused, nothing of "
       "the file shown", out)
    os.unlink(ref)
    with open(ref, "wb") as f:
        f.write(b"\x1b]0;owned\x07\x1b[2J\rdeadbeef\n")
    rc, out = plan("org/secret", env=env)
    ok(rc == 1 and "not a commit hash" in out and "\x1b" not in out and "\r" not in out
       and "owned" not in out, "refs/main of control bytes: refused, none of them printed",
       repr(out))


def class8(tmp):
    src = ckpt(os.path.join(tmp, "zero"), tensors={W: ("BF16", [0, 32]),
                                                  "model.embed_tokens.weight": ("BF16", [8, 32])})
    refused("a [0, 32] weight under --scheme fp8-dynamic", src, ["zero-sized", W],
            absent=["multiple of"])
    src = ckpt(os.path.join(tmp, "zero2"), tensors={W: ("BF16", [32, 0])})
    rc, out = run("plan", src, "--scheme", "w4a16")
    ok(rc == 1 and "zero-sized" in out and "group size" not in out,
       "a [32, 0] weight under --scheme w4a16 (group 128): zero-sized, not a group-size fault",
       out)

    # the Laguna fix: layer 1's down_proj left in BF16 by an ignore rule, zero-sized
    lag = os.path.join(tmp, "laguna-zero")
    os.makedirs(lag)
    cfg = {"architectures": ["LagunaForCausalLM"], "model_type": "laguna",
           "quantization_config": {"quant_method": "compressed-tensors",
                                   "format": "nvfp4-pack-quantized",
                                   "config_groups": {"group_0": {"targets": ["Linear"]}},
                                   "ignore": ["lm_head", "re:^model\\.layers\\.1\\.mlp\\..*$"]}}
    with open(os.path.join(lag, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    p0 = "model.layers.0.mlp.down_proj."
    size = {"BF16": 2, "U8": 1, "F8_E4M3": 1, "F32": 4}
    ts = {p0 + "weight_packed": ("U8", [32, 16]), p0 + "weight_scale": ("F8_E4M3", [32, 2]),
          p0 + "weight_global_scale": ("F32", [1]), p0 + "input_global_scale": ("F32", [1]),
          "model.layers.1.mlp.down_proj.weight": ("BF16", [0, 32])}
    h, off = {}, 0
    for k, (dt, sh) in ts.items():
        n = size[dt] * (sh[0] * (sh[1] if len(sh) > 1 else 1))
        h[k] = {"dtype": dt, "shape": sh, "data_offsets": [off, off + n]}
        off += n
    write_st(os.path.join(lag, "model.safetensors"), json.dumps(h).encode(), off)
    cal = os.path.join(tmp, "cal.safetensors")
    ch = {f"model.layers.{i}.mlp.down_proj.input_global_scale":
          {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i in (0, 1)}
    write_st(cal, json.dumps(ch).encode(), 8)
    rc, out = run("plan", lag, "--calib", cal)
    ok(rc == 1 and "zero-sized" in out and "model.layers.1.mlp.down_proj.weight" in out
       and "laid out" not in out, "the Laguna fix: a [0, 32] BF16 weight is called zero-sized", out)

    ref, env = hub_repo(tmp, "fifo")
    os.mkfifo(ref)
    rc, out = plan("org/fifo", env=env)
    ok(rc == 1 and "refs/main is a FIFO" in out and "no refs/main" not in out,
       "refs/main that is a FIFO is reported as a FIFO", out)
    ref, env = hub_repo(tmp, "dir")
    os.mkdir(ref)
    rc, out = plan("org/dir", env=env)
    ok(rc == 1 and "refs/main is a directory" in out and "no refs/main" not in out,
       "refs/main that is a directory is reported as a directory", out)
    ref, env = hub_repo(tmp, "dangling")
    os.symlink(os.path.join(tmp, "nowhere"), ref)
    rc, out = plan("org/dangling", env=env)
    ok(rc == 1 and "symbolic link that cannot be followed" in out,
       "refs/main that is a dangling link is reported as one", out)


def main():
    tmp = tempfile.mkdtemp(prefix="rq-hostile3-")
    try:
        class1(tmp)
        engine_files(tmp)
        hub_answers(tmp)
        class6(tmp)
        class8(tmp)
    finally:
        rqtap.cleanup(tmp)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
