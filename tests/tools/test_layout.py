"""The house rules of the source tree (issues 19 and 31), read from the sources:

- plan/ (the virtual checkpoint) includes nothing of FUSE, cache/, qdev/,
  hub/, job/, offline/ or fs/, and starts no thread;
- job/ knows neither the daemon nor the offline commands; offline/ not the
  daemon; fs/ (the daemon) neither offline/, hub/ nor kernels/;
- the engine's rooms are used one way: engine/tok/ and engine/chat/ know
  nothing of each other nor of engine/model/, which knows neither;
- the CLI (cli/) reaches tools/bench/ and tools/mkckpt/ only through their
  entry points (bench.h, mkckpt.h), and they reach the CLI only through its
  helpers (cli/cli.h); nothing below the CLI includes cli/ or tools/;
- every folder is one straight line: the order written at the top of the
  folder's main file (FOLDERS below) names each of its .c/.cu files once, and
  every call from one of them to a function defined in another goes down that
  order: no call up, so no two files of a folder call each other both ways;
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

# ---- the engine's rooms and the CLI's --------------------------------------
check_includes("engine/tok", ["engine/chat/", "engine/model/", "cli/", "tools/"])
check_includes("engine/chat", ["engine/tok/", "engine/model/", "cli/", "tools/"])
check_includes("engine/model", ["engine/tok/", "engine/chat/", "cli/", "tools/"])
for below in ("base", "quant", "kernels", "qdev", "cache", "st", "hub", "remote", "plan", "job",
              "offline", "fs", "engine/tok", "engine/chat", "engine/model"):
    inc = includes(below)
    bad = [f"{f}: {h}" for f, hs in inc.items() for h in hs if h.startswith(("cli/", "tools/"))]
    ok(not bad, f"{below}/ includes nothing of cli/ or tools/", "\n".join(bad))
bad = [f"{f}: {h}" for room in ("tools/bench", "tools/mkckpt") for f, hs in includes(room).items()
       for h in hs if h.startswith("cli/") and h != "cli/cli.h"]
ok(not bad, "tools/bench/ and tools/mkckpt/ use only cli/cli.h of the CLI", "\n".join(bad))
bad = [f"{f}: {h}" for f, hs in includes("cli").items() for h in hs
       if h.startswith("tools/") and h not in ("tools/bench/bench.h", "tools/mkckpt/mkckpt.h")]
ok(not bad, "cli/ uses only the entry points of tools/bench/ and tools/mkckpt/", "\n".join(bad))

# ---- every folder one straight line -----------------------------------------
# folder -> its main file, whose head comment holds the folder's order: lines
# " *   [role]  file.c  what it does" (a file, two spaces, its role), top to
# bottom; each file calls only the files below it.
FOLDERS = {
    "base": "err.c", "quant": "quant_ref.c", "kernels": "ek_rt.cu", "qdev": "qdev.c",
    "cache": "cache.c", "st": "st_parse.c", "hub": "hub.c", "remote": "rstore.c",
    "plan": "plan.c", "job": "job.c", "offline": "export.c", "fs": "mount.c",
    "engine/tok": "tokenizer.c", "engine/chat": "chat.c", "engine/model": "model.c",
    "cli": "main.c", "tools/bench": "cmd_bench.c", "tools/mkckpt": "mkckpt.c",
}
DEF = re.compile(r"^(?!static\b)[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{]*\)\s*\{", re.M)
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof"}
src = {}


def folder_order(folder, main):
    text = open(os.path.join(ROOT, folder, main), encoding="utf-8").read()
    head = text.split("*/", 1)[0]
    order = []
    for name in re.findall(r"^ \*\s+(?:[a-z]+\s+)?(\w+\.(?:c|cu))\s{2,}\S", head, re.M):
        if name not in order:
            order.append(name)
    return order


ok(sorted(FOLDERS) == sorted(d for d in FOLDERS if os.path.isdir(os.path.join(ROOT, d))),
   "every folder of the table exists")
on_disk = set()
for top in sorted(os.listdir(ROOT)):
    for dirpath, dirs, files in os.walk(os.path.join(ROOT, top)):
        rel = os.path.relpath(dirpath, ROOT)
        if rel.split(os.sep)[0] in ("tests", "build", "docs") or rel.startswith((".", "build")):
            continue
        if any(f.endswith((".c", ".cu")) for f in files) and rel not in ("tools",):
            on_disk.add(rel)
missing = sorted(on_disk - set(FOLDERS))
ok(not missing, "every folder with C or CUDA sources has an order", ", ".join(missing))

for folder, main in FOLDERS.items():
    files = sorted(os.path.basename(p) for ext in ("c", "cu")
                   for p in glob.glob(os.path.join(ROOT, folder, "*." + ext)))
    order = folder_order(folder, main)
    ok(sorted(order) == files, f"the order at the top of {folder}/{main} names every file once",
       f"order: {order}\nfiles: {files}")
    defs, fsrc = {}, {}
    for f in files:
        s = code(os.path.join(ROOT, folder, f))
        fsrc[f] = s
        for m in DEF.finditer(s):
            if m.group(1) not in KEYWORDS:
                defs.setdefault(m.group(1), f)
    if folder == "fs":
        src = fsrc
    rank = {f: i for i, f in enumerate(order)}
    up, twoway, calls = [], set(), {}
    for f, s in fsrc.items():
        for fn, where in defs.items():
            if where == f or not re.search(r"\b" + fn + r"\s*\(", s):
                continue
            calls.setdefault(f, set()).add(where)
            if f in rank and where in rank and rank[where] < rank[f]:
                up.append(f"{f} calls {fn} ({where}), which is above it")
    for f, ws in calls.items():
        for w in ws:
            if f in calls.get(w, ()):
                twoway.add(" <-> ".join(sorted((f, w))))
    ok(not twoway, f"{folder}/: no two files call each other both ways", "\n".join(sorted(twoway)))
    ok(not up, f"{folder}/: every call between its files goes down the order of {main}",
       "\n".join(up))
ok(len(src) > 10, "found the daemon's files", f"{sorted(src)}")

read = src.get("mount_read.c", "")
kinds = re.findall(r"\bRQ_SEG_\w+", read)
ok(read and not kinds, "mount_read.c names no segment kind (it asks mount_seg.c)",
   ", ".join(kinds))
seg = src.get("mount_seg.c", "")
ok(all(k in seg for k in ("RQ_SEG_MEM", "RQ_SEG_SRC", "RQ_SEG_JOB")),
   "mount_seg.c maps every segment kind to its source")

sys.exit(finish())
