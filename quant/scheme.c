/* scheme.c — the data-free compressed-tensors schemes (scheme.h).
 *
 * FACTS: what llm-compressor 0.14.0.1 `model_free_ptq` (compressed-tensors 0.19.0, torch on
 * the CPU) computes for a BF16 Linear weight W[out][in]; read from the installed sources
 * (llmcompressor/entrypoints/model_free/, observers/min_max.py, modifiers/quantization/
 * calibration.py, compressed_tensors/quantization/{quant_scheme,quant_args}.py,
 * utils/helpers.py, lifecycle/{initialize,forward_helpers}.py, compressors/) and checked
 * byte for byte by tests/quant/test_scheme_peer.c (tools/golden/gen_scheme_peer.py).
 *
 * Common path. model_free_ptq builds an nn.Linear in the weight's dtype per targeted tensor,
 * attaches the "memoryless_minmax" weight observer (calibration.py overrides minmax),
 * observes min/max (torch.amin/amax: exact, BF16) per row (channel) or per group, and
 * calculate_qparams() makes the scale. All presets are symmetric, so:
 *     absmax    = max(|min(min, 0)|, |max(max, 0)|)                BF16, exact
 *     scale     = absmax / (bit_range / 2)                         BF16 op: f32 divide, RNE
 *     bit_range = q_max - q_min as BF16:  FP8 448-(-448) -> /2 = 448;  INT8 127-(-128) ->
 *                 127.5;  INT4 7-(-8) -> 7.5;  FP4 6-(-6) -> 6     (all exact in BF16)
 *     scale == 0 -> eps = torch.finfo(scale dtype).eps: 2^-7 for BF16 (0.125 for an FP8
 *                 scale_dtype, the NVFP4 case)
 * (bf16(f32(a) / Q) equals bf16 of the exact quotient and of a * (1/Q) for every finite BF16
 * a and these Q — checked exhaustively — so the CPU kernel's form cannot matter.)
 * The scale parameter is created in the weight's dtype (initialize.py: observed dtype, BF16)
 * with shape [out, 1] (channel) or [out, in/group] (group); zero points are created only for
 * asymmetric schemes and none is written. The compressor then quantizes with forward's
 * _quantize on the CPU torch path (the Triton path needs a GPU; NOT what we match):
 *     x = w / scale                   BF16 tensor op: binary32 divide, RNE to BF16
 *     x = clamp(x, q_min, q_max)      in BF16 (bounds exact)
 *     FP8:  x.to(float8_e4m3fn)       RNE, sign kept (-0.0 -> 0x80), no saturation needed
 *     INT:  torch.round(x) -> int8    half to even
 *
 * Per scheme (group along `in`; shapes [out, in]):
 *   NVFP4A16  weights FP4 tensor_group, group 16, scale_dtype FP8.  = RQ_RECIPE_BF16 of
 *             quant.h: gs = generate_gparam = 2688 / absmax(BF16), which torch evaluates as
 *             bf16(bf16(1/a) * 2688) (python scalar / tensor is reciprocal-multiply), inf/NaN
 *             -> 1, stored F32; group scale f32(gs * bf16(g / 6)), clamp 448, E4M3, 0 ->
 *             0.125; codes from w / f32(scale / gs). Fused q/k/v and mlp.gate/up_proj share
 *             gs (see quant-schemes.facts; MoE experts' gate/up do NOT).
 *             -> weight_packed U8 [out, in/2] | weight_scale F8_E4M3 [out, in/16] |
 *                weight_global_scale F32 [1].            format nvfp4-pack-quantized
 *   NVFP4 (W4A4, RQ_SCHEME_NVFP4_W4A4) under oneshot: the weight goes through the same
 *             observe/update_qparams/compress calls (model_free/lifecycle.py calls
 *             calibration.py's, as QuantizationModifier does), so its bytes are NVFP4A16's
 *             for the same fused set; only the sets differ (observers/helpers.py
 *             FUSED_LAYER_NAMES, chosen in plan_scheme.c) and input_global_scale is added
 *             by the plan from CALIB.
 *   FP8_DYNAMIC  weights FP8 E4M3 channel (per row), activations dynamic per token.
 *             -> weight F8_E4M3 [out, in] | weight_scale BF16 [out, 1]. format float-quantized
 *   W8A16     weights INT8 group 128 (this version: GROUP, not channel).
 *   W4A16     weights INT4 group 128.
 *             -> weight_packed I32 [out, in*bits/32] | weight_scale BF16 [out, in/128] |
 *                weight_shape I64 [2] = {out, in}.        format pack-quantized
 *             pack_to_int32: v = q + 2^(bits-1) (unsigned), element i at bit i*bits of the
 *             little-endian int32 stream (32 elements per `bits` words), so in memory: INT8
 *             one byte per element in order, INT4 element 2k in the low nibble of byte k.
 * Refusals of model_free_ptq (it raises, the run fails): non-2-D weight; in % group != 0
 * (in < group too) for the group schemes. We refuse the same shapes (-EINVAL) and NaN/Inf
 * (-EDOM; torch would write garbage).
 *
 * F16 and F32 sources (every scheme but the Laguna NVFP4; peer-verified): the same steps
 * with every BF16 rounding replaced by a rounding to the source dtype T (F32: none), eps =
 * finfo(T).eps (F16 2^-10, F32 2^-23), weight_scale stored as T (FP8/INT). NVFP4A16 computes
 * its global scale in T with the floor finfo(T).tiny: F32 is quant.h's fp32 recipe on F32
 * inputs; F16 overflows 2688/amax to inf -> gs 1.0 for amax < ~0.041, a compressed-tensors
 * quirk we reproduce (scheme_nv.c).
 *
 * CUDA: model_free_ptq on a GPU dispatches _quantize to a Triton kernel (forward_helpers.py;
 * INT always, FP8 on SM >= 90) that divides in binary32 WITHOUT the BF16 rounding of x, so
 * its FP8/INT codes differ from the CPU's for a few % of weights (scales are the same; for
 * NVFP4 the CPU path already divides in binary32, so by reading the bytes agree). We match
 * the CPU run; the GPU form is neither implemented nor verifiable here (no device; Triton's
 * interpreter lacks libdevice.rint and rounds FP8 its own way).
 *
 * Dequantization (rq_scheme_dequant_row) is what compressed-tensors' decompress computes:
 * NVFP4 e2m1 * e4m3 / gs in binary32; FP8 and INT q * scale rounded to the scale dtype. */
