/* qdot.c — decode's quantized dots in registers (qdot.h), the oracle's bits.
 *
 * How each dequantization keeps the oracle's value, per weight:
 *   FP8  e4m3 byte b → binary16 bits (b & 0x80) << 8 | (b & 0x7F) << 7: the
 *        same sign, mantissa and (exponent − 8), subnormals included (an e4m3
 *        subnormal m·2^-9 is the half subnormal m·2^-17), widened exactly by
 *        vcvtph2ps; so e4m3(b) = half(b)·2^8 exactly, and e4m3(b)·s (one
 *        rounding) = half(b)·(s·2^8) (one rounding of the same real number),
 *        s·2^8 exact when |s| < 2^119. NaN codes (0x7F, 0xFF), which the half
 *        form reads as 1.875, send the row to the oracle.
 *   INT  field − zo, a small integer, converted exactly, times s: the
 *        oracle's (float)(q − z) · s.
 *   NVFP4 the group's 16 values (8 magnitudes, then the same negated: −0.0
 *        for code 8, as the scalar table's −lut[0]) picked by the code.
 * Each product with x is rounded, then added to lane c mod 16 (no FMA: the
 * build has -ffp-contract=off and these are separate intrinsics), then the
 * lanes are folded as lg_dot folds them. */
#include "engine/model/qdot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "engine/model/simd_int.h"

/* 2: AVX-512 (F, BW, VL), 1: AVX2 + F16C, 0: none (or switched off). */
static int level(void)
{
	static int v = -1;
	if (v < 0) {
		const char *no2 = getenv("RQ_ENGINE_NO_AVX2"), *no5 = getenv("RQ_ENGINE_NO_AVX512");
		__builtin_cpu_init();
		v = 0;
		if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
		    !(no2 && *no2 && strcmp(no2, "0")))
			v = 1;
		if (v && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512vl") && !(no5 && *no5 && strcmp(no5, "0")))
			v = 2;
	}
	return v;
}

__attribute__((target("avx512f")))
static inline float fold512(__m512 acc)
{
	return fold16(_mm512_castps512_ps256(acc),
	              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}

/* ------------------------------------------------------------------ FP8 */

/* half bits of 16 e4m3 bytes, as u16 lanes b << 8, then >> 1 (arith) & 0xBFFF */
__attribute__((target("avx512f,avx512bw,avx512vl")))
static float fp8_512(const uint8_t *q, const float *s, int gw, const float *x, int n, int *nan)
{
	__m512 acc = _mm512_setzero_ps();
	__m128i nanm = _mm_setzero_si128();
	const __m128i m7f = _mm_set1_epi8(0x7F);
	for (int g = 0; g < n / gw; g++) {
		__m512 sv = _mm512_set1_ps(s[g] * 256.0f);
		for (int c = g * gw; c < (g + 1) * gw; c += 16) {
			__m128i b = _mm_loadu_si128((const __m128i *)(q + c));
			nanm = _mm_or_si128(nanm, _mm_cmpeq_epi8(_mm_and_si128(b, m7f), m7f));
			__m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8);
			h = _mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16((short)0xBFFF));
			__m512 w = _mm512_mul_ps(_mm512_cvtph_ps(h), sv);
			acc = _mm512_add_ps(acc, _mm512_mul_ps(w, _mm512_loadu_ps(x + c)));
		}
	}
	*nan = !_mm_testz_si128(nanm, nanm);
	return fold512(acc);
}

__attribute__((target("avx2,f16c")))
static float fp8_avx2(const uint8_t *q, const float *s, int gw, const float *x, int n, int *nan)
{
	__m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
	__m128i nanm = _mm_setzero_si128(), z = _mm_setzero_si128();
	const __m128i m7f = _mm_set1_epi8(0x7F), keep = _mm_set1_epi16((short)0xBFFF);
	for (int g = 0; g < n / gw; g++) {
		__m256 sv = _mm256_set1_ps(s[g] * 256.0f);
		for (int c = g * gw; c < (g + 1) * gw; c += 16) {
			__m128i b = _mm_loadu_si128((const __m128i *)(q + c));
			nanm = _mm_or_si128(nanm, _mm_cmpeq_epi8(_mm_and_si128(b, m7f), m7f));
			__m128i h0 = _mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(z, b), 1), keep);
			__m128i h1 = _mm_and_si128(_mm_srai_epi16(_mm_unpackhi_epi8(z, b), 1), keep);
			__m256 w0 = _mm256_mul_ps(_mm256_cvtph_ps(h0), sv);
			__m256 w1 = _mm256_mul_ps(_mm256_cvtph_ps(h1), sv);
			lo = _mm256_add_ps(lo, _mm256_mul_ps(w0, _mm256_loadu_ps(x + c)));
			hi = _mm256_add_ps(hi, _mm256_mul_ps(w1, _mm256_loadu_ps(x + c + 8)));
		}
	}
	*nan = !_mm_testz_si128(nanm, nanm);
	return fold16(lo, hi);
}

