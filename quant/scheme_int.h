/* scheme_int.h — internals of the non-NVFP4 schemes (scheme.c, scheme_kern.c, tests/quant).
 *
 * The row kernels compute, for BF16 rows, exactly what torch on a BF16 tensor computes in
 * compressed-tensors 0.19.0 (the arithmetic is written out at the top of scheme.c). Each
 * function is compiled once per instruction set (quant_int.h's RQ_ISA_*; the same forcing
 * switch rq_quant_isa_force picks the variant) and all variants give the same bytes. */
#ifndef RQ_SCHEME_INT_H
#define RQ_SCHEME_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "quant/scheme.h"
#include "quant/recipe.h"

#define RQ_SCHEME_EPS_BF16 0x3C00u     /* torch.finfo(bfloat16).eps = 2^-7: a zero scale's value */
#define RQ_INT_GROUP 128               /* group size of W8A16 and W4A16 */

/* FP8_DYNAMIC over rows [0, rows) of w[rows][cols]: q[rows][cols] E4M3FN bytes and
 * scale[rows] BF16 bits (written unaligned, little-endian). Returns the index of the first
 * row holding a NaN/Inf (its outputs undefined), or rows when none. */
size_t rq_fp8_rows(const uint16_t *w, size_t rows, size_t cols, uint8_t *q, uint8_t *scale);

/* W8A16 (bits 8) / W4A16 (bits 4) over rows of w[rows][cols], cols % 128 == 0:
 * packed[rows][cols*bits/8] (q + 2^(bits-1) as unsigned fields, element 2k in the low nibble
 * for bits 4), scale[rows][cols/128] BF16 bits. Returns as rq_fp8_rows. */
size_t rq_int_rows(int bits, const uint16_t *w, size_t rows, size_t cols, uint8_t *packed,
                   uint8_t *scale);

/* The same for F16 (t = RQ_SRC_F16) and F32 (RQ_SRC_F32) sources: w holds T values (any
 * alignment), scales are written as T (2 or 4 bytes each). */
size_t rq_fp8_rows_t(int t, const void *w, size_t rows, size_t cols, uint8_t *q, uint8_t *scale);
size_t rq_int_rows_t(int t, int bits, const void *w, size_t rows, size_t cols, uint8_t *packed,
                     uint8_t *scale);

/* NVFP4A16 from F16/F32 (scheme_nv.c): the absmax of n T values as magnitude bits (F16:
 * >= 0x7C00, F32: >= 0x7F800000 means Inf/NaN), the global scale computed in T for it,
 * and the packed codes and E4M3 group scales of finite rows[rows][cols], cols % 16 == 0. */
uint32_t rq_nvfp4_absmax_t(int t, const void *w, size_t n);
float rq_nvfp4_gs_t(int t, uint32_t amax);
void rq_nvfp4_rows_t(int t, const void *w, size_t rows, size_t cols, float gs, uint8_t *packed,
                     uint8_t *scales);

/* The kernels' binary16 conversions (branch-free, inlined into the loops): */
/* binary16 bits (finite) -> binary32, exact: normal by rebiasing, subnormal/zero through a
 * subtraction that is exact (m * 2^-24 = (2^-14 + m * 2^-24) - 2^-14). */
static inline __attribute__((always_inline)) float rq_h2f(uint32_t h)
{
	uint32_t m = (h & 0x7FFFu) << 13;
	uint32_t normal = m + (112u << 23);
	uint32_t sub = rq_f2u(rq_u2f(m + (113u << 23)) - rq_u2f(113u << 23));
	uint32_t is_sub = 0u - (uint32_t)((h & 0x7C00u) == 0);
	return rq_u2f(((normal & ~is_sub) | (sub & is_sub)) | (h & 0x8000u) << 16);
}

/* binary32 (finite) -> binary16 bits, nearest even; >= 65520 -> inf. Normal: round the
 * mantissa to 10 bits on the bit pattern and rebias; below 2^-14 adding 0.5 (ulp 2^-24)
 * rounds to the subnormal quantum and the low bits are the code. Both computed, blended. */
static inline __attribute__((always_inline)) uint32_t rq_f2h(float x)
{
	uint32_t f = rq_f2u(x), sign = (f >> 16) & 0x8000u;
	f &= 0x7FFFFFFFu;
	uint32_t nrm = (f - (112u << 23) + 0xFFFu + ((f >> 13) & 1u)) >> 13;
	uint32_t sub = rq_f2u(rq_u2f(f) + 0.5f) - 0x3F000000u;
	uint32_t o = f < 0x38800000u ? sub : nrm;
	o = f >= 0x47800000u ? 0x7C00u : o;
	return o | sign;
}

/* Element i of an F16 (t = RQ_SRC_F16) or F32 source of any alignment: its value, its
 * magnitude as ordered integer bits (|w| without the sign), and x rounded to T. */
static inline __attribute__((always_inline)) float rq_ld_t(int t, const uint8_t *w, size_t i)
{
	if (t == RQ_SRC_F16) {
		uint16_t h;
		memcpy(&h, w + 2 * i, 2);
		return rq_h2f(h);
	}
	float f;
	memcpy(&f, w + 4 * i, 4);
	return f;
}

static inline __attribute__((always_inline)) uint32_t rq_mag_t(int t, const uint8_t *w, size_t i)
{
	if (t == RQ_SRC_F16) {
		uint16_t u;
		memcpy(&u, w + 2 * i, 2);
		return u & 0x7FFFu;
	}
	uint32_t u;
	memcpy(&u, w + 4 * i, 4);
	return u & 0x7FFFFFFFu;
}

static inline __attribute__((always_inline)) float rq_round_t(int t, float x)
{
	return t == RQ_SRC_F16 ? rq_h2f(rq_f2h(x)) : x;
}

/* ... and the same as functions, for tests and the glue code. */
float rq_f16_to_f32(uint16_t h);
uint16_t rq_f32_to_f16(float x);

/* The scalar oracles of one value (scheme.c), which tests compare the kernels with:
 * the BF16 scale bits for a BF16 absmax (bits) and the divisor q (448, 127.5, 7.5), and the
 * code of BF16 weight bits w under BF16 scale bits s. */
uint16_t rq_scheme_scale_ref(uint16_t amax, float q);
uint8_t rq_fp8_code_ref(uint16_t w, uint16_t s);
int rq_int_code_ref(int bits, uint16_t w, uint16_t s);   /* -2^(bits-1) .. 2^(bits-1)-1 */

/* The scalar oracle of one module (no fusion) of source dtype src: rq_scheme_quantize's
 * bytes from the recipe's words with the library's slow conversions (convert.c, rintf, the
 * compiler's _Float16; quant_ref.c for the NVFP4 schemes). -EDOM NaN/Inf, -EINVAL/-ENOTSUP
 * as rq_scheme_layout and rq_scheme_recipe_ok. */
int rq_scheme_quantize_ref(enum rq_scheme s, enum rq_recipe r, enum rq_src_dtype src,
                           const void *w, size_t rows, size_t cols, uint8_t *out);

#endif
