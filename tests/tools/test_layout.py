"""The house rules of the source tree (issue 19), read from the sources:

- plan/ (the virtual checkpoint) includes nothing of FUSE, cache/, qdev/,
  hub/, job/, offline/ or fs/, and starts no thread;
- job/ knows neither the daemon nor the offline commands; offline/ not the
  daemon; fs/ (the daemon) neither offline/, hub/ nor kernels/;
- the daemon is one straight line: the order written at the top of
  fs/mount.c names every fs/*.c, and every call from one daemon file to a
  function defined in another goes down that order (no call up, no circle);
- the read path (mount_read.c) never names a segment kind: it asks the
  segment-source seam (mount_seg.c).

argv[1]: the source root. TAP output.
"""
import glob, os, re, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rqtap import ok, finish  # noqa: E402

ROOT = sys.argv[1]


def code(path):
    """The file without comments and string literals."""
    s = open(path, encoding="utf-8").read()
    s = re.sub(r"/\*.*?\*/", " ", s, flags=re.S)
    s = re.sub(r"//[^\n]*", " ", s)
    return s


def includes(folder):
    out = {}
    for p in sorted(glob.glob(os.path.join(ROOT, folder, "*.[ch]"))):
        out[os.path.relpath(p, ROOT)] = re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]',
                                                    code(p), re.M)
    return out


def check_includes(folder, banned):
    inc = includes(folder)
    ok(len(inc) > 0, f"{folder}/ has sources", f"none under {ROOT}/{folder}")
    bad = [f"{f}: {h}" for f, hs in inc.items() for h in hs
           if any(h == b or h.startswith(b) for b in banned)]
    ok(not bad, f"{folder}/ includes none of {', '.join(banned)}", "\n".join(bad))


check_includes("plan", ["fuse", "fuse_lowlevel.h", "cache/", "qdev/", "hub/", "job/",
                        "offline/", "fs/", "kernels/", "curl/"])
threads = [p for p in glob.glob(os.path.join(ROOT, "plan", "*.c"))
           if re.search(r"\bpthread_create\b|\brq_pool_", code(p))]
ok(not threads, "plan/ starts no thread", "\n".join(threads))
check_includes("job", ["fuse", "fuse_lowlevel.h", "fs/", "offline/", "hub/"])
check_includes("offline", ["fuse", "fuse_lowlevel.h", "fs/"])
check_includes("fs", ["offline/", "hub/", "kernels/", "curl/"])
# remote/ (the chunk store of hf:// SRC) knows bytes of files, nothing of
# safetensors, plans, caches of quantized modules or the daemon
check_includes("remote", ["fuse", "fuse_lowlevel.h", "st/", "plan/", "cache/", "job/",
                          "offline/", "fs/", "engine/", "kernels/", "qdev/"])

# ---- the daemon's order ---------------------------------------------------
head = open(os.path.join(ROOT, "fs", "mount.c"), encoding="utf-8").read().split("*/", 1)[0]
order = []
# the table: " *   lifecycle mount_run.c   checks, ..." (a file, then its role)
for name in re.findall(r"^ \*\s+(?:[a-z]+\s+)?(mount\w*\.c)\s{2,}\S", head, re.M):
    if name not in order:
        order.append(name)
daemon = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "fs", "mount*.c")))
ok(sorted(order) == daemon, "the order at the top of fs/mount.c names every fs/mount*.c once",
   f"order: {order}\nfiles: {daemon}")

defs, src = {}, {}
for f in daemon:
    s = code(os.path.join(ROOT, "fs", f))
    src[f] = s
    for m in re.finditer(r"^(?!static\b)[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{]*\)\s*\{", s, re.M):
        defs[m.group(1)] = f
ok(len(defs) > 20, "found the daemon's functions", f"{len(defs)}: {sorted(defs)}")
up, calls = [], 0
rank = {f: i for i, f in enumerate(order)}
for f, s in src.items():
    for fn, where in defs.items():
        if where == f or not re.search(r"\b" + fn + r"\s*\(", s):
            continue
        calls += 1
        if f in rank and where in rank and rank[where] < rank[f]:
            up.append(f"{f} calls {fn} ({where}), which is above it")
ok(calls > 20, "the daemon's files call each other", f"{calls} calls found")
ok(not up, "every call between daemon files goes down the order of fs/mount.c", "\n".join(up))

read = src.get("mount_read.c", "")
kinds = re.findall(r"\bRQ_SEG_\w+", read)
ok(read and not kinds, "mount_read.c names no segment kind (it asks mount_seg.c)",
   ", ".join(kinds))
seg = src.get("mount_seg.c", "")
ok(all(k in seg for k in ("RQ_SEG_MEM", "RQ_SEG_SRC", "RQ_SEG_JOB")),
   "mount_seg.c maps every segment kind to its source")

sys.exit(finish())
