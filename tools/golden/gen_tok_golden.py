#!/usr/bin/env python3
"""Generates the committed golden data for the tokenizer and chat tests.

    /work/venv-ref/bin/python tools/golden/gen_tok_golden.py BUILD/tests/engine/tok_tool

tok_tool writes the synthetic tokenizer (mk_write_tokenizer, the one
`requantfs mkckpt` ships) into a temporary directory; the reference
libraries then say what the answers are:

  tests/data/tok_golden.json   Hugging Face `tokenizers`: ids of each text with
                               and without special tokens, decodes of chosen
                               id sequences (partial UTF-8, specials skipped)
  tests/data/chat_golden.json  jinja2, rendering the shipped chat template the
                               way transformers does (sandboxed, trim_blocks,
                               lstrip_blocks); checked against transformers'
                               own apply_chat_template when it is installed

Each file records an FNV-1a 64 hash of the tokenizer.json / chat template it
was made from, so the C tests notice when mkckpt's tokenizer changes and this
script must be rerun. Needs: tokenizers, jinja2 (transformers optional).
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "tests", "data")


def fnv64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


TEXTS = [
    ("empty", ""),
    ("ascii", "Hello, world! This is a simple sentence."),
    ("contractions", "I'm sure they'll say it's what we've done, isn't it? You'D BETTER. He'S"),
    ("contraction-long-s", "it'\u017f 'S 's 'st '\u017ft 'ß"),
    ("digits", "In 2026, 1234567890 digits; pi = 3.14159, ip 127.0.0.1, $1,234.56, x2 ²³"),
    ("whitespace-runs", "a  b   c    d\t\te \u00a0f\u3000g  "),
    ("newline-runs", "one\ntwo\n\nthree\n\n\nfour\n\n\n\n"),
    ("crlf", "line one\r\nline two\r\n\r\nend\r\n"),
    ("lone-cr", "a\rb\r\rc\r \rd\n\r\n\r"),
    ("tabs", "\tindented\n\t\tdouble\n\t \tmixed\t\n"),
    ("leading-newlines", "\n\n\n  leading"),
    ("trailing-spaces-newline", "word   \n  next \n"),
    ("code-c", "static int f(int x)\n{\n\tif (x > 0) {\n\t\treturn x * 2; // twice\n\t}\n\treturn -x;\n}\n"),
    ("code-python", "def encode(self, text):\n    ids = []\n    for w in self.split(text):\n"
                    "        ids.extend(self.merge(w))  # merge\n    return ids\n"),
    ("json", '{"hidden_size": 3072, "eos_token_id": [2, 24], "name": "Laguna"}'),
    ("punctuation", "Wait... what?! (yes) [no] {maybe} <tag/> a->b a=>b a::b ;;\n;\n"),
    ("cjk", "日本語の文章も少し入れておく。東京は日本の首都です。中文文本也在这里。한국어 텍스트"),
    ("emoji", "Emoji 🙂🚀✅ and a family 👨‍👩‍👧 and flags 🇫🇷🇯🇵 done"),
    ("combining", "e\u0301te\u0301 cafe\u0301 n\u0303 a\u0308\u0304 \u0301alone"),
    ("rtl", "שלום עולם مرحبا بالعالم 123 עברית"),
    ("cyrillic-greek", "Это пример текста. Ελληνικά γράμματα."),
    ("mixed-scripts", "abcабв日本123١٢٣४५६"),
    ("special-tokens", "〈|EOS|〉<system>Be brief.</system>\n<user>Hi</user>\n<assistant><think>"),
    ("special-inside-words", "a<think>b</think>c</assistant>d<tool_call>{}</tool_call>〈|PAD|〉〈|EOS|"),
    ("special-adjacent", "<think><think></think></think>〈|EOS|〉〈|EOS|〉"),
    ("ascii-imitation", "<|EOS|> <|PAD|> < think > <thin k>"),
    ("long-word", "Pneumonoultramicroscopicsilicovolcanoconiosis" * 3),
    ("long-space-run", " " * 100 + "x" + "\t" * 50),
    ("long-newline-run", "a" + "\n" * 60 + "b" + "\r\n" * 30),
    ("control-chars", "nul\x00inside\x01\x02\x7f end\x1b[0m"),
    ("unusual-spaces", "a\u2028b\u2029c\u0085d\u200be\u2009f\u202fg"),
    ("supplementary", "𝒳𝒴𝒵 𐍈 𝟘𝟙𝟚 \U0001f9ea\U00010000\U0010fffd"),
    ("apostrophe-variants", "don’t can't won`t l'été 'tis O'Neil"),
    ("chat-like", "User: What is 2+2?\nAssistant: 4.\n\nUser: Thanks!\n"),
]

DECODES = [
    ([2, 18, 19, 23, 24, 9], False),
    ([2, 18, 19, 23, 24, 9], True),
]


def run(tool, mode, lines, *args):
    out = subprocess.run([tool, mode] + list(args), input="".join(l + "\n" for l in lines).encode(),
                         capture_output=True, check=True).stdout.decode()
    return out.split("\n")[:len(lines)]


def chat_cases():
    sysmsg = {"role": "system", "content": "You are a terse assistant.  \n\t"}
    u1 = {"role": "user", "content": "What is 2+2?"}
    a1 = {"role": "assistant", "content": "4.", "reasoning_content": "Add two and two."}
    a_plain = {"role": "assistant", "content": "Sure."}
    a_inline = {"role": "assistant", "content": "<think>inline thought</think>Done."}
    a_closed = {"role": "assistant", "content": "</think>No thinking."}
    u2 = {"role": "user", "content": "  And in base 3?\n"}
    tool = {"role": "tool", "content": '{"result": 11}'}
    later_sys = {"role": "system", "content": "Answer in French."}
    uni = {"role": "user", "content": "日本語 🙂 e\u0301\r\n\u2028 '<think>'"}
    convs = [
        ("user-only", [u1]),
        ("system-user", [sysmsg, u1]),
        ("multi-turn", [sysmsg, u1, a1, u2]),
        ("assistant-no-reasoning", [u1, a_plain, u2]),
        ("assistant-inline-think", [u1, a_inline, u2]),
        ("assistant-closed-think", [u1, a_closed, u2]),
        ("tool-and-later-system", [u1, a_plain, tool, later_sys, u2]),
        ("empty-system", [{"role": "system", "content": ""}, u1]),
        ("whitespace-system", [{"role": "system", "content": " \n\u3000\x1c"}, u1]),
        ("unicode", [sysmsg, uni]),
        ("empty-conversation", []),
        ("empty-contents", [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]),
        ("ends-with-assistant", [sysmsg, u1, a1]),
    ]
    cases = []
    for name, msgs in convs:
        for gen in (True, False):
            for think in (True, False, None):
                cases.append({"name": name, "messages": msgs, "add_generation_prompt": gen,
                              "enable_thinking": think})
    return cases


def render(template, case):
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    kw = {"messages": case["messages"], "add_generation_prompt": case["add_generation_prompt"]}
    if case["enable_thinking"] is not None:
        kw["enable_thinking"] = case["enable_thinking"]
    return env.from_string(template).render(**kw)


def dump(path, head, lists):
    """JSON with one line per case, so that diffs stay readable."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for k, v in head.items():
            f.write(" %s: %s,\n" % (json.dumps(k), json.dumps(v, ensure_ascii=False)))
        for n, (k, items) in enumerate(lists.items()):
            f.write(" %s: [\n" % json.dumps(k))
            f.write(",\n".join("  " + json.dumps(x, ensure_ascii=False) for x in items))
            f.write("\n ]%s\n" % ("," if n + 1 < len(lists) else ""))
        f.write("}\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_tok_golden.py PATH/TO/tok_tool")
    tool = sys.argv[1]
    import jinja2
    import tokenizers
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory() as d:
        vocab_size = int(subprocess.run([tool, "write", d], capture_output=True, check=True).stdout)
        tj = open(os.path.join(d, "tokenizer.json"), "rb").read()
        cfg = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
        tk = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        try:
            from transformers import AutoTokenizer
            hf = AutoTokenizer.from_pretrained(d)
        except ImportError:
            hf = None
    template = cfg["chat_template"]
    assert tk.get_vocab_size() == vocab_size, (tk.get_vocab_size(), vocab_size)

    cases = []
    for name, text in TEXTS:
        ids = tk.encode(text, add_special_tokens=False).ids
        cases.append({"name": name, "text": text, "hex": text.encode().hex(), "ids": ids,
                      "ids_special": tk.encode(text, add_special_tokens=True).ids})
        assert tk.decode(ids, skip_special_tokens=False) == text, name
    # partial UTF-8: the byte tokens of multi-byte characters, cut short
    euro = list("€".encode())          # e2 82 ac
    emoji = list("🙂".encode())        # f0 9f 99 82
    # the byte symbols are ids 70..325 in code point order of the GPT-2 alphabet
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
    others = [b for b in range(256) if b not in printable]
    order = printable + others
    byte_id = {b: 70 + order.index(b) for b in range(256)}
    for b, i in byte_id.items():
        assert tk.decode([i]).encode() == (bytes([b]) if b < 0x80 else "\ufffd".encode()), (b, i)
    decodes = list(DECODES)
    decodes += [([byte_id[euro[0]]], False), ([byte_id[euro[0]], byte_id[euro[1]]], False),
                ([byte_id[b] for b in euro], False), ([byte_id[emoji[0]], byte_id[emoji[1]], 157], False),
                ([byte_id[0xff], byte_id[0xc0], byte_id[0x80], byte_id[0xed], byte_id[0xa0], byte_id[0x80]], False),
                ([byte_id[euro[0]], 2, byte_id[euro[1]], byte_id[euro[2]]], True),
                ([byte_id[euro[0]], 2, byte_id[euro[1]], byte_id[euro[2]]], False),
                ([byte_id[b] for b in emoji[:3]], False), (list(range(0, 80)), False),
                (list(range(0, 80)), True), ([100000, 5, -1], False)]
    dec = []
    for ids, skip in decodes:
        ok = [i for i in ids if 0 <= i < vocab_size]
        text = tk.decode(ok, skip_special_tokens=skip)
        dec.append({"ids": ids, "skip_special": skip, "hex": text.encode().hex()})
    dump(os.path.join(DATA, "tok_golden.json"),
         {"generator": "tools/golden/gen_tok_golden.py", "tokenizers": tokenizers.__version__,
          "tokenizer_json_fnv64": fnv64(tj), "vocab_size": vocab_size},
         {"cases": cases, "decodes": dec})

    chats = []
    for case in chat_cases():
        text = render(template, case)
        if hf is not None and case["messages"]:   # transformers refuses empty conversations
            kw = {} if case["enable_thinking"] is None else {"enable_thinking": case["enable_thinking"]}
            via_hf = hf.apply_chat_template(case["messages"], tokenize=False,
                                            add_generation_prompt=case["add_generation_prompt"], **kw)
            assert via_hf == text, (case, via_hf, text)
        case["rendered"] = text
        chats.append(case)
    dump(os.path.join(DATA, "chat_golden.json"),
         {"generator": "tools/golden/gen_tok_golden.py", "jinja2": jinja2.__version__,
          "template_fnv64": fnv64(template.encode())},
         {"cases": chats})
    print("tok_golden.json: %d texts, %d decodes; chat_golden.json: %d renders; transformers check: %s"
          % (len(cases), len(dec), len(chats), "yes" if hf is not None else "no"))


if __name__ == "__main__":
    main()
