#!/usr/bin/env python3
"""calib run --device (issue 21 / h24d item 1): the calibration file that the CUDA
engine's observer writes matches the CPU engine's, on mkckpt's synthetic Laguna
(NVFP4 W4A4 experts with BF16 layers, and all BF16), top-k and --all-experts: the
same module names, every tensor F32 [1], scales within TOL relative, the same token
ids; __metadata__ names the device and the forward's dtype. The --device choice:
cuda refuses --forward-dtype bf16 (exit 2, says what to use); auto runs a BF16
forward (asked, or a BF16 model's default) on the CPU and says how to use the GPU,
an F32 forward on the GPU; cuda with --forward-dtype auto runs F32 there.

usage: test_calib_device.py REQUANTFS CUDA_REQUANTFS [--gpu]
  CUDA_REQUANTFS: tests/kernels' requantfs-emul (the CLI on the host emulation of
  the CUDA kernels: TOL 1e-3), or with --gpu the real binary on a device (TOL 3e-2:
  the kernels round activations to fp16/BF16; SKIP without CUDA or a device). TAP."""
import os, struct, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402
import subprocess  # noqa: E402

TEXT = ("Calibration needs real words: the quick brown fox jumps over the lazy dog, "
        "while a ledger of numbers 3.14159, 2.71828 and 1729 goes by. ") * 30


def run_cuda(cuda_rq, *args, env=None):
    p = subprocess.run([cuda_rq, *args], capture_output=True, text=True, errors="replace",
                       timeout=rqtap.TIMEOUT, env=env)
    return p.returncode, p.stdout + p.stderr


def scales(path):
    return {k: (v[0], v[1], struct.unpack("<f", v[2])[0] if len(v[2]) == 4 else None)
            for k, v in rqtap.st_tensors(path).items()}


def compare(name, c, g, tol):
    sc, sg = scales(c), scales(g)
    ok(sorted(sc) == sorted(sg) and len(sc) > 0,
       f"{name}: the same {len(sc)} modules from both engines",
       f"only cpu: {sorted(set(sc) - set(sg))[:5]}, only cuda: {sorted(set(sg) - set(sc))[:5]}")
    shapes = all(v[0] == "F32" and v[1] == [1] for v in list(sc.values()) + list(sg.values()))
    ok(shapes, f"{name}: every tensor F32 [1] in both")
    worst, at = 0.0, ""
    for k in set(sc) & set(sg):
        a, b = sc[k][2], sg[k][2]
        d = abs(a - b) / abs(a) if a else (0.0 if b == a else 1.0)
        if d > worst:
            worst, at = d, f"{k}: cpu {a!r} cuda {b!r}"
    ok(worst <= tol, f"{name}: scales within {tol:g} relative (worst {worst:.2e})", at)
    mc = rqtap.st_header(c)[0].get("__metadata__", {})
    mg = rqtap.st_header(g)[0].get("__metadata__", {})
    ok(mc.get("calib_token_ids") and mc.get("calib_token_ids") == mg.get("calib_token_ids") and
       mc.get("calib_device") == "cpu" and mg.get("calib_device") == "cuda" and
       mc.get("calib_forward_dtype") == mg.get("calib_forward_dtype") == "f32",
       f"{name}: the same token ids; calib_device cpu / cuda, calib_forward_dtype f32 in both",
       f"cpu {dict((k, v) for k, v in mc.items() if k != 'calib_token_ids')}\n"
       f"cuda {dict((k, v) for k, v in mg.items() if k != 'calib_token_ids')}")


def main():
    rqtap.init(sys.argv[1])
    cuda_rq, gpu = os.path.abspath(sys.argv[2]), "--gpu" in sys.argv[3:]
    tmp = tempfile.mkdtemp(prefix="rq-calib-device-")
    try:
        body(tmp, cuda_rq, gpu)
    finally:
        rqtap.cleanup(tmp)
    return rqtap.finish()


