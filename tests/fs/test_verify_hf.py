#!/usr/bin/env python3
"""`requantfs verify` with hf:// sides against a local hub (tests/hubsrv.py,
which counts every range it answers): the tensors' reads are coalesced
(offline/vread.h), so a whole checkpoint costs a few requests per shard (its
header, then spans of up to 64 MiB), never one per tensor, and no byte is
fetched twice:
  - hf:// DIR against a local REF, a local DIR against hf:// REF, both hf://,
    and hf:// REF + --source hf:// with --tensors: the same verdicts as the
    local verify; requests and bytes counted and bounded;
  - the request count verify prints equals what the server counted.
Stdlib only. TAP output. Usage: test_verify_hf.py REQUANTFS"""
import os, re, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hfmount  # noqa: E402
from rqtap import ok, run  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
C1, C2, C3 = "4" * 39 + "d", "5" * 39 + "e", "6" * 39 + "f"


def shards(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".safetensors"))


def size_of(d, names):
    return sum(os.path.getsize(os.path.join(d, n)) for n in names)


def split(ranges):
    """(header requests, data requests): a shard's header is read as bytes 0-7 then
    8-(8+N-1); every other range of a .safetensors file is tensor data."""
    head = [r for r in ranges if r[1].endswith(".safetensors") and (r[2] == 0 and r[3] == 7 or
                                                                    r[2] == 8)]
    data = [r for r in ranges if r[1].endswith(".safetensors") and r not in head]
    return head, data


def printed(out):
    """Requests verify says it made, over its hf:// sides."""
    return sum(int(m) for m in re.findall(r"read in (\d+) range requests", out))


def body(T, hub, ep):
    tmp = T["tmp"]
    tiny = os.path.join(ROOT, "tests", "data", "tiny", "llama")
    ref = os.path.join(tmp, "ref")
    rc, out = run("export", T["src"], ref, "--calib", T["cal"], "--no-cache", "--quiet")
    ok(rc == 0, "export of the local checkpoint (REF)", out)
    hub.repos["synthetic/ckpt"] = {"refs": {"main": C1}, "commits": {C1: T["src"]}}
    hub.repos["synthetic/ref"] = {"refs": {"main": C2}, "commits": {C2: ref}}
    hub.repos["synthetic/tiny"] = {"refs": {"main": C3}, "commits": {C3: tiny}}
    ns, nr = len(shards(T["src"])), len(shards(ref))
    src_bytes, ref_bytes = size_of(T["src"], os.listdir(T["src"])), size_of(ref, os.listdir(ref))

    def verify(*args):
        hub.reset()
        t = time.monotonic()
        rc, out = run("verify", *args, "--endpoint", ep, timeout=300)
        return rc, out, time.monotonic() - t

    # the local verdict, to compare with
    rc, local = run("verify", T["src"], "--against", ref, "--quiet")
    lsum = [l for l in local.splitlines() if l.startswith(("summary:", "recipe:"))]
    ok(rc == 0 and len(lsum) == 2, "verify SRC --against REF on disk (the verdict to match)",
       local[-800:])

    rc, out, dt = verify("hf://synthetic/tiny", "--against", tiny)
    head, data = split(hub.ranges)
    ok(rc == 0 and " 0 differ" in out and len(data) == 1,
       f"verify hf://tiny --against its local copy: every tensor equal, their bytes in "
       f"{len(data)} request ({len(hub.ranges)} with the header, {dt:.2f} s)", out[-800:])

    rc, out, dt = verify("hf://synthetic/ckpt", "--against", ref, "--quiet")
    head, data = split(hub.ranges)
    got = [l for l in out.splitlines() if l.startswith(("summary:", "recipe:"))]
    ok(rc == 0 and got == lsum, f"verify hf://SRC --against REF: the local verdict ({dt:.2f} s)",
       out[-800:])
    ok(len(data) <= ns and len(head) <= 2 * ns and hub.sent <= src_bytes,
       f"hf:// DIR: {len(data)} data requests for {ns} shards (+ {len(head)} for headers), "
       f"{hub.sent} bytes of {src_bytes}: coalesced, nothing fetched twice",
       "\n".join(map(str, hub.ranges[:40])))
    ok(printed(out) == len(data), f"verify says {printed(out)} requests: the server counted "
       f"{len(data)}", out[-300:])

    rc, out, dt = verify(T["src"], "--against", "hf://synthetic/ref", "--quiet")
    head, data = split(hub.ranges)
    got = [l for l in out.splitlines() if l.startswith(("summary:", "recipe:"))]
    ok(rc == 0 and got == lsum and len(data) <= nr and hub.sent <= ref_bytes,
       f"verify SRC --against hf://REF: the local verdict, {len(data)} data requests for {nr} "
       f"shards, {hub.sent} bytes of {ref_bytes} ({dt:.2f} s)", out[-800:])

    rc, out, dt = verify("hf://synthetic/ckpt", "--against", "hf://synthetic/ref", "--quiet")
    head, data = split(hub.ranges)
    got = [l for l in out.splitlines() if l.startswith(("summary:", "recipe:"))]
    ok(rc == 0 and got == lsum and len(data) <= ns + nr and hub.sent <= src_bytes + ref_bytes,
       f"both hf://: the local verdict, {len(data)} data requests for {ns + nr} shards, "
       f"{hub.sent} bytes of {src_bytes + ref_bytes} ({dt:.2f} s)",
       "\n".join(map(str, hub.ranges[:60])))

    sel = r"layers\.4[01]\."
    rc, lout = run("verify", ref, "--against", ref, "--source", T["src"], "--quiet",
                   "--tensors", sel)
    lsel = [l for l in lout.splitlines() if l.startswith(("summary:", "recipe:"))]
    rc, out, dt = verify(ref, "--against", "hf://synthetic/ref", "--source", "hf://synthetic/ckpt",
                         "--quiet", "--tensors", sel)
    head, data = split(hub.ranges)
    got = [l for l in out.splitlines() if l.startswith(("summary:", "recipe:"))]
    touched = len({(r[0], r[1]) for r in data})
    ok(rc == 0 and got == lsel and "48 of 48" in out and len(data) <= 2 * touched,
       f"--tensors {sel} with hf:// REF and --source: the local verdict; {len(data)} data "
       f"requests over the {touched} shards holding the 2 layers ({dt:.2f} s)",
       out[-800:] + "\n" + "\n".join(map(str, data[:40])))
    return 0


if __name__ == "__main__":
    sys.exit(hfmount.main("rq-verify-hf-", body, root=False, mode=None))
