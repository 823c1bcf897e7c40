#!/usr/bin/env python3
"""calib fetch against a local hub: a Python http.server on 127.0.0.1 that
serves mkckpt 07-22 twins in the hub's URL layout (/{repo}/resolve/{rev}/{file})
with Range (206 + Content-Range), and can demand a Bearer token, redirect to
another host name (a "CDN" that must not see the token), fail or stall a
request once (retries), trickle a body just above the stall limit (the
per-request deadline), or ignore Range (200 + the whole body: refused).
The fetched file must equal `calib extract` of the same twin byte for byte,
cost a tiny fraction of the twin's bytes, and be accepted by export.
TAP output. Usage: test_calib_fetch.py REQUANTFS"""
import http.server, json, os, re, shutil, struct, sys, tempfile, threading, time, urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402  (tests/rqtap.py: TAP lines, running the binary)
from rqtap import ok, run  # noqa: E402

REPO, REV = "synthetic/laguna-0722", "07614121b3"
DEFAULT_REPO = "poolside/Laguna-S-2.1-NVFP4"      # cmd_calib.c's default REPO@REV
TOKEN = "hf_requantfsTestToken123"


class Hub:
    """What the server does and what it saw. Files: ROOT/{repo}/resolve/{rev}/{file}."""

    def __init__(self, root):
        self.root = root
        self.lock = threading.Lock()
        self.reset()

    def reset(self, **kw):
        with self.lock:
            self.ignore_range = False
            self.token = None          # demanded Bearer token, or None
            self.redirect = False      # resolve URLs answer 302 -> http://localhost:PORT/cdn/...
            self.fail_once = set()     # resolve paths answered 503 once
            self.stall_once = set()    # resolve paths that hang 3 s once
            self.trickle = {}          # resolve path -> tries sent slowly (None: every try)
            self.trickle_chunk, self.trickle_every = 64, 0.25   # 256 B/s: above 1 B/s
            for k, v in kw.items():
                setattr(self, k, v)
            self.sent = 0              # body bytes written to the socket
            self.requests = 0
            self.statuses = []
            self.cdn_auth = []         # Authorization header seen by the CDN path, per request


def handler(hub):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like the hub

        def log_message(self, *a):
            pass

        def reply(self, code, body=b"", headers=(), slow=False):
            with hub.lock:
                hub.requests += 1
                hub.statuses.append(code)
            self.send_response(code)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.write(body, slow)

        def write(self, body, slow=False):
            step = hub.trickle_chunk if slow else 65536
            for i in range(0, len(body), step):
                try:
                    self.wfile.write(body[i:i + step])
                    if slow:
                        self.wfile.flush()
                        time.sleep(hub.trickle_every)
                except OSError:        # the client hung up (Range ignored: it must)
                    self.close_connection = True
                    return
                with hub.lock:
                    hub.sent += len(body[i:i + step])

        def serve(self, rel, slow=False):
            path = os.path.join(hub.root, rel)
            if ".." in rel.split("/") or not os.path.isfile(path):
                return self.reply(404, b"Entry not found", [("X-Error-Message", "Entry not found")])
            size = os.path.getsize(path)
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
            with open(path, "rb") as f:
                if not m or hub.ignore_range:
                    return self.reply(200, f.read(), slow=slow)
                a, b = int(m[1]), min(int(m[2]), size - 1)
                if a >= size:
                    return self.reply(416, b"", [("Content-Range", f"bytes */{size}")])
                f.seek(a)
                return self.reply(206, f.read(b - a + 1), [("Content-Range", f"bytes {a}-{b}/{size}")],
                                  slow=slow)

        def do_GET(self):
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            if path.startswith("/cdn/"):
                with hub.lock:
                    hub.cdn_auth.append(self.headers.get("Authorization"))
                return self.serve(path[len("/cdn/"):])
            rel = path.lstrip("/")
            if "/resolve/" not in rel:
                return self.reply(404, b"Repository not found")
            if hub.token is not None:
                auth = self.headers.get("Authorization")
                if auth is None:
                    return self.reply(401, b"", [("X-Error-Message", "Invalid credentials in Authorization header")])
                if auth != f"Bearer {hub.token}":
                    return self.reply(403, b"", [("X-Error-Message", "Access to this resource is restricted")])
            with hub.lock:
                fail = rel in hub.fail_once
                stall = rel in hub.stall_once
                hub.fail_once.discard(rel)
                hub.stall_once.discard(rel)
                slow = rel in hub.trickle
                if slow and hub.trickle[rel] is not None:
                    hub.trickle[rel] -= 1
                    if hub.trickle[rel] <= 0:
                        del hub.trickle[rel]
            if fail:
                return self.reply(503, b"busy, try again")
            if stall:
                time.sleep(3)
                self.close_connection = True
                return
            if hub.redirect:
                port = self.server.server_address[1]
                return self.reply(302, b"", [("Location", f"http://localhost:{port}/cdn/{rel}")])
            return self.serve(rel, slow)
    return H


