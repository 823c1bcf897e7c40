#!/usr/bin/env python3
"""test_ek_pdl_rule.py — the PDL rule of kernels/ek_rt.cu, checked on the
sources of every engine kernel (suite unit; needs no nvcc or GPU).

usage: test_ek_pdl_rule.py KERNELS_DIR

Every kernel is launched through ek_launch with the programmatic-stream-
serialization attribute, so it may start while its predecessor still runs.
For each __global__ function in KERNELS_DIR/ek_*.cu (the quantizer's kq*
files launch without the attribute) this checks:
  - its body calls pdl_start() or pdl_wait() unconditionally (at the top
    level of the body, not inside an if or a loop);
  - before that call there is no memory access: no indexing, no ->, no
    unary *, no __ldg / ld_stream / atomic / __ldcg; only declarations of
    __shared__ memory, arithmetic on arguments, and prefetch_l2(...) hints
    (helpers named *_prefetch are checked by the same rule);
  - no file launches a kernel except through ek_launch (no <<< >>>, no
    cudaLaunchKernel outside kernels/ek_dev.cuh).
The checker first proves on a synthetic kernel that reads before waiting
that it can fail. TAP output."""
import os
import re
import sys

FORBIDDEN = [
    (re.compile(r"\["), "indexing"),
    (re.compile(r"->"), "->"),
    (re.compile(r"(^|[=(,;!&|?:*+\-/%<>^~]|\breturn)\s*\*\s*[A-Za-z_(]"), "unary *"),
    (re.compile(r"\b(__ldg|__ldcg|__ldcs|ld_stream\w*|atomic\w*|__stcg|memcpy)\s*\("), "a load"),
]


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def functions(src, marker):
    """(name, body, body_start_line) of every function whose header has marker."""
    out = []
    for m in re.finditer(marker, src):
        open_i = src.find("{", m.end())
        semi = src.find(";", m.end())
        if open_i < 0 or (0 <= semi < open_i):
            continue                          # a declaration
        header = src[m.start():open_i]
        nm = re.search(r"(\w+)\s*\([^()]*(\([^()]*\)[^()]*)*\)\s*$", header.strip())
        name = nm.group(1) if nm else header.strip()[-40:]
        depth, i = 0, open_i
        while i < len(src):
            if src[i] == "{":
                depth += 1
            elif src[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        out.append((name, src[open_i + 1:i], src.count("\n", 0, open_i) + 1))
    return out


DECL = re.compile(r"^(const\s+)?(unsigned\s+)?[A-Za-z_][\w:]*(\s*<[^;]*?>)?\s+\**\s*\w+\s*=")


def declared_exprs(stmt):
    """The expressions of a statement: for a declaration 'T a = e1, *b = e2'
    the initializers e1, e2 (declarators' '*' are not dereferences)."""
    if not DECL.match(stmt):
        return [stmt]
    parts, depth, cur = [], 0, ""
    for ch in stmt:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = [DECL.sub("", parts[0], count=1)]
    out += [re.sub(r"^\s*\**\s*\w+\s*=", "", q, count=1) for q in parts[1:]]
    return out


def pre_wait_problems(body, helpers):
    """Problems in the code before the kernel's top-level pdl_start/pdl_wait."""
    depth, pos, wait_at = 0, 0, None
    for m in re.finditer(r"[{}]|\bpdl_(start|wait)\s*\(\s*\)", body):
        if m.group(0) == "{":
            depth += 1
        elif m.group(0) == "}":
            depth -= 1
        elif depth == 0:
            wait_at = m.start()
            break
    if wait_at is None:
        return ["no unconditional pdl_start()/pdl_wait() at the top level of the body"]
    pre = body[:wait_at]
    probs = []
    for ln in pre.split(";"):
        s = " ".join(ln.split())
        if not s or "__shared__" in s or s.startswith("constexpr"):
            continue
        s = re.sub(r"\bprefetch_l2\s*\((?:[^()]|\([^()]*(?:\([^()]*\))*[^()]*\))*\)", "", s)
        for call in re.findall(r"\b(\w+_prefetch)\s*\(", s):
            if call not in helpers:
                probs.append("calls %s, not found" % call)
            else:
                probs += ["%s: %s" % (call, p) for p in pre_wait_problems(
                    helpers[call] + "\npdl_wait();", helpers)]
        s = re.sub(r"\b\w+_prefetch\s*\([^;]*\)", "", s)
        for e in declared_exprs(s):
            for rx, what in FORBIDDEN:
                if rx.search(e):
                    probs.append("%s before the wait: '%s'" % (what, s[:100]))
    return probs


def check_file(path, text):
    """(name, problems) per kernel of one file, plus launch problems."""
    src = strip_comments(text)
    helpers = {n: b for n, b, _ in functions(src, r"__device__[^;{]*?\b\w+_prefetch\s*\(")}
    results = []
    for name, body, line in functions(src, r"__global__"):
        results.append(("%s:%d %s" % (os.path.basename(path), line, name),
                        pre_wait_problems(body, helpers)))
    launch = []
    if "<<<" in src:
        launch.append("a <<< >>> launch")
    if re.search(r"\bcudaLaunchKernel(Ex)?\s*\(", src) and not path.endswith("ek_dev.cuh"):
        launch.append("cudaLaunchKernel outside ek_launch")
    return results, launch


BAD = """
__global__ void k_bad(const float *x, float *y)
{
	__shared__ float s[4];
	float v = x[threadIdx.x];
	pdl_start();
	y[threadIdx.x] = v;
}
__global__ void k_late(float *y)
{
	if (threadIdx.x == 0) { pdl_wait(); }
	y[0] = 1;
}
__global__ void k_deref(const float *x, float *y)
{
	int n = 4, *unused = 0;
	float v = n * *x;
	pdl_wait();
	*y = v;
}
"""


def main():
    if len(sys.argv) != 2:
        print("usage: test_ek_pdl_rule.py KERNELS_DIR", file=sys.stderr)
        return 2
    kdir = sys.argv[1]
    n = 0

    def ok(cond, msg):
        nonlocal n
        n += 1
        print("%s %d - %s" % ("ok" if cond else "not ok", n, msg))
        return cond

    res, _ = check_file("synthetic.cu", BAD)
    ok(len(res) == 3 and all(p for _, p in res),
       "the checker fails kernels that read before pdl_start (index, unary *) and one that waits "
       "conditionally "
       "(%s)" % "; ".join("%s: %s" % (k, p[0] if p else "passed") for k, p in res))
    files = sorted(f for f in os.listdir(kdir) if re.match(r"ek_.*\.(cu|cuh)$", f))
    kernels = 0
    for f in files:
        path = os.path.join(kdir, f)
        with open(path, encoding="utf-8") as fh:
            res, launch = check_file(path, fh.read())
        for name, probs in res:
            kernels += 1
            ok(not probs, "%s: pdl wait before any memory access%s" % (
                name, "" if not probs else ": " + "; ".join(probs)))
        ok(not launch, "%s: kernels launched only through ek_launch%s" % (
            f, "" if not launch else ": " + ", ".join(launch)))
    ok(kernels >= 10, "%d kernels found in %d files" % (kernels, len(files)))
    print("1..%d" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
