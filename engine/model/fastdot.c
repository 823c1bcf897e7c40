/* fastdot.c — the fast mode's decode dots of quantized rows (fastdot.h).
 *
 * The oracle's register dots (qdot.c) round every product w·x and then add
 * it, with w itself a rounded product (e4m3(b)·s, (q − zo)·s). Here, per row
 * and group, the exact small values the codes stand for are fused into the
 * group's partial sum, and the scale multiplies the sum once:
 *   FP8   half(b) = e4m3(b)·2^-8 exactly (qdot.c's bit move: sign, then
 *         (b & 0x7F) << 7 as binary16, subnormals included), 32 bytes a step
 *         (vpmovsxbw, << 7, bit 14 cleared, two vcvtph2ps); the row's sum
 *         times 2^8 at the end (exact short of an overflow)
 *   INT8  q − 128 = (int8)(b ^ 0x80), widened and converted exactly
 *   INT4  the nibble picks c − 8 from a constant register (vpermps)
 *   NVFP4 the group's 16 values from qdot.c's per-thread table, as there
 *   (both with the codes in codes16_perm's lane order and x permuted alike;
 *   INT4 32 columns a step)
 * Each step is one FMA into the row's 16 lanes; the lanes are summed at the
 * end in any order. So the result is Σ over groups of s_g·Σ(code value · x)
 * in binary32, within the summation bound the fast mode is held to (the
 * products are exact in an FMA; the group sums and the scaled adds are the
 * only roundings). A block of 4 rows whose result is not finite (a scale
 * that is not, an overflow) or that holds an FP8 NaN code is redone the
 * oracle's way, so NaN and inf come out as the oracle's do. Rows run 4 at a
 * time with the rows 8 ahead prefetched, as the oracle's dots do (FP8 and
 * INT a line at a time across the block's steps, prefetch4). */
#include "engine/model/fastdot.h"
#include "engine/model/model.h"
#include "engine/model/ops.h"
#include "engine/model/qdot.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define GMAX 1024                 /* scale groups per row the fast dots take */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "engine/model/simd_int.h"

#define T512F LG_T512 ",fma"

int lg_fast_dot_takes(const struct lg_linear *W)
{
	static int isa = -1;
	if (isa < 0) {
		__builtin_cpu_init();
		isa = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi") &&
		      __builtin_cpu_supports("fma");
	}
	if (!isa)
		return 0;
	int G = W->groups;
	switch (W->kind) {
	case LG_W_NVFP4:
		return W->gs_div && W->cols % 16 == 0;
	case LG_W_FP8:
		return G >= 1 && G <= GMAX && W->cols % G == 0 && W->cols / G % 16 == 0;
	case LG_W_INT:
		return G >= 1 && G <= GMAX && W->cols % G == 0 && W->cols / G % 16 == 0 && !W->qzero &&
		       (W->bits == 8 || W->bits == 4);
	default:
		return 0;
	}
}

/* The scales of rows [r, r + RR) as binary32 in buf, s[i·lds + g] (lds = 0:
 * one row of scales for the tensor): F32 copied, BF16 widened 16 at a time,
 * F16 one by one. Not checked: a scale that is not finite makes its row's result
 * not finite, which the caller redoes the oracle's way. */
__attribute__((target(T512F)))
static const float *block_scales(const struct lg_linear *W, int r, int RR, float *buf, size_t *lds)
{
	int G = W->groups, rows = W->srows == 1 ? 1 : RR;
	size_t k0 = W->srows == 1 ? 0 : (size_t)r * G;
	*lds = W->srows == 1 ? 0 : (size_t)G;
	for (int i = 0; i < rows; i++) {
		const uint8_t *p = W->qscale + 2 * (k0 + (size_t)i * G);
		float *o = buf + (size_t)i * G;
		if (W->sdtype == LG_S_F32) {   /* the mapped file need not align them */
			memcpy(o, W->qscale + 4 * (k0 + (size_t)i * G), sizeof(float) * G);
			continue;
		}
		if (W->sdtype != LG_S_BF16) {
			for (int g = 0; g < G; g++)
				o[g] = lg_qscale_at(W, k0 + (size_t)i * G + g);
			continue;
		}
		for (int g = 0; g < G; g += 16) {
			__mmask16 m = G - g >= 16 ? 0xFFFF : (__mmask16)((1u << (G - g)) - 1);
			__m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p + 2 * g));
			_mm512_mask_storeu_ps(o + g, m, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
		}
	}
	return buf;
}

