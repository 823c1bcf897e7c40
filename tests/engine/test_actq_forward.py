#!/usr/bin/env python3
"""The CPU engine on W4A4 checkpoints (issue 21 item 4): each Linear's input
quantized as vLLM quantizes it, checked against a numpy forward pass that
does the same with vLLM's own formulas (nvfp4_emulation_utils.py: the scale
gs·(amax·fl(1/6)) rounded to E4M3, output_scale gs/s, cast_to_fp4's
thresholds, x' = q·(s/gs)), written here independently of the C code.

usage: test_actq_forward.py REQUANTFS ACTQ_LOGITS TINY_DIR GOLDEN_JSON [TEST_EK_EMUL]
                                                                  (.venv: numpy)

For each tiny family (mistral: dense; mixtral: routed experts) the test
exports the BF16 model with `--scheme nvfp4a16`, then makes it W4A4 the way
llm-compressor's NVFP4 preset lays it out: an input_global_scale F32 [1] per
NVFP4 Linear (448·6 / amax of its input over the test prompt, from the
numpy forward, i.e. a calibration) and input_activations in the config
group. k_proj's and each expert's w3 scale are then made smaller than their
partners' so that vLLM's fusion rule (one scale for q/k/v, one for w1/w3:
the largest) is exercised. Checks:
  - the reference is right: the engine with RQ_ENGINE_ACT_QUANT=0 (A16) ==
    the numpy forward without input quantization;
  - W4A4 engine == W4A4 numpy, logits of every position;
  - W4A4 differs from A16 by far more than that tolerance;
  - the NVFP4A16 export (config without input_activations) is unchanged by
    the feature: bit for bit the A16 logits, no Linear quantizes its input;
  - mistral W4A4 engine == the peer: transformers' model (float32, weights set to the
    same dequantized values) with compressed-tensors' input fake quantization
    and vLLM's fused scales (GOLDEN_JSON, tests/data/actq_peer.json, from
    tools/golden/gen_actq_peer_golden.py, for the checkpoint bytes its sha256 names);
  - a W4A4 config with a module's input_global_scale missing is refused,
    naming the tensor;
  - FP8_DYNAMIC (export --scheme fp8-dynamic of mistral): the engine ==
    numpy with vLLM's per-token FP8 inputs (scale max(amax/448, 1/(448·512)));
  - with TEST_EK_EMUL (tests/kernels/test_ek_emul --w4a4): the CUDA engine's
    host code on the same W4A4 checkpoints, its GPU ops emulated by their CPU
    twins (ek_actq_nvfp4 before q/k/v, o, gate/up, down, lm_head; ek_moe_q for
    the experts), against the CPU engine.
"""
import hashlib, json, os, shutil, struct, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rqtap
from rqtap import ok

try:
    import numpy as np
except ImportError as e:
    rqtap.no_venv(e)

F32 = np.float32
TOKENS = [1, 17, 250, 33, 401, 7, 99, 320, 5, 64, 211]
TOL = 1e-3          # max|d logit| <= TOL * max|logit|, as the other engine tests

# ------------------------------------------------------------ safetensors

def st_read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    meta = hdr.pop("__metadata__", None)
    out = {}
    for k, v in hdr.items():
        b, e = v["data_offsets"]
        out[k] = (v["dtype"], v["shape"], data[b:e])
    return out, meta


def st_write(path, tensors, meta):
    hdr, off, blobs = {}, 0, []
    if meta is not None:
        hdr["__metadata__"] = meta
    for k in sorted(tensors):
        dt, shape, raw = tensors[k]
        hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def e4m3_table():
    t = np.zeros(256, dtype=F32)
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        v = m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        t[b] = -v if b & 128 else v
    return t

E4M3 = e4m3_table()
E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=F32)


def as_f32(dt, shape, raw):
    if dt == "BF16":
        u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        return u.view(F32).reshape(shape)
    if dt == "F32":
        return np.frombuffer(raw, dtype=F32).reshape(shape)
    raise ValueError(dt)


