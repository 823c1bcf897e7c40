"""A local imitation of the Hugging Face hub for tests (shared by tests/fs):
a Python http.server on 127.0.0.1 answering the model API
(/api/models/{repo}/revision/{rev}?blobs=true: commit "sha", "siblings" with
sizes, blob ids and LFS sha256) and /{repo}/resolve/{rev}/{file} with ranges
(206, redirected to a "CDN" path at the commit on a second port and host name,
localhost instead of 127.0.0.1, as the hub sends its CDN's; hub.cdn_auth keeps
the Authorization header of every CDN request: a token must never reach it), serving
checkpoint directories at commits. Every body byte and range is counted;
faults are injected with Hub.reset(fail=STATUS) or fail_after=BYTES, stall=S
(stall_file=NAME: that file only; stall_from=B: its ranges reaching byte B), wrong={NAME: N} (wrong bytes; wrong_from=B: the
byte at B or the first after it, so reads of a header before B stay right),
wrong_head=NAME (a valid header that is not the file's); no_lfs, no_blob: names listed
without "lfs" or "blobId"; extra={NAME: BYTES}: more siblings, served from memory (names
no directory holds: "..", ".", "a\\b", "x\0y"); claim_size={NAME: N}: NAME listed at N bytes
(served as it is: a range past its end answers 416 with "Content-Range: bytes */SIZE", as real
servers do).

    hub = Hub(); hub.repos["org/name"] = {"refs": {"main": C}, "commits": {C: dir}}
    srv, endpoint = start(hub) ... srv.shutdown()
(the server of tests/fs/test_plan_hf.py, with faults)"""
import hashlib, http.server, json, os, re, threading, time
import urllib.parse


class Hub:
    """repos: repo -> {"refs": {branch: commit}, "commits": {commit: dir}}."""

    def __init__(self):
        self.lock = threading.Lock()
        self.repos = {}
        self.reset()

    def reset(self, **kw):
        with self.lock:
            self.ignore_range = False
            self.token = None          # demanded Bearer token
            self.forbid = False        # API and resolve answer 403 (gated, no access)
            self.bad_sha = set()       # file names whose listed LFS sha256 is wrong
            self.lie_size = set()      # file names listed one byte shorter than served
            self.no_lfs = set()        # file names listed without "lfs" (plain git: blob id)
            self.no_blob = set()       # file names listed without "blobId"
            self.claim_size = {}       # file name -> the size the model API lists it at
            self.move_main = None      # (repo, commit): main moves there after the API answers
            self.extra = {}            # name -> bytes: siblings listed after the directory's
            self.fail = 0              # resolve/CDN answers: 0 serve, else this HTTP status
            self.fail_after = None     # body bytes served before fail turns on by itself
            self.stall = 0             # seconds every resolve/CDN answer waits first
            self.cut = False           # ranges: the headers and half the body, then hang up
            self.stall_file = None     # stall only answers of this file name
            self.stall_from = None     # ... and only ranges reaching this byte (a shard's
                                       # header read by range before it is not stalled)
            self.stalled = []          # file names of the answers stalled (counted first)
            self.wrong = {}            # file name -> range answers of it spoiled (their first
                                       # byte flipped), counted down
            self.wrong_from = 0        # ... the first byte at or past this offset flipped
                                       # instead (answers ending before it kept, not counted)
            self.wrong_head = None     # file name: the range of its header JSON (from byte 8)
                                       # answered with its last space made a tab: still valid
                                       # JSON, but not the file's bytes
            for k, v in kw.items():
                setattr(self, k, v)
            self.sent = 0              # body bytes of resolve answers
            self.api_sent = 0
            self.ranges = []           # (rev, file, first, last) of each resolve answer
            self.cdn_auth = []         # the Authorization header (or None) of each CDN request

    def commit_dir(self, repo, rev):
        r = self.repos.get(repo)
        if not r:
            return None, None
        c = r["refs"].get(rev, rev)
        return c, r["commits"].get(c)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def git_blob_id(path):
    """git's blob id of a file: sha1 of "blob <size>\\0" + its bytes."""
    with open(path, "rb") as f:
        b = f.read()
    return hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest()


