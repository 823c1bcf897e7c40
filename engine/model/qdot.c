/* qdot.c — decode's quantized dots in registers (qdot.h), the oracle's bits.
 *
 * How each dequantization keeps the oracle's value, per weight:
 *   FP8  e4m3 byte b → binary16 bits (b & 0x80) << 8 | (b & 0x7F) << 7: the
 *        same sign, mantissa and (exponent − 8), subnormals included (an e4m3
 *        subnormal m·2^-9 is the half subnormal m·2^-17), widened exactly by
 *        vcvtph2ps; so e4m3(b) = half(b)·2^8 exactly, and e4m3(b)·s (one
 *        rounding) = half(b)·(s·2^8) (one rounding of the same real number),
 *        s·2^8 exact when |s| < 2^119. NaN codes (0x7F, 0xFF), which the half
 *        form reads as 1.875, send the rows to the oracle. (Not binary32 bits
 *        by shifts: an e4m3 subnormal would be a binary32 subnormal, and a
 *        product with one costs a microcode assist, ten times the row.)
 *   INT  field − zo, a small integer, converted exactly, times s: the
 *        oracle's (float)(q − z) · s. AVX-512 INT4: the 16 values (c − zo)·s
 *        of a group made once, picked by each nibble.
 *   NVFP4 the group's 16 values (8 magnitudes, then the same negated: −0.0
 *        for code 8, as the scalar table's −lut[0]) picked by the code; on
 *        AVX-512 from a per-thread table of every scale byte's 16 values.
 * Each product with x is rounded, then added to lane c mod 16 (no FMA: the
 * build has -ffp-contract=off and these are separate intrinsics), then the
 * lanes are folded as lg_dot folds them. The order of a row's adds is the
 * oracle's; R rows run side by side (ROWS4), which changes no row's order. */
#include "engine/model/qdot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "engine/model/simd_int.h"

/* 2: AVX-512 (F, BW, VL, VBMI), 1: AVX2 + F16C, 0: none (or switched off). */
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
		    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi") &&
		    !(no5 && *no5 && strcmp(no5, "0")))
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

#define T512 LG_T512
/* Columns up to which a call copies x to its stack in codes16p's order (64
 * KiB); wider rows (config.json allows 2^24) take the AVX2 dots (NVFP4) or
 * the 4-row calls (INT4), the same bits. */
#define XPERM_MAX 16384

/* The rows of one call are R <= 4 at a time, interleaved: each row's 16
 * lanes are one register, so one row's adds wait on each other (a vaddps's
 * latency per 16 weights) but R rows' do not, and each x load serves R rows
 * (ROWS4, simd_int.h). */

/* BF16 number k at p (any alignment: a mapped file's), widened exactly. */
static inline float bf16_at(const uint8_t *p, size_t k)
{
	uint16_t b;
	uint32_t u;
	float f;
	memcpy(&b, p + 2 * k, 2);
	u = (uint32_t)b << 16;
	memcpy(&f, &u, 4);
	return f;
}

/* ------------------------------------------------------------------ FP8 */

