/* scheme_kern.c — the row kernels of FP8_DYNAMIC, W8A16 and W4A16 (scheme_int.h).
 *
 * The arithmetic (scheme.c's header has the derivation from compressed-tensors):
 *   scale s = bf16(f32(absmax) / Q)      Q = 448 (FP8), 127.5 (int8), 7.5 (int4);
 *             s == 0 -> 2^-7             absmax over a row (FP8) or a group of 128 (int)
 *   x       = bf16(f32(w) / s)           binary32 division, then RNE to BF16 (torch on BF16)
 *   FP8:      code = E4M3FN_RNE(min(|x|, 448)) | sign(x)
 *   int:      q = RNE_int(clamp(x, -2^(b-1), 2^(b-1)-1)), stored as q + 2^(b-1)
 * Every step is one IEEE binary32 operation or a bit manipulation (no FMA contraction,
 * -ffp-contract=off), written without branches so gcc vectorizes the column loops; each
 * loop nest is compiled for SSE2, AVX2 and AVX-512 like quant_fast.c, and the variant in
 * use is quant_int.h's rq_quant_isa(). */
#include "quant/scheme_int.h"
#include "quant/quant_int.h"

#include <string.h>

#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define RQ_X86_VARIANTS 1
#endif

#define FP8_MAX_BITS 0x43E00000u   /* 448.0f */
#define ROUND_MAGIC 12582912.0f    /* 1.5 * 2^23: x + M rounds x to an integer, ties to even */
#define ROUND_MAGIC_BITS 0x4B400000u

static inline __attribute__((always_inline)) void put_bf16(uint8_t *p, uint32_t bits)
{
	p[0] = (uint8_t)bits;
	p[1] = (uint8_t)(bits >> 8);
}

/* bf16(f32(amax) / q), 0 -> 2^-7, as BF16 bits (amax: finite BF16 magnitude bits). */
static inline __attribute__((always_inline)) uint32_t scale_bits(uint32_t amax, float q)
{
	uint32_t s = rq_f2u(rq_round_bf16(rq_bf16f(amax) / q)) >> 16;
	return s == 0 ? RQ_SCHEME_EPS_BF16 : s;
}

static inline __attribute__((always_inline)) uint32_t fp8_code(uint32_t w, float s)
{
	uint32_t u = rq_f2u(rq_round_bf16(rq_bf16f(w) / s));
	uint32_t a = u & 0x7FFFFFFFu;
	a = a < FP8_MAX_BITS ? a : FP8_MAX_BITS;
	return rq_e4m3_code(rq_u2f(a)) | ((u >> 24) & 0x80u);
}

/* q + 2^(b-1) for BF16 weight bits w under scale s, clamp bounds lo/hi (floats). */
static inline __attribute__((always_inline)) uint32_t int_field(uint32_t w, float s, float lo,
                                                                 float hi, uint32_t off)
{
	float x = rq_round_bf16(rq_bf16f(w) / s);
	x = x < lo ? lo : x;
	x = x > hi ? hi : x;
	return rq_f2u(x + ROUND_MAGIC) - ROUND_MAGIC_BITS + off;
}

static inline __attribute__((always_inline)) uint32_t absmax_bits(const uint16_t *w, size_t n)
{
	int16_t m = 0;
	for (size_t i = 0; i < n; i++) {
		int16_t a = (int16_t)(w[i] & 0x7FFF);
		m = a > m ? a : m;
	}
	return (uint16_t)m;
}

static inline __attribute__((always_inline))
size_t fp8_body(const uint16_t *w, size_t rows, size_t cols, uint8_t *q, uint8_t *scale)
{
	size_t bad = rows;
	for (size_t i = 0; i < rows; i++) {
		const uint16_t *wr = w + i * cols;
		uint8_t *qr = q + i * cols;
		uint32_t m = absmax_bits(wr, cols);
		if (m >= RQ_BF16_INF) {
			bad = bad < rows ? bad : i;
			continue;
		}
		uint32_t sb = scale_bits(m, 448.0f);
		put_bf16(scale + 2 * i, sb);
		float s = rq_bf16f(sb);
		for (size_t j = 0; j < cols; j++)
			qr[j] = (uint8_t)fp8_code(wr[j], s);
	}
	return bad;
}