def lay_out(root, repo, rev, src, drop=()):
    """The hub URL layout of directory src under root (symlinks, no copies)."""
    d = os.path.join(root, repo, "resolve", rev)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name in os.listdir(src):
        if name not in drop:
            os.symlink(os.path.abspath(os.path.join(src, name)), os.path.join(d, name))


def read(p):
    with open(p, "rb") as f:
        return f.read()


def dir_size(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def stat_bytes(out):
    """(requests, bytes) from fetch's summary line."""
    m = re.search(r"\((\d+) requests, (\d+) bytes", out)
    return (int(m[1]), int(m[2])) if m else (None, None)


def merge_shards(src, out):
    """Every tensor of src's shards in one safetensors file (data in name order)."""
    meta, blobs, at = {}, [], 0
    for s in sorted(f for f in os.listdir(src) if f.endswith(".safetensors")):
        with open(os.path.join(src, s), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            h = json.loads(f.read(n))
            data = f.read()
        for k, v in h.items():
            if k != "__metadata__":
                b, e = v["data_offsets"]
                blobs.append((k, v["dtype"], v["shape"], data[b:e]))
    for k, dt, shape, b in sorted(blobs):
        meta[k] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + len(b)]}
        at += len(b)
    hj = json.dumps(meta, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(b for *_, b in sorted(blobs)))