/* INT8's 16 values q − 128 of the bytes at p, converted. */
__attribute__((target(T512F), always_inline))
static inline __m512 int8_16(const uint8_t *p)
{
	__m128i b = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi8((char)0x80));
	return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}

/* RR (a constant where inlined) FP8 or INT rows, ld bytes apart, row i's
 * scales at s + i·lds (FP8: the result then times 2^8, exact). */
__attribute__((target(T512F), always_inline))
static inline void grouped_rows(const uint8_t *q, size_t ld, int RR, int kind, int bits,
                                const float *s, size_t lds, int G, const float *x, int n,
                                float *out, const uint8_t *pf)
{
	const __m512 i4 = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
	int gw = n / G;
	__m512 acc[4];
	for (int r = 0; r < RR; r++)
		acc[r] = _mm512_setzero_ps();
	for (int g = 0; g < G; g++) {
		__m512 part[4];
		for (int r = 0; r < RR; r++)
			part[r] = _mm512_setzero_ps();
		int c = g * gw, e = c + gw;
		if (kind == LG_W_FP8) {
			for (; c + 32 <= e; c += 32) {
				__m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + c + 16);
				if (pf && !(c & 63))
					prefetch4(pf, ld, (size_t)c);
				for (int r = 0; r < RR; r++) {
					__m512 h0, h1;
					fp8_half32(q + r * ld + c, &h0, &h1);
					part[r] = _mm512_fmadd_ps(h0, x0, part[r]);
					part[r] = _mm512_fmadd_ps(h1, x1, part[r]);
				}
			}
			if (c < e) {
				__m512 xv = _mm512_loadu_ps(x + c);
				for (int r = 0; r < RR; r++)
					part[r] = _mm512_fmadd_ps(fp8_half16(q + r * ld + c), xv, part[r]);
			}
		} else {
			for (; bits == 4 && c + 32 <= e; c += 32) {   /* 16 bytes a row */
				__m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + c + 16);
				size_t o = (size_t)c / 2;
				if (pf && !(o & 63))
					prefetch4(pf, ld, o);
				for (int r = 0; r < RR; r++) {
					const uint8_t *p = q + r * ld + o;
					part[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(codes16p(p), i4), x0,
					                          part[r]);
					part[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(codes16p(p + 8), i4), x1,
					                          part[r]);
				}
			}
			for (; c < e; c += 16) {
				__m512 xv = _mm512_loadu_ps(x + c);
				size_t o = (size_t)c * bits / 8;       /* the step's first byte */
				if (pf && !(o & 63))
					prefetch4(pf, ld, o);
				for (int r = 0; r < RR; r++) {
					__m512 w = bits == 8 ? int8_16(q + r * ld + o)
					                     : _mm512_permutexvar_ps(codes16p(q + r * ld + o), i4);
					part[r] = _mm512_fmadd_ps(w, xv, part[r]);
				}
			}
		}
		for (int r = 0; r < RR; r++)
			acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(s[r * lds + g]), part[r], acc[r]);
	}
	for (int r = 0; r < RR; r++)
		out[r] = _mm512_reduce_add_ps(acc[r]) * (kind == LG_W_FP8 ? 256.0f : 1.0f);
}

/* RR NVFP4 rows: qdot.c's group values, one FMA a group and row. */
__attribute__((target(T512F), always_inline))
static inline void nvfp4_rows(const uint8_t *packed, const uint8_t *scales, int RR,
                              const float (*lut)[16], const float *x, int n, float *out)
{
	size_t lp = (size_t)n / 2, ls = (size_t)n / 16;
	__m512 acc[4];
	for (int r = 0; r < RR; r++)
		acc[r] = _mm512_setzero_ps();
	for (int g = 0; g < n / 16; g++) {
		__m512 xv = _mm512_loadu_ps(x + 16 * g);
		for (int r = 0; r < RR; r++) {
			__m512 w = _mm512_permutexvar_ps(codes16p(packed + r * lp + 8 * g),
			                                 _mm512_load_ps(lut[scales[r * ls + g]]));
			acc[r] = _mm512_fmadd_ps(w, xv, acc[r]);
		}
	}
	for (int r = 0; r < RR; r++)
		out[r] = _mm512_reduce_add_ps(acc[r]);
}

