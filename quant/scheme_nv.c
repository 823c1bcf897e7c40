/* scheme_nv.c — NVFP4A16 from F16 and F32 weights (scheme_int.h).
 *
 * compressed-tensors computes NVFP4 in the weight's dtype T (scheme.c's FACTS), so for a
 * source of dtype T:
 *   a     = max(absmax over the job's modules, finfo(T).tiny)     F16 2^-14, F32 2^-126
 *   gs    = T(T(1 / a) * 2688)   (python scalar / tensor is reciprocal, then multiply)
 *           inf/NaN -> 1.0 (F16: whenever 2688 / a > 65504, i.e. amax < ~0.041)
 *   group: s = min(f32(gs * T(g / 6)), 448), E4M3 RNE, 0 -> 0.125, seff = f32(value / gs)
 *   code  = E2M1 of f32(w / seff), ties to even, sign kept for q < 0
 * For F32 this is quant.h's fp32 recipe applied to F32 inputs; for BF16 it is the bf16 recipe
 * (quant_fast.c, which the BF16 path keeps using). Same ISA variants as scheme_kern.c. */
#include "quant/scheme_int.h"
#include "quant/quant_int.h"

#include <string.h>

#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define RQ_X86_VARIANTS 1
#endif

float rq_nvfp4_gs_t(int t, uint32_t amax)
{
	float a = t == RQ_SRC_F16 ? rq_f16_to_f32((uint16_t)amax) : rq_u2f(amax);
	float tiny = t == RQ_SRC_F16 ? 0x1p-14f : 0x1p-126f;
	a = a < tiny ? tiny : a;
	if (t == RQ_SRC_F16) {   /* rq_f16_to_f32 takes finite halves: test the code for inf */
		uint16_t h = rq_f32_to_f16(rq_f16_to_f32(rq_f32_to_f16(1.0f / a)) * RQ_GS_NUM);
		return (h & 0x7C00u) == 0x7C00u ? 1.0f : rq_f16_to_f32(h);
	}
	float gs = RQ_MUL(RQ_DIV(1.0f, a), RQ_GS_NUM);
	return (rq_f2u(gs) & 0x7F800000u) == 0x7F800000u ? 1.0f : gs;
}

uint32_t rq_nvfp4_absmax_t(int t, const void *w, size_t n)
{
	const uint8_t *p = w;
	uint32_t m = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t a = rq_mag_t(t, p, i);
		m = a > m ? a : m;
	}
	return m;
}

#define NV_BLOCK 64   /* groups of 16 per block: four loops over a block, as quant_fast.c */

static inline __attribute__((always_inline))
void nv_body(int t, const uint8_t *w, size_t rows, size_t cols, float gs, uint8_t *packed,
             uint8_t *scales)
{
	size_t groups = cols / 16;
	float x[NV_BLOCK * 16];       /* the block's weights, widened */
	uint32_t gmax[NV_BLOCK];      /* group max |w|, binary32 bits */
	float seff[NV_BLOCK];
	for (size_t i = 0; i < rows; i++) {
		for (size_t g0 = 0; g0 < groups; g0 += NV_BLOCK) {
			size_t ng = groups - g0 < NV_BLOCK ? groups - g0 : NV_BLOCK;
			size_t b = i * cols + g0 * 16;
			for (size_t j = 0; j < ng * 16; j++)
				x[j] = rq_ld_t(t, w, b + j);
			for (size_t g = 0; g < ng; g++) {
				uint32_t m = 0;
				for (int j = 0; j < 16; j++) {
					uint32_t a = rq_f2u(x[g * 16 + (size_t)j]) & 0x7FFFFFFFu;
					m = a > m ? a : m;
				}
				gmax[g] = m;
			}
			for (size_t g = 0; g < ng; g++) {
				float s6 = rq_round_t(t, rq_u2f(gmax[g]) / 6.0f);
				uint32_t u = rq_f2u(gs * s6), mx = rq_f2u(RQ_E4M3_MAX);
				uint32_t c = rq_e4m3_code(rq_u2f(u < mx ? u : mx));
				c |= RQ_E4M3_EPS_CODE & (0u - (uint32_t)(c == 0));
				scales[i * groups + g0 + g] = (uint8_t)c;
				seff[g] = rq_seff(c, gs);
			}
			uint8_t *p = packed + b / 2;
			for (size_t g = 0; g < ng; g++) {
				float se = seff[g];
				uint32_t code[16];
				for (int j = 0; j < 16; j++)
					code[j] = rq_e2m1_code(x[g * 16 + (size_t)j] / se);
				for (int k = 0; k < 8; k++)
					p[g * 8 + (size_t)k] = (uint8_t)(code[2 * k] | (code[2 * k + 1] << 4));
			}
		}
	}
}

typedef void (*nv_fn)(const uint8_t *, size_t, size_t, float, uint8_t *, uint8_t *);

#define RQ_NVVARIANT(suffix, attr) \
	attr static void nvh_##suffix(const uint8_t *w, size_t r, size_t c, float gs, uint8_t *p, \
	                               uint8_t *s) \
	{ nv_body(RQ_SRC_F16, w, r, c, gs, p, s); } \
	attr static void nvf_##suffix(const uint8_t *w, size_t r, size_t c, float gs, uint8_t *p, \
	                               uint8_t *s) \
	{ nv_body(RQ_SRC_F32, w, r, c, gs, p, s); }

RQ_NVVARIANT(base, )
#ifdef RQ_X86_VARIANTS
RQ_NVVARIANT(avx2, __attribute__((target("avx2"))))
RQ_NVVARIANT(avx512, __attribute__((target("arch=x86-64-v4"))))
#endif

static const nv_fn nvvariants[RQ_ISA_COUNT][2] = {
	{nvh_base, nvf_base},
#ifdef RQ_X86_VARIANTS
	{nvh_avx2, nvf_avx2},
	{nvh_avx512, nvf_avx512},
#endif
};

void rq_nvfp4_rows_t(int t, const void *w, size_t rows, size_t cols, float gs, uint8_t *packed,
                     uint8_t *scales)
{
	nvvariants[rq_quant_isa()][t == RQ_SRC_F32](w, rows, cols, gs, packed, scales);
}