#include "quant/scheme.h"
#include "quant/scheme_int.h"
#include "quant/quant_int.h"
#include "base/pool.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define MIN_CHUNK_ELEMS 65536   /* work per pool chunk, in weights */

static const struct {
	const char *name, *preset, *format;
	unsigned group;
	int bits;                   /* INT schemes: 8 or 4 */
} schemes[RQ_SCHEME_COUNT] = {
	[RQ_SCHEME_NVFP4] = {"nvfp4", "NVFP4", "nvfp4-pack-quantized", 16, 0},
	[RQ_SCHEME_NVFP4A16] = {"nvfp4a16", "NVFP4A16", "nvfp4-pack-quantized", 16, 0},
	[RQ_SCHEME_FP8_DYNAMIC] = {"fp8-dynamic", "FP8_DYNAMIC", "float-quantized", 0, 0},
	[RQ_SCHEME_W8A16] = {"w8a16", "W8A16", "pack-quantized", 128, 8},
	[RQ_SCHEME_W4A16] = {"w4a16", "W4A16", "pack-quantized", 128, 4},
	[RQ_SCHEME_NVFP4_W4A4] = {"nvfp4", "NVFP4", "nvfp4-pack-quantized", 16, 0},
};

int rq_scheme_parse(const char *s, enum rq_scheme *out)
{
	if (!s)
		return -EINVAL;
	for (int i = 1; i < RQ_SCHEME_COUNT; i++) {    /* not the Laguna fix: see scheme.h */
		if (strcmp(s, schemes[i].name) == 0) {
			*out = (enum rq_scheme)i;
			return 0;
		}
	}
	return -EINVAL;
}

static int valid(enum rq_scheme s)
{
	return (unsigned)s < RQ_SCHEME_COUNT;
}

const char *rq_scheme_name(enum rq_scheme s)
{
	return valid(s) ? schemes[s].name : "?";
}

const char *rq_scheme_preset(enum rq_scheme s)
{
	return valid(s) ? schemes[s].preset : "?";
}

const char *rq_scheme_format(enum rq_scheme s)
{
	return valid(s) ? schemes[s].format : "?";
}

unsigned rq_scheme_group(enum rq_scheme s)
{
	return valid(s) ? schemes[s].group : 0;
}