__attribute__((target(T512), always_inline))
static inline int fp8_rows_512(const uint8_t *q, size_t ldq, int RR, const float *s, int gw,
                               const float *x, int n, float *out, const uint8_t *pf,
                               const uint8_t *sb, size_t lds)
{
	/* scales: s[r·ng + g] binary32, or (lg_qdot_fp8_bf16s) sb's BF16 number r·lds + g */
	__m512 acc[4];
	int ng = n / gw;
	if (fp8_has_nan(q, ldq, RR, n))
		return 0;
	for (int r = 0; r < RR; r++)
		acc[r] = _mm512_setzero_ps();
	for (int g = 0; g < ng; g++) {
		__m512 sv[4];
		for (int r = 0; r < RR; r++)
			sv[r] = _mm512_set1_ps((sb ? bf16_at(sb, (size_t)r * lds + g) : s[(size_t)r * ng + g]) *
			                       256.0f);
		/* 32 columns a step (one conversion to binary16 for both halves), then
		 * 16: column c's product into lane c mod 16 in column order either way */
		int c = g * gw, e = c + gw;
		for (; c + 32 <= e; c += 32) {
			__m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + c + 16);
			if (pf && !(c & 63))
				prefetch4(pf, ldq, (size_t)c);
			for (int r = 0; r < RR; r++) {
				__m512 h0, h1;
				fp8_half32(q + r * ldq + c, &h0, &h1);
				acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(h0, sv[r]), x0));
				acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(h1, sv[r]), x1));
			}
		}
		if (c < e) {
			__m512 xv = _mm512_loadu_ps(x + c);
			for (int r = 0; r < RR; r++) {
				__m512 w = _mm512_mul_ps(fp8_half16(q + r * ldq + c), sv[r]);
				acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(w, xv));
			}
		}
	}
	for (int r = 0; r < RR; r++)
		out[r] = fold512(acc[r]);
	return 1;
}

__attribute__((target(T512)))
static int fp8_512(const uint8_t *q, size_t ldq, int R, const float *s, int gw, const float *x,
                   int n, float *out, const uint8_t *pf)
{
	int ok = 0;
#define FP8_BODY(RR) ok = fp8_rows_512(q, ldq, RR, s, gw, x, n, out, pf, NULL, 0)
	ROWS4(R, FP8_BODY);
#undef FP8_BODY
	return ok;
}

/* lg_qdot_fp8_bf16s: blocks of 4 rows, as int_range_512, until one holds a
 * NaN code; the rows done. */
__attribute__((target(T512)))
static int fp8_range_512(const uint8_t *q0, size_t ldq, int R, const uint8_t *sb, size_t lds,
                         int gw, const float *x, int n, float *out)
{
	for (int b = 0; b < R; b += 4) {
		const uint8_t *q = q0 + (size_t)b * ldq, *pf = b + 12 <= R ? q + 8 * ldq : NULL;
		const uint8_t *sr = sb + 2 * (size_t)b * lds;
		int ok = 0;
#define FR_BODY(RR) ok = fp8_rows_512(q, ldq, RR, NULL, gw, x, n, out + b, pf, sr, lds)
		ROWS4(R - b < 4 ? R - b : 4, FR_BODY);
#undef FR_BODY
		if (!ok)
			return b;
	}
	return R;
}

/* AVX2: 16 e4m3 bytes b → binary16 bits (b & 0x80) << 8 | (b & 0x7F) << 7 (the
 * top comment), widened by vcvtph2ps, times s·2^8. */
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

int lg_qdot_fp8(const uint8_t *q, size_t ldq, int R, const float *s, int gw, const float *x,
                int n, float *out, const uint8_t *pf)
{
	int lv = level();
	if (!lv || R < 1 || R > 4 || gw <= 0 || gw % 16 || n % gw)
		return 0;
	for (int g = 0; g < R * (n / gw); g++)
		if (!(fabsf(s[g]) < 0x1p119f))   /* s·2^8 not exact (or NaN): the oracle */
			return 0;
	if (lv == 2)
		return fp8_512(q, ldq, R, s, gw, x, n, out, pf);
	for (size_t o = 0; pf && o < 4 * ldq; o += 64)   /* AVX2: the next rows at once */
		_mm_prefetch((const char *)(pf + o), _MM_HINT_T0);
	float r[4];
	for (int i = 0; i < R; i++) {
		int nan = 0;
		r[i] = fp8_avx2(q + i * ldq, s + (size_t)i * (n / gw), gw, x, n, &nan);
		if (nan)
			return 0;
	}
	memcpy(out, r, R * sizeof *out);
	return 1;
}

