/* recipe.h — the NVFP4 recipe (SPEC.md §3), written once for every
 * implementation: quant_ref.c (the scalar oracle), quant_fast.c (the
 * vectorized CPU path, through quant_int.h) and kernels/kquant_kern.cu (the
 * CUDA quantizer). Internal to quant/, kernels/ and their tests.
 *
 * The rule — GS(a) and S6(g) of each variant, the 448 clamp, the zero-scale
 * code, the E2M1 rounding — lives here and nowhere else. What stays apart is
 * the literal encoding the oracle uses to check these forms: convert.c's
 * E4M3 table search and quant_ref.c's E2M1 distances (and tests/kernels'
 * own transcription of GS), which tests compare with the functions below
 * exhaustively where feasible (tests/quant, tests/kernels/test_kq_math.c).
 *
 * nvcc compiles these as __host__ __device__ functions; gcc as plain C.
 * Every helper is branch-free (integer blends, not ?: on floats), so gcc
 * vectorizes the loops of quant_fast.c that call them.
 *
 * Exactness: every float operation is one IEEE binary32 operation rounded to
 * nearest even. On the device the arithmetic goes through the _rn intrinsics
 * (never contracted into an FMA, no approximate division) and kquant_kern.cu
 * is also built with -fmad=false -prec-div=true -ftz=false; on the host the
 * project builds with -ffp-contract=off and without -ffast-math, which the
 * 2^23 rounding trick below depends on. Subnormals matter: seff can be a
 * binary32 subnormal (gs near 3.4e38 times a subnormal E4M3 scale).
 *
 * Changing any output byte here means bumping RQ_RECIPE_VERSION (quant.h);
 * tests/quant/test_recipe_version.c fails until both are done. */
#ifndef RQ_RECIPE_H
#define RQ_RECIPE_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define RQ_FN static __host__ __device__ __forceinline__
#else
#define RQ_FN static inline
#endif
#ifdef __CUDA_ARCH__
#define RQ_UNROLL _Pragma("unroll")
#define RQ_DIV(a, b) __fdiv_rn((a), (b))
#define RQ_MUL(a, b) __fmul_rn((a), (b))
#define RQ_ADD(a, b) __fadd_rn((a), (b))
#else
#define RQ_UNROLL
#define RQ_DIV(a, b) ((a) / (b))
#define RQ_MUL(a, b) ((a) * (b))
#define RQ_ADD(a, b) ((a) + (b))
#endif

#define RQ_E4M3_MAX 448.0f
#define RQ_E4M3_EPS_CODE 0x20u  /* 0.125: replaces a zero group scale */
#define RQ_GS_NUM 2688.0f       /* 448 (E4M3 max) * 6 (E2M1 max) */
#define RQ_BF16_INF 0x7F80u     /* |w| bits >= this: Inf or NaN */

/* Recipe numbers as in enum rq_recipe (quant.h), for code that has an int. */
#define RQ_R_FP32 0
#define RQ_R_BF16 1
#define RQ_R_FP32DIV 2

RQ_FN uint32_t rq_f2u(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
#endif
}

RQ_FN float rq_u2f(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float f;
	memcpy(&f, &u, 4);
	return f;
#endif
}

/* BF16 bits (low 16 bits of b) -> binary32, exact. */
RQ_FN float rq_bf16f(uint32_t b)
{
	return rq_u2f((b & 0xFFFFu) << 16);
}

/* bf16(x): round a finite binary32 to BF16 (nearest even), widen it back.
 * Overflow rounds to inf, as torch does. */
RQ_FN float rq_round_bf16(float x)
{
	uint32_t u = rq_f2u(x);
	u += 0x7FFFu + ((u >> 16) & 1u);
	return rq_u2f(u & 0xFFFF0000u);
}

/* The global scale GS(a) of recipe r for amax (a BF16 magnitude widened),
 * with the max(amax, 2^-126) floor and inf/NaN -> 1.0 (a NaN amax passes the
 * floor, as torch.clamp does, and ends as 1.0). */
RQ_FN float rq_recipe_gs(int r, float amax)
{
	const float tiny = 1.17549435e-38f;     /* 2^-126 */
	float a = amax < tiny ? tiny : amax;
	float gs;
	if (r == RQ_R_BF16)                     /* torch on BF16: reciprocal, then multiply */
		gs = rq_round_bf16(RQ_MUL(rq_round_bf16(RQ_DIV(1.0f, a)), RQ_GS_NUM));
	else if (r == RQ_R_FP32DIV)
		gs = RQ_DIV(RQ_GS_NUM, a);
	else
		gs = RQ_MUL(RQ_DIV(1.0f, a), RQ_GS_NUM);
	if ((rq_f2u(gs) & 0x7F800000u) == 0x7F800000u)   /* inf or NaN */
		gs = 1.0f;
	return gs;
}