def body(tmp, cuda_rq, gpu):
    txt = os.path.join(tmp, "text.txt")
    with open(txt, "w") as f:
        f.write(TEXT)
    tol = 3e-2 if gpu else 1e-3
    if gpu:   # before any TAP line: a device, or SKIP with the reason
        probe = os.path.join(tmp, "probe")
        rc, out = run("mkckpt", probe, "--layers", "2", "--bf16-layers", "1-1")
        if rc == 0:
            rc, out = run_cuda(cuda_rq, "calib", "run", probe, "--text", txt, "--tokens", "8",
                               "--device", "cuda", "--quiet", "-o", os.path.join(tmp, "p.st"))
        if rc != 0 and ("built without CUDA" in out or "no CUDA device" in out or
                        "ek_open" in out or "no device" in out or "CUDA driver" in out):
            print("1..0 # SKIP no usable CUDA device: " + out.strip().splitlines()[-1])
            sys.exit(0)
    models = [("laguna nvfp4 A16" if gpu else "laguna nvfp4 W4A4", "nvfp4", ["--layers", "4"]),
              ("laguna bf16", "bf16", ["--layers", "4", "--dense"])]
    for name, d, flags in models:
        src = os.path.join(tmp, d)
        rc, out = run("mkckpt", src, *flags)
        if not ok(rc == 0, f"{name}: mkckpt", out):
            continue
        for all_e in ([], ["--all-experts"]):
            nm = name + (" --all-experts" if all_e else "")
            c, g = (os.path.join(tmp, f"{d}{len(all_e)}.{x}.safetensors") for x in ("cpu", "cuda"))
            common = ["calib", "run", src, "--text", txt, "--tokens", "150", "--scale-dtype", "f32",
                      *all_e]
            # on the device the W4A4 model runs A16 (both engines): its inputs' NVFP4
            # rounding is discontinuous and the kernels' fp16/BF16 activations would flip
            # some, moving later maxima past TOL (the W4A4 path: emulated, test_ek_gpu)
            env = dict(os.environ, RQ_ENGINE_ACT_QUANT="0") if gpu and d == "nvfp4" else None
            rc, out = run(*common, "--device", "cpu", "--forward-dtype", "f32", "-o", c, env=env)
            ok(rc == 0 and "on the CPU" in out, f"{nm}: calib run --device cpu", out)
            rc, out = run_cuda(cuda_rq, *common, "--device", "cuda", "-o", g, env=env)
            if not ok(rc == 0 and "on the GPU" in out, f"{nm}: calib run --device cuda", out):
                continue
            compare(nm, c, g, tol)

    src = os.path.join(tmp, "bf16")
    o = os.path.join(tmp, "x.safetensors")
    rc, out = run_cuda(cuda_rq, "calib", "run", src, "--text", txt, "--tokens", "40",
                       "--device", "cuda", "--forward-dtype", "bf16", "-o", o)
    ok(rc == 2 and "--device cpu" in out and not os.path.exists(o),
       "--device cuda --forward-dtype bf16: refused (exit 2), says to use --device cpu", out)
    rc, out = run_cuda(cuda_rq, "calib", "run", src, "--text", txt, "--tokens", "40",
                       "--forward-dtype", "bf16", "-o", o)
    meta = rqtap.st_header(o)[0].get("__metadata__", {}) if rc == 0 else {}
    ok(rc == 0 and "runs on the CPU" in out and meta.get("calib_device") == "cpu" and
       meta.get("calib_forward_dtype") == "bf16",
       "--device auto --forward-dtype bf16: runs on the CPU (BF16 forward) and says why", out)

    def auto(name, want_dev, want_fwd, *extra):
        if os.path.exists(o):
            os.unlink(o)
        rc, out = run_cuda(cuda_rq, "calib", "run", src, "--text", txt, "--tokens", "40", *extra,
                           "-o", o)
        meta = rqtap.st_header(o)[0].get("__metadata__", {}) if rc == 0 else {}
        ok(rc == 0 and meta.get("calib_device") == want_dev and
           meta.get("calib_forward_dtype") == want_fwd, name,
           out + str({k: v for k, v in meta.items() if k != "calib_token_ids"}))
        return out
    out = auto("a BF16 model, the defaults (--device auto --forward-dtype auto) with a device: "
               "the CPU's BF16 forward, the peer's (the same file on every machine)", "cpu", "bf16")
    ok("--forward-dtype f32 or --device cuda" in out, "... and it says how to use the GPU", out)
    auto("--forward-dtype f32 (--device auto) with a device: the GPU", "cuda", "f32",
         "--forward-dtype", "f32")
    auto("--device cuda (--forward-dtype auto) on a BF16 model: the GPU, F32 forward", "cuda",
         "f32", "--device", "cuda")
    rc, out = run_cuda(cuda_rq, "calib", "run", src, "--text", txt, "--device", "tpu", "-o", o)
    ok(rc == 2 and "--device" in out, "--device tpu: a usage error naming --device", out)


if __name__ == "__main__":
    sys.exit(main())