int lg_qdot_fp8(const uint8_t *q, const float *s, int gw, const float *x, int n, float *out)
{
	int lv = level(), nan = 0;
	if (!lv || gw <= 0 || gw % 16 || n % gw)
		return 0;
	for (int g = 0; g < n / gw; g++)
		if (!(fabsf(s[g]) < 0x1p119f))   /* s·2^8 not exact (or NaN): the oracle */
			return 0;
	float r = lv == 2 ? fp8_512(q, s, gw, x, n, &nan) : fp8_avx2(q, s, gw, x, n, &nan);
	if (nan)
		return 0;
	*out = r;
	return 1;
}

/* ------------------------------------------------------------------ INT */

/* The 16 nibbles of 8 bytes in column order (byte k: low nibble, high nibble) */
__attribute__((target("avx2")))
static inline __m128i nibbles16(const uint8_t *p)
{
	__m128i b = _mm_loadl_epi64((const __m128i *)p), m = _mm_set1_epi8(15);
	return _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
}

__attribute__((target("avx512f,avx512bw,avx512vl")))
static float int_512(const uint8_t *row, int bits, const float *s, const int *zo, int gw,
                     const float *x, int n)
{
	__m512 acc = _mm512_setzero_ps();
	for (int g = 0; g < n / gw; g++) {
		__m512 sv = _mm512_set1_ps(s[g]);
		__m512i zv = _mm512_set1_epi32(zo[g]);
		for (int c = g * gw; c < (g + 1) * gw; c += 16) {
			__m128i b = bits == 8 ? _mm_loadu_si128((const __m128i *)(row + c)) : nibbles16(row + c / 2);
			__m512 w = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(b), zv));
			w = _mm512_mul_ps(w, sv);
			acc = _mm512_add_ps(acc, _mm512_mul_ps(w, _mm512_loadu_ps(x + c)));
		}
	}
	return fold512(acc);
}

__attribute__((target("avx2")))
static float int_avx2(const uint8_t *row, int bits, const float *s, const int *zo, int gw,
                      const float *x, int n)
{
	__m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
	for (int g = 0; g < n / gw; g++) {
		__m256 sv = _mm256_set1_ps(s[g]);
		__m256i zv = _mm256_set1_epi32(zo[g]);
		for (int c = g * gw; c < (g + 1) * gw; c += 16) {
			__m128i b = bits == 8 ? _mm_loadu_si128((const __m128i *)(row + c)) : nibbles16(row + c / 2);
			__m256 w0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(b), zv));
			__m256 w1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)), zv));
			lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_mul_ps(w0, sv), _mm256_loadu_ps(x + c)));
			hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_mul_ps(w1, sv), _mm256_loadu_ps(x + c + 8)));
		}
	}
	return fold16(lo, hi);
}

int lg_qdot_int(const uint8_t *row, int bits, const float *s, const int *zo, int gw,
                const float *x, int n, float *out)
{
	int lv = level();
	if (!lv || (bits != 8 && bits != 4) || gw <= 0 || gw % 16 || n % gw)
		return 0;
	*out = lv == 2 ? int_512(row, bits, s, zo, gw, x, n) : int_avx2(row, bits, s, zo, gw, x, n);
	return 1;
}

/* ---------------------------------------------------------------- NVFP4 */

/* The group's 16 values as the scalar table has them: lanes 1..7 the products
 * f1·(.5, 1, ·, 2, ·, 4, ·) and f15·(1, 2, 4) at 3, 5, 7 (each the same exact
 * product), lane 0 +0.0 (a constant there, whatever f1 is), lanes 8..15 the
 * same with the sign bit flipped (−lut[i]: −0.0 at 8). */
