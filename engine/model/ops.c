/* ops.c — CPU kernels of the forward pass: matmul over BF16/NVFP4/FP8/INT weights,
 * dot products, RMSNorm, activations. */
#include "engine/model/ops.h"
#include "engine/model/qdot.h"
#include "base/pool.h"
#include "quant/quant.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Vector clones where the CPU has them; the arithmetic (and so the bits)
 * is identical in every clone: same operations, same order, no FMA. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LG_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LG_CLONES
#endif

static int have_avx2(void);
static float dot_f32_avx2(const float *a, const float *b, int n);

/* lg_dot's closing sum of its 16 accumulators: acc[j] += acc[j + w] for
 * w = 8, 4, 2, 1; the total. */
__attribute__((always_inline))
static inline float close16(float acc[16])
{
	for (int w = 8; w >= 1; w /= 2)
		for (int j = 0; j < w; j++)
			acc[j] += acc[j + w];
	return acc[0];
}

/* A BF16 value's bits widened to the float it is (exact). */
__attribute__((always_inline))
static inline float bf16_f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

LG_CLONES
static float dot_f32(const float *a, const float *b, int n)
{
	float acc[16] = {0};
	int i = 0;
	for (; i + 16 <= n; i += 16)
		for (int j = 0; j < 16; j++)
			acc[j] += a[i + j] * b[i + j];
	for (int j = 0; i < n; i++, j++)
		acc[j] += a[i] * b[i];
	return close16(acc);
}

/* 16 accumulators, acc[j] summing elements j, j + 16, ... (products rounded,
 * then added: no FMA), then acc[j] += acc[j + w] for w = 8, 4, 2, 1. The
 * AVX2 version is the same operations in the same order (the same bits);
 * attention calls this once per key (head_dim long), so it is worth one. */
float lg_dot(const float *a, const float *b, int n)
{
	return have_avx2() ? dot_f32_avx2(a, b, n) : dot_f32(a, b, n);
}

/* lg_dot of a BF16 row, widened on the fly: the same operations in the same
 * order as widening first, so the same bits, without the round trip through
 * memory (decode reads each weight once, so this is its inner loop). */
LG_CLONES
static float dot_bf16(const uint16_t *w, const float *x, int n)
{
	float acc[16] = {0};
	int i = 0;
	for (; i + 16 <= n; i += 16)
		for (int j = 0; j < 16; j++)
			acc[j] += bf16_f(w[i + j]) * x[i + j];
	for (int j = 0; i < n; i++, j++)
		acc[j] += bf16_f(w[i]) * x[i];
	return close16(acc);
}

/* lg_dot of four rows against one x: per row the same operations in the
 * same order as lg_dot (so the same bits), x loaded once for the four. */
LG_CLONES
static void dot4(const float *w0, const float *w1, const float *w2, const float *w3, const float *x,
                 int n, float *out)
{
	float a0[16] = {0}, a1[16] = {0}, a2[16] = {0}, a3[16] = {0};
	int i = 0;
	for (; i + 16 <= n; i += 16)
		for (int j = 0; j < 16; j++) {
			float xv = x[i + j];
			a0[j] += w0[i + j] * xv;
			a1[j] += w1[i + j] * xv;
			a2[j] += w2[i + j] * xv;
			a3[j] += w3[i + j] * xv;
		}
	for (int j = 0; i < n; i++, j++) {
		a0[j] += w0[i] * x[i];
		a1[j] += w1[i] * x[i];
		a2[j] += w2[i] * x[i];
		a3[j] += w3[i] * x[i];
	}
	for (int w = 8; w >= 1; w /= 2)
		for (int j = 0; j < w; j++) {
			a0[j] += a0[j + w];
			a1[j] += a1[j + w];
			a2[j] += a2[j + w];
			a3[j] += a3[j + w];
		}
	out[0] = a0[0];
	out[1] = a1[0];
	out[2] = a2[0];
	out[3] = a3[0];
}

LG_CLONES
void lg_axpy(float *out, float s, const float *x, int n)
{
	for (int i = 0; i < n; i++)
		out[i] += s * x[i];
}