static inline __attribute__((always_inline))
size_t int_body(int bits, const uint16_t *w, size_t rows, size_t cols, uint8_t *packed,
                uint8_t *scale)
{
	size_t bad = rows, groups = cols / RQ_INT_GROUP;
	float lo = bits == 8 ? -128.0f : -8.0f, hi = bits == 8 ? 127.0f : 7.0f;
	float qdiv = bits == 8 ? 127.5f : 7.5f;
	uint32_t off = bits == 8 ? 128u : 8u;
	for (size_t i = 0; i < rows; i++) {
		for (size_t g = 0; g < groups; g++) {
			const uint16_t *wg = w + i * cols + g * RQ_INT_GROUP;
			uint32_t m = absmax_bits(wg, RQ_INT_GROUP);
			if (m >= RQ_BF16_INF) {
				bad = bad < rows ? bad : i;
				continue;
			}
			uint32_t sb = scale_bits(m, qdiv);
			put_bf16(scale + 2 * (i * groups + g), sb);
			float s = rq_bf16f(sb);
			if (bits == 8) {
				uint8_t *p = packed + i * cols + g * RQ_INT_GROUP;
				for (int j = 0; j < RQ_INT_GROUP; j++)
					p[j] = (uint8_t)int_field(wg[j], s, lo, hi, off);
			} else {
				uint8_t *p = packed + i * (cols / 2) + g * (RQ_INT_GROUP / 2);
				uint32_t f[RQ_INT_GROUP];
				for (int j = 0; j < RQ_INT_GROUP; j++)
					f[j] = int_field(wg[j], s, lo, hi, off);
				for (int k = 0; k < RQ_INT_GROUP / 2; k++)
					p[k] = (uint8_t)(f[2 * k] | (f[2 * k + 1] << 4));
			}
		}
	}
	return bad;
}

#define RQ_SVARIANT(suffix, attr) \
	attr static size_t fp8_##suffix(const uint16_t *w, size_t rows, size_t cols, uint8_t *q, \
	                                 uint8_t *scale) \
	{ return fp8_body(w, rows, cols, q, scale); } \
	attr static size_t int8_##suffix(const uint16_t *w, size_t rows, size_t cols, uint8_t *p, \
	                                  uint8_t *scale) \
	{ return int_body(8, w, rows, cols, p, scale); } \
	attr static size_t int4_##suffix(const uint16_t *w, size_t rows, size_t cols, uint8_t *p, \
	                                  uint8_t *scale) \
	{ return int_body(4, w, rows, cols, p, scale); }

RQ_SVARIANT(base, )
#ifdef RQ_X86_VARIANTS
RQ_SVARIANT(avx2, __attribute__((target("avx2"))))
RQ_SVARIANT(avx512, __attribute__((target("arch=x86-64-v4"))))
#endif

typedef size_t (*rows_fn)(const uint16_t *, size_t, size_t, uint8_t *, uint8_t *);
static const struct {
	rows_fn fp8, int8, int4;
} variants[RQ_ISA_COUNT] = {
	{fp8_base, int8_base, int4_base},
#ifdef RQ_X86_VARIANTS
	{fp8_avx2, int8_avx2, int4_avx2},
	{fp8_avx512, int8_avx512, int4_avx512},
#endif
};

size_t rq_fp8_rows(const uint16_t *w, size_t rows, size_t cols, uint8_t *q, uint8_t *scale)
{
	return variants[rq_quant_isa()].fp8(w, rows, cols, q, scale);
}

