/* kq_math.h — the NVFP4 recipe (SPEC.md §3) for one group of 16, written once
 * for the GPU and the CPU (internal to kernels/ and its tests).
 *
 * nvcc compiles these as __host__ __device__ functions for kquant.cu; gcc
 * compiles them as plain C for tests/kernels/test_kq_math.c, which compares
 * them with quant/ exhaustively where feasible, so the device code is checked
 * on every CI run even without a GPU. The formulas mirror quant/quant_int.h.
 *
 * Exactness: every float operation is one IEEE binary32 operation rounded to
 * nearest even. On the device the arithmetic goes through the _rn intrinsics
 * (never contracted into an FMA, no approximate division) and kquant.cu is
 * also built with -fmad=false -prec-div=true -ftz=false; on the host the
 * project builds with -ffp-contract=off. Subnormals matter: seff can be a
 * binary32 subnormal (gs near 3.4e38 times a subnormal E4M3 scale). */
#ifndef RQ_KQ_MATH_H
#define RQ_KQ_MATH_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KQ_FN static __host__ __device__ __forceinline__
#else
#define KQ_FN static inline
#endif
#ifdef __CUDA_ARCH__
#define KQ_UNROLL _Pragma("unroll")
#else
#define KQ_UNROLL
#endif

#ifdef __CUDA_ARCH__
#define KQ_DIV(a, b) __fdiv_rn((a), (b))
#define KQ_MUL(a, b) __fmul_rn((a), (b))
#define KQ_ADD(a, b) __fadd_rn((a), (b))
#else
#define KQ_DIV(a, b) ((a) / (b))
#define KQ_MUL(a, b) ((a) * (b))
#define KQ_ADD(a, b) ((a) + (b))
#endif

#define KQ_E4M3_MAX 448.0f
#define KQ_E4M3_EPS_CODE 0x20u  /* 0.125: replaces a zero group scale */
#define KQ_GS_NUM 2688.0f       /* 448 (E4M3 max) * 6 (E2M1 max) */
#define KQ_BF16_INF 0x7F80u     /* |w| bits >= this: Inf or NaN */

/* Recipe numbers as in enum rq_recipe (quant/quant.h). */
#define KQ_FP32 0
#define KQ_BF16 1
#define KQ_FP32DIV 2

KQ_FN uint32_t kq_f2u(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
#endif
}

KQ_FN float kq_u2f(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float f;
	memcpy(&f, &u, 4);
	return f;
#endif
}

/* BF16 bits -> binary32, exact. */
KQ_FN float kq_bf16f(uint32_t b)
{
	return kq_u2f((b & 0xFFFFu) << 16);
}

/* bf16(x): round a finite binary32 to BF16 (nearest even), widen it back.
 * Overflow rounds to inf, as torch does. */
KQ_FN float kq_round_bf16(float x)
{
	uint32_t u = kq_f2u(x);
	u += 0x7FFFu + ((u >> 16) & 1u);
	return kq_u2f(u & 0xFFFF0000u);
}

/* The global scale GS(a) of recipe r for amax (a finite BF16 magnitude,
 * widened), with the 2^-126 floor and inf/NaN -> 1.0 (rq_global_scale). */
KQ_FN float kq_global_scale(int r, float amax)
{
	const float tiny = 1.17549435e-38f;     /* 2^-126 */
	float a = amax < tiny ? tiny : amax;
	float gs;
	if (r == KQ_BF16)
		gs = kq_round_bf16(KQ_MUL(kq_round_bf16(KQ_DIV(1.0f, a)), KQ_GS_NUM));
	else if (r == KQ_FP32DIV)
		gs = KQ_DIV(KQ_GS_NUM, a);
	else
		gs = KQ_MUL(KQ_DIV(1.0f, a), KQ_GS_NUM);
	if ((kq_f2u(gs) & 0x7F800000u) == 0x7F800000u)   /* inf or NaN */
		gs = 1.0f;
	return gs;
}