/* The group scale before encoding: s = min(gs * S6(g), 448), S6(g) = g / 6
 * (rounded to BF16 for the bf16 variant), binary32 multiply in this order.
 * g is the group's max |w| (finite, >= 0), so s >= +0 and the min is taken
 * on the bit pattern (keeps the caller's loop free of control flow). */
RQ_FN float rq_scale_value(int r, float g, float gs)
{
	float s6 = RQ_DIV(g, 6.0f);
	if (r == RQ_R_BF16)
		s6 = rq_round_bf16(s6);
	uint32_t u = rq_f2u(RQ_MUL(gs, s6)), m = rq_f2u(RQ_E4M3_MAX);
	return rq_u2f(u < m ? u : m);
}

/* E4M3FN code of 0 <= s <= 448 (finite), nearest even. Normal range
 * (s >= 2^-6): round the binary32 mantissa to 3 bits on the bit pattern and
 * rebias the exponent (127 -> 7). Below 2^-6 the quantum is 2^-9: s*512 is
 * exact, and adding 2^23 rounds it to an integer (ties to even) that lands in
 * the low mantissa bits; that integer is the code itself (8 = 2^-6, the
 * smallest normal, comes out right). Both are computed and blended. */
RQ_FN uint32_t rq_e4m3_code(float s)
{
	uint32_t u = rq_f2u(s);
	uint32_t r = u + 0x7FFFFu + ((u >> 20) & 1u);
	uint32_t normal = (r >> 20) - (120u << 3);
	float t = RQ_ADD(RQ_MUL(s, 512.0f), 8388608.0f);
	uint32_t sub = rq_f2u(t) - 0x4B000000u;
	uint32_t is_normal = 0u - (uint32_t)(u >= 0x3C800000u);
	return (normal & is_normal) | (sub & ~is_normal);
}

/* Value of a positive E4M3FN code 1..0x7E (exact). */
RQ_FN float rq_e4m3_val(uint32_t c)
{
	uint32_t normal = (c << 20) + (120u << 23);
	uint32_t sub = rq_f2u(RQ_MUL((float)(int32_t)(c & 7u), 0.001953125f));   /* c * 2^-9 */
	uint32_t is_normal = 0u - (uint32_t)(c >= 8u);
	return rq_u2f((normal & is_normal) | (sub & ~is_normal));
}

/* Group scale byte for group max |w| g under global scale gs:
 * E4M3 RNE of rq_scale_value, 0 -> 0x20. */
RQ_FN uint32_t rq_scale_code(int r, float g, float gs)
{
	uint32_t c = rq_e4m3_code(rq_scale_value(r, g, gs));
	return c | (RQ_E4M3_EPS_CODE & (0u - (uint32_t)(c == 0)));
}

/* seff = value(scale) / gs: what each weight of the group is divided by. */
RQ_FN float rq_seff(uint32_t code, float gs)
{
	return RQ_DIV(rq_e4m3_val(code), gs);
}

/* E2M1 code of q = w / seff by counting thresholds (ties to the even index):
 * |q| 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2.0, 2.5->2.0, 3.5->4.0, 5->4.0;
 * |q| > 5 (even inf) gives 7, so the ±6 clamp of the recipe is implicit.
 * Sign bit 8 iff q < 0 (so an exact -0.0 gives 0x0). */
RQ_FN uint32_t rq_e2m1_code(float q)
{
	float a = q < 0.0f ? -q : q;
	uint32_t i = (uint32_t)(a > 0.25f) + (uint32_t)(a >= 0.75f) + (uint32_t)(a > 1.25f)
	           + (uint32_t)(a >= 1.75f) + (uint32_t)(a > 2.5f) + (uint32_t)(a >= 3.5f)
	           + (uint32_t)(a > 5.0f);
	return i | (q < 0.0f ? 8u : 0u);
}

/* The code of w = RN(w / seff) without dividing (the CUDA quantizer's form):
 * RN(x) >= T exactly when x reaches the midpoint below T (every threshold T
 * of rq_e2m1_code has an even mantissa, so ties round to T), and RN(x) > T
 * when x passes the midpoint above T; the sign survives when x > 2^-150
 * (RN(x) != 0). Each bound times seff is exact in binary64 (<= 26 + 24
 * bits), and |w| is a BF16, so each test is an integer compare of |w|'s bits
 * with the smallest BF16 at or above the bound: t[0..6] count the magnitude
 * index, t[7] gates the sign bit. Bounds 0..6 are never BF16 values
 * themselves (their significand has >= 25 bits), so "smallest BF16 >= b" and
 * "> b" agree there; the sign bound is seff * 2^-150, which can be one, hence
 * strict. */