int lg_qdot_fp8_bf16s(const uint8_t *q, size_t ldq, int R, const uint8_t *sb, size_t lds, int gw,
                      const float *x, int n, float *out)
{
	if (level() != 2 || R < 1 || gw <= 0 || gw % 16 || n % gw)
		return 0;
	return fp8_range_512(q, ldq, R, sb, lds, gw, x, n, out);
}

/* ------------------------------------------------------------------ INT */

/* The 16 nibbles of 8 bytes in column order (byte k: low nibble, high nibble) */
__attribute__((target("avx2")))
static inline __m128i nibbles16(const uint8_t *p)
{
	__m128i b = _mm_loadl_epi64((const __m128i *)p), m = _mm_set1_epi8(15);
	return _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
}

/* INT4: per group, each row's 16 possible weights (c − zo)·s, c = 0..15, in a
 * register ((float)c − (float)zo is the exact small integer the oracle
 * converts), then picked by each column's nibble. INT8: (field − zo)
 * converted, times s, per column. */
__attribute__((target(T512), always_inline))
static inline void int_rows_512(const uint8_t *row, size_t ldr, int RR, int bits, const float *s,
                                const int *zo, int gw, const float *x, int n, float *out,
                                const uint8_t *pf, const uint8_t *sb, size_t lds, int perm)
{
	/* the rest of this file's INT calls: s[r·ng + g] binary32, x in column
	 * order; lg_qdot_int_bf16s: sb[r·lds + g] BF16, 4-bit codes by codes16p
	 * with x in its order (perm) */
	const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	const __m512i half = _mm512_set1_epi32(1 << (bits - 1));
	/* symmetric: c − 2^(bits−1), the same for every group */
	const __m512 sym = _mm512_sub_ps(iota, _mm512_cvtepi32_ps(half));
	__m512 acc[4];
	int ng = n / gw;
	for (int r = 0; r < RR; r++)
		acc[r] = _mm512_setzero_ps();
	for (int g = 0; g < ng; g++) {
		__m512 sv[4], tv[4];
		__m512i zv[4];
		for (int r = 0; r < RR; r++) {
			sv[r] = _mm512_set1_ps(sb ? bf16_at(sb, (size_t)r * lds + g) : s[(size_t)r * ng + g]);
			zv[r] = zo ? _mm512_set1_epi32(zo[(size_t)r * ng + g]) : half;
			if (bits == 4)
				tv[r] = _mm512_mul_ps(zo ? _mm512_sub_ps(iota, _mm512_cvtepi32_ps(zv[r])) : sym,
				                      sv[r]);
		}
		for (int c = g * gw; c < (g + 1) * gw; c += 16) {
			__m512 xv = _mm512_loadu_ps(x + c);
			size_t o = (size_t)c * bits / 8;       /* the step's first byte */
			if (pf && !(o & 63))
				prefetch4(pf, ldr, o);
			for (int r = 0; r < RR; r++) {
				__m512 w;
				if (bits == 4) {
					w = _mm512_permutexvar_ps(perm ? codes16p(row + r * ldr + o)
					                               : codes16(row + r * ldr + o), tv[r]);
				} else {
					__m128i b = _mm_loadu_si128((const __m128i *)(row + r * ldr + o));
					w = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(b), zv[r]));
					w = _mm512_mul_ps(w, sv[r]);
				}
				acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(w, xv));
			}
		}
	}
	for (int r = 0; r < RR; r++)
		out[r] = fold512(perm ? lanes_unperm16(acc[r]) : acc[r]);
}

__attribute__((target(T512)))
static void int_512(const uint8_t *row, size_t ldr, int R, int bits, const float *s, const int *zo,
                    int gw, const float *x, int n, float *out, const uint8_t *pf)
{
#define INT_BODY(RR)                                                           \
	do {                                                                   \
		if (bits == 4)                                                 \
			int_rows_512(row, ldr, RR, 4, s, zo, gw, x, n, out, pf, NULL, 0, 0); \
		else                                                           \
			int_rows_512(row, ldr, RR, 8, s, zo, gw, x, n, out, pf, NULL, 0, 0); \
	} while (0)
	ROWS4(R, INT_BODY);
#undef INT_BODY
}

