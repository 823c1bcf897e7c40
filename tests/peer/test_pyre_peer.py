#!/usr/bin/env python3
"""Ignore/targets patterns (and verify --tensors) against Python's own re
(issue 17, class 2): requantfs runs Python re patterns on PCRE2 (plan/pyre.c);
this test asks both the same questions and requires the same answers.

  1. a corpus of real patterns (Laguna's ignore rule and those of the
     synthetic Laguna config, llm-compressor's defaults and the ignore/target
     entries public quantized models use) and plausible odd ones, against a
     corpus of module names (Llama, Qwen MoE, Mixtral, DeepSeek, Laguna,
     vision towers, Unicode and odd names): re.match == requantfs, entry by
     entry, name by name; plain entries are exact;
  2. every code point (planes 0-1, no surrogates) against \\d \\w \\s, '.',
     their negations, classes and case-insensitive letters;
  3. verify --tensors patterns as re.search;
  4. what Python refuses is refused; what requantfs does not translate is
     refused with the pattern named;
  5. pathological patterns (catastrophic backtracking) end within 1 s each
     with an error naming the pattern and the name, through the tool and
     through `requantfs plan`, `mount` and `verify` (glibc's regex spun for
     minutes on some of these).

Usage: test_pyre_peer.py PYRE_TOOL REQUANTFS   (TAP)"""
import json, os, re, struct, subprocess, sys, tempfile, time, warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run  # noqa: E402

TOOL = os.path.abspath(sys.argv[1])
rqtap.init(sys.argv[2])
warnings.simplefilter("ignore")          # "Possible nested set" etc.: we test the meaning

# ---- the corpus -----------------------------------------------------------

# Laguna: the real rule of the 08-01 release and the forms tools/mkckpt/mkckpt_config.c writes
LAGUNA = [r"re:^model\.layers\.4[0-7]\.mlp\.experts(\..*)?$",
          r"re:^model\.layers\.[2-3]\.mlp\.experts(\..*)?$",
          r"re:^model\.layers\.[0-3]\.mlp\.experts(\..*)?$",
          r"re:^model\.layers\.1[0-9]\.mlp\.experts(\..*)?$",
          r"re:^model\.layers\.(?:1|2|3)\.mlp\.experts(\..*)?$",
          r"re:^model\.layers\.(?:9|10|11)\.mlp\.experts(\..*)?$",
          r"re:^model\.layers\.2\.mlp\.experts\..*$"]
# llm-compressor's defaults and examples, and public quantized models' config.json
LLMC = ["lm_head", "re:.*lm_head", r"re:.*embed_tokens$", r"re:.*\.gate$", "re:.*mlp.gate$",
        "re:.*router", "re:.*shared_expert_gate$", "re:visual.*", "re:.*vision_tower.*",
        r"re:.*mlp\.shared_experts.*", "re:.*block_sparse_moe.gate", "re:model.visual.*",
        "re:.*multi_modal_projector.*", "re:vision_model.*", "re:.*self_attn.*", "re:.*mlp.*",
        "re:.*down_proj", r"re:model.layers.[0-9]+.mlp.experts.[0-9]+.(gate|up|down)_proj",
        "re:.*mlp.experts.*", "re:.*gate_proj$", "re:.*up_proj$", "re:.*q_proj", "re:.*o_proj",
        "re:.*self_attn.(q|k|v|o)_proj$", "re:.*kv_a_proj_with_mqa$", "re:.*q_a_proj$",
        r"re:model\.layers\.[0-2]\..*", r"re:.*\.mlp\.gate\.e_score_correction_bias",
        r"re:^model\.layers\.(0|1|2)\.mlp\..*$", r"re:.*layers\.([0-9]|1[0-5])\..*",
        r"re:.*\.experts\.\d+\.w[13]$", "re:.*w2$",
        r"re:model\.layers\.\d+\.block_sparse_moe\.experts\.\d+\.w[1-3]",
        r"re:(?:model\.)?layers\.\d+\.self_attn\.[qkvo]_proj", r"re:.*\.(q|k|v)_proj$",
        r"re:.*mlp\.experts\.(\d+)\.(gate|up)_proj$", "re:.*conv.*", "re:.*mtp.*",
        "re:.*linear_attn.*", "re:.*in_proj.*", r"re:.*\.gate_up_proj$", "re:.*norm$",
        "re:.*shared_expert.*", "re:.*embed.*", "re:lm_head$", r"re:.*\.eh_proj$",
        r"re:.*mlp\.gate$", "re:.*attn.*", "re:.*attention.*", r"re:.*\.0\..*",
        r"re:model\.layers\.\d+\.mlp\.experts\.\d+\.(gate_proj|up_proj|down_proj)$",
        "re:.*visual.*", "re:^mtp.*", "re:.*norm.*", "embed_tokens",
        "model.embed_tokens", "model.norm", "model.layers.0.mlp.gate",
        "model.layers.0.self_attn.q_proj"]
