#!/usr/bin/env python3
"""Hostile inputs, fourth round, items 8-10: what the engine's commands
(generate, compare, calib run) read of a model directory and of --text /
--prompts, on mkckpt's synthetic Laguna (--dense), end to end through the
binary. Every command runs with a time limit and an address-space limit, so
a reader that blocks or reads without end fails here instead of hanging or
exhausting the machine.

 8. bounded reads: config.json / generation_config.json as a symlink to
    /dev/zero is refused as a character device; a FIFO as config.json,
    generation_config.json, tokenizer.json, model.safetensors.index.json, a
    shard, chat_template.jinja, tokenizer_config.json (generate --chat),
    --text or --prompts is refused as a FIFO (never waited on); a
    config.json over the cap is refused naming the cap; an index that is
    there but unreadable is an error, not a silent fallback to a listing.
 9. --prompts bounded by --tokens: a 24 MB line with --tokens 16 is read
    only as far as 64 bytes a token (noted), for calib run and compare.
10. true messages: a float token id in tokenizer.json's model.vocab,
    added_tokens or post_processor, or in generation_config's eos_token_id
    is said to be no integer, naming its JSON path (not "appears twice");
    --tokens out of range names the real limit.
(The rope message of item 10 is tests/engine/test_arch.c's.)
11. (issue 34 item 5) a tokenizer.json or chat template the engine cannot
    take is refused, naming its JSON path or template construct, before
    any shard is touched: with every shard a FIFO (opening one would
    block) or a sparse 1 TiB file of zeros (reading its header would fail
    naming it), generate, generate --chat, compare (text and prompts) and
    calib run name the tokenizer's JSON path or the template's construct,
    never a shard.

usage: test_hostile4.py REQUANTFS        (standard library only)
"""
import json, os, resource, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok  # noqa: E402

LIMIT_AS = 3 << 30      # bytes of address space a command may take
LIMIT_S = int(os.environ.get("RQ_HOSTILE4_LIMIT_S", "30"))   # seconds a command may take