__attribute__((target("avx2")))
static float int_avx2(const uint8_t *row, int bits, const float *s, const int *zo, int gw,
                      const float *x, int n)
{
	__m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
	for (int g = 0; g < n / gw; g++) {
		__m256 sv = _mm256_set1_ps(s[g]);
		__m256i zv = _mm256_set1_epi32(zo ? zo[g] : 1 << (bits - 1));
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

int lg_qdot_int(const uint8_t *row, size_t ldr, int R, int bits, const float *s, const int *zo,
                int gw, const float *x, int n, float *out, const uint8_t *pf)
{
	int lv = level();
	if (!lv || R < 1 || R > 4 || (bits != 8 && bits != 4) || gw <= 0 || gw % 16 || n % gw)
		return 0;
	if (lv == 2) {
		int_512(row, ldr, R, bits, s, zo, gw, x, n, out, pf);
		return 1;
	}
	for (size_t o = 0; pf && o < 4 * ldr; o += 64)   /* AVX2: the next rows at once */
		_mm_prefetch((const char *)(pf + o), _MM_HINT_T0);
	for (int i = 0; i < R; i++)
		out[i] = int_avx2(row + i * ldr, bits, s + (size_t)i * (n / gw),
		                  zo ? zo + (size_t)i * (n / gw) : NULL, gw, x, n);
	return 1;
}

/* All R rows of a symmetric INT Linear with BF16 scales, 4 at a time, the
 * scales widened where used and x put in codes16p's order once for the
 * call (a decode chunk is tens of rows: per 4 rows, copying their scales to
 * binary32 cost a sixth of the dots), the rows 8 ahead fetched a line at a
 * time across each block's steps. */
__attribute__((target(T512)))
static void int_range_512(const uint8_t *row, size_t ldr, int R, int bits, const uint8_t *sb,
                          size_t lds, int gw, const float *x, int n, float *out)
{
	float xp[bits == 4 ? n : 1];
	if (bits == 4)
		x = lg_x_perm16(x, n, xp);
	for (int b = 0; b < R; b += 4) {
		const uint8_t *q = row + (size_t)b * ldr, *pf = b + 12 <= R ? q + 8 * ldr : NULL;
		const uint8_t *sr = sb + 2 * (size_t)b * lds;
#define IR_BODY(RR)                                                                          \
	do {                                                                                 \
		if (bits == 4)                                                               \
			int_rows_512(q, ldr, RR, 4, NULL, NULL, gw, x, n, out + b, pf, sr, lds, 1); \
		else                                                                         \
			int_rows_512(q, ldr, RR, 8, NULL, NULL, gw, x, n, out + b, pf, sr, lds, 0); \
	} while (0)
		ROWS4(R - b < 4 ? R - b : 4, IR_BODY);
#undef IR_BODY
	}
}

int lg_qdot_int_bf16s(const uint8_t *row, size_t ldr, int R, int bits, const uint8_t *sb,
                      size_t lds, int gw, const float *x, int n, float *out)
{
	if (level() != 2 || R < 1 || (bits != 8 && bits != 4) || gw <= 0 || gw % 16 || n % gw ||
	    (bits == 4 && n > XPERM_MAX))
		return 0;
	int_range_512(row, ldr, R, bits, sb, lds, gw, x, n, out);
	return 1;
}

/* ---------------------------------------------------------------- NVFP4 */

/* The group values of every scale byte, lut[b][code], made from a Linear's
 * division table once per thread and reused while the table's contents stay
 * the same (the Linears of a token alternate, so in practice once per
 * product and thread, 256 vector builds, against a product's thousands of
 * groups). Row b as the scalar table has it: lanes 1..7 the products
 * f1·(.5, 1, ·, 2, ·, 4, ·) and f15·(1, 2, 4) at 3, 5, 7 (each the same exact
 * product), lane 0 +0.0 (a constant there, whatever f1 is), lanes 8..15 the
 * same with the sign bit flipped (−lut[i]: −0.0 at 8). */
static _Thread_local struct {
	_Alignas(64) float lut[256][16];
	float div[512];            /* the table lut was made from */
	int made;
} nv;

__attribute__((target(T512), noinline))   /* else GCC re-derives the TLS address per group */
const float (*lg_qdot_nvfp4_lut(const float *div))[16]
{
	if (nv.made && !memcmp(nv.div, div, sizeof nv.div))
		return nv.lut;
	const __m512 c1 = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 0.0f, 2.0f, 0.0f, 4.0f, 0.0f,
	                                 0.0f, 0.5f, 1.0f, 0.0f, 2.0f, 0.0f, 4.0f, 0.0f);
	const __m512 c15 = _mm512_setr_ps(0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 2.0f, 0.0f, 4.0f,
	                                  0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 2.0f, 0.0f, 4.0f);
	const __m512i neg = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, (int)0x80000000u,
	                                      (int)0x80000000u, (int)0x80000000u, (int)0x80000000u,
	                                      (int)0x80000000u, (int)0x80000000u, (int)0x80000000u,
	                                      (int)0x80000000u);
	for (int b = 0; b < 256; b++) {
		/* lanes 1, 2, 4, 6 (and 9, ...): f1 products; 3, 5, 7: f15's; 0 and 8: zero */
		__m512 lut = _mm512_maskz_mul_ps(0x5656, _mm512_set1_ps(div[b]), c1);
		lut = _mm512_mask_mul_ps(lut, 0xA8A8, _mm512_set1_ps(div[256 + b]), c15);
		lut = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(lut), neg));
		_mm512_store_ps(nv.lut[b], lut);
	}
	memcpy(nv.div, div, sizeof nv.div);
	nv.made = 1;
	return nv.lut;
}