def handler(hub, cdn=False):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, code, body=b"", headers=()):
            self.send_response(code)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                self.close_connection = True
            return len(body)

        def api(self, repo, rev):
            c, d = hub.commit_dir(repo, rev)
            if d is None:
                return self.reply(404, b'{"error":"Repository not found"}',
                                  [("X-Error-Message", "Repository not found")])
            sib = []
            for name in sorted(os.listdir(d)):
                p = os.path.join(d, name)
                e = {"rfilename": name, "size": os.path.getsize(p) - (name in hub.lie_size),
                     "blobId": git_blob_id(p)}
                e["size"] = hub.claim_size.get(name, e["size"])
                if name in hub.no_blob:
                    del e["blobId"]
                if (name.endswith(".safetensors") or name.endswith(".index.json")) and \
                        name not in hub.no_lfs:
                    sha = sha256_of(p)
                    if name in hub.bad_sha:
                        sha = hashlib.sha256(b"not this").hexdigest()
                    e["lfs"] = {"sha256": sha, "size": e["size"], "pointerSize": 134}
                sib.append(e)
            sib.append({"rfilename": "original/params.json", "size": 2})
            sib += [{"rfilename": n, "size": len(b)} for n, b in hub.extra.items()]
            body = json.dumps({"id": repo, "sha": c, "siblings": sib}).encode()
            with hub.lock:
                hub.api_sent += len(body)
                mv = hub.move_main
                if mv and mv[0] == repo:
                    hub.repos[repo]["refs"]["main"] = mv[1]
            self.reply(200, body)

        def serve(self, repo, rev, name):
            with hub.lock:
                if hub.fail_after is not None and hub.sent >= hub.fail_after and not hub.fail:
                    hub.fail = 503
                fail, stall = hub.fail, hub.stall
                if hub.stall_file is not None and hub.stall_file != name:
                    stall = 0
                r = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
                if hub.stall_from is not None and r and int(r[2]) < hub.stall_from:
                    stall = 0
                if stall:
                    hub.stalled.append(name)
            if stall:
                time.sleep(stall)
            if fail:
                return self.reply(fail, b"injected fault", [("Retry-After", "0")])
            c, d = hub.commit_dir(repo, rev)
            if d and name in hub.extra:
                return self.reply(200, hub.extra[name])
            path = os.path.join(d, name) if d else None
            if not path or "/" in name or not os.path.isfile(path):
                return self.reply(404, b"Entry not found", [("X-Error-Message", "Entry not found")])
            size = os.path.getsize(path)
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
            with open(path, "rb") as f:
                if not m or hub.ignore_range:
                    return self.reply(200, f.read())
                a, b = int(m[1]), min(int(m[2]), size - 1)
                if a >= size:          # not satisfiable: the size said, as real servers do
                    n = self.reply(416, b"", [("Content-Range", f"bytes */{size}")])
                    with hub.lock:
                        hub.ranges.append((rev, name, a, int(m[2])))
                    return
                f.seek(a)
                if hub.cut:            # a connection dropped mid-body
                    body = f.read(b - a + 1)
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {a}-{b}/{size}")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    try:
                        self.wfile.write(body[:len(body) // 2])
                        self.wfile.flush()
                    except OSError:
                        pass
                    self.close_connection = True
                    with hub.lock:
                        hub.sent += len(body) // 2
                        hub.ranges.append((rev, name, a, b))
                    return
                body = f.read(b - a + 1)
                with hub.lock:
                    k = max(hub.wrong_from - a, 0)
                    if hub.wrong.get(name, 0) > 0 and k < len(body):
                        hub.wrong[name] -= 1
                        body = body[:k] + bytes([body[k] ^ 0xFF]) + body[k + 1:]
                    if name == hub.wrong_head and a == 8 and body.endswith(b" "):
                        body = body[:-1] + b"\t"
                n = self.reply(206, body, [("Content-Range", f"bytes {a}-{b}/{size}"),
                                                        ("ETag", f'"{c}-{name}"')])
            with hub.lock:
                hub.sent += n
                hub.ranges.append((rev, name, a, b))

        def do_GET(self):
            u = urllib.parse.urlsplit(self.path)
            path = urllib.parse.unquote(u.path)
            if path.startswith("/cdn/") != cdn:   # each server answers only its part
                return self.reply(404, b"not found on this server")
            if cdn:
                with hub.lock:
                    hub.cdn_auth.append(self.headers.get("Authorization"))
            if hub.token is not None and not path.startswith("/cdn/") and \
                    self.headers.get("Authorization") != f"Bearer {hub.token}":
                return self.reply(401, b"", [("X-Error-Message", "Invalid credentials")])
            if hub.forbid and not path.startswith("/cdn/"):
                return self.reply(403, b"", [("X-Error-Message", "Access to this model is "
                                              "restricted")])
            m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/(.+)", path)
            if m:
                if "blobs=true" not in u.query:
                    return self.reply(400, b"test hub: ask with ?blobs=true")
                return self.api(m[1], m[2])
            m = re.fullmatch(r"/cdn/([^/]+/[^/]+)/([^/]+)/(.+)", path)
            if m:
                return self.serve(m[1], m[2], m[3])
            m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
            if m:   # the hub redirects resolve URLs to its CDN, at the commit
                c, d = hub.commit_dir(m[1], m[2])
                if d is None:
                    return self.reply(404, b"Revision not found")
                return self.reply(302, b"", [("Location", f"http://localhost:{hub.cdn_port}/cdn/{m[1]}/"
                                              f"{c}/{urllib.parse.quote(m[3])}")])
            self.reply(404, b"not found")
    return H


class Servers:
    """The hub's server and its CDN's; shutdown() stops both and closes their
    sockets (the hub gone: connections refused), once however often called."""

    def __init__(self, *srvs):
        self.srvs = list(srvs)

    def shutdown(self):
        while self.srvs:
            s = self.srvs.pop()
            s.shutdown()
            s.server_close()

    server_close = shutdown


def start(hub):
    """Threaded servers for hub on 127.0.0.1 (ephemeral ports), the hub's and
    the CDN's its resolve answers redirect to: (servers, endpoint)."""
    srvs = []
    for cdn in (False, True):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler(hub, cdn))
        srv.daemon_threads = True
        srv.handle_error = lambda *a: None     # clients hanging up are expected
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        srvs.append(srv)
    hub.cdn_port = srvs[1].server_address[1]
    return Servers(*srvs), f"http://127.0.0.1:{srvs[0].server_address[1]}"
