#!/usr/bin/env python3
"""requantfs against llm-compressor's model_free_ptq, tensor by tensor (issue 12).

tests/data/scheme_peer_model.json (tools/golden/gen_scheme_peer.py --model) holds what
model_free_ptq 0.14.0.1 (compressed-tensors 0.19.0, CPU) wrote for the synthetic checkpoint
`requantfs mkckpt OUT --dense --no-tokenizer --layers 2 --experts 4`, per scheme: every
output tensor's dtype, shape and sha256 and the quantization_config. This test makes the
same checkpoint, runs `requantfs export --scheme S` with the same ignore list, and (as root
with /dev/fuse) mounts it and reads every file through FUSE; each must give exactly those
tensors and that quantization_config. The same again for scheme_wide.py's 128-divisible
Llama-shaped model in BF16 and in F16, which every scheme (W8A16/W4A16 included) takes whole.
No torch: CI's .venv is enough.

Usage: test_scheme_peer.py REQUANTFS"""
import hashlib, json, os, struct, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap  # noqa: E402
from rqtap import ok, run, mounted, MOUNTS  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scheme_wide  # noqa: E402

rqtap.init(sys.argv[1])
GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                      "scheme_peer_model.json")
CAN_MOUNT = os.geteuid() == 0 and os.path.exists("/dev/fuse")
OURS = {"NVFP4A16": "nvfp4a16", "FP8_DYNAMIC": "fp8-dynamic", "W8A16": "w8a16",
        "W4A16": "w4a16"}


def tensors(d):
    """name -> {dtype, shape, sha256, file} over the safetensors files of directory d."""
    out = {}
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".safetensors"):
            continue
        with open(os.path.join(d, fn), "rb") as f:
            data = f.read()
        n = struct.unpack("<Q", data[:8])[0]
        for k, v in json.loads(data[8:8 + n]).items():
            if k == "__metadata__":
                continue
            b, e = v["data_offsets"]
            out[k] = {"dtype": v["dtype"], "shape": v["shape"], "file": fn,
                      "sha256": hashlib.sha256(data[8 + n + b:8 + n + e]).hexdigest()}
    return out


def todo(cond, what, reason, detail=()):
    """A TAP line with a TODO directive: shown, counted, but not a failure."""
    rqtap.n += 1
    print(("ok" if cond else "not ok") + f" {rqtap.n} - {what} # TODO {reason}", flush=True)
    for line in list(detail)[:8]:
        print("#   " + line, flush=True)


def compare(label, d, want, fused):
    """Tensors and quantization_config of directory d against one scheme's golden entry;
    fused: an NVFP4 scheme (fused partners share a global scale)."""
    got = tensors(d)
    missing = sorted(set(want["tensors"]) - set(got))
    extra = sorted(set(got) - set(want["tensors"]))
    ok(not missing and not extra, f"{label}: the same {len(want['tensors'])} tensor names as "
       "model_free_ptq", f"missing {missing[:8]}\nextra {extra[:8]}")
    bad = []
    for k, w in sorted(want["tensors"].items()):
        g = got.get(k)
        if g and (g["dtype"], g["shape"], g["sha256"]) != (w["dtype"], w["shape"], w["sha256"]):
            bad.append(f"{k}: ours {g['dtype']} {g['shape']} {g['sha256'][:12]}, "
                       f"peer {w['dtype']} {w['shape']} {w['sha256'][:12]}")
    ok(not bad, f"{label}: every tensor's dtype, shape and bytes (sha256) equal "
       "model_free_ptq's", "\n".join(bad))
    wrong_shard = [f"{k}: ours {got[k]['file']}, peer {w['file']}"
                   for k, w in sorted(want["tensors"].items())
                   if k in got and got[k]["file"] != w["file"]]
    # model_free_ptq saves an NVFP4 primary's fused partners (k/v_proj with q_proj, up_proj
    # with gate_proj) in the primary's shard; requantfs keeps each tensor in its own shard.
    # Tensor bytes and names are identical either way (vLLM loads both): a TODO for the
    # NVFP4 schemes (an unexpected pass, once the plan moves them too, fails: update this),
    # a plain check for the others, which move nothing.
    if fused:
        todo(not wrong_shard, f"{label}: every tensor in model_free_ptq's shard",
             "partners moved to the primary's shard by model_free_ptq", wrong_shard)
    else:
        ok(not wrong_shard, f"{label}: every tensor in model_free_ptq's shard", wrong_shard)
    with open(os.path.join(d, "config.json")) as f:
        qc = json.load(f).get("quantization_config")
    ok(qc == want["quantization_config"], f"{label}: quantization_config equals "
       "model_free_ptq's (parsed)",
       json.dumps(qc, sort_keys=True) + "\n" + json.dumps(want["quantization_config"],
                                                          sort_keys=True))
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        idx = json.load(f)
    ok(idx["metadata"].get("total_size") == want["index_metadata"]["total_size"] and
       {k: v["file"] for k, v in got.items()} == idx["weight_map"],
       f"{label}: index total_size and weight_map agree",
       f"{idx['metadata']} vs {want['index_metadata']}")


