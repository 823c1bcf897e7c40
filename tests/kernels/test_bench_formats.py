#!/usr/bin/env python3
"""bench engine --device cuda's per-format decode rows (issue 33 item 4), on the host
emulation of the CUDA engine (tests/kernels' requantfs-emul: the GPU entry points run
their CPU twins, device times read 0, so only the rows and their byte counts are
checked here; tools/gpu-check's bench-engine step gives the figures on a device):

- a run prints, after the decode line, one "format NAME [R x C]: X MB of weights per
  call, ... GB/s of weights, P% of the copy (D GB/s)" row for bf16 and for nvfp4, the
  same GEMV shape for both, X the format's bytes (BF16: 2 per weight; NVFP4: the
  engine's 576-byte tiles of 16 x 64), the copy bandwidth measured in the same run
  named in the header, and a row saying fp8/int8/int4 have no CUDA kernel;
- --no-formats leaves those rows out; --list-ops names gemv_bf16 and gemv_nvfp4.

usage: test_bench_formats.py REQUANTFS_EMUL TINY_LLAMA_DIR. TAP."""
import math, os, re, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run, finish  # noqa: E402

rqtap.init(sys.argv[1])
TINY = sys.argv[2]
BASE = ("bench", "engine", "--device", "cuda", "--model", TINY, "--steps", "1", "--prefill", "0",
        "--ctx", "64", "--reps", "1")

rc, out = run(*BASE, timeout=280)
ok(rc == 0, "bench engine --device cuda (emulated) runs", out[-2000:])
head = re.search(r"^decode GEMV per weight format \(.*device->device copy [0-9.]+ GB/s, "
                 r"read \+ write, this run\):$", out, re.M)
ok(head is not None and out.index("decode at position") < head.start(),
   "the per-format rows follow the decode line, naming the copy bandwidth of the same run",
   out[-2000:])
rows = {m.group(1): m for m in re.finditer(
    r"^format (\w+) +\[(\d+) x (\d+)\]: ([0-9.]+) MB of weights per call, [0-9.]+ us, \S+ GB/s "
    r"of weights, \S+% of the copy \(\S+ GB/s\)$", out, re.M)}
ok(sorted(rows) == ["bf16", "nvfp4"], "one row each for bf16 and nvfp4", out[-2000:])
if sorted(rows) == ["bf16", "nvfp4"]:
    shape = {f: (int(m.group(2)), int(m.group(3))) for f, m in rows.items()}
    r, c = shape["bf16"]
    want = {"bf16": r * c * 2 / 1e6,
            "nvfp4": math.ceil(r / 16) * math.ceil(c / 64) * 576 / 1e6}
    ok(shape["bf16"] == shape["nvfp4"] and all(
        abs(float(rows[f].group(4)) - want[f]) < 0.006 for f in want),
       f"the same GEMV [{r} x {c}] in both, weight bytes per format (bf16 {want['bf16']:.2f} MB, "
       f"nvfp4 {want['nvfp4']:.2f} MB)", "\n".join(m.group(0) for m in rows.values()))
ok(re.search(r"^format fp8, int8, int4: no CUDA kernel", out, re.M) is not None,
   "the formats without a CUDA kernel are named, with no figure", out[-1000:])

rc, out = run(*BASE, "--no-formats")
ok(rc == 0 and "decode at position" in out and "format " not in out,
   "--no-formats: the decode line, no per-format rows", out[-1000:])
rc, out = run("bench", "engine", "--device", "cuda", "--list-ops")
ok(rc == 0 and re.search(r"^gemv_bf16\t", out, re.M) and re.search(r"^gemv_nvfp4\t", out, re.M),
   "--list-ops names gemv_bf16 and gemv_nvfp4", out)
sys.exit(finish())
