/* ek_actq_rule.h — vLLM's input-activation quantizers, one number at a time,
 * written once for the CPU twin (ek_actq_cpu.c) and the CUDA op (ek_actq.cu).
 * Internal to kernels/ and its tests. The E4M3 and E2M1 roundings are
 * quant/'s (quant/recipe.h): the same functions the weight quantizer uses.
 *
 * NVFP4 (compressed-tensors nvfp4-pack-quantized, input_activations 4-bit
 * float, tensor_group, group 16, dynamic "local"; the checkpoint's static
 * input_global_scale gs, the large number 448·6/amax). Per group of 16
 * consecutive inputs of one token, as vLLM's NVFP4 emulation
 * (nvfp4_emulation_utils.py, _nvfp4_quant_dequant_kernel and ref_nvfp4_quant),
 * every step one binary32 operation rounded to nearest even:
 *   a     = max |x_i| over the group
 *   s     = e4m3(min(gs · (a · fl(1/6)), 448))        E4M3 RNE (quant's rq_e4m3_code)
 *   inv   = s == 0 ? 0 : gs / s                         vLLM's output_scale
 *   q_i   = e2m1(x_i · inv)                             RNE on the E2M1 grid, |q| > 5 -> 6
 *                                                       (quant's rq_e2m1_code: the
 *                                                       thresholds of vLLM's cast_to_fp4)
 *   x'_i  = q_i · (s / gs)                              the dequantized input
 * A negative input that rounds to zero gives -0.0, as vLLM's sign · 0 does.
 * vLLM's torch CPU fallback computes inv as 1 / (s · (1/gs)), which can differ
 * from gs / s in the last bit; the GPU path (Triton) divides once, as here.
 * vLLM then rounds x' to its activation dtype (BF16); this engine's
 * activations are binary32 throughout and x' stays binary32.
 * compressed-tensors' fake quantization (llm-compressor's view while it
 * calibrates; lifecycle/forward.py, utils/helpers.py) divides instead: scale
 * gs · (a / 6), q = x / (s / gs), and a zero scale becomes E4M3's eps 0.125;
 * the results differ from vLLM's only for inputs within an ulp of a rounding
 * boundary. The engine follows vLLM: it is what a server computes.
 *
 * FP8 dynamic per token (float-quantized, input_activations 8-bit float,
 * strategy token, dynamic true), as vLLM's
 * dynamic_per_token_scaled_fp8_quant kernel, per token:
 *   a     = max |x_i| over the token's inputs
 *   s     = max(a / 448, 1 / (448 · 512))               vLLM's min_scaling_factor
 *   q_i   = e4m3(clamp(x_i / s, -448, 448))             E4M3 RNE, sign kept (a negative
 *                                                       input that rounds to 0 is -0, as
 *                                                       the E4M3 conversion gives)
 *   x'_i  = q_i · s
 * (vLLM keeps q and s apart and multiplies s into the GEMM's output; the
 * product here is the same value up to the summation's rounding.)
 *
 * Inputs are finite (a NaN or Inf activation gives unspecified values). */
#ifndef RQ_KERNELS_EK_ACTQ_RULE_H
#define RQ_KERNELS_EK_ACTQ_RULE_H

#include "quant/recipe.h"

#define EK_ACTQ_RCP6 0.16666667f                 /* fl32(1/6): vLLM's FLOAT4_E2M1_MAX_RECIPROCAL */
#define EK_ACTQ_FP8_MIN_SCALE (1.0f / (448.0f * 512.0f))

/* The E4M3 group scale s of a group with max |x| = a under input global scale gs. */
RQ_FN float ek_actq_nv_scale(float a, float gs)
{
	float s = RQ_MUL(gs, RQ_MUL(a, EK_ACTQ_RCP6));
	s = s < RQ_E4M3_MAX ? s : RQ_E4M3_MAX;
	return rq_e4m3_val(rq_e4m3_code(s));
}

/* Value of an E2M1 code (sign bit 8, magnitude index 0..7), exact. */
RQ_FN float ek_actq_e2m1(uint32_t c)
{
	uint32_t m = c & 7u;
	/* 0, 0.5, 1, 1.5, 2, 3, 4, 6: index 2..7 is 2^(m/2 - 1) · (1 or 1.5) */
	float v = m == 0u ? 0.0f : m == 1u ? 0.5f
	        : RQ_MUL((m & 1u) ? 1.5f : 1.0f, rq_u2f((126u + (m >> 1)) << 23));
	return (c & 8u) ? -v : v;
}

/* x' of one input x of a group whose scale is s (gs: the input global scale). */
RQ_FN float ek_actq_nv_elem(float x, float inv, float deq)
{
	return RQ_MUL(ek_actq_e2m1(rq_e2m1_code(RQ_MUL(x, inv))), deq);
}

/* inv and deq of a group scale s. */
RQ_FN float ek_actq_nv_inv(float s, float gs)
{
	return s == 0.0f ? 0.0f : RQ_DIV(gs, s);
}

RQ_FN float ek_actq_nv_deq(float s, float gs)
{
	return RQ_DIV(s, gs);
}

/* The per-token FP8 scale of a token whose max |x| is a. */
RQ_FN float ek_actq_fp8_scale(float a)
{
	float s = RQ_DIV(a, RQ_E4M3_MAX);
	return s > EK_ACTQ_FP8_MIN_SCALE ? s : EK_ACTQ_FP8_MIN_SCALE;
}

/* x' of one input x under per-token scale s. */
RQ_FN float ek_actq_fp8_elem(float x, float s)
{
	uint32_t u = rq_f2u(RQ_DIV(x, s));
	float m = rq_u2f(u & 0x7FFFFFFFu);   /* |q|; the sign bit goes back on the E4M3 value */
	m = m < RQ_E4M3_MAX ? m : RQ_E4M3_MAX;
	float v = rq_e4m3_val(rq_e4m3_code(m));
	return RQ_MUL(rq_u2f(rq_f2u(v) | (u & 0x80000000u)), s);
}

#endif