/* Per group and row: the codes (codes16), their values from the scale
 * byte's row of the table (vpermps with the table in memory), times x. */
__attribute__((target(T512), always_inline))
static inline void nvfp4_rows_512(const uint8_t *packed, const uint8_t *scales, int RR,
                                  const float (*lut)[16], const float *x, int n, float *out)
{
	__m512 acc[4];
	size_t lp = (size_t)n / 2, ls = (size_t)n / 16;
	for (int r = 0; r < RR; r++)
		acc[r] = _mm512_setzero_ps();
	for (int g = 0; g < n / 16; g++) {
		__m512 xv = _mm512_loadu_ps(x + 16 * g);
		for (int r = 0; r < RR; r++) {
			__m512 w = _mm512_permutexvar_ps(codes16p(packed + r * lp + 8 * g),
			                                 _mm512_load_ps(lut[scales[r * ls + g]]));
			acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(w, xv));
		}
	}
	for (int r = 0; r < RR; r++)
		out[r] = fold512(lanes_unperm16(acc[r]));
}

/* All R rows, 4 at a time, with one look at the table (a chunk of a decode
 * loop is tens of rows; a check per 4 rows cost a third of their dots). */
__attribute__((target(T512)))
static void nvfp4_512(const uint8_t *packed, const uint8_t *scales, int R, const float *div,
                      const float *x, int n, float *out)
{
	const float (*lut)[16] = lg_qdot_nvfp4_lut(div);   /* the thread's table: its address once */
	size_t lp = (size_t)n / 2, ls = (size_t)n / 16;
	float xp[n];                                        /* x in codes16p's order */
	x = lg_x_perm16(x, n, xp);
	for (int b = 0; b < R; b += 4) {
		const uint8_t *p = packed + b * lp, *sc = scales + b * ls;
		/* the rows 8 ahead (~2 KB at 576 columns) fetched while these are dotted */
		if (b + 12 <= R) {
			for (size_t o = 0; o < 4 * lp; o += 64)
				_mm_prefetch((const char *)(p + 8 * lp + o), _MM_HINT_T0);
			for (size_t o = 0; o < 4 * ls; o += 64)
				_mm_prefetch((const char *)(sc + 8 * ls + o), _MM_HINT_T0);
		}
#define NV_BODY(RR) nvfp4_rows_512(p, sc, RR, lut, x, n, out + b)
		ROWS4(R - b < 4 ? R - b : 4, NV_BODY);
#undef NV_BODY
	}
}