def run(*args, limit_as=LIMIT_AS):
    """(rc, stdout + stderr, seconds); rc -999 when the time limit hit."""
    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
    t = time.monotonic()
    try:
        p = subprocess.run([rqtap.RQ, *args], capture_output=True, text=True, errors="replace",
                           timeout=LIMIT_S, preexec_fn=limited, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout + p.stderr, time.monotonic() - t
    except subprocess.TimeoutExpired as e:
        return -999, "TIMEOUT after %ds: %s\n%s%s" % (LIMIT_S, " ".join(args), e.stdout or "",
                                                       e.stderr or ""), LIMIT_S


def variant(base, work, name):
    """A copy of the model directory base (shards linked, small files copied)."""
    d = os.path.join(work, name)
    os.mkdir(d)
    for f in os.listdir(base):
        s = os.path.join(base, f)
        if f.endswith(".safetensors"):
            os.symlink(s, os.path.join(d, f))
        else:
            shutil.copy(s, os.path.join(d, f))
    return d


def replace(d, name, how):
    p = os.path.join(d, name)
    os.unlink(p)
    if how == "fifo":
        os.mkfifo(p)
    elif how == "zero":
        os.symlink("/dev/zero", p)
    return p


def generate(d):
    return run("generate", d, "--prompt", "hi", "-n", "1", "--device", "cpu", "--threads", "1")


def refused(what, rc_out, words, absent=()):
    rc, out = rc_out[:2]
    return ok(rc == 1 and all(w in out for w in words) and not any(a in out for a in absent),
              what, "rc %d, wanted %s\n%s" % (rc, words, out))


def bounded_reads(base, work, text):
    for f in ("config.json", "generation_config.json"):
        d = variant(base, work, "zero-" + f)
        p = replace(d, f, "zero")
        refused("generate: %s -> /dev/zero is refused as a character device" % f, generate(d),
                [p, "a character device", "not a regular file"])
    for f in ("config.json", "generation_config.json", "tokenizer.json",
              "model.safetensors.index.json", "model-00002-of-00006.safetensors"):
        d = variant(base, work, "fifo-" + f)
        p = replace(d, f, "fifo")
        refused("generate: %s as a FIFO is refused at once, naming it" % f, generate(d),
                [p, "is a FIFO, not a regular file"])
    for f in ("chat_template.jinja", "tokenizer_config.json"):
        d = variant(base, work, "fifo-chat-" + f)
        p = os.path.join(d, f)
        if os.path.lexists(p):
            os.unlink(p)
        os.mkfifo(p)
        refused("generate --chat: %s as a FIFO is refused at once, naming it" % f,
                run("generate", d, "--chat", "--prompt", "hi", "-n", "1", "--device", "cpu",
                    "--threads", "1"), [p, "is a FIFO, not a regular file"])
    d = variant(base, work, "fifo-cmp")
    p = replace(d, "config.json", "fifo")
    refused("compare: A's config.json as a FIFO is refused", run("compare", d, base, "-n", "1"),
            [p, "is a FIFO"])
    refused("calib run: MODEL's config.json as a FIFO is refused",
            run("calib", "run", d, "--text", text, "-o", os.path.join(work, "c.st")), [p, "is a FIFO"])

    d = variant(base, work, "big-config")
    with open(os.path.join(d, "config.json"), "r+b") as f:
        f.truncate((16 << 20) + 1)      # sparse: the cap plus one byte
    refused("a config.json of 16 MiB + 1 byte is refused naming the 16 MiB cap", generate(d),
            ["config.json is larger than 16 MiB"])

    d = variant(base, work, "index-dir")
    os.unlink(os.path.join(d, "model.safetensors.index.json"))
    os.mkdir(os.path.join(d, "model.safetensors.index.json"))
    refused("an index that is a directory is an error, not a fallback to *.safetensors",
            generate(d), ["model.safetensors.index.json is a directory"])

    fifo = os.path.join(work, "text.fifo")
    os.mkfifo(fifo)
    out = os.path.join(work, "c.safetensors")
    refused("calib run --text FIFO is refused at once", run("calib", "run", base, "--text", fifo,
            "-o", out), [fifo, "is a FIFO"])
    refused("calib run --prompts FIFO is refused at once", run("calib", "run", base, "--prompts",
            fifo, "-o", out), ["--prompts", fifo, "is a FIFO"])
    refused("calib run --prompts /dev/zero is refused (a device)", run("calib", "run", base,
            "--prompts", "/dev/zero", "-o", out), ["/dev/zero is a character device"])
    refused("compare --text FIFO is refused at once", run("compare", base, base, "--text", fifo),
            [fifo, "is a FIFO"])
    refused("compare --prompts FIFO is refused at once", run("compare", base, base, "--prompts",
            fifo), ["--prompts", fifo, "is a FIFO"])


def prompts_budget(base, work):
    # a 64 MB line: read whole and tokenized it took more than the 256 MiB of
    # address space given here; a tenth of that is what 16 tokens need
    big = os.path.join(work, "long-line.txt")
    with open(big, "w") as f:
        f.write("The quick brown fox " * ((64 << 20) // 20) + "\nsecond line\n")
    out = os.path.join(work, "p.safetensors")
    rc, o, t = run("calib", "run", base, "--prompts", big, "--tokens", "16", "-o", out,
                   "--threads", "1", limit_as=256 << 20)
    ok(rc == 0 and "calib run: note: --prompts %s line 1 is longer than 1024 bytes" % big in o,
       "calib run --prompts: a 64 MB line with --tokens 16 reads 1024 bytes of it, noted, within "
       "256 MiB of address space (%.1f s)" % t, o)
    meta = b""
    if rc == 0:
        with open(out, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            meta = f.read(n)
    ok(b'"calib_tokens":"16"' in meta and meta.count(b";") == 0,
       "the 16 tokens are one sequence, the long line's first", meta[:400])

    utf = os.path.join(work, "utf8-line.txt")
    with open(utf, "w", encoding="utf-8") as f:
        f.write("x" + "\u00e9" * 500 + "\n")       # byte 128 is inside an e-acute
    rc, o = run("calib", "run", base, "--prompts", utf, "--tokens", "2", "-o", out)[:2]
    ok(rc == 0 and "line 1 is longer than 128 bytes (64 bytes a token for the 2 tokens still "
       "wanted): only its first 127 bytes are read" in o,
       "a cut never splits a UTF-8 character (127 of 128 bytes kept)", o)

    rc, o, t = run("compare", base, base, "--prompts", big, "--tokens", "16", "-n", "1",
                   "--threads", "1", limit_as=256 << 20)
    ok(rc == 0 and "compare: note: --prompts %s line 1 is longer than 1024 bytes" % big in o
       and "2 prompts" in o,
       "compare --prompts --tokens 16: the 64 MB line cut to 1024 bytes, noted, within 256 MiB of "
       "address space; the next line read (%.1f s)" % t, o)


def edit_json(d, name, fn):
    p = os.path.join(d, name)
    with open(p) as f:
        j = json.load(f)
    fn(j)
    with open(p, "w") as f:
        json.dump(j, f)
    return p


def true_messages(base, work, text):
    def vocab(j):
        v = j["model"]["vocab"]
        k = [t for t, i in v.items() if i == 100][0]
        v[k] = 99.5                      # truncated, it would land on id 99
    def added(j):
        j["added_tokens"][1]["id"] = 1.5
    def post(j):
        sp = j["post_processor"]["special_tokens"]
        sp[list(sp)[0]]["ids"] = [2.5]
    def eos(j):
        j["eos_token_id"] = [2, 24.5]
    cases = [("tokenizer.json", vocab, ['model.vocab["', "must be an integer", "not 99.5"], "appears twice"),
             ("tokenizer.json", added, ["added_tokens[1].id: must be an integer", "not 1.5"], None),
             ("tokenizer.json", post, ["post_processor.special_tokens[", "].ids[0]: must be an integer"], None),
             ("generation_config.json", eos, ['"eos_token_id"[1] = 24.5', "integer token id"], None)]
    for i, (f, fn, words, absent) in enumerate(cases):
        d = variant(base, work, "msg%d" % i)
        edit_json(d, f, fn)
        refused("a float token id in %s: %s" % (f, words[0]), generate(d), words,
                [absent] if absent else ())
    rc, o = run("compare", base, base, "--text", text, "--tokens", "2000000")[:2]
    ok(rc == 2 and "--tokens: expected a count in [2, 1048576], got '2000000'" in o,
       "compare --tokens too large names the real limit", o)
    rc, o = run("calib", "run", base, "--text", text, "--tokens", "20000000", "-o", "x")[:2]
    ok(rc == 2 and "--tokens: '20000000' is not a count in [2, 16777216]" in o,
       "calib run --tokens too large names the real limit", o)


def refused_before_weights(base, work, text):
    def bad_norm(j):
        j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "StripAccents"}]}
    want = ["tokenizer.json: normalizer.normalizers[1]: type \"StripAccents\" is not supported"]
    prompts = os.path.join(work, "prompts.txt")
    with open(prompts, "w") as f:
        f.write("hello\nworld\n")
    for how in ("fifo", "sparse"):
        d = variant(base, work, "tok-%s" % how)
        edit_json(d, "tokenizer.json", bad_norm)
        shards = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
        for f in shards:
            p = os.path.join(d, f)
            os.unlink(p)
            if how == "fifo":
                os.mkfifo(p)
            else:
                with open(p, "wb") as fh:
                    fh.truncate(1 << 40)
        shard = "-of-%05d.safetensors" % len(shards)
        for what, rc_out in (
                ("generate", generate(d)),
                ("compare A B --text", run("compare", d, base, "--text", text, "-n", "1")),
                ("compare A B --prompts", run("compare", d, base, "--prompts", prompts, "-n", "1")),
                ("calib run", run("calib", "run", d, "--text", text, "-o", os.path.join(work, "c.st")))):
            refused("%s: a tokenizer.json it cannot take is refused before any shard (%s shards)"
                    % (what, how), rc_out, want, [shard])
        # the chat template: a construct the interpreter lacks, named with its place
        t = variant(base, work, "tmpl-%s" % how)
        for f in shards:
            os.unlink(os.path.join(t, f))
            os.symlink(os.path.join(d, f), os.path.join(t, f))
        with open(os.path.join(t, "chat_template.jinja"), "w") as f:
            f.write("{% for m in messages %}{{ m.content }}{% endfor %}{% call foo() %}x{% endcall %}")
        refused("generate --chat: a template construct it cannot render is refused before any shard "
                "(%s shards)" % how,
                run("generate", t, "--chat", "--prompt", "hi", "-n", "1", "--device", "cpu", "--threads", "1"),
                ["chat_template.jinja", "call"], [shard])


def main():
    rqtap.init(sys.argv[1])
    work = tempfile.mkdtemp(prefix="rq-hostile4-")
    try:
        base = os.path.join(work, "base")
        rc, out = run("mkckpt", base, "--dense", "--layers", "2", "--bf16-layers", "1-1",
                      "--experts", "4")[:2]
        if not ok(rc == 0, "mkckpt --dense --layers 2", out):
            return rqtap.finish()
        text = os.path.join(work, "text.txt")
        with open(text, "w") as f:
            f.write("The quick brown fox jumps over the lazy dog.\n" * 50)
        rc, out = generate(base)[:2]
        ok(rc == 0, "control: generate on the unmodified directory", out)
        bounded_reads(base, work, text)
        prompts_budget(base, work)
        true_messages(base, work, text)
        refused_before_weights(base, work, text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