LG_CLONES
static void widen_bf16(const uint16_t *w, float *out, int n)
{
	for (int i = 0; i < n; i++) {
		uint32_t u = (uint32_t)w[i] << 16;
		memcpy(&out[i], &u, 4);
	}
}

/* E4M3FN byte → value; built once. */
static float e4m3_lut[256];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void lut_init(void)
{
	for (int i = 0; i < 256; i++)
		e4m3_lut[i] = rq_e4m3_to_f32((uint8_t)i);
}

/* One NVFP4 row. Per 16-column group the 16 possible values are tabulated:
 * v = (e2m1 · s) / gs. Every magnitude is 2^k or 1.5·2^k, so two divisions
 * per group, s/gs and (1.5·s)/gs, scaled by exact powers of two, give the
 * same bits as one division per weight (short of underflow). */
LG_CLONES
static void dequant_nvfp4(const uint8_t *packed, const uint8_t *scales, float gs, const float *div,
                          int cols, float *out)
{
	for (int g = 0; g < cols / 16; g++) {
		float s = e4m3_lut[scales[g]];
		float f1 = div ? div[scales[g]] : s / gs, f15 = div ? div[256 + scales[g]] : (1.5f * s) / gs;
		float lut[16] = {0.0f, 0.5f * f1, f1, f15, 2.0f * f1, 2.0f * f15, 4.0f * f1, 4.0f * f15};
		for (int i = 0; i < 8; i++)
			lut[8 + i] = -lut[i];
		const uint8_t *p = packed + g * 8;
		float *o = out + g * 16;
		for (int i = 0; i < 8; i++) {
			o[2 * i] = lut[p[i] & 15];
			o[2 * i + 1] = lut[p[i] >> 4];
		}
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "engine/model/simd_int.h"
/* dequant_nvfp4 with AVX2: the same eight magnitudes per group, picked by
 * vpermps from the code's low three bits, the sign bit from its fourth;
 * -v by flipping the sign bit is the scalar table's -lut[i] (0 gives -0.0
 * in both), so the bits are the scalar version's. Column 8j + k of a group
 * is nibble k of its little-endian u32 j. */
/* The eight magnitudes a group's codes 0..7 stand for (scale byte sc). */
__attribute__((target("avx2")))
static inline __m256 nvfp4_mag(uint8_t sc, float gs, const float *div)
{
	float s = e4m3_lut[sc];
	float f1 = div ? div[sc] : s / gs, f15 = div ? div[256 + sc] : (1.5f * s) / gs;
	return _mm256_setr_ps(0.0f, 0.5f * f1, f1, f15, 2.0f * f1, 2.0f * f15, 4.0f * f1, 4.0f * f15);
}

/* The eight values of the nibbles of u (little-endian u32 of packed codes). */
__attribute__((target("avx2")))
static inline __m256 nvfp4_eight(__m256 mag, uint32_t u)
{
	const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
	__m256i c = _mm256_srlv_epi32(_mm256_set1_epi32((int)u), sh);
	__m256 v = _mm256_permutevar8x32_ps(mag, _mm256_and_si256(c, _mm256_set1_epi32(7)));
	__m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(8)), 28);
	return _mm256_xor_ps(v, _mm256_castsi256_ps(sign));
}

__attribute__((target("avx2")))
static void dequant_nvfp4_avx2(const uint8_t *packed, const uint8_t *scales, float gs,
                               const float *div, int cols, float *out)
{
	for (int g = 0; g < cols / 16; g++) {
		__m256 mag = nvfp4_mag(scales[g], gs, div);
		for (int j = 0; j < 2; j++) {
			uint32_t u;
			memcpy(&u, packed + g * 8 + 4 * j, 4);
			_mm256_storeu_ps(out + g * 16 + 8 * j, nvfp4_eight(mag, u));
		}
	}
}

/* lg_dot(row r of W dequantized, x) for an NVFP4 W, without the row in
 * memory: lanes j < 8 and 8 + j of each 16-column group are lg_dot's
 * acc[j] and acc[8 + j] (products rounded, then added, no FMA), then the
 * same pairwise combination, so the same bits. Decode's inner loop. */
