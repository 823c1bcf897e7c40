#!/usr/bin/env python3
"""`requantfs plan hf://ORG/NAME@REV` against a local hub: a Python http.server
on 127.0.0.1 that answers the hub's model API
(/api/models/{repo}/revision/{rev}?blobs=true: commit "sha", "siblings" with
sizes and LFS sha256) and /{repo}/resolve/{rev}/{file} with ranges (206,
redirected to a "CDN" path like the hub), serving mkckpt checkpoints at
commits. The plan of the remote SRC must equal the plan of the same files on
disk (same presented sizes, same JSON), having fetched only the small files
the plan reads and each shard's 8-byte length + header (every body byte and
range counted on the server: tests/hubsrv.py); a branch moved while the plan runs must not
mix revisions; a missing repo, a server ignoring Range, an LFS sha256 that
does not match and a gated repo fail naming the file and saying why.
TAP output. Usage: test_plan_hf.py REQUANTFS"""
import json, os, shutil, struct, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402
from hubsrv import Hub, start  # noqa: E402  (the local hub, shared)

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
C1, C2 = "1" * 39 + "a", "2" * 39 + "b"


def header_len(path):
    with open(path, "rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]


def plan_json(*args, env=None):
    rc, out = run("plan", *args, "--json", env=env)
    try:
        return rc, json.JSONDecoder().raw_decode(out[out.index("{"):])[0], out
    except ValueError:
        return rc, None, out


def same_plan(local, remote):
    a = {k: v for k, v in local.items() if k != "src"}
    b = {k: v for k, v in remote.items() if k not in ("src", "remote")}
    return a == b, json.dumps({k: (a.get(k), b.get(k)) for k in a if a.get(k) != b.get(k)})[:2000]


def main():
    rqtap.init(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="rq-plan-hf-")
    hub = Hub()
    srv, ep = start(hub)
    try:
        src, cal, src2 = (os.path.join(tmp, n) for n in ("src", "cal", "src2"))
        rc, out = run("mkckpt", src, "--calib-out", cal)
        ok(rc == 0, "mkckpt makes a checkpoint and its twin", out)
        rc, out = run("mkckpt", src2, "--layers", "2", "--dense", "--no-tokenizer")
        ok(rc == 0, "mkckpt makes a second, different checkpoint", out)
        tiny = os.path.join(ROOT, "tests", "data", "tiny", "llama")
        hub.repos["synthetic/ckpt"] = {"refs": {"main": C1, "moving": C1},
                                       "commits": {C1: src, C2: src2}}
        hub.repos["synthetic/tiny-llama"] = {"refs": {"main": C2}, "commits": {C2: tiny}}

        # 1. the Laguna fix: the remote plan is the local plan
        rc, loc, out = plan_json(src, "--calib", cal)
        ok(rc == 0 and loc, "plan of the local checkpoint", out)
        hub.reset()
        rc, rem, out = plan_json("hf://synthetic/ckpt", "--calib", cal, "--endpoint", ep)
        ok(rc == 0 and rem, "plan hf://synthetic/ckpt (main) runs", out)
        if loc and rem:
            same, diff = same_plan(loc, rem)
            ok(same, "plan hf:// equals plan of the local copy (sizes, files, modules, JSON)", diff)
            r = rem.get("remote", {})
            ok(rem["src"] == f"hf://synthetic/ckpt@{C1}" and r.get("commit") == C1,
               "main is pinned to its commit (src and remote.commit)", json.dumps(r))
            ok(r.get("cache_bytes") == loc["presented_bytes"],
               "cache bytes = presented bytes (what the mount holds, once)", json.dumps(r))
            shards = sum(os.path.getsize(os.path.join(src, n)) for n in os.listdir(src)
                         if n.endswith(".safetensors"))
            ok(shards <= r.get("download_bytes", -1) <= loc["source_bytes"],
               "download bytes (--remote-verify file): every SRC shard whole, at most SRC",
               json.dumps(r))
            ok(loc["weight_bytes_read"] <= r.get("download_bytes_verify_none", -1) <
               r.get("download_bytes", -1), "download bytes with --remote-verify none: at "
               "least the weights quantized, less than whole files", json.dumps(r))
        # only small files and headers came over the wire
        small = {"config.json", "model.safetensors.index.json"}
        bad = [x for x in hub.ranges
               if not (x[1] in small or (x[1].endswith(".safetensors") and
                                         x[3] < header_len(os.path.join(src, x[1]))))]
        allow = sum(header_len(os.path.join(src, n)) for n in os.listdir(src)
                    if n.endswith(".safetensors")) + \
            sum(os.path.getsize(os.path.join(src, n)) for n in small)
        total = sum(os.path.getsize(os.path.join(src, n)) for n in os.listdir(src))
        ok(not bad and hub.sent <= allow,
           f"fetched {hub.sent} of {total} bytes: only config, index and shard headers "
           f"(<= {allow})", "\n".join(map(str, bad[:20])))
        ok(all(x[0] == C1 for x in hub.ranges), "every resolve request used the commit, not main",
           "\n".join(map(str, hub.ranges[:10])))
        if rem:
            ok(rem["remote"]["plan_fetched_bytes"] >= hub.sent and
               rem["remote"]["plan_requests"] >= len(hub.ranges),
               "the plan reports what it fetched", json.dumps(rem["remote"]))

        # 2. the table says what a mount downloads and caches; HF_ENDPOINT as calib fetch
        env = dict(os.environ, HF_ENDPOINT=ep)
        rc, out = run("plan", "hf://synthetic/ckpt@main", "--calib", cal, env=env)
        ok(rc == 0 and "a mount downloads:" in out and "its cache holds:" in out and C1 in out,
           "plan hf:// (table, HF_ENDPOINT) prints download and cache bytes and the commit", out)

        # 3. a --scheme model
        rc, loc2, out = plan_json(tiny, "--scheme", "nvfp4a16")
        ok(rc == 0 and loc2, "plan of tests/data/tiny/llama --scheme nvfp4a16", out)
        hub.reset()
        rc, rem2, out = plan_json("hf://synthetic/tiny-llama", "--scheme", "nvfp4a16",
                                  "--endpoint", ep)
        ok(rc == 0 and rem2, "plan hf://synthetic/tiny-llama --scheme nvfp4a16 runs", out)
        if loc2 and rem2:
            same, diff = same_plan(loc2, rem2)
            ok(same, "--scheme: plan hf:// equals plan of the local copy", diff)
        hl = header_len(os.path.join(tiny, "model.safetensors"))
        ok(all(x[1] == "config.json" or x[3] < hl for x in hub.ranges),
           f"--scheme: only config.json and the {hl}-byte header fetched",
           "\n".join(map(str, hub.ranges)))

        # 4. pinning: main moves to another commit right after the API answered
        hub.reset(move_main=("synthetic/ckpt", C2))
        rc, rem3, out = plan_json("hf://synthetic/ckpt", "--calib", cal, "--endpoint", ep)
        ok(rc == 0 and rem3 and same_plan(loc, rem3)[0] and rem3["remote"]["commit"] == C1,
           "a branch moved during the plan does not mix revisions", out)
        ok(hub.ranges and all(x[0] == C1 for x in hub.ranges),
           "after the move, every read still asked for the pinned commit",
           "\n".join(map(str, hub.ranges[:10])))
        hub.reset()
        hub.repos["synthetic/ckpt"]["refs"]["main"] = C1
        rc, out = run("plan", f"hf://synthetic/ckpt@{C2}", "--scheme", "nvfp4a16",
                      "--endpoint", ep)
        ok(rc == 0 and f"@{C2}" in out, "a commit as REV is served as itself", out)

        # 5. export hf:// reads SRC through the same seam: the same bytes as export of
        # the local copy; each SRC file fetched whole once and sha256-checked before use
        # (issue 20: no unverified byte exported), so every SRC byte about once
        for label, rsrc, lsrc, args in (
                ("Laguna fix", "hf://synthetic/ckpt", src, ("--calib", cal)),
                ("--scheme", "hf://synthetic/tiny-llama", tiny, ("--scheme", "nvfp4a16"))):
            d_loc, d_rem = (os.path.join(tmp, f"exp-{label[:3]}-{k}") for k in ("loc", "rem"))
            rc, out = run("export", lsrc, d_loc, *args, "--no-cache", "--quiet")
            ok(rc == 0, f"{label}: export of the local copy", out)
            rc, pj, out = plan_json(rsrc, *args, "--endpoint", ep)
            hub.reset()
            rc, out = run("export", rsrc, d_rem, *args, "--no-cache", "--quiet",
                          "--endpoint", ep)
            ok(rc == 0, f"{label}: export {rsrc}", out)
            diff = [n for n in sorted(os.listdir(d_loc))
                    if not os.path.isfile(os.path.join(d_rem, n)) or
                    open(os.path.join(d_loc, n), "rb").read() !=
                    open(os.path.join(d_rem, n), "rb").read()]
            ok(rc == 0 and not diff and sorted(os.listdir(d_loc)) == sorted(os.listdir(d_rem)),
               f"{label}: export hf:// equals export of the local copy, byte for byte",
               "differ: " + " ".join(diff))
            lim = pj["source_bytes"] + pj["remote"]["plan_fetched_bytes"] if pj else 0
            ok(pj and pj["source_bytes"] <= hub.sent <= lim,
               f"{label}: fetched {hub.sent} bytes: each SRC byte once (whole files, "
               f"verified), <= {lim} with the plan's headers",
               json.dumps(pj and pj["remote"]))
        hub.reset()
        rc, out = run("export", "hf://synthetic/ckpt", os.path.join(tmp, "exp-link"), "--calib",
                      cal, "--link", "--no-cache", "--endpoint", ep)
        ok(rc == 2 and "remote" in out and "--link" in out and hub.sent == 0 and
           hub.api_sent == 0, "export --link of a remote SRC is a usage error, saying why, "
           "before anything is fetched", out)

        # 6. --calib hf://: the scales fetched as calib fetch does, the temp file removed
        hub.repos["synthetic/cal"] = {"refs": {"main": C2}, "commits": {C2: cal}}
        tdir = os.path.join(tmp, "tmpdir")
        os.mkdir(tdir)
        env = dict(os.environ, TMPDIR=tdir)
        rc, rem4, out = plan_json("hf://synthetic/ckpt", "--calib", "hf://synthetic/cal",
                                  "--endpoint", ep, env=env)
        ok(rc == 0 and rem4 and loc and same_plan(loc, rem4)[0] and not os.listdir(tdir),
           "--calib hf://: the same plan, no temporary file left", out)
        d_rem = os.path.join(tmp, "exp-calib-hf")
        rc, out = run("export", "hf://synthetic/ckpt", d_rem, "--calib", "hf://synthetic/cal",
                      "--no-cache", "--quiet", "--endpoint", ep, env=env)
        d_loc = os.path.join(tmp, "exp-Lag-loc")
        ok(rc == 0 and not os.listdir(tdir) and all(
            open(os.path.join(d_loc, n), "rb").read() == open(os.path.join(d_rem, n), "rb").read()
            for n in os.listdir(d_loc)), "export hf:// --calib hf:// equals the local export", out)
        rc, out = run("plan", src, "--calib", "hf://synthetic/nocal", "--endpoint", ep, env=env)
        ok(rc == 1 and "synthetic/nocal" in out and "404" in out and not os.listdir(tdir),
           "--calib hf:// of a missing repo: named, no temporary file left", out)

        # 7. errors, each named
        hub.reset()
        rc, out = run("plan", "hf://synthetic/nope", "--calib", cal, "--endpoint", ep)
        ok(rc == 1 and "no such repository" in out and "404" in out and "synthetic/nope" in out,
           "an unknown repo: exit 1, HTTP 404 and the repo named", out)
        rc, out = run("plan", "hf://synthetic/ckpt@nobranch", "--calib", cal, "--endpoint", ep)
        ok(rc == 1 and "nobranch" in out and "404" in out, "an unknown revision is named", out)
        hub.reset(ignore_range=True)
        rc, out = run("plan", "hf://synthetic/ckpt", "--calib", cal, "--endpoint", ep)
        ok(rc == 1 and "ignored the Range" in out and hub.sent < 1 << 20,
           "a server ignoring Range: refused, not downloaded whole", f"sent {hub.sent}\n{out}")
        hub.reset(bad_sha={"model.safetensors.index.json"})
        rc, out = run("plan", "hf://synthetic/ckpt", "--calib", cal, "--endpoint", ep)
        ok(rc == 1 and "sha256 mismatch" in out and "model.safetensors.index.json" in out,
           "an LFS sha256 mismatch fails naming the file", out)
        hub.reset(lie_size={"config.json"})
        rc, out = run("plan", "hf://synthetic/ckpt", "--calib", cal, "--endpoint", ep)
        ok(rc == 1 and "config.json" in out and "the model API listed" in out,
           "a file served with another size than listed fails naming it", out)
        hub.reset(token="hf_secretTestToken")
        env = dict(os.environ, HF_TOKEN="", HF_TOKEN_PATH=os.path.join(tmp, "no-token"))
        rc, out = run("plan", "hf://synthetic/ckpt", "--calib", cal, "--endpoint", ep, env=env)
        ok(rc == 1 and "401" in out and "HF_TOKEN" in out,
           "a gated repo without a token: refused, saying to set HF_TOKEN", out)
        env["HF_TOKEN"] = "hf_secretTestToken"
        rc, out = run("plan", "hf://synthetic/ckpt", "--calib", cal, "--endpoint", ep, env=env)
        ok(rc == 0, "the same repo with HF_TOKEN", out)
        rc, out = run("plan", "hf://nope", "--calib", cal, "--endpoint", ep)
        ok(rc == 1 and "hf://ORG/NAME" in out, "a malformed hf:// SRC says the form", out)
        rc, out = run("plan", src, "--calib", cal, "--endpoint", ep)
        ok(rc == 2 and "--endpoint" in out, "--endpoint without hf:// is a usage error", out)
    finally:
        srv.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