size_t rq_int_rows(int bits, const uint16_t *w, size_t rows, size_t cols, uint8_t *packed,
                   uint8_t *scale)
{
	int v = rq_quant_isa();
	return bits == 8 ? variants[v].int8(w, rows, cols, packed, scale)
	                 : variants[v].int4(w, rows, cols, packed, scale);
}

/* ---- F16 and F32 sources ----
 * The same steps with torch's arithmetic in the source dtype T: every BF16 rounding above
 * becomes a rounding to T (F16: round to nearest even with subnormals and overflow to inf;
 * F32: none), the zero-scale value is finfo(T).eps (F16 2^-10, F32 2^-23), and the scale is
 * stored as T. Inputs are read with memcpy (tensor data in a safetensors file need not be
 * aligned). Same ISA variants as above. */

/* Scale of the group [i, i+n) of a T tensor: rq_round_t(absmax / q), 0 -> eps, stored as T at
 * dst; returned as a float, or -1 for a NaN/Inf in the group. */
static inline __attribute__((always_inline))
float scale_t(int t, const uint8_t *w, size_t i, size_t n, float q, uint8_t *dst)
{
	uint32_t m = 0, inf = t == RQ_SRC_F16 ? 0x7C00u : 0x7F800000u;
	for (size_t j = i; j < i + n; j++) {
		uint32_t a = rq_mag_t(t, w, j);
		m = a > m ? a : m;
	}
	if (m >= inf)
		return -1.0f;
	float am = t == RQ_SRC_F16 ? rq_h2f(m) : rq_u2f(m);
	float s = rq_round_t(t, am / q);
	if (s == 0.0f)
		s = t == RQ_SRC_F16 ? 0x1p-10f : 0x1p-23f;
	if (t == RQ_SRC_F16) {
		uint16_t h = (uint16_t)rq_f2h(s);
		memcpy(dst, &h, 2);
	} else {
		memcpy(dst, &s, 4);
	}
	return s;
}

static inline __attribute__((always_inline))
size_t fp8_body_t(int t, const uint8_t *w, size_t rows, size_t cols, uint8_t *q, uint8_t *scale)
{
	size_t es = t == RQ_SRC_F16 ? 2 : 4, bad = rows;
	for (size_t i = 0; i < rows; i++) {
		float s = scale_t(t, w, i * cols, cols, 448.0f, scale + es * i);
		if (s < 0) {
			bad = bad < rows ? bad : i;
			continue;
		}
		uint8_t *qr = q + i * cols;
		for (size_t j = 0; j < cols; j++) {
			uint32_t u = rq_f2u(rq_round_t(t, rq_ld_t(t, w, i * cols + j) / s));
			uint32_t a = u & 0x7FFFFFFFu;
			a = a < FP8_MAX_BITS ? a : FP8_MAX_BITS;
			qr[j] = (uint8_t)(rq_e4m3_code(rq_u2f(a)) | ((u >> 24) & 0x80u));
		}
	}
	return bad;
}

static inline __attribute__((always_inline))
size_t int_body_t(int t, int bits, const uint8_t *w, size_t rows, size_t cols, uint8_t *packed,
                  uint8_t *scale)
{
	size_t es = t == RQ_SRC_F16 ? 2 : 4, bad = rows, groups = cols / RQ_INT_GROUP;
	float lo = bits == 8 ? -128.0f : -8.0f, hi = bits == 8 ? 127.0f : 7.0f;
	uint32_t off = bits == 8 ? 128u : 8u;
	for (size_t i = 0; i < rows; i++) {
		for (size_t g = 0; g < groups; g++) {
			size_t b = i * cols + g * RQ_INT_GROUP;
			float s = scale_t(t, w, b, RQ_INT_GROUP, bits == 8 ? 127.5f : 7.5f,
			                  scale + es * (i * groups + g));
			if (s < 0) {
				bad = bad < rows ? bad : i;
				continue;
			}
			uint32_t f[RQ_INT_GROUP];
			for (int j = 0; j < RQ_INT_GROUP; j++) {
				float x = rq_round_t(t, rq_ld_t(t, w, b + (size_t)j) / s);
				x = x < lo ? lo : x;
				x = x > hi ? hi : x;
				f[j] = rq_f2u(x + ROUND_MAGIC) - ROUND_MAGIC_BITS + off;
			}
			if (bits == 8) {
				for (int j = 0; j < RQ_INT_GROUP; j++)
					packed[b + (size_t)j] = (uint8_t)f[j];
			} else {
				uint8_t *p = packed + b / 2;
				for (int k = 0; k < RQ_INT_GROUP / 2; k++)
					p[k] = (uint8_t)(f[2 * k] | (f[2 * k + 1] << 4));
			}
		}
	}
	return bad;
}