__attribute__((target("avx2")))
static float dot_nvfp4_avx2(const struct lg_linear *W, int r, const float *x)
{
	const uint8_t *packed = W->packed + (size_t)r * (W->cols / 2);
	const uint8_t *scales = W->scales + (size_t)r * (W->cols / 16);
	const float *div = W->gs_div;
	float gs = W->global_scale;
	__m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
	for (int g = 0; g < W->cols / 16; g++) {
		__m256 mag = nvfp4_mag(scales[g], gs, div);
		for (int j = 0; j < 2; j++) {
			uint32_t u;
			memcpy(&u, packed + g * 8 + 4 * j, 4);
			__m256 v = nvfp4_eight(mag, u);
			acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(v, _mm256_loadu_ps(x + g * 16 + 8 * j)));
		}
	}
	float a[8];
	_mm256_storeu_ps(a, _mm256_add_ps(acc[0], acc[1]));
	for (int w = 4; w >= 1; w /= 2)
		for (int j = 0; j < w; j++)
			a[j] += a[j + w];
	return a[0];
}

__attribute__((target("avx2")))
static float dot_f32_avx2(const float *a, const float *b, int n)
{
	__m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
	int i = 0;
	for (; i + 16 <= n; i += 16) {
		lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
		hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8)));
	}
	if (i == n)
		return fold16(lo, hi);
	float acc[16];
	_mm256_storeu_ps(acc, lo);
	_mm256_storeu_ps(acc + 8, hi);
	for (int j = 0; i < n; i++, j++)
		acc[j] += a[i] * b[i];
	return close16(acc);
}

/* dot_bf16 in AVX2: the same 16 accumulators in two registers, the same
 * adds in the same order (the same bits), and the closing sum in registers
 * (the compiler's version of the loop goes through the stack at each row's
 * end; decode does that once per weight row, 1152 bytes at SmolLM2's 576). */
__attribute__((target("avx2")))
static float dot_bf16_avx2(const uint16_t *w, const float *x, int n)
{
	__m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
	int i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256i a = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + i)));
		__m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + i + 8)));
		lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(a, 16)),
		                                     _mm256_loadu_ps(x + i)));
		hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(b, 16)),
		                                     _mm256_loadu_ps(x + i + 8)));
	}
	if (i == n)
		return fold16(lo, hi);
	float acc[16];
	_mm256_storeu_ps(acc, lo);
	_mm256_storeu_ps(acc + 8, hi);
	for (int j = 0; i < n; i++, j++)
		acc[j] += bf16_f(w[i]) * x[i];
	return close16(acc);
}

static int have_avx2(void)
{
	static int v = -1;
	if (v < 0) {   /* RQ_ENGINE_NO_AVX2 (tests): the portable path on any CPU */
		const char *e = getenv("RQ_ENGINE_NO_AVX2");
		__builtin_cpu_init();
		v = __builtin_cpu_supports("avx2") && !(e && *e && strcmp(e, "0")) ? 1 : 0;
	}
	return v;
}
#else
static int have_avx2(void)
{
	return 0;
}
#define dequant_nvfp4_avx2 dequant_nvfp4
static float dot_nvfp4_avx2(const struct lg_linear *W, int r, const float *x)
{
	(void)W, (void)r, (void)x;
	return 0;   /* never called: have_avx2() is 0 */
}
static float dot_f32_avx2(const float *a, const float *b, int n)
{
	(void)a, (void)b, (void)n;
	return 0;   /* never called: have_avx2() is 0 */
}
#define dot_bf16_avx2 dot_bf16
#endif

void lg_nvfp4_div_table(float gs, float *out)
{
	pthread_once(&lut_once, lut_init);
	for (int b = 0; b < 256; b++) {
		out[b] = e4m3_lut[b] / gs;
		out[256 + b] = (1.5f * e4m3_lut[b]) / gs;
	}
}