int lg_qdot_nvfp4(const uint8_t *packed, const uint8_t *scales, int R, const float *div,
                  const float *x, int n, float *out)
{
	if (level() != 2 || !div || R < 1 || n % 16 || n > XPERM_MAX)
		return 0;   /* AVX2: ops.c's dot_nvfp4_avx2 */
	nvfp4_512(packed, scales, R, div, x, n, out);
	return 1;
}

/* ----------------------------------------------------------------- BF16 */

/* Widened exactly (bits << 16), times x, into lane c mod 16; the last n % 16
 * columns with masked loads and a masked add (lanes past n keep their sum,
 * as lg_dot's scalar tail leaves them). */
__attribute__((target(T512), always_inline))
static inline void bf16_rows_512(const uint16_t *w, size_t ldw, int RR, const float *x, int n,
                                 float *out)
{
	__m512 acc[4];
	for (int r = 0; r < RR; r++)
		acc[r] = _mm512_setzero_ps();
	int c = 0;
	for (; c + 16 <= n; c += 16) {
		__m512 xv = _mm512_loadu_ps(x + c);
		for (int r = 0; r < RR; r++) {
			__m256i h = _mm256_loadu_si256((const __m256i *)(w + r * ldw + c));
			__m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
			acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(wv, xv));
		}
	}
	if (c < n) {
		__mmask16 m = (__mmask16)((1u << (n - c)) - 1);
		__m512 xv = _mm512_maskz_loadu_ps(m, x + c);
		for (int r = 0; r < RR; r++) {
			__m256i h = _mm256_maskz_loadu_epi16(m, w + r * ldw + c);
			__m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
			acc[r] = _mm512_mask_add_ps(acc[r], m, acc[r], _mm512_mul_ps(wv, xv));
		}
	}
	for (int r = 0; r < RR; r++)
		out[r] = fold512(acc[r]);
}

__attribute__((target(T512)))
static void bf16_512(const uint16_t *w, size_t ldw, int R, const float *x, int n, float *out)
{
#define BF_BODY(RR) bf16_rows_512(w, ldw, RR, x, n, out)
	ROWS4(R, BF_BODY);
#undef BF_BODY
}

int lg_qdot_bf16(const uint16_t *w, size_t ldw, int R, const float *x, int n, float *out)
{
	if (level() != 2 || R < 1 || R > 4 || n < 1)
		return 0;   /* AVX2: ops.c's dot_bf16_avx2, a row at a time */
	bf16_512(w, ldw, R, x, n, out);
	return 1;
}

/* ------------------------------------------------------------ the tile */

/* U <= 3 tokens x R <= 4 rows, each (row, token) its 16 lanes in one
 * register; R and U are constants where it is inlined, so the accumulators
 * stay in registers: each w load serves U tokens, each x load R rows. */
__attribute__((target(T512), always_inline))
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

__attribute__((target(T512)))
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

/* ------------------------------------------------------- rows of axpys */

/* KK <= 4 registers of out (16 columns each) through every row: per
 * column the adds of lg_axpy row after row, s[r] · x rounded, then added. */