def weights(tensors):
    """name -> float32 weight ([rows, cols]); NVFP4 as e2m1·e4m3 / weight_global_scale."""
    w = {}
    for k, (dt, shape, raw) in tensors.items():
        if k.endswith(".weight_packed"):
            m = k[: -len(".weight_packed")]
            p = np.frombuffer(raw, dtype=np.uint8).reshape(shape)
            codes = np.stack([p & 15, p >> 4], axis=-1).reshape(shape[0], shape[1] * 2)
            sc = E4M3[np.frombuffer(tensors[m + ".weight_scale"][2], dtype=np.uint8)]
            sc = sc.reshape(shape[0], -1)
            gs = np.frombuffer(tensors[m + ".weight_global_scale"][2], dtype=F32)[0]
            w[m + ".weight"] = (E2M1[codes] * np.repeat(sc, 16, axis=1)) / gs
        elif dt == "F8_E4M3" and k.endswith(".weight"):      # FP8 (float-quantized): e4m3 · weight_scale, one product
            q = E4M3[np.frombuffer(raw, dtype=np.uint8)].reshape(shape)
            sdt, sshape, sraw = tensors[k + "_scale"]
            w[k] = (q * as_f32(sdt, sshape, sraw)).astype(F32)
        elif dt in ("BF16", "F32") and not k.endswith("_scale"):
            w[k] = as_f32(dt, shape, raw)
    return w

# ---------------------------------------------------- vLLM's input quantizer

def e4m3_rne(s):
    """0 <= s <= 448 to the nearest E4M3 value, ties to even (np.round)."""
    _, E = np.frexp(s)
    q = np.ldexp(np.ones_like(s), (np.maximum(E - 1, -6) - 3).astype(np.int32))
    return (np.round(s / q) * q).astype(F32)


def cast_to_fp4(x):
    """vLLM's cast_to_fp4, threshold by threshold."""
    sign = np.where(x < 0, F32(-1), F32(1))
    a = np.abs(x)
    r = np.where(a > 5.0, 6.0, 0.0)
    r = np.where((a >= 3.5) & (a <= 5.0), 4.0, r)
    r = np.where((a > 2.5) & (a < 3.5), 3.0, r)
    r = np.where((a >= 1.75) & (a <= 2.5), 2.0, r)
    r = np.where((a > 1.25) & (a < 1.75), 1.5, r)
    r = np.where((a >= 0.75) & (a <= 1.25), 1.0, r)
    r = np.where((a > 0.25) & (a < 0.75), 0.5, r)
    return (r * sign).astype(F32)