RQ_FN uint32_t rq_bf16_ceil(double b, int strict)
{
#ifdef __CUDA_ARCH__
	uint32_t u = rq_f2u(__double2float_ru(b));  /* smallest binary32 >= b */
#else
	float f = (float)b;
	uint32_t u = rq_f2u(f);
	if ((double)f < b)
		u += 1;                             /* smallest binary32 >= b (b > 0) */
#endif
	uint32_t t = (u + 0xFFFFu) >> 16;       /* smallest BF16 >= b */
	if (strict && (u & 0xFFFFu) == 0 && (double)rq_u2f(u) == b)
		t += 1;                             /* b is a BF16 itself: need > b */
	return t;
}

RQ_FN void rq_code_thresholds(float seff, uint32_t t[8])
{
	double s = (double)seff;
	t[0] = rq_bf16_ceil(s * (0.25 + 0x1p-26), 0);    /* q > 0.25 */
	t[1] = rq_bf16_ceil(s * (0.75 - 0x1p-25), 0);    /* q >= 0.75 */
	t[2] = rq_bf16_ceil(s * (1.25 + 0x1p-24), 0);    /* q > 1.25 */
	t[3] = rq_bf16_ceil(s * (1.75 - 0x1p-24), 0);    /* q >= 1.75 */
	t[4] = rq_bf16_ceil(s * (2.5 + 0x1p-23), 0);     /* q > 2.5 */
	t[5] = rq_bf16_ceil(s * (3.5 - 0x1p-23), 0);     /* q >= 3.5 */
	t[6] = rq_bf16_ceil(s * (5.0 + 0x1p-22), 0);     /* q > 5 */
	t[7] = rq_bf16_ceil(s * 0x1p-150, 1);            /* q != 0 */
}

/* Same as rq_e2m1_code(RN(w / seff)) for a finite BF16 w (bits), given
 * rq_code_thresholds(seff). (m - t) >> 31 is 1 when m < t (both < 2^16). */
RQ_FN uint32_t rq_code_thr(uint32_t w, const uint32_t t[8])
{
	uint32_t m = w & 0x7FFFu;
	uint32_t below = ((m - t[0]) >> 31) + ((m - t[1]) >> 31) + ((m - t[2]) >> 31)
	               + ((m - t[3]) >> 31) + ((m - t[4]) >> 31) + ((m - t[5]) >> 31)
	               + ((m - t[6]) >> 31);
	uint32_t sign = (w >> 15) & ~((m - t[7]) >> 31) & 1u;
	return (7u - below) | sign << 3;
}

/* Max |w| of 16 BF16 weights, as bits (non-negative floats order as integers). */
RQ_FN uint32_t rq_group_absmax(const uint32_t w[16])
{
	uint32_t m = 0;
	RQ_UNROLL
	for (int j = 0; j < 16; j++) {
		uint32_t a = w[j] & 0x7FFFu;
		m = a > m ? a : m;
	}
	return m;
}

/* One group: w[16] BF16 bits (finite) -> packed[0..1] (two little-endian
 * words holding 16 nibbles, column 2k in the low nibble of byte k) and the
 * returned scale byte. Division-free codes (rq_code_thr). */
RQ_FN uint32_t rq_quant_group(int r, float gs, const uint32_t w[16], uint32_t packed[2])
{
	uint32_t t[8];
	uint32_t sc = rq_scale_code(r, rq_bf16f(rq_group_absmax(w)), gs);
	rq_code_thresholds(rq_seff(sc, gs), t);
	RQ_UNROLL
	for (int h = 0; h < 2; h++) {
		uint32_t word = 0;
		RQ_UNROLL
		for (int j = 0; j < 8; j++)
			word |= rq_code_thr(w[8 * h + j], t) << (4 * j);
		packed[h] = word;
	}
	return sc;
}

/* The literal form of rq_quant_group (one division per weight), kept as the
 * tests' link between the threshold form and the recipe's wording. */
RQ_FN uint32_t rq_quant_group_div(int r, float gs, const uint32_t w[16], uint32_t packed[2])
{
	uint32_t sc = rq_scale_code(r, rq_bf16f(rq_group_absmax(w)), gs);
	float seff = rq_seff(sc, gs);
	for (int h = 0; h < 2; h++) {
		uint32_t word = 0;
		for (int j = 0; j < 8; j++)
			word |= rq_e2m1_code(RQ_DIV(rq_bf16f(w[8 * h + j]), seff)) << (4 * j);
		packed[h] = word;
	}
	return sc;
}

#endif