# Python syntax PCRE2 spells differently or that POSIX ERE answered wrongly
ODD = [r"re:.*(?<!shared_)expert.*", r"re:^(?!.*lm_head).*$", r"re:.*(?=_proj$)",
       r"re:.*\w$", r"re:\W", r"re:.*[^\x00-\x7f].*", "re:.*é.*", r"re:(?i).*LM_HEAD$",
       r"re:(?i:MODEL)\..*", r"re:(?s).*gate.*", r"re:(?m).*gate$", r"re:(?m)^\d+$",
       r"re:(?u)\w+", r"re:.*\s.*", r"re:.*\S$", r"re:.*\Z", r"re:.*$", r"re:.*\n",
       r"re:\A.*gate", r"re:.*\b\d+\b.*", r"re:.*\B\d", r"re:.{3,}", r"re:x{,2}",
       r"re:.*x{,}", r"re:.{,5}$", r"re:.*{", r"re:.*[{}].*", r"re:.*\{1\}", r"re:a{1,2",
       r"re:.*}", r"re:[]a]", r"re:[^]a]", r"re:.*[\]].*", r"re:.*\x2e.*", r"re:.*\u00e9",
       r"re:.*\U0001F642.*", r"re:.*\056.*", r"re:.*[\056].*", r"re:.*[\1]", r"re:.*\0",
       r"re:[[:alpha:]]+", r"re:.*[[].*", r"re:.*[\b].*", r"re:.*\d$", r"re:.*\D$",
       r"re:.*[\d\s]$", r"re:.*[^\w.]", r"re:(\w+)\.\1", r"re:(?P<a>\w+)\.(?P=a)",
       r"re:(?P<x>model)?(?(x)\.layers|lm)", r"re:(a)?(?(1)b|model)", r"re:.*\t",
       r"re:.*\v.*", r"re:.*\f.*", r"re:.*\r$", r"re:.*\a", r"re:.*\\", r"re:.*\#", "re:.*#",
       "re:model.layers.0.mlp.gate ", r"re:model\ layers", r"re:.*(?#a comment)gate$",
       r"re:(?>.*)gate", r"re:.*+gate", r"re:.*?gate$", r"re:.*??", r"re:(?:a|b)*?c",
       r"re:.{2,3}?\.", "re:", "re:$", "re:^$", r"re:\Z", "re:.*\u0663", "re:.*[٠-٩]",
       r"re:.*\w\w\w\w$", r"re:(?i).*ſ.*", r"re:(?i).*k.*", r"re:(?i)ß", r"re:.*[\s\S]$",
       r"re:.*\x85", "re:.*\u2028", "re:.*\n$", "re:.*$\n", r"re:.*[\u0300-\u036f]",
       r"re:(?i)[a-z.]+$", r"re:(?i)[^a-z]", r"re:.*\|", r"re:(|a)+", r"re:(a|)*$",
       r"re:[\S]", r"re:[^\S]+$", r"re:.*[a\S]$", r"re:.*[^a\S]", r"re:.*[\s\S]*$",
       r"re:[-a]", r"re:[a-]+$", r"re:[\]-a]", r"re:(?i)[^\S]", r"re:(?i)LM_HEAD|(?-i:x)"]