/* E4M3FN code of 0 <= s <= 448, nearest even. Normal range (s >= 2^-6):
 * round the binary32 mantissa to 3 bits on the bit pattern and rebias the
 * exponent (127 -> 7). Below 2^-6 the quantum is 2^-9: s*512 is exact and
 * adding 2^23 rounds it to an integer, which is the code (8 = 2^-6 too). */
KQ_FN uint32_t kq_e4m3_code(float s)
{
	uint32_t u = kq_f2u(s);
	if (u >= 0x3C800000u) {
		uint32_t r = u + 0x7FFFFu + ((u >> 20) & 1u);
		return (r >> 20) - (120u << 3);
	}
	float t = KQ_ADD(KQ_MUL(s, 512.0f), 8388608.0f);
	return kq_f2u(t) - 0x4B000000u;
}

/* Value of a positive E4M3FN code 1..0x7E (exact). */
KQ_FN float kq_e4m3_val(uint32_t c)
{
	if (c >= 8u)
		return kq_u2f((c << 20) + (120u << 23));
	return KQ_MUL((float)(int)c, 0.001953125f);      /* c * 2^-9 */
}

/* Group scale code for group absmax g under global scale gs:
 * s = min(gs * S6(g), 448), E4M3 RNE, 0 -> 0x20. */
KQ_FN uint32_t kq_scale_code(int r, float g, float gs)
{
	float s6 = KQ_DIV(g, 6.0f);
	if (r == KQ_BF16)
		s6 = kq_round_bf16(s6);
	float s = KQ_MUL(gs, s6);
	s = s < KQ_E4M3_MAX ? s : KQ_E4M3_MAX;
	uint32_t c = kq_e4m3_code(s);
	return c == 0u ? KQ_E4M3_EPS_CODE : c;
}

/* E2M1 code of q: nearest magnitude index on [0 .5 1 1.5 2 3 4 6], ties to
 * the even index; |q| > 5 (even inf) gives 7, so the ±6 clamp is implicit.
 * Sign bit 8 iff q < 0 (an exact -0.0 gives 0). */
KQ_FN uint32_t kq_e2m1_code(float q)
{
	float a = q < 0.0f ? -q : q;
	uint32_t i = (uint32_t)(a > 0.25f) + (uint32_t)(a >= 0.75f) + (uint32_t)(a > 1.25f)
	           + (uint32_t)(a >= 1.75f) + (uint32_t)(a > 2.5f) + (uint32_t)(a >= 3.5f)
	           + (uint32_t)(a > 5.0f);
	return i | (q < 0.0f ? 8u : 0u);
}

/* The code of w = RN(w / seff) without dividing: RN(x) >= T exactly when x
 * reaches the midpoint below T (every threshold T of kq_e2m1_code has an even
 * mantissa, so ties round to T), and RN(x) > T when x passes the midpoint
 * above T; the sign survives when x > 2^-150 (RN(x) != 0). Each bound times
 * seff is exact in binary64 (<= 26 + 24 bits), and |w| is a BF16, so each
 * test is an integer compare of |w|'s bits with the smallest BF16 at or above
 * the bound: t[0..6] count the magnitude index, t[7] gates the sign bit.
 * Bounds 0..6 are never BF16 values themselves (their significand has >= 25
 * bits), so "smallest BF16 >= b" and "> b" agree there; the sign bound is
 * seff * 2^-150, which can be one, hence strict. */
KQ_FN uint32_t kq_bf16_ceil(double b, int strict)
{
#ifdef __CUDA_ARCH__
	uint32_t u = kq_f2u(__double2float_ru(b));  /* smallest binary32 >= b */
#else
	float f = (float)b;
	uint32_t u = kq_f2u(f);
	if ((double)f < b)
		u += 1;                             /* smallest binary32 >= b (b > 0) */
#endif
	uint32_t t = (u + 0xFFFFu) >> 16;       /* smallest BF16 >= b */
	if (strict && (u & 0xFFFFu) == 0 && (double)kq_u2f(u) == b)
		t += 1;                             /* b is a BF16 itself: need > b */
	return t;
}