typedef size_t (*wrows_fn)(const uint8_t *, size_t, size_t, uint8_t *, uint8_t *);

#define RQ_TVARIANT(suffix, attr) \
	attr static size_t fp8h_##suffix(const uint8_t *w, size_t r, size_t c, uint8_t *q, uint8_t *s) \
	{ return fp8_body_t(RQ_SRC_F16, w, r, c, q, s); } \
	attr static size_t fp8f_##suffix(const uint8_t *w, size_t r, size_t c, uint8_t *q, uint8_t *s) \
	{ return fp8_body_t(RQ_SRC_F32, w, r, c, q, s); } \
	attr static size_t int8h_##suffix(const uint8_t *w, size_t r, size_t c, uint8_t *p, uint8_t *s) \
	{ return int_body_t(RQ_SRC_F16, 8, w, r, c, p, s); } \
	attr static size_t int8f_##suffix(const uint8_t *w, size_t r, size_t c, uint8_t *p, uint8_t *s) \
	{ return int_body_t(RQ_SRC_F32, 8, w, r, c, p, s); } \
	attr static size_t int4h_##suffix(const uint8_t *w, size_t r, size_t c, uint8_t *p, uint8_t *s) \
	{ return int_body_t(RQ_SRC_F16, 4, w, r, c, p, s); } \
	attr static size_t int4f_##suffix(const uint8_t *w, size_t r, size_t c, uint8_t *p, uint8_t *s) \
	{ return int_body_t(RQ_SRC_F32, 4, w, r, c, p, s); }

RQ_TVARIANT(base, )
#ifdef RQ_X86_VARIANTS
RQ_TVARIANT(avx2, __attribute__((target("avx2"))))
RQ_TVARIANT(avx512, __attribute__((target("arch=x86-64-v4"))))
#endif

/* [isa][0 F16, 1 F32][0 fp8, 1 int8, 2 int4] */
static const wrows_fn wvariants[RQ_ISA_COUNT][2][3] = {
	{{fp8h_base, int8h_base, int4h_base}, {fp8f_base, int8f_base, int4f_base}},
#ifdef RQ_X86_VARIANTS
	{{fp8h_avx2, int8h_avx2, int4h_avx2}, {fp8f_avx2, int8f_avx2, int4f_avx2}},
	{{fp8h_avx512, int8h_avx512, int4h_avx512}, {fp8f_avx512, int8f_avx512, int4f_avx512}},
#endif
};

size_t rq_fp8_rows_t(int t, const void *w, size_t rows, size_t cols, uint8_t *q, uint8_t *scale)
{
	return wvariants[rq_quant_isa()][t == RQ_SRC_F32][0](w, rows, cols, q, scale);
}

size_t rq_int_rows_t(int t, int bits, const void *w, size_t rows, size_t cols, uint8_t *packed,
                     uint8_t *scale)
{
	return wvariants[rq_quant_isa()][t == RQ_SRC_F32][bits == 8 ? 1 : 2](w, rows, cols, packed,
	                                                                   scale);
}

float rq_f16_to_f32(uint16_t h)
{
	return rq_h2f(h);
}

uint16_t rq_f32_to_f16(float x)
{
	return (uint16_t)rq_f2h(x);
}