PATTERNS = LAGUNA + LLMC + ODD


def module_names():
    n = ["model.embed_tokens", "model.norm", "lm_head", "model.rotary_emb"]
    for l in (0, 1, 3, 9, 10, 17, 31, 40, 47, 48, 60, 61):
        p = f"model.layers.{l}"
        n += [f"{p}.self_attn.{x}" for x in ("q_proj", "k_proj", "v_proj", "o_proj", "g_proj",
                                              "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa",
                                              "kv_b_proj", "q_norm", "k_norm")]
        n += [f"{p}.mlp.{x}" for x in ("gate_proj", "up_proj", "down_proj", "gate",
                                        "shared_expert_gate", "gate_up_proj")]
        n += [f"{p}.mlp.shared_expert.{x}" for x in ("gate_proj", "up_proj", "down_proj")]
        n += [f"{p}.mlp.shared_experts.{x}" for x in ("gate_proj", "up_proj", "down_proj")]
        n += [f"{p}.mlp.experts.{e}.{x}" for e in (0, 7, 127, 255)
              for x in ("gate_proj", "up_proj", "down_proj")]
        n += [f"{p}.mlp.experts", f"{p}.mlp.experts.", f"{p}.input_layernorm",
              f"{p}.post_attention_layernorm", f"{p}.mlp.gate.e_score_correction_bias",
              f"{p}.block_sparse_moe.gate", f"{p}.linear_attn.in_proj_qkvz",
              f"{p}.linear_attn.conv1d", f"{p}.eh_proj"]
        n += [f"{p}.block_sparse_moe.experts.{e}.w{w}" for e in (0, 7) for w in (1, 2, 3)]
    n += ["model.visual.blocks.0.attn.qkv", "visual.merger.mlp.0", "visual.patch_embed.proj",
          "model.vision_tower.encoder.layers.0.self_attn.q_proj", "vision_model.encoder.fc1",
          "multi_modal_projector.linear_1", "model.mtp.0.eh_proj", "mtp.layers.0.mlp.gate"]
    odd = ["", "lm_head\n", "lm_head ", " lm_head", "LM_HEAD", "Lm_Head", "lm_head\n\n",
           "lm_head\r", "lm_head\t", "model.layers.\u0663.mlp.gate", "model.layers.३.mlp.gate",
           "model.layers.\u2460.mlp.gate", "model.layers.\u00b2", "modèle.couches.0.é",
           "\u6a21\u578b.\u5c42.0.\u95e8", "model.layers.0.mlp.gate\n",
           "model.layers.0.mlp.gate\n\n",
           "a\nb", "model.layers.0.mlp.gate\r\n", "x\x85", "x\u2028y", "x\x1c", "model.🙂.gate",
           "model.🙂", "e\u0301", "e\u0301.gate", "ſ", "\u212a", "K", "ß", "SS", "ẞ",
           "model..layers",
           "model.layers.-1.mlp", "{", "}", "{1}", "x{1}", "a{1,2", "]a", "]", "a", "[", "\\",
           "#", "a|b", "|", "model.layers.0.mlp.gate ", "model layers", "model\tlayers",
           "\x00x"[1:], "xx", "xxx", "xxy", "model.layers.0.mlp.experts.0.gate_proj.weight",
           "lm_head.weight", ".", "..", "model.layers.12.12", "ab", "aab", "b", "c", "ac",
           "model.layers.7.self_attn.q_proj\x0b", "\x0c", "\x07", "model.x.", "\u0130", "ı",
           "\u03c3", "\u03c2", "\u03a3", "\u00b5", "\u03bc", "ﬀ", "\x0b", "x.x", "ab.ab", "ab.ac",
           "model.layers.0." + "a" * 900 + ".gate", "a" * 1023]
    return n + odd


