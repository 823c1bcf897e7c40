"""Docs follow the code (issue "the house, third step", item 7): README.md and
docs/*.md may name only what is there.

- every requantfs command line they write (in code blocks and `inline code`:
  `requantfs CMD [SUB] ... --flag`, `build/requantfs ...`, and inline code
  that starts with a command, e.g. `export --link`, `calib run --skip K`)
  names a command that exists and only flags that command's --help lists
  (each command's and subcommand's --help is run once);
- inline code that is a bare flag (`--remote-verify none`) is a flag of some
  requantfs command, or one of the other tools' flags listed below (FOREIGN);
- every relative markdown link points at a file that exists (and a #anchor
  at a heading of that file);
- every repo path they name (tools/setup, fs/mount.c, engine/tok/, tests/...,
  docs/x.md; globs such as tools/golden/gen_*.py) exists in the source tree;
- every flag of every command's --help is named somewhere in README or docs/
  (each option a user can pass is described).
A failure names the doc, its line and what is wrong.

argv[1]: the source root; argv[2]: the built requantfs. TAP output.
"""
import glob, os, re, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rqtap import ok, finish  # noqa: E402

ROOT, RQ = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])

# Flags of other programs the docs name in inline code on their own (vLLM,
# tools/gpu-check, tools/test, meson, nvcc): not requantfs's, so not checked.
FOREIGN = {"--safetensors-load-strategy", "--tensor-parallel-size", "--trust-remote-code",
           "--speculative-config", "--kv-cache-dtype", "--max-model-len",
           "--gpu-memory-utilization", "--fetch-debs", "--only", "--dry-run", "--suite",
           "--print-errorlogs"}
# The top-level folders of the source tree: a token "<folder>/..." is a repo path.
FOLDERS = ("base", "quant", "kernels", "qdev", "cache", "st", "hub", "remote", "plan", "job",
           "offline", "fs", "engine", "cli", "tools", "tests", "docs")
FLAG = re.compile(r"(?<![\w./$-])(--?[A-Za-z][A-Za-z0-9-]*)")


def helptext(*args):
    p = subprocess.run([RQ, *args, "--help"], capture_output=True, text=True,
                       errors="replace", timeout=60)
    return p.returncode, p.stdout + p.stderr


def flags_of(text):
    return set(FLAG.findall(text)) | {"--help", "-h"}


# ---- what the binary says -------------------------------------------------
rc, top = helptext()
cmds = re.findall(r"^  ([a-z]+)\s{2,}", top.split("commands:", 1)[-1], re.M)
ok(rc == 0 and len(cmds) >= 10, "requantfs --help lists the commands", top)
HELP = {}                       # (cmd,) or (cmd, sub) -> set of flags
SUBS = {}                       # cmd -> its subcommands
for c in cmds:
    rc, text = helptext(c)
    if not ok(rc == 0 and text.strip(), f"requantfs {c} --help", text):
        continue
    HELP[(c,)] = flags_of(text)
    subs = set(re.findall(rf"requantfs {c} ([a-z]+)\b", text))
    for alt in re.findall(rf"requantfs {c} <([a-z]+(?:\|[a-z]+)+)>", text):
        subs |= set(alt.split("|"))
    SUBS[c] = sorted(subs)
    for s in SUBS[c]:
        rc, t = helptext(c, s)
        ok(rc == 0 and t.strip(), f"requantfs {c} {s} --help", t)
        HELP[(c, s)] = flags_of(t)
if ("bench", "engine") in HELP:       # the CUDA engine's bench has its own --help
    rc, t = helptext("bench", "engine", "--device", "cuda")
    HELP[("bench", "engine")] |= flags_of(t)
ALL = set().union(*HELP.values()) if HELP else set()

# ---- the docs, as lines, code lines and inline code spans -------------------
docs = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
ok(os.path.exists(docs[0]) and len(docs) > 1, "README.md and docs/*.md exist", docs)
docs = [d for d in docs if os.path.exists(d)]


def parse(path):
    """(lines, code, spans): code = [(lineno, text)] of code-block commands
    (continuation lines joined), spans = [(lineno, text)] of inline code."""
    lines = open(path, encoding="utf-8").read().split("\n")
    code, spans, para, fence, blank = [], [], [], False, True
    pending = None

    def flush():
        text = "\n".join(t for _, t in para)
        for m in re.finditer(r"(`+)(.+?)\1", text, re.S):
            spans.append((para[0][0] + text.count("\n", 0, m.start()), m.group(2).replace("\n", " ")))
        para.clear()

    for i, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            flush()
            fence = not fence
            continue
        indented = re.match(r"^( {4,}|\t)", line) and (blank or pending is not None or
                                                     (code and code[-1][0] >= i - 2))
        if fence or (indented and not para):
            text = line.strip()
            if pending is not None:
                pending = (pending[0], pending[1] + " " + text)
            else:
                pending = (i, text)
            if not text.endswith("\\"):
                code.append(pending)
                pending = None
            blank = False
            continue
        if pending is not None:
            code.append(pending)
            pending = None
        if not line.strip():
            flush()
            blank = True
            continue
        para.append((i, line))
        blank = False
    flush()
    return lines, code, spans