/* IEEE binary16 → binary32, exact (subnormals, inf, NaN kept). */
float lg_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023, u;
	if (e == 31) {
		u = sign | 0x7F800000u | (m << 13);
	} else if (e) {
		u = sign | ((e + 112) << 23) | (m << 13);
	} else {
		float f = (float)m * 0x1p-24f;   /* subnormal: m · 2^-24, exact */
		memcpy(&u, &f, 4);
		u |= sign;
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

float lg_qscale_at(const struct lg_linear *W, size_t k)
{
	if (W->sdtype == LG_S_F32) {
		float f;
		memcpy(&f, W->qscale + 4 * k, 4);
		return f;
	}
	uint16_t b;
	memcpy(&b, W->qscale + 2 * k, 2);
	return W->sdtype == LG_S_BF16 ? rq_bf16_to_f32(b) : lg_f16_to_f32(b);
}

/* The unsigned field of element i of a pack-quantized bit stream (bits per
 * element, little-endian int32 words, word w at words + w·stride bytes):
 * bits [i·bits, i·bits + bits), which may straddle two words. */
static unsigned int_field(const uint8_t *words, size_t stride, size_t i, int bits)
{
	size_t bit = i * (size_t)bits, w = bit / 32;
	unsigned sh = (unsigned)(bit % 32);
	uint32_t lo;
	memcpy(&lo, words + stride * w, 4);
	uint64_t v = lo >> sh;
	if (sh + (unsigned)bits > 32) {
		uint32_t hi;
		memcpy(&hi, words + stride * (w + 1), 4);
		v |= (uint64_t)hi << (32 - sh);
	}
	return (unsigned)(v & ((1u << bits) - 1));
}

/* One FP8 row: w = e4m3(byte) · s, s per group of cols/groups columns. */
LG_CLONES
static void dequant_fp8(const struct lg_linear *W, int r, float *out)
{
	const uint8_t *q = W->w8 + (size_t)r * W->cols;
	size_t sr = W->srows == 1 ? 0 : (size_t)r * W->groups;
	int gw = W->cols / W->groups;
	for (int g = 0; g < W->groups; g++) {
		float s = lg_qscale_at(W, sr + g);
		for (int c = g * gw; c < (g + 1) * gw; c++)
			out[c] = e4m3_lut[q[c]] * s;
	}
}

/* One INT row: w = (q − z) · s. q − z is an exact small integer (|q − z| <
 * 2^bits), converted exactly, then one binary32 product. */
static void dequant_int(const struct lg_linear *W, int r, float *out)
{
	const uint8_t *row = W->qw + (size_t)r * W->words * 4;
	size_t sr = W->srows == 1 ? 0 : (size_t)r * W->groups;
	int gw = W->cols / W->groups, off = 1 << (W->bits - 1);
	for (int g = 0; g < W->groups; g++) {
		float s = lg_qscale_at(W, sr + g);
		int z = 0;
		if (W->qzero)   /* packed down column g of [ceil(rows·bits/32)][groups] */
			z = (int)int_field(W->qzero + 4 * (size_t)g, 4 * (size_t)W->groups, (size_t)r,
			                   W->bits) - off;
		int c = g * gw, e = c + gw;
		if (W->bits == 4 && !(c & 7) && !(gw & 7)) {
			/* eight nibbles per word, column 8j + k in bits 4k..4k+3 */
			for (; c < e; c += 8) {
				uint32_t u;
				memcpy(&u, row + (size_t)c / 2, 4);
				for (int k = 0; k < 8; k++)
					out[c + k] = (float)((int)((u >> (4 * k)) & 15) - off - z) * s;
			}
		} else if (W->bits == 8) {
			for (; c < e; c++)
				out[c] = (float)((int)row[c] - off - z) * s;
		} else {
			for (; c < e; c++)
				out[c] = (float)((int)int_field(row, 4, (size_t)c, W->bits) - off - z) * s;
		}
	}
}

/* lg_dot(row r + i of W dequantized, x) into out[i] for i < R (1..4) from
 * registers (qdot.h) when this CPU and these rows have a fast path: 1, else 0
 * (the caller's oracle). FP8 and INT: pf, the 4 rows to prefetch meanwhile,
 * or NULL. */
static int qdot_rows(const struct lg_linear *W, int r, int R, const float *x, float *out,
                     const uint8_t *pf)
{
	enum { GMAX = 2048 };
	if (W->kind == LG_W_NVFP4) {
		const uint8_t *p = W->packed + (size_t)r * (W->cols / 2);
		const uint8_t *sc = W->scales + (size_t)r * (W->cols / 16);
		if (lg_qdot_nvfp4(p, sc, R, W->gs_div, x, W->cols, out))
			return 1;
		if (!have_avx2())
			return 0;
		for (int i = 0; i < R; i++)
			out[i] = dot_nvfp4_avx2(W, r + i, x);
		return 1;
	}
	if ((W->kind != LG_W_FP8 && W->kind != LG_W_INT) || W->groups > GMAX)
		return 0;
	int G = W->groups, gw = W->cols / G;
	float s[4 * G];            /* sized by the Linear: a fixed 4 · GMAX frame was 64 KB a call */
	int zo[4 * G];
	for (int i = 0; i < R; i++) {
		size_t sr = W->srows == 1 ? 0 : (size_t)(r + i) * G;
		if (W->sdtype == LG_S_BF16)   /* the common case, widened in a loop the compiler vectorizes */
			for (int g = 0; g < G; g++) {
				uint16_t b;
				memcpy(&b, W->qscale + 2 * (sr + g), 2);
				s[i * G + g] = bf16_f(b);
			}
		else
			for (int g = 0; g < G; g++)
				s[i * G + g] = lg_qscale_at(W, sr + g);
	}
	if (W->kind == LG_W_FP8)
		return lg_qdot_fp8(W->w8 + (size_t)r * W->cols, W->cols, R, s, gw, x, W->cols, out, pf);
	for (int i = 0; W->qzero && i < R; i++)
		for (int g = 0; g < G; g++)
			zo[i * G + g] = (int)int_field(W->qzero + 4 * (size_t)g, 4 * (size_t)G, (size_t)(r + i),
			                               W->bits);
	return lg_qdot_int(W->qw + (size_t)r * W->words * 4, (size_t)W->words * 4, R, W->bits, s,
	                   W->qzero ? zo : NULL, gw, x, W->cols, out, pf);
}

void lg_linear_row(const struct lg_linear *W, int r, float *out)
{
	switch (W->kind) {
	case LG_W_BF16:
		widen_bf16(W->w + (size_t)r * W->cols, out, W->cols);
		return;
	case LG_W_NVFP4:
		pthread_once(&lut_once, lut_init);
		(have_avx2() ? dequant_nvfp4_avx2 : dequant_nvfp4)(
		    W->packed + (size_t)r * (W->cols / 2), W->scales + (size_t)r * (W->cols / 16),
		    W->global_scale, W->gs_div, W->cols, out);
		return;
	case LG_W_FP8:
		pthread_once(&lut_once, lut_init);
		dequant_fp8(W, r, out);
		return;
	case LG_W_INT:
		dequant_int(W, r, out);
		return;
	case LG_W_F16:
		for (int c = 0; c < W->cols; c++) {
			uint16_t h;
			memcpy(&h, W->w8 + ((size_t)r * W->cols + c) * 2, 2);
			out[c] = lg_f16_to_f32(h);
		}
		return;
	case LG_W_F32:
		memcpy(out, W->w8 + (size_t)r * W->cols * 4, (size_t)W->cols * 4);
		return;
	}
}

struct mm_ctx {
	const struct lg_mm *mm;
	int n;
	size_t *first;             /* [n + 1] prefix sums of rows */
	float *scratch;
	size_t stride;
};

/* y + bias[r] when the Linear has a bias (transformers adds it after the product). */
static inline float add_bias(const struct lg_linear *W, int r, float y)
{
	return W->bias ? y + W->bias[r] : y;
}

#define PF_ROWS 4                 /* BF16 decode: rows prefetched ahead */

static void mm_rows(void *vctx, size_t b, size_t e, int worker)
{
	struct mm_ctx *c = vctx;
	float *row = c->scratch + (size_t)worker * 4 * c->stride;
	int k = 0;
	for (size_t i = b; i < e;) {
		while (c->first[k + 1] <= i)
			k++;
		const struct lg_mm *m = &c->mm[k];
		int r = (int)(i - c->first[k]), K = m->W->cols;
		size_t end = e < c->first[k + 1] ? e : c->first[k + 1];
		if (m->W->kind == LG_W_BF16 && m->T <= 2) {
			/* one or two tokens: dot straight from the mapped BF16 row; the
			 * row PF_ROWS ahead is prefetched (decode is bound by how many
			 * loads are in flight, and the dot's add chain limits that)
			 * into every cache level: a non-temporal prefetch halved decode
			 * (0.50 of the all-threads read against 1.00, SmolLM2 BF16, 2
			 * threads, same run), as it keeps the weights out of a large L3
			 * that holds much of a small model from one token to the next
			 * and leaves the hardware's own prefetch idle */
			float (*dot)(const uint16_t *, const float *, int) = have_avx2() ? dot_bf16_avx2 : dot_bf16;
			while (m->T == 1 && i < end) {   /* AVX-512: 4 rows at a time (qdot.h) */
				int R = end - i < 4 ? (int)(end - i) : 4;
				float d[4];
				for (int j = 0; j < R && i + j + PF_ROWS < end; j++) {
					const char *nx = (const char *)(m->W->w + (size_t)(r + j + PF_ROWS) * K);
					for (size_t b = 0; b < (size_t)K * 2; b += 64)
						__builtin_prefetch(nx + b, 0, 3);
				}
				if (!lg_qdot_bf16(m->W->w + (size_t)r * K, K, R, m->x, K, d))
					break;
				for (int j = 0; j < R; j++)
					m->y[r + j] = add_bias(m->W, r + j, d[j]);
				i += R;
				r += R;
			}
			for (; i < end; i++, r++) {
				if (i + PF_ROWS < end) {
					const char *nx = (const char *)(m->W->w + (size_t)(r + PF_ROWS) * K);
					for (size_t b = 0; b < (size_t)K * 2; b += 64)
						__builtin_prefetch(nx + b, 0, 3);
				}
				for (int t = 0; t < m->T; t++)
					m->y[(size_t)t * m->ldy + r] =
					    add_bias(m->W, r, dot(m->W->w + (size_t)r * K, m->x + (size_t)t * m->ldx, K));
			}
			continue;
		}
		if (m->T == 1 && (m->W->kind == LG_W_NVFP4 || m->W->kind == LG_W_FP8 ||
		                  m->W->kind == LG_W_INT)) {
			/* one token (decode): rows dequantized in registers and dotted
			 * (qdot.h), the oracle's bits: NVFP4 the whole range in one call,
			 * the others up to 4 rows at a time; rows without a fast path the
			 * oracle's way */
			const struct lg_linear *W = m->W;
			if (W->kind == LG_W_NVFP4 &&
			    lg_qdot_nvfp4(W->packed + (size_t)r * (K / 2), W->scales + (size_t)r * (K / 16),
			                  (int)(end - i), W->gs_div, m->x, K, m->y + r)) {
				for (; W->bias && i < end; i++, r++)
					m->y[r] += W->bias[r];
				i = end;
				continue;
			}
			size_t rb = W->kind == LG_W_INT ? (size_t)W->words * 4 : W->kind == LG_W_FP8 ? (size_t)K : 0;
			const uint8_t *base = W->kind == LG_W_INT ? W->qw : W->w8;
			size_t lds = W->srows == 1 ? 0 : (size_t)W->groups;
			if (W->kind == LG_W_INT && !W->qzero && W->sdtype == LG_S_BF16 && W->groups > 0 &&
			    lg_qdot_int_bf16s(base + (size_t)r * rb, rb, (int)(end - i), W->bits,
			                      W->qscale + 2 * (size_t)r * lds, lds, K / W->groups, m->x, K,
			                      m->y + r)) {
				for (; W->bias && i < end; i++, r++)
					m->y[r] += W->bias[r];
				i = end;
				continue;
			}
			int fp8s = W->kind == LG_W_FP8 && W->sdtype == LG_S_BF16 && W->groups > 0;
			while (i < end) {
				if (fp8s) {   /* to the end, or up to a block of 4 with a NaN code */
					int d = lg_qdot_fp8_bf16s(base + (size_t)r * rb, rb, (int)(end - i),
					                          W->qscale + 2 * (size_t)r * lds, lds, K / W->groups,
					                          m->x, K, m->y + r);
					for (int j = 0; W->bias && j < d; j++)
						m->y[r + j] += W->bias[r + j];
					i += (size_t)d;
					r += d;   /* then a block with a NaN code, or (no AVX-512) all, below */
					if (i >= end)
						break;
				}
				int R = end - i < 4 ? (int)(end - i) : 4;
				float d[4];
				/* the rows 8 ahead (as lg_qdot_nvfp4), fetched across the dots */
				const uint8_t *pf = rb && i + 12 <= end ? base + (size_t)(r + 8) * rb : NULL;
				if (!qdot_rows(m->W, r, R, m->x, d, pf))
					for (int j = 0; j < R; j++) {
						lg_linear_row(m->W, r + j, row);
						d[j] = lg_dot(row, m->x, K);
					}
				for (int j = 0; j < R; j++)
					m->y[r + j] = add_bias(m->W, r + j, d[j]);
				i += R;
				r += R;
			}
			continue;
		}
		if (end - i >= 4) {
			/* four rows at a time: each input row is read once for four weight rows */
			float *w[4], out[4];
			for (int j = 0; j < 4; j++) {
				w[j] = row + (size_t)j * c->stride;
				lg_linear_row(m->W, r + j, w[j]);
			}
			if (lg_dot_tile(w[0], c->stride, 4, m->x, m->ldx, m->T, K, m->y + r, m->ldy)) {
				for (int t = 0; m->W->bias && t < m->T; t++)
					for (int j = 0; j < 4; j++)
						m->y[(size_t)t * m->ldy + r + j] += m->W->bias[r + j];
				i += 4;
				continue;
			}
			for (int t = 0; t < m->T; t++) {
				dot4(w[0], w[1], w[2], w[3], m->x + (size_t)t * m->ldx, K, out);
				for (int j = 0; m->W->bias && j < 4; j++)
					out[j] += m->W->bias[r + j];
				memcpy(m->y + (size_t)t * m->ldy + r, out, sizeof out);
			}
			i += 4;
			continue;
		}
		lg_linear_row(m->W, r, row);
		for (int t = 0; t < m->T; t++)
			m->y[(size_t)t * m->ldy + r] = add_bias(m->W, r, lg_dot(row, m->x + (size_t)t * m->ldx, K));
		i++;
	}
}

void lg_matmul(struct rq_pool *pool, float *scratch, size_t stride, const struct lg_mm *mm, int n)
{
	size_t first[n + 1];
	double work = 0;
	int tmax = 0;
	first[0] = 0;
	for (int k = 0; k < n; k++) {
		first[k + 1] = first[k] + (mm[k].T > 0 ? (size_t)mm[k].W->rows : 0);
		work += (double)mm[k].W->rows * mm[k].W->cols * (mm[k].T + 1);
		tmax = mm[k].T > tmax ? mm[k].T : tmax;
	}
	size_t rows = first[n];
	if (rows == 0)
		return;
	pthread_once(&lut_once, lut_init);
	/* chunks of at least ~64K multiply-adds keep the pool's hand-off cheap;
	 * ~16K at one token (decode): a loop ends when its last chunk does, and
	 * a decode step is ~150 such loops */
	double per_row = work / rows, least = tmax <= 1 ? 16384 : 65536;
	size_t grain = per_row >= least ? 4 : ((size_t)(least / per_row) + 3) & ~(size_t)3;
	struct mm_ctx c = {.mm = mm, .n = n, .first = first, .scratch = scratch, .stride = stride};
	rq_pool_for(pool, rows, grain, mm_rows, &c);
}

void lg_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
	float ss = lg_dot(x, x, n);
	float r = 1.0f / sqrtf(ss / (float)n + eps);
	for (int i = 0; i < n; i++)
		out[i] = w[i] * (x[i] * r);
}

float lg_softplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}