NAMES = module_names()


def py_entry(entry):
    """Python's answer for an ignore/targets entry, as a function of the name"""
    if entry.startswith("re:"):
        return re.compile(entry[3:]).match
    return lambda name: entry == name


def tool(mode, patterns, names):
    """{i: (status, message)}, {i: result string}, {(i, j): message}, {i: ms}"""
    inp = "".join("P " + p.encode("utf-8", "surrogatepass").hex() + "\n" for p in patterns)
    inp += "".join("N " + n.encode("utf-8", "surrogatepass").hex() + "\n" for n in names)
    r = subprocess.run([TOOL, mode], input=inp, capture_output=True, text=True,
                       errors="replace", timeout=600)
    comp, res, errs, ms = {}, {}, {}, {}
    if r.returncode != 0:
        return None, r.stderr
    for line in r.stdout.splitlines():
        a = line.split(" ", 3)
        if a[0] == "C":
            comp[int(a[1])] = (a[2], a[3] if len(a) > 3 else "")
        elif a[0] == "R":
            res[int(a[1])] = a[2] if len(a) > 2 else ""
        elif a[0] == "E":
            errs[(int(a[1]), int(a[2]))] = a[3]
        elif a[0] == "T":
            ms[int(a[1])] = float(a[2])
    return (comp, res, errs, ms), ""


def py_compiles(p):
    try:
        re.compile(p)
        return True
    except (re.error, OverflowError, RecursionError):
        return False


def compare(label, mode, patterns, names, pyfun):
    """one TAP line per pattern group: equal answers, or the differences"""
    out, why = tool(mode, patterns, names)
    if not ok(out is not None, f"{label}: pyre_tool {mode} ran", why):
        return
    comp, res, errs, _ = out
    bad = []
    for i, p in enumerate(patterns):
        raw = p[3:] if mode == "rules" and p.startswith("re:") else p
        isre = mode == "search" or p.startswith("re:")
        st = comp.get(i, ("missing", ""))
        if isre and not py_compiles(raw):
            if st[0] != "refused":
                bad.append(f"{p!r}: Python refuses it, requantfs does not")
            continue
        if st[0] != "ok":
            bad.append(f"{p!r}: refused: {st[1]}")
            continue
        f = pyfun(p)
        want = "".join("0" if f(n) in (None, False) else "1" for n in names)
        got = res.get(i, "")
        if got != want:
            d = [j for j in range(len(names)) if j >= len(got) or got[j] != want[j]]
            bad.append(f"{p!r}: {len(d)} names differ, e.g. " + "; ".join(
                f"{names[j]!r}: python {want[j]} requantfs {got[j] if j < len(got) else '?'}"
                f"{' ' + errs.get((i, j), '') if j < len(got) and got[j] == 'E' else ''}"
                for j in d[:3]))
    ok(not bad, f"{label}: {len(patterns)} patterns x {len(names)} names, same answers as "
       f"Python's re", "\n".join(bad))


