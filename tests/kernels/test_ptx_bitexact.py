#!/usr/bin/env python3
"""test_ptx_bitexact.py — the CUDA quantizer's PTX keeps the IEEE recipe.

usage: test_ptx_bitexact.py KQUANT_KERN.compute_NN.ptx...
       test_ptx_bitexact.py --skip REASON

Each PTX file is kernels/kquant_kern.cu compiled by nvcc -ptx with the flags
of the kernels library for one architecture of gpu_arch (tests/kernels/
meson.build). The quantizer must match quant/ bit for bit, so its PTX may hold
no fused multiply-add (fma.*: what -fmad=true contracts a*b+c into), no
float add/sub/mul without a rounding mode (ptxas, the JIT included, may fuse
those into FMA; -fmad=false writes mul.rn/add.rn), no
flush-to-zero (.ftz: -ftz=true), and no approximate division, square root or
reciprocal (-prec-div=false / -prec-sqrt=false). The embedded compute_NN PTX
is what a GPU newer than the SASS list JIT-compiles, so this is also the JIT
path's guarantee. Only the quantizer's file is checked: the engine's kernels
(ek_*.cu) may use fma. TAP; exit 0 pass or skip (a plan of "1..0 # SKIP reason"), 1 fail.
"""
import re
import sys

# the __global__ kernels of kquant_kern.cu (k_obs_search: kq_obs.cuh's MSE
# search): each must be found, so that an empty or foreign PTX file cannot pass
KERNELS = ("k_absmax", "k_scale", "k_quant", "k_gs_batch", "k_obs_search")
BAD = [
    (re.compile(r"^\s*(@!?%\w+\s+)?fma\."), "fused multiply-add (needs -fmad=false)"),
    (re.compile(r"\.ftz\b"), "flush-to-zero (needs -ftz=false)"),
    (re.compile(r"^\s*(@!?%\w+\s+)?(div\.(approx|full)|sqrt\.approx|rcp\.approx)\."),
     "approximate div/sqrt/rcp (needs -prec-div=true -prec-sqrt=true)"),
    # add/sub/mul without a rounding mode: ptxas (and so the driver's JIT)
    # may fuse such a mul and add into an FFMA; -fmad=false writes .rn
    (re.compile(r"^\s*(@!?%\w+\s+)?(add|sub|mul)(\.sat)?\.f(32|64)\b"),
     "add/sub/mul without .rn: ptxas may contract it into FMA (needs -fmad=false)"),
]
FLOAT_OP = re.compile(r"^\s*(@!?%\w+\s+)?(add|sub|mul|div|sqrt|rcp|fma|mad|cvt)\.[\w.]*f(32|64)")
FUNC = re.compile(r"^\s*(\.visible\s+|\.weak\s+)?\.(entry|func)\s+(\([^)]*\)\s*)?(\w+)")


def check(path):
    """Returns (errors, entries found, float instructions seen)."""
    errs, entries, nfloat = [], set(), 0
    func = None
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            code = line.split("//", 1)[0]
            m = FUNC.match(code)
            if m:
                func = m.group(4)
                if m.group(2) == "entry":
                    entries.add(func)
                continue
            if not code.strip():
                continue
            if FLOAT_OP.match(code):
                nfloat += 1
            for rx, why in BAD:
                if rx.search(code):
                    errs.append("%s:%d: in %s: %s: %s" % (path, ln, func, why, code.strip()))
    return errs, entries, nfloat


def main(argv):
    if len(argv) >= 2 and argv[1] == "--skip":
        print("1..0 # SKIP %s" % (" ".join(argv[2:]) or "no PTX to check"))
        return 0
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    failed = 0
    print("1..%d" % (len(argv) - 1))
    for i, path in enumerate(argv[1:], 1):
        try:
            errs, entries, nfloat = check(path)
        except OSError as e:
            errs, entries, nfloat = ["%s: %s" % (path, e)], set(), 0
        missing = [k for k in KERNELS if not any(k in e for e in entries)]
        if missing:
            errs.append("%s: quantizer kernels not found in the PTX: %s (entries: %s)"
                        % (path, ", ".join(missing), ", ".join(sorted(entries)) or "none"))
        if errs:
            failed += 1
            print("not ok %d - %s" % (i, path))
            for e in errs[:20]:   # stderr too: meson --print-errorlogs shows it
                print("#   " + e)
                print(e, file=sys.stderr)
            if len(errs) > 20:
                print("#   ... %d more" % (len(errs) - 20))
        else:
            print("ok %d - %s: %d kernels, %d float instructions, no fma/.ftz/approx/unrounded add-mul"
                  % (i, path.rsplit("/", 1)[-1], len(entries), nfloat))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