KQ_FN void kq_code_thresholds(float seff, uint32_t t[8])
{
	double s = (double)seff;
	t[0] = kq_bf16_ceil(s * (0.25 + 0x1p-26), 0);    /* q > 0.25 */
	t[1] = kq_bf16_ceil(s * (0.75 - 0x1p-25), 0);    /* q >= 0.75 */
	t[2] = kq_bf16_ceil(s * (1.25 + 0x1p-24), 0);    /* q > 1.25 */
	t[3] = kq_bf16_ceil(s * (1.75 - 0x1p-24), 0);    /* q >= 1.75 */
	t[4] = kq_bf16_ceil(s * (2.5 + 0x1p-23), 0);     /* q > 2.5 */
	t[5] = kq_bf16_ceil(s * (3.5 - 0x1p-23), 0);     /* q >= 3.5 */
	t[6] = kq_bf16_ceil(s * (5.0 + 0x1p-22), 0);     /* q > 5 */
	t[7] = kq_bf16_ceil(s * 0x1p-150, 1);            /* q != 0 */
}

/* Same as kq_e2m1_code(RN(w / seff)) for a finite BF16 w (bits), given
 * kq_code_thresholds(seff). (m - t) >> 31 is 1 when m < t (both < 2^16). */
KQ_FN uint32_t kq_code_thr(uint32_t w, const uint32_t t[8])
{
	uint32_t m = w & 0x7FFFu;
	uint32_t below = ((m - t[0]) >> 31) + ((m - t[1]) >> 31) + ((m - t[2]) >> 31)
	               + ((m - t[3]) >> 31) + ((m - t[4]) >> 31) + ((m - t[5]) >> 31)
	               + ((m - t[6]) >> 31);
	uint32_t sign = (w >> 15) & ~((m - t[7]) >> 31) & 1u;
	return (7u - below) | sign << 3;
}

/* One group: w[16] BF16 bits (finite) -> packed[0..1] (two little-endian
 * words holding 16 nibbles, column 2k in the low nibble of byte k) and the
 * returned scale byte. */
KQ_FN uint32_t kq_quant_group(int r, float gs, const uint32_t w[16], uint32_t packed[2])
{
	uint32_t m = 0, t[8];
	KQ_UNROLL
	for (int j = 0; j < 16; j++) {
		uint32_t a = w[j] & 0x7FFFu;        /* |w| as bits: orders as integers */
		m = a > m ? a : m;
	}
	uint32_t sc = kq_scale_code(r, kq_bf16f(m), gs);
	float seff = KQ_DIV(kq_e4m3_val(sc), gs);
	kq_code_thresholds(seff, t);
	KQ_UNROLL
	for (int h = 0; h < 2; h++) {
		uint32_t word = 0;
		KQ_UNROLL
		for (int j = 0; j < 8; j++)
			word |= kq_code_thr(w[8 * h + j], t) << (4 * j);
		packed[h] = word;
	}
	return sc;
}

/* The literal form of kq_quant_group (one division per weight), kept as the
 * tests' link between the threshold form and the recipe's wording. */
KQ_FN uint32_t kq_quant_group_div(int r, float gs, const uint32_t w[16], uint32_t packed[2])
{
	uint32_t m = 0;
	for (int j = 0; j < 16; j++) {
		uint32_t a = w[j] & 0x7FFFu;
		m = a > m ? a : m;
	}
	uint32_t sc = kq_scale_code(r, kq_bf16f(m), gs);
	float seff = KQ_DIV(kq_e4m3_val(sc), gs);
	for (int h = 0; h < 2; h++) {
		uint32_t word = 0;
		for (int j = 0; j < 8; j++)
			word |= kq_e2m1_code(KQ_DIV(kq_bf16f(w[8 * h + j]), seff)) << (4 * j);
		packed[h] = word;
	}
	return sc;
}

#endif