def sweep():
    """every code point of planes 0 and 1 (no surrogates, no NUL) against the
    classes whose Unicode meaning PCRE2 and Python must share"""
    cps = [chr(c) for c in range(1, 0x20000) if not 0xd800 <= c <= 0xdfff]
    pats = [r"re:\d", r"re:\w", r"re:\s", r"re:\D", r"re:\W", r"re:\S", "re:.", r"re:[\s]",
            r"re:[^\d\w]", r"re:\b", r"re:\B", r"re:.\Z", r"re:.$", r"re:[\w\s]", r"re:[^\s]",
            r"re:(?i)k", r"re:(?i)s", r"re:(?i)\u00b5", r"re:(?i)\u00df", r"re:(?i)\u0130",
            r"re:(?i)i", r"re:(?i)\u03c3", r"re:(?i)[a-z]", r"re:(?i)[^a-z]", r"re:(?i)\u1e9e",
            r"re:(?i)\u01c5", r"re:(?i)\u0345", r"re:(?i)\u212b", r"re:(?s).", r"re:[\x00-\x7f]"]
    t0 = time.time()
    compare("every code point of planes 0-1", "rules", pats, cps, py_entry)
    print(f"# sweep: {len(pats)} patterns x {len(cps)} code points in {time.time() - t0:.1f} s")
    # case-insensitive: letters whose folding Python special-cases (sre_compile's
    # equivalences) and a few more, against every cased code point
    cased = [c for c in cps if c.lower() != c or c.upper() != c or c.casefold() != c]
    letters = "aiksIKSµßẞİıſKÅΣσςΩβϐεϵθϑκϰπϖρϱφϕṡẛﬅﬆΐΐΰΰιιͅǅǄǆΆЁёԱաႠⴀᏸᏰ𐐀𐐨"
    pats = ["re:(?i)" + re.escape(ch) for ch in letters] + [
        r"re:(?i)[h-j]", r"re:(?i)[^h-j]", r"re:(?i)[\u0100-\u017f]", r"re:(?i:k)",
        r"re:(?i)(?-i:k)", r"re:(?i)[α-ω]"]
    compare(f"(?i) on {len(cased)} cased code points", "rules", pats, cased, py_entry)
    # '$' and \Z: a character after "a"
    pats = [r"re:a$", r"re:a\Z", r"re:(?m)a$", r"re:a\s*$", r"re:(?m)a\n^$"]
    compare("'$' before every code point", "rules", pats, ["a" + c for c in cps[:0x3000]],
            py_entry)


def refusals():
    """untranslated constructs: refused, with the pattern named"""
    pats = [r"re:(?x)a b", r"re:(?a)\w", r"re:(?L)a", r"re:\N{DIGIT ONE}",
            r"re:(?P<nom_é>a)", r"re:(*LIMIT_MATCH=1)a", r"re:a(?i)b", r"re:a{99999}",
            r"re:" + "(" * 300 + "a" + ")" * 300]
    out, why = tool("rules", pats, ["a"])
    if not ok(out is not None, "refusals: pyre_tool ran", why):
        return
    comp = out[0]
    bad = [f"{p!r}: {comp.get(i)}" for i, p in enumerate(pats)
           if comp.get(i, ("", ""))[0] != "refused" or p not in comp[i][1]]
    ok(not bad, f"{len(pats)} untranslated patterns refused, each message naming the entry",
       "\n".join(bad))
    # Python refuses these: so must we
    pats = ["re:(", "re:[", "re:\\", "re:*a", "re:a**", "re:a{2}{3}", "re:a*{2}", r"re:\q",
            r"re:[\A]", r"re:\8", r"re:(a)\2", r"re:(a\1)", r"re:[z-a]", r"re:(?P<1>a)",
            r"re:(?P=nope)", r"re:(?<name>a)", r"re:(?|a)", r"re:(?R)", r"re:(?P>n)", "re:)",
            r"re:\x4", r"re:\u12", r"re:\U00110000", r"re:\777", r"re:(?-i)a", r"re:a++*",
            r"re:(?i-i:a)", r"re:x{2,1}", r"re:(?P<a>a)(?P<a>b)", r"re:[a-\d]", r"re:(?<!a+)b",
            r"re:(?(2)a|b)(x)", r"re:(?'n'a)", r"re:\k<n>", r"re:\g<1>", r"re:^*", r"re:(?#x",
            r"re:(?P<a>x(?P=a))", r"re:(?P=a)(?P<a>x)"]
    out, why = tool("rules", pats, ["a"])
    if not ok(out is not None, "Python-invalid: pyre_tool ran", why):
        return
    comp = out[0]
    bad = [f"{p!r}: python {'accepts' if py_compiles(p[3:]) else 'refuses'}, "
           f"requantfs {comp.get(i)}" for i, p in enumerate(pats)
           if py_compiles(p[3:]) or comp.get(i, ("", ""))[0] != "refused"]
    ok(not bad, f"{len(pats)} patterns Python refuses are refused", "\n".join(bad))