def scale_offsets(shard):
    """name -> absolute file offset of every input_global_scale in shard."""
    with open(shard, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    return {k: 8 + n + v["data_offsets"][0] for k, v in h.items()
            if k.endswith(".input_global_scale")}


def main():
    rqtap.init(sys.argv[1])
    env0 = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    tmp = tempfile.mkdtemp(prefix="rq-calib-fetch-")
    hf_home = os.path.join(tmp, "hf-home")     # no token file unless a test writes one
    os.makedirs(hf_home)
    env0["HF_HOME"] = hf_home
    root = os.path.join(tmp, "hub")
    hub = Hub(root)
    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            if not isinstance(sys.exc_info()[1], OSError):   # hang-ups are expected here
                super().handle_error(request, client_address)
    srv = Server(("127.0.0.1", 0), handler(hub))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    ep = f"http://127.0.0.1:{srv.server_address[1]}"

    def fetch(*args, env=None, repo=f"{REPO}@{REV}"):
        e = dict(env0, **(env or {}))
        return run("calib", "fetch", *([repo] if repo else []), *args, env=e, timeout=60)

    try:
        src, twin = os.path.join(tmp, "src"), os.path.join(tmp, "twin")
        rc, out = run("mkckpt", src, "--calib-out", twin)
        if not ok(rc == 0, "mkckpt makes a checkpoint and its 07-22 twin", out):
            return rqtap.finish()
        ref = os.path.join(tmp, "ref.safetensors")
        rc, out = run("calib", "extract", twin, "-o", ref)
        ok(rc == 0, "calib extract of the twin", out)
        lay_out(root, REPO, REV, twin)
        got = os.path.join(tmp, "got.safetensors")

        rc, out = fetch("-o", got, "--endpoint", ep)
        ok(rc == 0 and read(got) == read(ref), "calib fetch equals calib extract byte for byte", out)
        req, nb = stat_bytes(out)
        ok(req == hub.requests and nb == hub.sent,
           "the bytes and requests fetch reports are what the server sent",
           f"fetch: {req} requests {nb} bytes; server: {hub.requests} requests {hub.sent} bytes")
        ok(all(s == 206 for s in hub.statuses[1:]) and hub.statuses[:1] == [200],
           "the index whole, everything else by range (206)", hub.statuses)
        print(f"# tiny twin: {hub.sent} bytes in {hub.requests} requests of {dir_size(twin)} "
              f"bytes (the index alone is {os.path.getsize(os.path.join(twin, 'model.safetensors.index.json'))})")
        ok(not [f for f in os.listdir(tmp) if ".tmp." in f], "no temporary file left behind")

        # the default REPO@REV and $HF_ENDPOINT
        lay_out(root, DEFAULT_REPO, REV, twin)
        hub.reset()
        g2 = os.path.join(tmp, "got-default.safetensors")
        rc, out = fetch("-o", g2, env={"HF_ENDPOINT": ep + "/"}, repo=None)
        ok(rc == 0 and read(g2) == read(ref), f"default {DEFAULT_REPO}@{REV} from $HF_ENDPOINT", out)

        # usage errors
        rc, out = fetch("-o", got, repo="not a repo@x")
        ok(rc == 2, "a malformed REPO@REV is a usage error (exit 2)", out)
        rc, out = run("calib", "fetch", REPO)
        ok(rc == 2 and "usage" in out, "fetch without -o is a usage error", out)
        rc, out = run("calib", "fetch", "--help")
        ok(rc == 0 and "fetch" in out and DEFAULT_REPO in out, "calib fetch --help", out)

        # tokens: $HF_TOKEN, the token file, wrong and missing tokens
        hub.reset(token=TOKEN)
        rc, out = fetch("-o", got, "--endpoint", ep, env={"HF_TOKEN": TOKEN})
        ok(rc == 0 and read(got) == read(ref), "HF_TOKEN is sent as a Bearer token", out)
        rc, out = fetch("-o", got, "--endpoint", ep, env={"HF_TOKEN": "hf_wrong"})
        print("# " + out.strip().replace("\n", "\n# "))
        ok(rc == 1 and "403" in out and "resolve/" in out and "hf_wrong" not in out,
           "a wrong token: exit 1, HTTP 403 and the URL named, the token not shown", out)
        rc, out = fetch("-o", got, "--endpoint", ep)
        ok(rc == 1 and "401" in out and "no token was sent" in out and "HF_TOKEN" in out,
           "no token for a gated repository: HTTP 401, and how to give one", out)
        tf = os.path.join(tmp, "token-file")
        with open(tf, "w") as f:
            f.write(TOKEN + "\n")
        rc, out = fetch("-o", got, "--endpoint", ep, env={"HF_TOKEN_PATH": tf})
        ok(rc == 0 and read(got) == read(ref), "the token from $HF_TOKEN_PATH", out)
        with open(os.path.join(hf_home, "token"), "w") as f:
            f.write(TOKEN)
        rc, out = fetch("-o", got, "--endpoint", ep)
        ok(rc == 0 and read(got) == read(ref), "the token from $HF_HOME/token (huggingface_hub's file)", out)
        os.unlink(os.path.join(hf_home, "token"))

        # redirects to another host: Range goes along, the token does not
        hub.reset(token=TOKEN, redirect=True)
        rc, out = fetch("-o", got, "--endpoint", ep, env={"HF_TOKEN": TOKEN})
        ok(rc == 0 and read(got) == read(ref), "redirects (302 to another host name) are followed", out)
        ok(hub.cdn_auth and all(a is None for a in hub.cdn_auth),
           "the token is not sent to the redirect's host", hub.cdn_auth[:5])

        # retries: a 503 on the index and on a shard, then a stalled request
        shard = sorted(f for f in os.listdir(twin) if f.endswith(".safetensors"))[0]
        base = f"{REPO}/resolve/{REV}/"
        hub.reset(fail_once={base + "model.safetensors.index.json", base + shard})
        t0 = time.time()
        rc, out = fetch("-o", got, "--endpoint", ep)
        ok(rc == 0 and read(got) == read(ref) and hub.statuses.count(503) == 2,
           f"two 503s are retried with back-off ({time.time() - t0:.1f} s)", f"{out}\n{hub.statuses}")
        hub.reset(stall_once={base + "model.safetensors.index.json"})
        t0 = time.time()
        rc, out = fetch("-o", got, "--endpoint", ep, env={"HF_HUB_DOWNLOAD_TIMEOUT": "1"})
        dt = time.time() - t0
        ok(rc == 0 and read(got) == read(ref) and dt < 10,
           f"a stalled request times out (HF_HUB_DOWNLOAD_TIMEOUT=1) and is retried ({dt:.1f} s)", out)

        # a server that trickles just above the stall limit (256 B/s > 1 B/s): each try has
        # a deadline of HF_HUB_DOWNLOAD_TIMEOUT + bytes / REQUANTFS_HUB_MIN_RATE, then retries
        slow_env = {"HF_HUB_DOWNLOAD_TIMEOUT": "1", "REQUANTFS_HUB_MIN_RATE": "1M"}
        hub.reset(trickle={base + "model.safetensors.index.json": 1})
        t0 = time.time()
        rc, out = fetch("-o", got, "--endpoint", ep, env=slow_env)
        dt = time.time() - t0
        isize = os.path.getsize(os.path.join(twin, "model.safetensors.index.json"))
        ok(rc == 0 and read(got) == read(ref) and dt < 15,
           f"a whole file ({isize} bytes) trickled at 256 B/s overruns its deadline (1 s + "
           f"{isize} B at 1 MiB/s), is retried and fetched ({dt:.1f} s; "
           f"{isize / 256:.0f} s without a deadline)", out)
        hub.reset(trickle={base + shard: None})
        t0 = time.time()
        rc, out = fetch("-o", got + "-slow", "--endpoint", ep, env=slow_env)
        dt = time.time() - t0
        print("# " + out.strip().replace("\n", "\n# "))
        ok(rc == 1 and shard in out and "too slow" in out and "past the deadline" in out and
           "4 tries" in out and "REQUANTFS_HUB_MIN_RATE" in out and dt < 30 and
           not os.path.exists(got + "-slow"),
           f"a shard's ranges trickled on every try: a clear error naming the file, the deadline "
           f"and the setting, after 4 tries ({dt:.1f} s)", out)
        rc, out = fetch("-o", got, "--endpoint", ep, env={"REQUANTFS_HUB_MIN_RATE": "fast"})
        ok(rc == 1 and "REQUANTFS_HUB_MIN_RATE='fast'" in out, "a bad REQUANTFS_HUB_MIN_RATE is named",
           out)

        # a server that ignores Range
        hub.reset(ignore_range=True)
        rc, out = fetch("-o", got + "-nr", "--endpoint", ep)
        m = re.search(r"aborted after (\d+) body bytes", out)
        ok(rc == 1 and "ignored the Range request" in out and "refusing to download the whole file" in out
           and m and int(m[1]) < 65536 and not os.path.exists(got + "-nr"),
           "a server that ignores Range: refused clearly, having read little", out)

        # a shard the index names is missing (404 names the file)
        lay_out(root, REPO, REV, twin, drop=(shard,))
        hub.reset()
        rc, out = fetch("-o", got + "-404", "--endpoint", ep)
        ok(rc == 1 and "404" in out and shard in out, "a missing shard: HTTP 404 naming the file", out)
        lay_out(root, REPO, REV, twin)

        # bad values: NaN and negative scales are refused with the tensor named
        for label, val in (("NaN", float("nan")), ("negative", -0.5)):
            bad = os.path.join(tmp, f"twin-{label}")
            shutil.copytree(twin, bad)
            name, off = sorted(scale_offsets(os.path.join(bad, shard)).items())[0]
            with open(os.path.join(bad, shard), "r+b") as f:
                f.seek(off)
                f.write(struct.pack("<f", val))
            lay_out(root, "synthetic/bad", label, bad)
            hub.reset()
            rc, out = fetch("-o", got + "-bad", "--endpoint", ep, repo=f"synthetic/bad@{label}")
            ok(rc == 1 and name in out and "finite and positive" in out,
               f"a {label} scale is refused with the tensor named", out)

        # a one-file checkpoint (no index): the twin's tensors in one model.safetensors
        d = os.path.join(root, "synthetic/one", "resolve", "main")
        os.makedirs(d)
        one = os.path.join(d, "model.safetensors")
        merge_shards(twin, one)
        ref1 = os.path.join(tmp, "ref-one.safetensors")
        rc1, out1 = run("calib", "extract", one, "-o", ref1)
        rc, out = fetch("-o", got + "-one", "--endpoint", ep, repo="synthetic/one")
        ok(rc == 0 and rc1 == 0 and read(got + "-one") == read(ref1) == read(ref),
           "no index: every scale of model.safetensors (REV main by default)", out + out1)

        # the mount's export accepts the fetched file: same bytes as with the twin
        rc, out = fetch("-o", got, "--endpoint", ep)
        d1, d2 = os.path.join(tmp, "dst-twin"), os.path.join(tmp, "dst-fetched")
        rc1, out1 = run("export", src, d1, "--calib", twin, "--quiet")
        rc2, out2 = run("export", src, d2, "--calib", got, "--quiet")
        same = rc1 == 0 and rc2 == 0 and sorted(os.listdir(d1)) == sorted(os.listdir(d2)) and all(
            read(os.path.join(d1, f)) == read(os.path.join(d2, f)) for f in os.listdir(d1))
        ok(same, "export --calib FETCHED equals export --calib TWIN", out1 + out2)
        for dd in (d1, d2, os.path.join(tmp, "twin-NaN"), os.path.join(tmp, "twin-negative")):
            shutil.rmtree(dd, ignore_errors=True)

        # real widths: the bytes read are a tiny fraction of the checkpoint
        bsrc, big = os.path.join(tmp, "src-big"), os.path.join(tmp, "twin-big")
        rc, out = run("mkckpt", bsrc, "--calib-out", big, "--real-dims", "--experts", "2",
                      "--top-k", "1", "--no-tokenizer")
        shutil.rmtree(bsrc, ignore_errors=True)
        if ok(rc == 0, "mkckpt --real-dims twin", out):
            refb = os.path.join(tmp, "ref-big.safetensors")
            rcb, outb = run("calib", "extract", big, "-o", refb)
            lay_out(root, "synthetic/big", REV, big)
            hub.reset()
            rc, out = fetch("-o", got + "-big", "--endpoint", ep, repo=f"synthetic/big@{REV}")
            total = dir_size(big)
            ok(rc == 0 and rcb == 0 and read(got + "-big") == read(refb),
               "real widths: calib fetch equals calib extract", out + outb)
            print(f"# real-width twin: {hub.sent} bytes in {hub.requests} requests of {total} bytes "
                  f"({100.0 * hub.sent / total:.4f} %)")
            ok(hub.sent < total / 100, "fewer than 1 % of the twin's bytes are transferred",
               f"{hub.sent} of {total}")
            with open(os.path.join(big, "model.safetensors.index.json")) as f:
                wm = json.load(f)["weight_map"]
            first = next(v for k, v in wm.items() if k.endswith(".input_global_scale"))
            fsize = os.path.getsize(os.path.join(big, first))
            isize = os.path.getsize(os.path.join(big, "model.safetensors.index.json"))
            hub.reset(ignore_range=True)
            rc, out = fetch("-o", got + "-bignr", "--endpoint", ep, repo=f"synthetic/big@{REV}")
            time.sleep(0.5)   # let the server notice the hang-up
            pushed = hub.sent - isize
            print(f"# Range ignored: the server pushed {pushed} bytes of {first} ({fsize} bytes) "
                  f"into the socket before the hang-up")
            ok(rc == 1 and "ignored the Range" in out and pushed < fsize / 4,
               "Range ignored on real widths: aborted long before the shard's end",
               f"{out}\npushed {pushed} of {fsize}")
    finally:
        srv.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