def check_schemes(tmp, tag, src, schemes):
    """export (and, as root, mount) SRC with every scheme of the golden entry `schemes`."""
    for peer, info in sorted(schemes.items()):
        scheme = OURS[peer]
        label = f"{tag} {scheme}"
        ign = [a for i in info["ignore"] for a in ("--ignore", i)]
        dst = os.path.join(tmp, f"x-{tag}-{scheme}")
        rc, out = run("export", src, dst, "--scheme", scheme, "--quiet", *ign)
        if ok(rc == 0, f"{label}: export --scheme {scheme} " + " ".join(ign), out):
            compare(f"{label} export", dst, info, peer == "NVFP4A16")
        if not CAN_MOUNT:
            continue
        mnt, cache = os.path.join(tmp, f"m-{tag}-{scheme}"), os.path.join(tmp, f"c-{tag}-{scheme}")
        os.makedirs(mnt)
        MOUNTS.append(mnt)
        rc, out = run("mount", src, mnt, "--scheme", scheme, "--cache", cache, *ign)
        if ok(rc == 0 and mounted(mnt), f"{label}: mount --scheme {scheme}", out):
            compare(f"{label} mount", mnt, info, peer == "NVFP4A16")
            rc, out = run("umount", mnt, timeout=60)
            ok(rc == 0 and not mounted(mnt), f"{label}: umount", out)


def main():
    with open(GOLDEN) as f:
        golden = json.load(f)
    tmp = tempfile.mkdtemp(prefix="rq-scheme-peer-")
    os.chmod(tmp, 0o755)
    try:
        src = os.path.join(tmp, "src")
        rc, out = run("mkckpt", src, *golden["mkckpt_args"])
        if not ok(rc == 0, "mkckpt " + " ".join(golden["mkckpt_args"]), out):
            return rqtap.finish()
        srct = tensors(src)
        ok({k: v["sha256"] for k, v in srct.items()} == golden["source_sha256"],
           "mkckpt makes the very checkpoint the golden data was generated from",
           "regenerate with tools/golden/gen_scheme_peer.py --model if mkckpt changed on purpose")
        check_schemes(tmp, "mkckpt", src, golden["schemes"])
        # the 128-divisible Llama-shaped model, BF16 and F16: every Linear, every scheme
        for dt, w in sorted(golden["wide"].items()):
            wsrc = scheme_wide.write(os.path.join(tmp, "wide-" + dt), dt)
            got = {k: v["sha256"] for k, v in tensors(wsrc).items()}
            if ok(got == w["source_sha256"], f"wide {dt}: scheme_wide.py writes the very "
                  "checkpoint the golden data was generated from"):
                check_schemes(tmp, "wide-" + dt, wsrc, w["schemes"])
        if not CAN_MOUNT:
            print("# mount part skipped: needs root and /dev/fuse (as CI has)")
    finally:
        rqtap.cleanup(tmp)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