BAD = [r"(a|aa)*$", r"(a|aa)*b", r"(a+)+b", r"(a*)*b", r"(.{1,200}){1,200}y$", r"(a|a?)+b",
       r"(?:a+){2,}b", r"(.*a){12}b", r"(\w+\w+)+\.$", r"(.+.+)+y$", r"(.*)*\d$", r"((a+)*)+$"]


def pathological():
    long_a = "a" * 1000 + "!by.!"
    names = [long_a, "model.layers.0." + "a" * 900 + ".gate!", "x" * 60 + "!y"]
    pats = ["re:" + p for p in BAD] + [r"re:(x+x+)+y"]
    t0 = time.time()
    out, why = tool("rules", pats, names)
    wall = time.time() - t0
    if not ok(out is not None, "pathological: pyre_tool ran", why):
        return
    comp, res, errs, ms = out
    for i, p in enumerate(pats):
        e = [errs.get((i, j), "") for j in range(len(names))]
        hit = [j for j in range(len(names)) if res.get(i, "")[j:j + 1] == "E"]
        ok(comp.get(i, ("",))[0] == "ok" and hit and ms.get(i, 1e9) < 1000 and
           all(p in e[j] and names[j][:40] in e[j] and "limit" in e[j] for j in hit),
           f"{p}: gave up within 1 s ({ms.get(i, -1):.0f} ms CPU for the slowest name) on "
           f"{len(hit)} of {len(names)} long names, the error naming entry and name",
           f"{comp.get(i)} {res.get(i)} {e}")
    ok(wall < 30, f"all {len(pats)} pathological patterns x {len(names)} names in {wall:.1f} s")
    # search mode (verify --tensors): every start position counts against the limit
    out, why = tool("search", [r"(a|aa)*b!$", r"(\w+\w+)+!$"], [long_a])
    ok(out is not None and out[1].get(0) == "E" and out[1].get(1) == "E" and
       max(out[3].values()) < 1000, "search mode: pathological patterns give up within 1 s",
       f"{why} {out}")


def search_mode():
    pats = [r"layers\.4[0-7]\.mlp\.experts", r"layers\.40\.mlp\.experts\.[0-9]\.",
            r"layers\.40\.", r"^model\.norm", r"weight_scale$", r"\.weight$", r"experts\.\d+\.",
            r"(gate|up)_proj", "é", r"\bgate\b", "$", "", r"\d{3}", r"^lm_head", r"(?i)LM_HEAD",
            r"(?<=\.)gate", r"[^\x00-\x7f]", r"\Z", r"mlp\.gate\Z", r"\n", r"^\s", "k_proj.weight"]
    names = [n + s for n in NAMES[::3] for s in ("", ".weight", ".weight_packed",
                                                 ".weight_scale")]
    compare("verify --tensors (re.search)", "search", pats, names,
            lambda p: re.compile(p).search)


# ---- end to end: plan, mount and verify refuse pathological patterns fast ----

def write_ckpt(d, names):
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                   "hidden_size": 32, "torch_dtype": "bfloat16"}, f)
    h, off = {}, 0
    for n in names:
        h[n + ".weight"] = {"dtype": "BF16", "shape": [16, 32], "data_offsets": [off, off + 1024]}
        off += 1024
    j = json.dumps(h, separators=(",", ":")).encode()
    j += b" " * (-len(j) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(j)) + j + bytes(off))