def where(path, n):
    return f"{os.path.relpath(path, ROOT)}:{n}"


CMD_AT = re.compile(r"(?<![\w./$-])(?:[\w./-]*build/)?requantfs[ \t]+(\S+)(.*)")
STOP = re.compile(r"\s(?:\|\|?|&&|;|#)\s|;\s*$|\s#|\s>")


def check_command(cmd, rest, at, bad):
    """cmd: the word after requantfs; rest: the line after it (up to a pipe,
    ;, && or a comment)."""
    if (cmd,) not in HELP:
        if re.fullmatch(r"[a-z]+", cmd):
            bad.append(f"{at}: requantfs {cmd}: no such command (requantfs --help)")
            return
        cmd = "mount"               # requantfs SRC MNT -o ...: the mount(8) form
    rest = STOP.split(" " + rest, 1)[0]
    toks, name, allowed = rest.split(), cmd, HELP[(cmd,)]
    if SUBS.get(cmd) and toks and re.fullmatch(r"[a-z]+(\|[a-z]+)*", toks[0]):
        alts = toks[0].split("|")
        unknown = [a for a in alts if a not in SUBS[cmd]]
        if unknown:
            bad.append(f"{at}: requantfs {cmd} {toks[0]}: no such subcommand "
                       f"(requantfs {cmd} {'|'.join(SUBS[cmd])})")
            return
        name = f"{cmd} {alts[0]}"
        allowed = set().union(*(HELP[(cmd, a)] for a in alts))
        rest = " ".join(toks[1:])
    for f in FLAG.findall(rest):
        if f not in allowed:
            bad.append(f"{at}: requantfs {name} {f}: not in `requantfs {name} --help`")


PATH = re.compile(r"(?<![\w./<>$~@:-])((?:" + "|".join(FOLDERS) + r")/[\w./*-]*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    return {slug(re.sub(r"^#+", "", l)) for l in open(path, encoding="utf-8")
            if re.match(r"^#{1,6} ", l)}


written = set()
for doc in docs:
    name = os.path.relpath(doc, ROOT)
    lines, code, spans = parse(doc)
    written |= set(FLAG.findall("\n".join(lines)))
    bad_cmd, bad_flag, bad_link, bad_path = [], [], [], []
    for n, text in code + spans:
        at = where(doc, n)
        for m in CMD_AT.finditer(text):
            check_command(m.group(1), m.group(2), at, bad_cmd)
    for n, text in spans:
        at = where(doc, n)
        t = text.strip()
        first = t.split()[0] if t.split() else ""
        if CMD_AT.search(t):
            continue
        if (first,) in HELP:
            if first in ("mount", "umount") and not re.search(r"(?<![\w-])--[a-z]", t):
                continue                # mount(8)/umount(8) with its short options
            if first in ("export",) and re.match(r"export\s+[A-Z_]+=", t):
                continue                # the shell's export
            check_command(first, t[len(first):], at, bad_cmd)
        elif first.startswith("--"):
            f = FLAG.findall(first)
            if f and f[0] not in ALL and f[0] not in FOREIGN:
                bad_flag.append(f"{at}: {f[0]}: no requantfs command takes it "
                                "(nor is it in FOREIGN of tests/tools/test_docs.py)")
    for n, line in enumerate(lines, 1):
        at = where(doc, n)
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target) or target.startswith("#") and not target[1:]:
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(doc), file)) if file else doc
            if not os.path.exists(dest):
                bad_link.append(f"{at}: link {target}: {os.path.relpath(dest, ROOT)} does not exist")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                bad_link.append(f"{at}: link {target}: no heading #{anchor} in "
                                f"{os.path.relpath(dest, ROOT)}")
        for p in PATH.findall(line):
            p = re.sub(r"[.,;:]+$", "", p)
            p = re.sub(r"/\.\.\.?.*$", "/", p)
            hit = glob.glob(os.path.join(ROOT, p)) if "*" in p else os.path.exists(os.path.join(ROOT, p))
            if not hit:
                bad_path.append(f"{at}: {p}: not in the source tree")
    for bad in (bad_cmd, bad_flag, bad_link, bad_path):     # in the doc's line order
        bad.sort(key=lambda b: int(b.split(":")[1]))
    ok(not bad_cmd, f"{name}: every requantfs command and flag it writes is in that command's --help",
       "\n".join(bad_cmd), lines=60)
    ok(not bad_flag, f"{name}: every bare flag in inline code is a requantfs flag",
       "\n".join(bad_flag), lines=60)
    ok(not bad_link, f"{name}: every relative link resolves", "\n".join(bad_link), lines=60)
    ok(not bad_path, f"{name}: every repo path it names exists", "\n".join(bad_path), lines=60)

# ---- and the other way: every option a user can pass is described ----------
for key in sorted(HELP):
    missing = sorted(HELP[key] - written - {"-h", "--help"})
    ok(not missing, f"every flag of `requantfs {' '.join(key)} --help` is named in README or docs/",
       "not named anywhere: " + " ".join(missing))

sys.exit(finish())