int rq_scheme_shares_scale(enum rq_scheme s)
{
	return s == RQ_SCHEME_NVFP4 || s == RQ_SCHEME_NVFP4A16 || s == RQ_SCHEME_NVFP4_W4A4;
}

int rq_scheme_has_input_scale(enum rq_scheme s)
{
	return s == RQ_SCHEME_NVFP4 || s == RQ_SCHEME_NVFP4_W4A4;
}

enum rq_recipe rq_scheme_default_recipe(enum rq_scheme s)
{
	return s == RQ_SCHEME_NVFP4 ? RQ_RECIPE_FP32 : RQ_RECIPE_BF16;
}

int rq_scheme_recipe_ok(enum rq_scheme s, enum rq_recipe r)
{
	if (!valid(s) || (unsigned)r >= RQ_RECIPE_COUNT)
		return 0;
	return rq_scheme_shares_scale(s) || r == RQ_RECIPE_BF16;
}

static void put(struct rq_stensor *t, const char *suffix, const char *dtype, int ndim,
                uint64_t d0, uint64_t d1, uint64_t esize, uint64_t *off)
{
	t->suffix = suffix;
	t->dtype = dtype;
	t->ndim = ndim;
	t->shape[0] = d0;
	t->shape[1] = ndim > 1 ? d1 : 0;
	t->off = *off;
	t->len = d0 * (ndim > 1 ? d1 : 1) * esize;
	*off += t->len;
}

int rq_scheme_layout(enum rq_scheme s, enum rq_src_dtype src, uint64_t rows, uint64_t cols,
                     struct rq_stensor t[RQ_SCHEME_MAX_TENSORS], int *nt, uint64_t *out_size)
{
	struct rq_stensor o[RQ_SCHEME_MAX_TENSORS];
	uint64_t off = 0;
	int n = 0;
	if (!valid(s))
		return -EINVAL;
	unsigned g = schemes[s].group;
	if (rows == 0 || cols == 0 || (g && cols % g) || rows > (1ull << 31) ||
	    cols > (1ull << 31))
		return -EINVAL;
	if ((unsigned)src > RQ_SRC_F32)
		return -EINVAL;
	if (src != RQ_SRC_BF16 && s == RQ_SCHEME_NVFP4)
		return -ENOTSUP;   /* the Laguna fix takes BF16 only (SPEC.md §3) */
	const char *sdt = src == RQ_SRC_BF16 ? "BF16" : src == RQ_SRC_F16 ? "F16" : "F32";
	uint64_t ses = rq_src_size(src);
	switch (s) {
	case RQ_SCHEME_NVFP4:
	case RQ_SCHEME_NVFP4A16:
	case RQ_SCHEME_NVFP4_W4A4:
		put(&o[n++], "weight_packed", "U8", 2, rows, cols / 2, 1, &off);
		put(&o[n++], "weight_scale", "F8_E4M3", 2, rows, cols / 16, 1, &off);
		put(&o[n++], "weight_global_scale", "F32", 1, 1, 0, 4, &off);
		break;
	case RQ_SCHEME_FP8_DYNAMIC:
		put(&o[n++], "weight", "F8_E4M3", 2, rows, cols, 1, &off);
		put(&o[n++], "weight_scale", sdt, 2, rows, 1, ses, &off);
		break;
	case RQ_SCHEME_W8A16:
	case RQ_SCHEME_W4A16:
		put(&o[n++], "weight_packed", "I32", 2, rows, cols * (uint64_t)schemes[s].bits / 32,
		    4, &off);
		put(&o[n++], "weight_scale", sdt, 2, rows, cols / g, ses, &off);
		put(&o[n++], "weight_shape", "I64", 1, 2, 0, 8, &off);
		break;
	}
	memcpy(t, o, sizeof(o[0]) * (size_t)n);
	*nt = n;
	*out_size = off;
	return 0;
}

/* rq_scheme_layout's tensors alone: their count, or its -errno. */
static int layout(enum rq_scheme s, enum rq_src_dtype src, uint64_t rows, uint64_t cols,
                  struct rq_stensor t[RQ_SCHEME_MAX_TENSORS])
{
	int nt;
	uint64_t sz;
	int rc = rq_scheme_layout(s, src, rows, cols, t, &nt, &sz);
	return rc < 0 ? rc : nt;
}

/* ---- quantize ---- */