def end_to_end(tmp):
    # 20 modules: glibc's regex took about 3 s a module on the first pattern below
    mods = [f"model.layers.{l}.self_attn.{p}" for l in range(4) for p in ("q_proj", "k_proj",
                                                                        "v_proj", "o_proj")]
    mods += ["model.layers.0.mlp.experts.0.gate_proj", "model.layers.0.mlp.gate", "lm_head",
             "model.embed_tokens"]
    src = os.path.join(tmp, "src")
    write_ckpt(src, mods)
    rc, out = run("plan", src, "--scheme", "nvfp4a16", "--ignore", "lm_head")
    ok(rc == 0, "plan of the small checkpoint with a plain --ignore works", out)
    for pat in (r"re:(.{1,200}){1,200}y$", r"re:(.+.+)+y$", r"re:(\w+\.?)+\.$"):
        t0 = time.time()
        rc, out = run("plan", src, "--scheme", "nvfp4a16", "--ignore", pat, timeout=60)
        dt = time.time() - t0
        ok(rc == 1 and pat in out and "model.layers.0." in out and "limit" in out and dt < 10,
           f"plan --ignore '{pat}': refused in {dt:.2f} s naming the entry and a module", out)
    t0 = time.time()
    rc, out = run("plan", src, "--scheme", "nvfp4a16", "--targets", r"re:(.+.+)+y$", timeout=60)
    ok(rc == 1 and "--targets" in out and "limit" in out and time.time() - t0 < 10,
       "plan --targets with a pathological pattern: refused fast", out)
    # the same through the checkpoint's own config.json (an already quantized SRC)
    src2 = os.path.join(tmp, "src2")
    write_ckpt(src2, mods)
    cfgp = os.path.join(src2, "config.json")
    cfg = json.load(open(cfgp))
    group = {"targets": ["re:nothing$"], "format": "float-quantized",
             "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                         "symmetric": True, "dynamic": False}}
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "quantization_status": "compressed", "ignore": ["lm_head", r"re:(.+.+)+y$"],
        "config_groups": {"group_0": group}}
    json.dump(cfg, open(cfgp, "w"))
    t0 = time.time()
    rc, out = run("plan", src2, "--scheme", "nvfp4a16", timeout=60)
    ok(rc == 1 and r"re:(.+.+)+y$" in out and "limit" in out and time.time() - t0 < 10,
       "a pathological ignore entry in SRC's config.json: plan refused fast, naming it", out)
    if os.geteuid() == 0 and os.path.exists("/dev/fuse"):
        mnt = os.path.join(tmp, "mnt")
        os.makedirs(mnt)
        rqtap.MOUNTS.append(mnt)
        t0 = time.time()
        rc, out = run("mount", src, mnt, "--scheme", "nvfp4a16", "--cache",
                      os.path.join(tmp, "cache"), "--ignore", r"re:(.+.+)+y$", timeout=60)
        ok(rc == 1 and r"re:(.+.+)+y$" in out and not rqtap.mounted(mnt) and
           time.time() - t0 < 10, "mount with a pathological --ignore: refused fast, nothing "
           "mounted", out)
    else:
        ok(False, "mount part needs root and /dev/fuse (CI has both)")
    t0 = time.time()
    rc, out = run("verify", src, "--against", src, "--tensors", r"(\w+\.?)+\.$", timeout=60)
    ok(rc == 1 and "--tensors" in out and "limit" in out and time.time() - t0 < 10,
       "verify --tensors with a pathological pattern: refused fast", out)
    rc, out = run("verify", src, "--against", src, "--tensors", r"experts\.\d+\.")
    ok(rc == 0 and "1 tensors compared" in out, "verify --tensors as re.search selects one "
       "tensor", out)


def main():
    compare("corpus", "rules", PATTERNS, NAMES, py_entry)
    sweep()
    search_mode()
    refusals()
    pathological()
    with tempfile.TemporaryDirectory() as tmp:
        end_to_end(tmp)
    return rqtap.finish()


sys.exit(main())
