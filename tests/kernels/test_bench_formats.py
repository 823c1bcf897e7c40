#!/usr/bin/env python3
"""bench engine --device cuda's per-format decode rows (issue 33 item 4), on the host
emulation of the CUDA engine (tests/kernels' requantfs-emul: the GPU entry points run
their CPU twins, device times read 0, so only the rows and their byte counts are
checked here; tools/gpu-check's bench-engine step gives the figures on a device):

- a run prints, after the decode line, one "format NAME [R x C]: X MB of weights per
  call, ... GB/s of weights, P% of the copy (D GB/s)" row for each of bf16, nvfp4, fp8,
  int8 and int4, the same GEMV shape for all, X the format's bytes in the engine layout
  (BF16: 2 per weight; NVFP4: 576-byte tiles of 16 x 64; FP8 / INT8: rows of 16-byte
  multiples, INT4 half of that, then a binary32 scale per row (fp8) or per 128 columns
  (int8, int4), each part rounded up to 16 bytes), the copy bandwidth measured in the
  same run named in the header;
- --no-formats leaves those rows out; --list-ops names gemv_bf16, gemv_nvfp4,
  gemv_fp8, gemv_int8 and gemv_int4.

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
FMTS = ["bf16", "fp8", "int4", "int8", "nvfp4"]
ok(sorted(rows) == FMTS, "one row each for bf16, nvfp4, fp8, int8, int4", out[-2000:])


def r16(n):
    return (n + 15) // 16 * 16


if sorted(rows) == FMTS:
    shape = {f: (int(m.group(2)), int(m.group(3))) for f, m in rows.items()}
    r, c = shape["bf16"]
    g128 = (c + 127) // 128
    want = {"bf16": r * c * 2 / 1e6,
            "nvfp4": math.ceil(r / 16) * math.ceil(c / 64) * 576 / 1e6,
            "fp8": (r16(r * r16(c)) + r16(r * 4)) / 1e6,
            "int8": (r16(r * r16(c)) + r16(r * g128 * 4)) / 1e6,
            "int4": (r16(r * ((c + 31) // 32 * 16)) + r16(r * g128 * 4)) / 1e6}
    ok(len(set(shape.values())) == 1 and all(
        abs(float(rows[f].group(4)) - want[f]) < 0.006 for f in want),
       f"the same GEMV [{r} x {c}] in all, weight bytes per format (" +
       ", ".join(f"{f} {want[f]:.2f} MB" for f in FMTS) + ")",
       "\n".join(m.group(0) for m in rows.values()))
ok("no CUDA kernel" not in out, "no format is named as lacking a CUDA kernel", out[-1000:])

rc, out = run(*BASE, "--no-formats")
ok(rc == 0 and "decode at position" in out and "format " not in out,
   "--no-formats: the decode line, no per-format rows", out[-1000:])
rc, out = run("bench", "engine", "--device", "cuda", "--list-ops")
ok(rc == 0 and all(re.search(rf"^gemv_{f}\t", out, re.M) for f in FMTS),
   "--list-ops names gemv_bf16, gemv_nvfp4, gemv_fp8, gemv_int8 and gemv_int4", out)
sys.exit(finish())