struct rows_ctx {
	enum rq_scheme s;
	enum rq_src_dtype t;
	const uint8_t *w;           /* [rows][cols] of t */
	size_t rows, cols;
	uint8_t *q;                 /* FP8 weight or INT packed, [rows][...] */
	uint8_t *scale;             /* scales as t, [rows][cols/group or 1] */
	size_t bad;                 /* first row with NaN/Inf, rows if none (atomic min) */
};

static void rows_chunk(void *arg, size_t begin, size_t end, int worker)
{
	struct rows_ctx *c = arg;
	size_t n = end - begin, b, es = rq_src_size(c->t);
	const uint8_t *w = c->w + es * begin * c->cols;
	(void)worker;
	if (c->s == RQ_SCHEME_FP8_DYNAMIC) {
		uint8_t *q = c->q + begin * c->cols, *sc = c->scale + es * begin;
		b = c->t == RQ_SRC_BF16 ? rq_fp8_rows((const uint16_t *)(const void *)w, n, c->cols, q, sc)
		                        : rq_fp8_rows_t(c->t, w, n, c->cols, q, sc);
	} else {
		int bits = schemes[c->s].bits;
		size_t gr = c->cols / RQ_INT_GROUP;
		uint8_t *p = c->q + begin * (c->cols * (size_t)bits / 8), *sc = c->scale + es * begin * gr;
		b = c->t == RQ_SRC_BF16
		        ? rq_int_rows(bits, (const uint16_t *)(const void *)w, n, c->cols, p, sc)
		        : rq_int_rows_t(c->t, bits, w, n, c->cols, p, sc);
	}
	if (b < n) {
		size_t row = begin + b, cur = __atomic_load_n(&c->bad, __ATOMIC_RELAXED);
		while (row < cur && !__atomic_compare_exchange_n(&c->bad, &cur, row, 0,
		                                                  __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
	}
}

static int quantize_rows(enum rq_scheme s, const struct rq_smod *m, struct rq_pool *pool)
{
	struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
	int nt = layout(s, m->dtype, m->rows, m->cols, t);
	if (nt < 0)
		return nt;
	struct rows_ctx c = {s, m->dtype, m->w, m->rows, m->cols, m->out + t[0].off,
	                     m->out + t[1].off, m->rows};
	size_t grain = (MIN_CHUNK_ELEMS + m->cols - 1) / m->cols;
	rq_pool_for(pool, m->rows, grain, rows_chunk, &c);
	if (c.bad < m->rows)
		return -EDOM;
	if (nt == 3) {              /* weight_shape: I64 {rows, cols}, little-endian */
		uint8_t *p = m->out + t[2].off;
		uint64_t v[2] = {m->rows, m->cols};
		for (int k = 0; k < 16; k++)
			p[k] = (uint8_t)(v[k / 8] >> (8 * (k % 8)));
	}
	return 0;
}

struct nv_ctx {
	enum rq_src_dtype t;
	const uint8_t *w;           /* [rows][cols] of t */
	size_t cols;
	float gs;
	uint8_t *packed, *scales;   /* [rows][cols/2], [rows][cols/16] */
};

static void nv_chunk(void *arg, size_t begin, size_t end, int worker)
{
	struct nv_ctx *c = arg;
	size_t es = rq_src_size(c->t);
	(void)worker;
	rq_nvfp4_rows_t(c->t, c->w + es * begin * c->cols, end - begin, c->cols, c->gs,
	                c->packed + begin * (c->cols / 2), c->scales + begin * (c->cols / 16));
}

/* NVFP4A16 from F16/F32: one global scale for the n modules (all of one dtype). */
static int quantize_nv_t(enum rq_recipe r, const struct rq_smod *m, int n, int *bad,
                         struct rq_pool *pool)
{
	enum rq_src_dtype t = m[0].dtype;
	uint32_t amax = 0, inf = t == RQ_SRC_F16 ? 0x7C00u : 0x7F800000u;
	if (r != RQ_RECIPE_BF16) {   /* "the source dtype's arithmetic" is the only variant */
		if (bad)
			*bad = 0;
		return -ENOTSUP;
	}
	for (int i = 0; i < n; i++) {
		uint32_t a = m[i].dtype == t ? rq_nvfp4_absmax_t(t, m[i].w, m[i].rows * m[i].cols) : 0;
		if (m[i].dtype != t || a >= inf) {
			if (bad)
				*bad = i;
			return m[i].dtype != t ? -ENOTSUP : -EDOM;
		}
		amax = a > amax ? a : amax;
	}
	float gs = rq_nvfp4_gs_t(t, amax);
	for (int i = 0; i < n; i++) {
		uint8_t *pk = m[i].out, *sc = pk + m[i].rows * m[i].cols / 2;
		struct nv_ctx c = {t, m[i].w, m[i].cols, gs, pk, sc};
		rq_pool_for(pool, m[i].rows, (MIN_CHUNK_ELEMS + m[i].cols - 1) / m[i].cols, nv_chunk, &c);
		memcpy(sc + m[i].rows * m[i].cols / 16, &gs, 4);
	}
	return 0;
}

int rq_scheme_quantize(enum rq_scheme s, enum rq_recipe r, const struct rq_smod *m, int n,
                       int *bad, struct rq_pool *pool)
{
	if (!valid(s) || n < 1 || n > 3)
		return -EINVAL;
	if (!rq_scheme_recipe_ok(s, r))
		return -ENOTSUP;
	struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
	for (int i = 0; i < n; i++) {
		int rc = layout(s, m[i].dtype, m[i].rows, m[i].cols, t);
		if (rc < 0) {
			if (bad)
				*bad = i;
			return rc;
		}
	}
	if (rq_scheme_shares_scale(s) && m[0].dtype != RQ_SRC_BF16)
		return quantize_nv_t(r, m, n, bad, pool);
	if (rq_scheme_shares_scale(s)) {
		struct rq_qmod q[3];
		for (int i = 1; i < n; i++) {
			if (m[i].dtype != RQ_SRC_BF16) {
				if (bad)
					*bad = i;
				return -ENOTSUP;   /* a fused set of mixed dtypes */
			}
		}
		for (int i = 0; i < n; i++)
			q[i] = (struct rq_qmod){m[i].w, m[i].rows, m[i].cols, m[i].out,
			                        m[i].out + m[i].rows * m[i].cols / 2};
		float gs;
		int rc = rq_quantize_job(r, q, n, &gs, bad, pool);
		if (rc < 0)
			return rc;
		for (int i = 0; i < n; i++)   /* F32, little-endian like the host (x86/arm64) */
			memcpy(m[i].out + m[i].rows * m[i].cols / 2 + m[i].rows * m[i].cols / 16, &gs, 4);
		return 0;
	}
	for (int i = 0; i < n; i++) {
		int rc = quantize_rows(s, &m[i], pool);
		if (rc < 0) {
			if (bad)
				*bad = i;
			return rc;
		}
	}
	return 0;
}

/* ---- dequantize and the scalar oracles ---- */

static float scale_at(enum rq_src_dtype t, const uint8_t *p, size_t i)
{
	if (t == RQ_SRC_BF16)
		return rq_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
	if (t == RQ_SRC_F16) {
		_Float16 h;
		memcpy(&h, p + 2 * i, 2);
		return (float)h;
	}
	float f;
	memcpy(&f, p + 4 * i, 4);
	return f;
}

/* a multiply in the scale's dtype t: binary32, rounded to t */
static float mul_t(enum rq_src_dtype t, float a, float b)
{
	float x = a * b;
	return t == RQ_SRC_BF16 ? rq_bf16_to_f32(rq_f32_to_bf16(x))
	     : t == RQ_SRC_F16 ? (float)(_Float16)x : x;
}

int rq_scheme_dequant_row(enum rq_scheme s, enum rq_src_dtype src, const uint8_t *out,
                          size_t rows, size_t cols, size_t row, float *dst)
{
	struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
	int rc = layout(s, src, rows, cols, t);
	if (rc < 0)
		return rc;
	if (row >= rows)
		return -EINVAL;
	if (rq_scheme_shares_scale(s)) {
		float gs;
		memcpy(&gs, out + t[2].off, 4);
		rq_dequant_row(out + t[0].off + row * (cols / 2), out + t[1].off + row * (cols / 16),
		               gs, cols, dst);
	} else if (s == RQ_SCHEME_FP8_DYNAMIC) {
		const uint8_t *q = out + t[0].off + row * cols;
		float sc = scale_at(src, out + t[1].off, row);
		for (size_t j = 0; j < cols; j++)
			dst[j] = mul_t(src, rq_e4m3_to_f32(q[j]), sc);
	} else {
		int bits = schemes[s].bits;
		const uint8_t *p = out + t[0].off + row * (cols * (size_t)bits / 8);
		size_t ng = cols / RQ_INT_GROUP;
		for (size_t j = 0; j < cols; j++) {
			int v = bits == 8 ? p[j] - 128 : ((p[j / 2] >> (4 * (j % 2))) & 15) - 8;
			dst[j] = mul_t(src, (float)v, scale_at(src, out + t[1].off, row * ng + j / RQ_INT_GROUP));
		}
	}
	return 0;
}

/* The oracles: the recipe's words with the library's slow conversions (convert.c's E4M3
 * table search, rintf), for tests to hold the kernels against. */
uint16_t rq_scheme_scale_ref(uint16_t amax, float q)
{
	uint16_t s = rq_f32_to_bf16(rq_bf16_to_f32(amax) / q);
	return s == 0 ? (uint16_t)RQ_SCHEME_EPS_BF16 : s;
}

uint8_t rq_fp8_code_ref(uint16_t w, uint16_t s)
{
	float x = rq_bf16_to_f32(rq_f32_to_bf16(rq_bf16_to_f32(w) / rq_bf16_to_f32(s)));
	x = fminf(fmaxf(x, -448.0f), 448.0f);
	return rq_f32_to_e4m3(x);
}

int rq_int_code_ref(int bits, uint16_t w, uint16_t s)
{
	float lo = -ldexpf(1.0f, bits - 1), hi = ldexpf(1.0f, bits - 1) - 1.0f;
	float x = rq_bf16_to_f32(rq_f32_to_bf16(rq_bf16_to_f32(w) / rq_bf16_to_f32(s)));
	x = fminf(fmaxf(x, lo), hi);
	return (int)rintf(x);   /* default rounding mode: to nearest, ties to even */
}

/* The oracle's own view of a source value: widening by the compiler (_Float16) and by
 * convert.c, rounding to the source dtype the same way. */
static float ref_ld(enum rq_src_dtype t, const void *w, size_t i)
{
	if (t == RQ_SRC_BF16) {
		uint16_t b;
		memcpy(&b, (const uint8_t *)w + 2 * i, 2);
		return rq_bf16_to_f32(b);
	}
	if (t == RQ_SRC_F16) {
		_Float16 h;
		memcpy(&h, (const uint8_t *)w + 2 * i, 2);
		return (float)h;
	}
	float f;
	memcpy(&f, (const uint8_t *)w + 4 * i, 4);
	return f;
}

static float ref_round(enum rq_src_dtype t, float x)
{
	return t == RQ_SRC_BF16 ? rq_bf16_to_f32(rq_f32_to_bf16(x))
	     : t == RQ_SRC_F16 ? (float)(_Float16)x : x;
}

static void ref_store(enum rq_src_dtype t, uint8_t *p, float v)
{
	if (t == RQ_SRC_BF16) {
		uint16_t b = rq_f32_to_bf16(v);
		memcpy(p, &b, 2);
	} else if (t == RQ_SRC_F16) {
		_Float16 h = (_Float16)v;
		memcpy(p, &h, 2);
	} else {
		memcpy(p, &v, 4);
	}
}

/* NVFP4A16 from F16/F32 in the recipe's words: literal E4M3 (convert.c's table search) and
 * E2M1 (nearest magnitude by distance, ties to the even index). */
static int nv_ref_t(enum rq_recipe r, enum rq_src_dtype src, const void *w, size_t rows,
                    size_t cols, uint8_t *out, const struct rq_stensor *t)
{
	if (r != RQ_RECIPE_BF16)
		return -ENOTSUP;
	float amax = 0;
	for (size_t i = 0; i < rows * cols; i++) {
		float v = ref_ld(src, w, i);
		if (!isfinite(v))
			return -EDOM;
		amax = fmaxf(amax, fabsf(v));
	}
	float tiny = src == RQ_SRC_F16 ? 0x1p-14f : 0x1p-126f;
	float gs = ref_round(src, ref_round(src, 1.0f / fmaxf(amax, tiny)) * 2688.0f);
	if (!isfinite(gs))
		gs = 1.0f;
	memcpy(out + t[2].off, &gs, 4);
	for (size_t i = 0; i < rows; i++) {
		for (size_t g = 0; g < cols / 16; g++) {
			size_t b = i * cols + g * 16;
			float gm = 0;
			for (int j = 0; j < 16; j++)
				gm = fmaxf(gm, fabsf(ref_ld(src, w, b + (size_t)j)));
			float sv = fminf(gs * ref_round(src, gm / 6.0f), 448.0f);
			uint8_t sc = rq_f32_to_e4m3(sv);
			if (sc == 0)
				sc = 0x20;
			out[t[1].off + i * (cols / 16) + g] = sc;
			float seff = rq_e4m3_to_f32(sc) / gs;
			for (int j = 0; j < 16; j++) {
				float q = ref_ld(src, w, b + (size_t)j) / seff, aq = fabsf(q);
				int best = 0;
				for (int k = 1; k < 8; k++) {
					float d = fabsf(aq - rq_e2m1_mag[k]), db = fabsf(aq - rq_e2m1_mag[best]);
					if (d < db || (d == db && k % 2 == 0))
						best = k;
				}
				uint8_t code = (uint8_t)(best | (q < 0 ? 8 : 0));
				uint8_t *p = out + t[0].off + (b + (size_t)j) / 2;
				*p = j % 2 ? (uint8_t)((*p & 0x0F) | code << 4) : (uint8_t)((*p & 0xF0) | code);
			}
		}
	}
	return 0;
}

int rq_scheme_quantize_ref(enum rq_scheme s, enum rq_recipe r, enum rq_src_dtype src,
                           const void *w, size_t rows, size_t cols, uint8_t *out)
{
	struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
	int nt = layout(s, src, rows, cols, t);
	if (nt < 0)
		return nt;
	if (!rq_scheme_recipe_ok(s, r))
		return -ENOTSUP;
	if (rq_scheme_shares_scale(s) && src != RQ_SRC_BF16)
		return nv_ref_t(r, src, w, rows, cols, out, t);
	if (rq_scheme_shares_scale(s)) {
		uint16_t amax;
		if (rq_absmax_bf16(w, rows * cols, &amax, NULL) < 0)
			return -EDOM;
		float gs = rq_global_scale(r, rq_bf16_to_f32(amax));
		rq_quantize_ref(r, w, rows, cols, gs, out + t[0].off, out + t[1].off);
		memcpy(out + t[2].off, &gs, 4);
		return 0;
	}
	int bits = schemes[s].bits;
	size_t group = bits ? RQ_INT_GROUP : cols, ng = cols / group;
	size_t es = rq_src_size(src);
	float q = bits == 8 ? 127.5f : bits == 4 ? 7.5f : 448.0f;
	float eps = src == RQ_SRC_BF16 ? 0x1p-7f : src == RQ_SRC_F16 ? 0x1p-10f : 0x1p-23f;
	float lo = bits ? -ldexpf(1.0f, bits - 1) : -448.0f, hi = bits ? -lo - 1.0f : 448.0f;
	for (size_t i = 0; i < rows; i++) {
		for (size_t g = 0; g < ng; g++) {
			size_t b = i * cols + g * group;
			float amax = 0;
			for (size_t j = 0; j < group; j++) {
				float v = ref_ld(src, w, b + j);
				if (!isfinite(v))
					return -EDOM;
				amax = fmaxf(amax, fabsf(v));
			}
			float sc = ref_round(src, amax / q);
			if (sc == 0.0f)
				sc = eps;
			ref_store(src, out + t[1].off + es * (i * ng + g), sc);
			for (size_t j = 0; j < group; j++) {
				float x = fminf(fmaxf(ref_round(src, ref_ld(src, w, b + j) / sc), lo), hi);
				size_t c = b + j;
				if (!bits) {
					out[t[0].off + c] = rq_f32_to_e4m3(x);
				} else if (bits == 8) {
					out[t[0].off + c] = (uint8_t)((int)rintf(x) + 128);
				} else {
					uint8_t *p = out + t[0].off + c / 2;
					uint8_t v = (uint8_t)((int)rintf(x) + 8);
					*p = c % 2 ? (uint8_t)((*p & 0x0F) | v << 4) : (uint8_t)((*p & 0xF0) | v);
				}
			}
		}
	}
	if (nt == 3) {
		uint64_t v[2] = {rows, cols};
		for (int k = 0; k < 16; k++)
			out[t[2].off + (size_t)k] = (uint8_t)(v[k / 8] >> (8 * (k % 8)));
	}
	return 0;
}
