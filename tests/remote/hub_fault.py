#!/usr/bin/env python3
"""A hub that misbehaves on demand, for tests/remote/test_rstore.c.

Two HTTP/1.1 servers on 127.0.0.1, as the hub and its CDN:
  hub  /{org}/{name}/resolve/{commit}/{file}  -> 302 to the CDN (like the hub)
       /api/models/{org}/{name}/revision/{rev}?blobs=true -> {"sha", "siblings"}
       /_ctl/set?key=value&...   arm faults (below); /_ctl/reset; /_ctl/stats (JSON)
  cdn  /cdn/{org}/{name}/{commit}/{file}      the bytes: Range -> 206 (+ ETag)
Every file lives in DIR (argv[1]); repo and commit are not checked beyond the
layout. Prints "HUBPORT CDNPORT" on stdout, then serves until stdin closes.

Faults, each a count of CDN range answers it spoils (the next N):
  drop     close the connection without an answer
  e500     HTTP 500                e429   HTTP 429 with Retry-After: 1
  stall    headers and half the body, then silence for 30 s (a deadline fault)
  short    headers, half the body, then close
  ignore   HTTP 200 with the whole file (Range ignored)
  wrong    the right headers and length, wrong bytes (first byte flipped)
  wrong_file   restricts `wrong` to that file name
  hang     1: every CDN answer waits until hang is 0 again (or 60 s)
  delay_ms every answer first sleeps this long
Stats: "ranges": [[file, first, last], ...] of 206 answers about to be sent whole,
"bytes": their body bytes, "active": CDN requests being answered, "maxconc": the most requests in their delay_ms at once."""
import hashlib, http.server, json, os, re, sys, threading, time, urllib.parse

DIR = sys.argv[1]
lock = threading.Lock()
state = {}
FAULTS = ("drop", "e500", "e429", "stall", "short", "ignore", "wrong")


def reset():
    with lock:
        conc = state.get("conc", 0)            # requests still running keep counting
        active = state.get("active", 0)
        state.clear()
        state.update({k: 0 for k in FAULTS})
        state.update(hang=0, delay_ms=0, wrong_file="", ranges=[], bytes=0, conc=conc, maxconc=0, active=active,
                     faults_served=0)


def take(fault, name):
    """Consumes one count of fault if armed (for name, when it is `wrong`)."""
    with lock:
        if state[fault] <= 0 or (fault == "wrong" and state["wrong_file"] and
                                 state["wrong_file"] != name):
            return False
        state[fault] -= 1
        state["faults_served"] += 1
        return True


class Base(http.server.BaseHTTPRequestHandler):
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


class Hub(Base):
    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(u.path)
        if path.startswith("/_ctl/"):
            q = dict(urllib.parse.parse_qsl(u.query))
            if path == "/_ctl/reset":
                reset()
            elif path == "/_ctl/set":
                with lock:
                    for k, v in q.items():
                        state[k] = v if k == "wrong_file" else int(v)
            with lock:
                body = json.dumps({k: v for k, v in state.items()}).encode()
            return self.reply(200, body)
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/(.+)", path)
        if m:
            sib = []
            for n in sorted(os.listdir(DIR)):
                with open(os.path.join(DIR, n), "rb") as f:
                    d = f.read()
                sib.append({"rfilename": n, "size": len(d),
                            "lfs": {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}})
            return self.reply(200, json.dumps({"sha": m[2], "siblings": sib}).encode())
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            cdn = self.server.cdn_port
            return self.reply(302, b"", [("Location", f"http://127.0.0.1:{cdn}/cdn/{m[1]}/{m[2]}/"
                                          f"{urllib.parse.quote(m[3])}")])
        self.reply(404, b"not found")


class Cdn(Base):
    def do_GET(self):
        with lock:
            state["active"] += 1
        try:
            self.serve()
        finally:
            with lock:
                state["active"] -= 1

    def serve(self):
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        m = re.fullmatch(r"/cdn/([^/]+/[^/]+)/([0-9a-f]{40})/(.+)", path)
        p = os.path.join(DIR, m[3]) if m else None
        if not p or "/" in m[3] or not os.path.isfile(p):
            return self.reply(404, b"Entry not found", [("X-Error-Message", "Entry not found")])
        name = m[3]
        with open(p, "rb") as f:
            data = f.read()
        r = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        with lock:
            delay = state["delay_ms"]
        if delay:   # counted while asleep: no client can have its answer yet
            with lock:
                state["conc"] += 1
                state["maxconc"] = max(state["maxconc"], state["conc"])
            time.sleep(delay / 1000)
            with lock:
                state["conc"] -= 1
        t_end = time.time() + 60
        while time.time() < t_end:
            with lock:
                if not state["hang"]:
                    break
            time.sleep(0.02)
        if not r:
            return self.reply(200, data)
        a, b = int(r[1]), min(int(r[2]), len(data) - 1)
        body = data[a:b + 1]
        hdr = [("Content-Range", f"bytes {a}-{b}/{len(data)}"), ("ETag", f'"{name}"')]
        if take("drop", name):
            self.close_connection = True
            return
        if take("e500", name):
            return self.reply(500, b"internal error (injected)")
        if take("e429", name):
            return self.reply(429, b"slow down (injected)", [("Retry-After", "1")])
        if take("ignore", name):
            return self.reply(200, data)
        for fault in ("stall", "short"):
            if take(fault, name):
                self.send_response(206)
                for k, v in hdr:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body[:len(body) // 2])
                    self.wfile.flush()
                    if fault == "stall":   # not "active": a reset need not wait for it
                        with lock:
                            state["active"] -= 1
                        time.sleep(30)
                        with lock:
                            state["active"] += 1
                except OSError:
                    pass
                self.close_connection = True
                return
        if take("wrong", name):
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        with lock:   # counted before the answer: a reset after it never sees a straggler
            state["ranges"].append([name, a, b])
            state["bytes"] += len(body)
        self.reply(206, body, hdr)


def main():
    reset()
    cdn = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Cdn)
    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    for s in (cdn, hub):
        s.daemon_threads = True
        s.handle_error = lambda *a: None      # clients hang up on purpose
        threading.Thread(target=s.serve_forever, daemon=True).start()
    hub.cdn_port = cdn.server_address[1]
    print(hub.server_address[1], cdn.server_address[1], flush=True)
    sys.stdin.read()                           # the test closes its end: we are done


if __name__ == "__main__":
    main()