__attribute__((target("avx512f,avx512bw,avx512vl")))
static float nvfp4_512(const uint8_t *packed, const uint8_t *scales, const float *div,
                       const float *x, int n)
{
	const __m512 c1 = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 0.0f, 2.0f, 0.0f, 4.0f, 0.0f,
	                                 0.0f, 0.5f, 1.0f, 0.0f, 2.0f, 0.0f, 4.0f, 0.0f);
	const __m512 c15 = _mm512_setr_ps(0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 2.0f, 0.0f, 4.0f,
	                                  0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 2.0f, 0.0f, 4.0f);
	const __m512i neg = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, (int)0x80000000u,
	                                      (int)0x80000000u, (int)0x80000000u, (int)0x80000000u,
	                                      (int)0x80000000u, (int)0x80000000u, (int)0x80000000u,
	                                      (int)0x80000000u);
	__m512 acc = _mm512_setzero_ps();
	for (int g = 0; g < n / 16; g++) {
		/* lanes 1, 2, 4, 6 (and 9, ...): f1 products; 3, 5, 7: f15's; 0 and 8: zero */
		__m512 lut = _mm512_maskz_mul_ps(0x5656, _mm512_set1_ps(div[scales[g]]), c1);
		lut = _mm512_mask_mul_ps(lut, 0xA8A8, _mm512_set1_ps(div[256 + scales[g]]), c15);
		lut = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(lut), neg));
		__m512i code = _mm512_cvtepu8_epi32(nibbles16(packed + 8 * g));
		__m512 w = _mm512_permutexvar_ps(code, lut);
		acc = _mm512_add_ps(acc, _mm512_mul_ps(w, _mm512_loadu_ps(x + 16 * g)));
	}
	return fold512(acc);
}

int lg_qdot_nvfp4(const uint8_t *packed, const uint8_t *scales, const float *div, const float *x,
                  int n, float *out)
{
	if (level() != 2 || !div || n % 16)
		return 0;   /* AVX2: ops.c's dot_nvfp4_avx2 */
	*out = nvfp4_512(packed, scales, div, x, n);
	return 1;
}

/* ------------------------------------------------------------ the tile */

/* U <= 3 tokens x R <= 4 rows, each (row, token) its 16 lanes in one
 * register; R and U are constants where it is inlined, so the accumulators
 * stay in registers: each w load serves U tokens, each x load R rows. */
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline))
static inline void tile_512(const float *w, size_t ldw, int R, const float *x, size_t ldx, int U,
                            int n, float *y, size_t ldy)
{
	__m512 acc[4][3];
	for (int r = 0; r < R; r++)
		for (int u = 0; u < U; u++)
			acc[r][u] = _mm512_setzero_ps();
	for (int k = 0; k < n; k += 16) {
		__m512 wv[4];
		for (int r = 0; r < R; r++)
			wv[r] = _mm512_loadu_ps(w + (size_t)r * ldw + k);
		for (int u = 0; u < U; u++) {
			__m512 xv = _mm512_loadu_ps(x + (size_t)u * ldx + k);
			for (int r = 0; r < R; r++)
				acc[r][u] = _mm512_add_ps(acc[r][u], _mm512_mul_ps(wv[r], xv));
		}
	}
	for (int r = 0; r < R; r++)
		for (int u = 0; u < U; u++)
			y[(size_t)u * ldy + r] = fold512(acc[r][u]);
}

__attribute__((target("avx512f,avx512bw,avx512vl")))
static void tiles_512(const float *w, size_t ldw, int R, const float *x, size_t ldx, int T, int n,
                      float *y, size_t ldy)
{
	int t = 0;
#define TILE(RR, UU) tile_512(w, ldw, RR, x + (size_t)t * ldx, ldx, UU, n, y + (size_t)t * ldy, ldy)
	TILES_R4_U3(t, T, R, TILE);
#undef TILE
}

int lg_dot_tile(const float *w, size_t ldw, int R, const float *x, size_t ldx, int T, int n,
                float *y, size_t ldy)
{
	if (level() != 2 || n % 16 || R < 1 || R > 4)
		return 0;
	tiles_512(w, ldw, R, x, ldx, T, n, y, ldy);
	return 1;
}

#else
int lg_qdot_fp8(const uint8_t *q, const float *s, int gw, const float *x, int n, float *out)
{
	(void)q, (void)s, (void)gw, (void)x, (void)n, (void)out;
	return 0;
}

int lg_qdot_int(const uint8_t *row, int bits, const float *s, const int *zo, int gw,
                const float *x, int n, float *out)
{
	(void)row, (void)bits, (void)s, (void)zo, (void)gw, (void)x, (void)n, (void)out;
	return 0;
}

int lg_qdot_nvfp4(const uint8_t *packed, const uint8_t *scales, const float *div, const float *x,
                  int n, float *out)
{
	(void)packed, (void)scales, (void)div, (void)x, (void)n, (void)out;
	return 0;
}

int lg_dot_tile(const float *w, size_t ldw, int R, const float *x, size_t ldx, int T, int n,
                float *y, size_t ldy)
{
	(void)w, (void)ldw, (void)R, (void)x, (void)ldx, (void)T, (void)n, (void)y, (void)ldy;
	return 0;
}
#endif