__attribute__((target(T512), always_inline))
static inline void axpy_cols_512(float *out, const float *s, const float *x, size_t ldx,
                                 int rows, int KK)
{
	__m512 acc[4];
	for (int k = 0; k < KK; k++)
		acc[k] = _mm512_loadu_ps(out + 16 * k);
	for (int r = 0; r < rows; r++) {
		__m512 sv = _mm512_set1_ps(s[r]);
		for (int k = 0; k < KK; k++)
			acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(sv, _mm512_loadu_ps(x + r * ldx + 16 * k)));
	}
	for (int k = 0; k < KK; k++)
		_mm512_storeu_ps(out + 16 * k, acc[k]);
}

__attribute__((target(T512)))
static void axpy_rows_512(float *out, const float *s, const float *x, size_t ldx, int rows, int n)
{
	for (int c = 0; c < n; c += 64) {
		switch ((n - c) / 16 < 4 ? (n - c) / 16 : 4) {
		case 4: axpy_cols_512(out + c, s, x + c, ldx, rows, 4); break;
		case 3: axpy_cols_512(out + c, s, x + c, ldx, rows, 3); break;
		case 2: axpy_cols_512(out + c, s, x + c, ldx, rows, 2); break;
		default: axpy_cols_512(out + c, s, x + c, ldx, rows, 1); break;
		}
	}
}

int lg_axpy_rows(float *out, const float *s, const float *x, size_t ldx, int rows, int n)
{
	if (level() != 2 || n % 16 || rows < 0)
		return 0;
	axpy_rows_512(out, s, x, ldx, rows, n);
	return 1;
}

#else
int lg_qdot_fp8(const uint8_t *q, size_t ldq, int R, const float *s, int gw, const float *x,
                int n, float *out, const uint8_t *pf)
{
	(void)pf, (void)q, (void)ldq, (void)R, (void)s, (void)gw, (void)x, (void)n, (void)out;
	return 0;
}

int lg_qdot_int(const uint8_t *row, size_t ldr, int R, int bits, const float *s, const int *zo,
                int gw, const float *x, int n, float *out, const uint8_t *pf)
{
	(void)pf, (void)row, (void)ldr, (void)R, (void)bits, (void)s, (void)zo, (void)gw, (void)x, (void)n, (void)out;
	return 0;
}

int lg_qdot_fp8_bf16s(const uint8_t *q, size_t ldq, int R, const uint8_t *sb, size_t lds, int gw,
                      const float *x, int n, float *out)
{
	(void)q, (void)ldq, (void)R, (void)sb, (void)lds, (void)gw, (void)x, (void)n, (void)out;
	return 0;
}

int lg_qdot_int_bf16s(const uint8_t *row, size_t ldr, int R, int bits, const uint8_t *sb,
                      size_t lds, int gw, const float *x, int n, float *out)
{
	(void)row, (void)ldr, (void)R, (void)bits, (void)sb, (void)lds, (void)gw, (void)x, (void)n,
	    (void)out;
	return 0;
}

int lg_qdot_nvfp4(const uint8_t *packed, const uint8_t *scales, int R, const float *div,
                  const float *x, int n, float *out)
{
	(void)packed, (void)scales, (void)R, (void)div, (void)x, (void)n, (void)out;
	return 0;
}

int lg_qdot_bf16(const uint16_t *w, size_t ldw, int R, const float *x, int n, float *out)
{
	(void)w, (void)ldw, (void)R, (void)x, (void)n, (void)out;
	return 0;
}

int lg_axpy_rows(float *out, const float *s, const float *x, size_t ldx, int rows, int n)
{
	(void)out, (void)s, (void)x, (void)ldx, (void)rows, (void)n;
	return 0;
}

int lg_dot_tile(const float *w, size_t ldw, int R, const float *x, size_t ldx, int T, int n,
                float *y, size_t ldy)
{
	(void)w, (void)ldw, (void)R, (void)x, (void)ldx, (void)T, (void)n, (void)y, (void)ldy;
	return 0;
}
#endif