def nvfp4_qdq(x, gs):
    T, K = x.shape
    g = x.reshape(T, K // 16, 16).astype(F32)
    gs = F32(gs)
    amax = np.abs(g).max(axis=-1, keepdims=True)
    s = gs * (amax * F32(1.0 / 6.0))
    s = e4m3_rne(np.minimum(s, F32(448)))
    with np.errstate(divide="ignore"):
        inv = np.where(s == 0, F32(0), gs / s).astype(F32)
    q = cast_to_fp4(np.clip(g * inv, F32(-6), F32(6)))
    return (q * (s / gs)).reshape(T, K).astype(F32)

def fp8_token_qdq(x):
    """vLLM's dynamic per-token FP8: s = max(amax/448, 1/(448·512)), e4m3(clamp(x/s)) · s."""
    a = np.abs(x).max(axis=-1, keepdims=True).astype(F32)
    s = np.maximum(a / F32(448), F32(1) / F32(448 * 512)).astype(F32)
    q = (x / s).astype(F32)
    m = e4m3_rne(np.minimum(np.abs(q), F32(448)))
    return (np.where(np.signbit(q), -m, m) * s).astype(F32)

# -------------------------------------------------------- the forward pass

class Ref:
    """transformers' Mistral/Mixtral forward in float32 on the checkpoint's
    dequantized weights; act: module -> input global scale (vLLM's fused
    value) or None for A16; amax: filled with each Linear's input max|x|."""

    def __init__(self, cfg, w, act=None):
        self.c, self.w, self.act, self.amax = cfg, w, act or {}, {}

    def lin(self, name, x):
        self.amax[name] = max(self.amax.get(name, 0.0), float(np.abs(x).max()) if x.size else 0.0)
        if name in self.act:
            x = fp8_token_qdq(x) if self.act[name] == "fp8" else nvfp4_qdq(x, self.act[name])
        return (x @ self.w[name + ".weight"].T).astype(F32)

    def rms(self, x, name):
        v = np.mean(x * x, axis=-1, keepdims=True, dtype=F32)
        return (self.w[name] * (x * (F32(1) / np.sqrt(v + F32(self.c["rms_norm_eps"]))))).astype(F32)

    def forward(self, toks):
        c = self.c
        T, hd = len(toks), c["head_dim"]
        nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
        inv = F32(1) / (F32(c["rope_theta"]) ** (np.arange(0, hd, 2, dtype=F32) / F32(hd)))
        fr = np.arange(T, dtype=F32)[:, None] * inv[None, :]
        emb = np.concatenate([fr, fr], axis=-1)
        cos, sin = np.cos(emb).astype(F32), np.sin(emb).astype(F32)

        def rope(x):   # [T, h, hd]
            rot = np.concatenate([-x[..., hd // 2:], x[..., : hd // 2]], axis=-1)
            return (x * cos[:, None, :] + rot * sin[:, None, :]).astype(F32)

        win = c.get("sliding_window") or T
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        mask = (j <= i) & (i - j < win)
        x = self.w["model.embed_tokens.weight"][toks]
        for l in range(c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            h = self.rms(x, p + "input_layernorm.weight")
            q = rope(self.lin(p + "self_attn.q_proj", h).reshape(T, nh, hd))
            k = rope(self.lin(p + "self_attn.k_proj", h).reshape(T, nkv, hd))
            v = self.lin(p + "self_attn.v_proj", h).reshape(T, nkv, hd)
            o = np.zeros((T, nh, hd), dtype=F32)
            for hh in range(nh):
                kv = hh // (nh // nkv)
                sc = (q[:, hh] @ k[:, kv].T) * F32(1 / np.sqrt(hd))
                sc = np.where(mask, sc, -np.inf).astype(F32)
                e = np.exp(sc - sc.max(axis=-1, keepdims=True))
                o[:, hh] = (e / e.sum(axis=-1, keepdims=True)) @ v[:, kv]
            x = x + self.lin(p + "self_attn.o_proj", o.reshape(T, nh * hd))
            h = self.rms(x, p + "post_attention_layernorm.weight")
            x = x + (self.moe(p, h) if "num_local_experts" in c else self.mlp(p + "mlp.", h))
        return self.lin("lm_head", self.rms(x, "model.norm.weight"))

    def mlp(self, p, h, names=("gate_proj", "up_proj", "down_proj")):
        g, u = self.lin(p + names[0], h), self.lin(p + names[1], h)
        return self.lin(p + names[2], (g / (F32(1) + np.exp(-g)) * u).astype(F32))

    def moe(self, p, h):
        c = self.c
        p += "block_sparse_moe."
        logits = (h @ self.w[p + "gate.weight"].T).astype(F32)
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        prob = e / e.sum(axis=-1, keepdims=True)
        K = c["num_experts_per_tok"]
        top = np.argsort(-prob, axis=-1, kind="stable")[:, :K]
        wt = np.take_along_axis(prob, top, axis=-1)
        wt = wt / wt.sum(axis=-1, keepdims=True)
        out = np.zeros_like(h)
        for ex in range(c["num_local_experts"]):
            rows, slot = np.nonzero(top == ex)
            if len(rows):
                y = self.mlp(p + f"experts.{ex}.", h[rows], ("w1", "w3", "w2"))
                out[rows] += wt[rows, slot][:, None] * y
        return out

# ------------------------------------------------------------------ test

def engine(tool, d, env_off=False):
    env = dict(os.environ)
    if env_off:
        env["RQ_ENGINE_ACT_QUANT"] = "0"
    else:
        env.pop("RQ_ENGINE_ACT_QUANT", None)
    out = os.path.join(d, "logits.bin")
    r = subprocess.run([tool, d, out] + [str(t) for t in TOKENS], capture_output=True, text=True,
                       env=env, timeout=120)
    if r.returncode:
        return None, r.stderr.strip()
    n_act = int(r.stdout.split()[1])
    return np.fromfile(out, dtype=F32).reshape(len(TOKENS), -1), n_act


def maxd(a, b):
    return float(np.abs(a - b).max())


def fused(names, gs):
    """vLLM's fusion: q/k/v and gate/up (w1/w3) run with the largest scale."""
    out = dict(gs)
    for m in gs:
        for a, parts in ((".self_attn.", ("q_proj", "k_proj", "v_proj")),
                         (".mlp.", ("gate_proj", "up_proj")), ("", ("w1", "w3"))):
            tail = m.rsplit(".", 1)[-1]
            if tail in parts and (a in m or a == ""):
                base = m[: -len(tail)]
                out[m] = max(gs[base + t] for t in parts if base + t in gs)
    return out


# families with a peer golden (tools/golden/gen_actq_peer_golden.py): transformers 5 keeps
# Mixtral's experts as fused 3-D tensors, out of compressed-tensors' per-Linear reach
PEER_FAMILIES = ("mistral",)


def sha_of(d):
    return hashlib.sha256(open(os.path.join(d, "model.safetensors"), "rb").read()).hexdigest()


W4A4_INPUTS = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
               "dynamic": "local", "symmetric": True, "observer": "static_minmax",
               "observer_kwargs": {}, "actorder": None, "block_structure": None,
               "scale_dtype": "torch.float8_e4m3fn", "zp_dtype": None}


def build_w4a4(rq, tiny, fam, tmp):
    """export --scheme nvfp4a16 of tiny/fam, then its W4A4 twin: input_global_scale
    = 448·6 / amax (the numpy forward's, on TOKENS; 3 significant digits, so the
    bytes do not depend on the BLAS), k_proj's halved and w3's times 0.7 (vLLM's
    fusion takes the largest); input_activations as llm-compressor's NVFP4 preset.
    A dict of what the checks need, or the export's stderr (a str) on failure.
    Also tools/golden/gen_actq_peer_golden.py's checkpoints."""
    src, a16 = os.path.join(tiny, fam), os.path.join(tmp, fam + "-nvfp4a16")
    r = subprocess.run([rq, "export", src, a16, "--scheme", "nvfp4a16"], capture_output=True,
                       text=True, timeout=300)
    if r.returncode:
        return r.stderr
    cfg = json.load(open(os.path.join(a16, "config.json")))
    tensors, meta = st_read(os.path.join(a16, "model.safetensors"))
    w = weights(tensors)
    nv = sorted(k[: -len(".weight_packed")] for k in tensors if k.endswith(".weight_packed"))
    ref = Ref(cfg, w)
    l16 = ref.forward(TOKENS)
    gs = {}
    hmax = max(v for k, v in ref.amax.items())
    for m in nv:
        a = ref.amax.get(m, 0.0) or hmax       # an expert no token reached: the largest input
        g = F32(float("%.3g" % (448.0 * 6.0 / a)))
        if m.endswith("k_proj"):
            g = g * F32(0.5)                     # smaller than q's: vLLM takes the largest
        if m.endswith(".w3"):
            g = g * F32(0.7)
        gs[m] = F32(g)
    w4 = os.path.join(tmp, fam + "-w4a4")
    shutil.copytree(a16, w4)
    t4 = dict(tensors)
    for m in nv:
        t4[m + ".input_global_scale"] = ("F32", [1], struct.pack("<f", gs[m]))
    st_write(os.path.join(w4, "model.safetensors"), t4, meta)
    cfg4 = json.loads(json.dumps(cfg))
    for g in cfg4["quantization_config"]["config_groups"].values():
        g["input_activations"] = dict(W4A4_INPUTS)
    json.dump(cfg4, open(os.path.join(w4, "config.json"), "w"), indent=2)
    return {"a16": a16, "w4": w4, "cfg": cfg4, "tensors": tensors, "t4": t4, "meta": meta,
            "w": w, "nv": nv, "gs": gs, "l16": l16}


def family(rq, tool, tiny, fam, tmp, golden):
    b = build_w4a4(rq, tiny, fam, tmp)
    if not ok(isinstance(b, dict), f"{fam}: export --scheme nvfp4a16", b):
        return
    a16, w4, cfg, w, nv, gs, l16 = b["a16"], b["w4"], b["cfg"], b["w"], b["nv"], b["gs"], b["l16"]
    t4, meta = b["t4"], b["meta"]
    e16, n16 = engine(tool, a16)
    if not ok(e16 is not None, f"{fam}: engine runs the NVFP4A16 export", n16):
        return
    e16off, _ = engine(tool, a16, env_off=True)
    ok(n16 == 0 and np.array_equal(e16, e16off),
       f"{fam}: NVFP4A16 (no input_activations): no Linear quantizes its input ({n16}), logits "
       "bit for bit those of RQ_ENGINE_ACT_QUANT=0")
    scale = float(np.abs(l16).max())
    d = maxd(e16, l16)
    ok(d <= TOL * scale, f"{fam}: A16 engine == numpy reference: max|d| {d:.3g} <= {TOL} x {scale:.3g}")

    l4 = Ref(cfg, w, fused(nv, gs)).forward(TOKENS)
    e4, n4 = engine(tool, w4)
    if not ok(e4 is not None, f"{fam}: engine runs the W4A4 checkpoint", n4):
        return
    ok(n4 == len(nv), f"{fam}: every NVFP4 Linear quantizes its input ({n4} of {len(nv)})")
    d4 = maxd(e4, l4)
    ok(d4 <= TOL * scale, f"{fam}: W4A4 engine == numpy W4A4 (vLLM's input quantizer, fused "
       f"scales): max|d| {d4:.3g} <= {TOL} x {scale:.3g} over {len(TOKENS)} positions")
    dq = maxd(e4, e16)
    ok(dq > 20 * TOL * scale, f"{fam}: W4A4 logits differ from A16's: max|d| {dq:.3g} > 20 x the "
       f"tolerance {TOL * scale:.3g}")
    e4off, _ = engine(tool, w4, env_off=True)
    ok(e4off is not None and np.array_equal(e4off, e16),
       f"{fam}: RQ_ENGINE_ACT_QUANT=0 on the W4A4 checkpoint gives the A16 logits bit for bit")

    # the peer: transformers' model with compressed-tensors' input fake quantization
    # (tools/golden/gen_actq_peer_golden.py), on these very bytes
    gd = golden.get("models", {}).get(fam)
    if fam in PEER_FAMILIES and ok(gd is not None and gd.get("sha256") == sha_of(w4),
            f"{fam}: the golden of tools/golden/gen_actq_peer_golden.py is for these bytes",
            "rerun tools/golden/gen_actq_peer_golden.py (golden sha256 %s, checkpoint %s)"
            % ((gd or {}).get("sha256"), sha_of(w4))):
        gl = np.array(gd["logits"], dtype=F32)
        dg = maxd(e4, gl) if gl.shape == e4.shape else float("inf")
        ok(dg <= TOL * scale,
           f"{fam}: W4A4 engine == transformers + compressed-tensors' input fake quantization "
           f"(vLLM's fused scales): max|d| {dg:.3g} <= {TOL} x {scale:.3g}")

    # a missing input_global_scale under a W4A4 config: refused by name
    bad = os.path.join(tmp, fam + "-missing")
    shutil.copytree(w4, bad)
    gone = nv[len(nv) // 2] + ".input_global_scale"
    tb = dict(t4)
    del tb[gone]
    st_write(os.path.join(bad, "model.safetensors"), tb, meta)
    eb, msg = engine(tool, bad)
    ok(eb is None and gone in str(msg) and "W4A4" in str(msg),
       f"{fam}: W4A4 config without {gone}: refused naming it", msg)
    return w4


def family_fp8(rq, tool, tiny, fam, tmp):
    """FP8_DYNAMIC (export --scheme fp8-dynamic): every FP8 Linear's input per token."""
    src, d = os.path.join(tiny, fam), os.path.join(tmp, fam + "-fp8")
    r = subprocess.run([rq, "export", src, d, "--scheme", "fp8-dynamic"], capture_output=True,
                       text=True, timeout=300)
    if not ok(r.returncode == 0, f"{fam}: export --scheme fp8-dynamic", r.stderr):
        return
    cfg = json.load(open(os.path.join(d, "config.json")))
    tensors, _ = st_read(os.path.join(d, "model.safetensors"))
    w = weights(tensors)
    f8 = sorted(k[: -len(".weight")] for k, v in tensors.items() if v[0] == "F8_E4M3")
    l16 = Ref(cfg, w).forward(TOKENS)
    l8 = Ref(cfg, w, {m: "fp8" for m in f8}).forward(TOKENS)
    e8, n8 = engine(tool, d)
    e16, _ = engine(tool, d, env_off=True)
    if not ok(e8 is not None and e16 is not None, f"{fam} fp8-dynamic: the engine runs it", n8):
        return
    scale = float(np.abs(l16).max())
    d16, d8, dq = maxd(e16, l16), maxd(e8, l8), maxd(e8, e16)
    ok(n8 == len(f8), f"{fam} fp8-dynamic: every FP8 Linear quantizes its input per token "
       f"({n8} of {len(f8)})")
    ok(d16 <= TOL * scale and d8 <= TOL * scale,
       f"{fam} fp8-dynamic: engine == numpy with per-token FP8 inputs (max|d| {d8:.3g}) and, "
       f"with RQ_ENGINE_ACT_QUANT=0, without ({d16:.3g}), <= {TOL} x {scale:.3g}")
    ok(dq > 20 * TOL * scale, f"{fam} fp8-dynamic: quantized inputs move the logits by "
       f"{dq:.3g}, > 20 x the tolerance {TOL * scale:.3g}")


def main():
    if len(sys.argv) not in (5, 6):
        print("usage: test_actq_forward.py REQUANTFS ACTQ_LOGITS TINY_DIR GOLDEN_JSON "
              "[TEST_EK_EMUL]", file=sys.stderr)
        return 2
    rqtap.init(sys.argv[1])
    try:
        golden = json.load(open(sys.argv[4]))
    except (OSError, ValueError) as e:
        golden = {}
        ok(False, f"golden {sys.argv[4]} loads", e)
    tmp = tempfile.mkdtemp(prefix="rq-test-actq-")
    try:
        dirs = [family(rqtap.RQ, os.path.abspath(sys.argv[2]), sys.argv[3], fam, tmp, golden)
                for fam in ("mistral", "mixtral")]
        family_fp8(rqtap.RQ, os.path.abspath(sys.argv[2]), sys.argv[3], "mistral", tmp)
        if len(sys.argv) == 6:
            r = subprocess.run([sys.argv[5], rqtap.RQ, "--w4a4"] + [d for d in dirs if d],
                               capture_output=True, text=True, timeout=600)
            lines = [l for l in r.stdout.splitlines() if l.startswith(("ok", "not ok"))]
            bad = [l for l in lines if l.startswith("not ok")]
            ok(r.returncode == 0 and len(lines) >= 2 * 7 and not bad,
               f"CUDA engine (emulated by the kernels' CPU twins) == CPU engine on the W4A4 "
               f"checkpoints: {len(lines) - len(bad)}/{len(lines)} checks", r.stdout + r.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rqtap.finish()


if __name__ == "__main__":
    sys.exit(main())