static void prefetch_rows(const uint8_t *p, size_t bytes)
{
	for (size_t o = 0; o < bytes; o += 64)
		__builtin_prefetch(p + o, 0, 3);
}

__attribute__((target(T512F)))
static void nvfp4_dot(const struct lg_linear *W, int r, int R, const float *x, float *y,
                      float *xp)
{
	int n = W->cols;
	x = lg_x_perm16(x, n, xp);
	size_t lp = (size_t)n / 2, ls = (size_t)n / 16;
	const float (*lut)[16] = lg_qdot_nvfp4_lut(W->gs_div);
	for (int b = 0; b < R; b += 4) {
		const uint8_t *p = W->packed + (size_t)(r + b) * lp, *sc = W->scales + (size_t)(r + b) * ls;
		if (b + 12 <= R) {
			prefetch_rows(p + 8 * lp, 4 * lp);
			prefetch_rows(sc + 8 * ls, 4 * ls);
		}
#define NV_BODY(RR) nvfp4_rows(p, sc, RR, lut, x, n, y + b)
		ROWS4(R - b < 4 ? R - b : 4, NV_BODY);
#undef NV_BODY
	}
}

__attribute__((target(T512F)))
static void grouped_dot(const struct lg_linear *W, int r, int R, const float *x, float *y,
                        float *scratch)
{
	int n = W->cols, G = W->groups, fp8 = W->kind == LG_W_FP8;
	size_t ld = fp8 ? (size_t)n : (size_t)W->words * 4, lds;
	const uint8_t *base = fp8 ? W->w8 : W->qw;
	const float *xc = !fp8 && W->bits == 4 ? lg_x_perm16(x, n, scratch + n) : x;
	float buf[4 * G];
	for (int b = 0; b < R; b += 4) {
		int RR = R - b < 4 ? R - b : 4, redo = 0;
		const uint8_t *q = base + (size_t)(r + b) * ld;
		const uint8_t *pf = b + 12 <= R ? q + 8 * ld : NULL;   /* spread over the block's steps */
		const float *s = block_scales(W, r + b, RR, buf, &lds);
		if (fp8 && fp8_has_nan(q, ld, RR, n)) {
			redo = 1;
		} else {
#define GR_BODY(K)                                                                          \
	do {                                                                                \
		if (fp8)                                                                    \
			grouped_rows(q, ld, K, LG_W_FP8, 8, s, lds, G, x, n, y + b, pf);    \
		else if (W->bits == 8)                                                      \
			grouped_rows(q, ld, K, LG_W_INT, 8, s, lds, G, x, n, y + b, pf);    \
		else                                                                        \
			grouped_rows(q, ld, K, LG_W_INT, 4, s, lds, G, xc, n, y + b, pf);   \
	} while (0)
			ROWS4(RR, GR_BODY);
#undef GR_BODY
			for (int i = 0; i < RR; i++)
				redo |= !isfinite(y[b + i]);
		}
		/* a NaN code, or a result not finite (a scale that is not, an overflow):
		 * the block the oracle's way, NaN and inf as there */
		for (int i = 0; redo && i < RR; i++) {
			lg_linear_row(W, r + b + i, scratch);
			y[b + i] = lg_dot(scratch, x, n);
		}
	}
}

void lg_fast_dot_rows(const struct lg_linear *W, int r, int R, const float *x, float *y,
                      float *scratch)
{
	if (W->kind == LG_W_NVFP4)
		nvfp4_dot(W, r, R, x, y, scratch);
	else
		grouped_dot(W, r, R, x, y, scratch);
}

#else
int lg_fast_dot_takes(const struct lg_linear *W)
{
	(void)W;
	return 0;
}

void lg_fast_dot_rows(const struct lg_linear *W, int r, int R, const float *x, float *y,
                      float *scratch)
{
	(void)W, (void)r, (void)R, (void)x, (void)y, (void)scratch;
}
#endif
