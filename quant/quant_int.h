/* quant_int.h — internals shared by the quant sources and tests/quant (not public).
 *
 * Branch-free helpers used by the fast path, written as plain scalar C so gcc
 * vectorizes the loops that call them. Each has a slow, obviously-correct twin
 * in convert.c / quant_ref.c, and tests/quant compares them (exhaustively
 * where feasible). All arithmetic is IEEE binary32 in default rounding mode;
 * the project is built with -ffp-contract=off and without -ffast-math, which
 * these helpers depend on (the 2^23 rounding trick below must not be folded). */
#ifndef RQ_QUANT_INT_H
#define RQ_QUANT_INT_H

#include <stdint.h>
#include <string.h>

#include "quant/quant.h"

#define RQ_E4M3_MAX 448.0f
#define RQ_E4M3_EPS_CODE 0x20   /* 0.125: replaces a zero group scale */
#define RQ_GS_NUM 2688.0f       /* 448 (E4M3 max) * 6 (E2M1 max) */

static inline uint32_t rq_f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float rq_u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* BF16 bits -> binary32, exact. */
static inline float rq_bf16f(uint16_t b)
{
	return rq_u2f((uint32_t)b << 16);
}

/* Round a finite binary32 to BF16 (nearest even) and widen it back: bf16(x). */
static inline float rq_round_bf16(float x)
{
	uint32_t u = rq_f2u(x);
	u += 0x7FFFu + ((u >> 16) & 1u);
	return rq_u2f(u & 0xFFFF0000u);
}

/* E4M3FN code of s for 0 <= s <= 448 (finite), ties to even. Normal range
 * (s >= 2^-6): round the binary32 mantissa to 3 bits on the bit pattern and
 * rebias the exponent (127 -> 7). Below 2^-6 the quantum is 2^-9: s*512 is
 * exact, and adding 2^23 rounds it to an integer (ties to even) that lands in
 * the low mantissa bits; that integer is the code itself (8 = 2^-6, the
 * smallest normal, comes out right). */
static inline uint32_t rq_e4m3_code_pos(float s)
{
	uint32_t u = rq_f2u(s);
	uint32_t r = u + 0x7FFFFu + ((u >> 20) & 1u);
	uint32_t normal = (r >> 20) - (120u << 3);
	float t = s * 512.0f + 8388608.0f;
	uint32_t sub = rq_f2u(t) - 0x4B000000u;
	/* integer blend, not ?: — keeps the loop free of control flow so gcc
	 * vectorizes it (FP ops are not speculated under -ftrapping-math) */
	uint32_t is_normal = 0u - (uint32_t)(u >= 0x3C800000u);
	return (normal & is_normal) | (sub & ~is_normal);
}

/* Value of a positive E4M3FN code 1..0x7E. */
static inline float rq_e4m3_val_pos(uint32_t c)
{
	uint32_t normal = (c << 20) + (120u << 23);
	uint32_t sub = rq_f2u((float)(int32_t)(c & 7u) * (1.0f / 512.0f));
	uint32_t is_normal = 0u - (uint32_t)(c >= 8u);
	return rq_u2f((normal & is_normal) | (sub & ~is_normal));
}

/* S6(g) of the recipe: g / 6 in binary32, rounded to BF16 for RQ_RECIPE_BF16. */
static inline float rq_s6(float g, int bf16)
{
	float s = g / 6.0f;
	return bf16 ? rq_round_bf16(s) : s;
}

/* Group scale byte for group absmax g (|w| max, finite) under global scale gs:
 * s = min(gs * S6(g), 448), E4M3 RNE, 0 -> 0x20. */
static inline uint32_t rq_group_code(float g, float gs, int bf16)
{
	float s = gs * rq_s6(g, bf16);
	/* min(s, 448) on the bit pattern: s >= +0, and integer min keeps the
	 * caller's loop free of control flow */
	uint32_t u = rq_f2u(s), m = rq_f2u(RQ_E4M3_MAX);
	uint32_t c = rq_e4m3_code_pos(rq_u2f(u < m ? u : m));
	return c | (RQ_E4M3_EPS_CODE & (0u - (uint32_t)(c == 0)));   /* 0 -> 0x20 */
}

/* E2M1 code of q = w / seff by counting thresholds (ties to the even index):
 * |q| 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2.0, 2.5->2.0, 3.5->4.0, 5->4.0 (values,
 * codes 0, 2, 2, 4, 4, 6, 6); q beyond +-6
 * (even inf) gives 7, so the clamp of the recipe is implicit. Sign bit 8 iff
 * q < 0 (so an exact -0.0 gives 0x0). */
static inline uint32_t rq_e2m1_code(float q)
{
	float a = q < 0.0f ? -q : q;
	uint32_t i = (uint32_t)(a > 0.25f) + (uint32_t)(a >= 0.75f) + (uint32_t)(a > 1.25f)
	           + (uint32_t)(a >= 1.75f) + (uint32_t)(a > 2.5f) + (uint32_t)(a >= 3.5f)
	           + (uint32_t)(a > 5.0f);
	return i | (q < 0.0f ? 8u : 0u);
}

/* Instruction-set variants of the fast path (quant_fast.c). All give the
 * same bytes; tests force each one the CPU supports. */
enum { RQ_ISA_BASE = 0, RQ_ISA_AVX2 = 1, RQ_ISA_AVX512 = 2, RQ_ISA_COUNT = 3 };
int rq_quant_isa_max(void);            /* best variant this CPU and build can run */
int rq_quant_isa(void);                /* the variant in use */
int rq_quant_isa_force(int isa);       /* -1 = automatic; returns the previous forced
                                          value, -EINVAL if the CPU lacks it */
const char *rq_quant_isa_name(int isa);   /* "sse2", "avx2", "avx512" */

/* The scalar oracle of one row (quant_ref.c); the fast path is checked against it. */
void rq_quantize_row_ref(enum rq_recipe r, const uint16_t *w, size_t cols, float gs,
                         uint8_t *packed, uint8_t *scales);

#endif
