/* kq_obs.cuh — the MSE observers' search on the GPU (kq_obs.cu launches it; tests/kernels/
 * test_kq_obs_simt.cpp runs this source on the host under emul/simt.h against the CPU
 * oracle). One thread per group, observer_ref.c's arithmetic operation for operation
 * (observer_int.h's header): s_i = bf16(bf16(bf16(A E) P_i) / Q) (0 -> 2^-7), every weight's
 * T[|bf16(bf16(R(clamp(bf16(x / s))) s) - x)|] summed in torch's order by quant/obs_sum.h,
 * the oracle's own code (pairs of 16-chunks, the 4x4 cascade, the tail, the 8 lanes),
 * improvement on err < best. The terms are recomputed where the cascade reads them
 * (nothing stored per weight), so any group width runs in a thread's registers and local
 * memory.
 * IEEE binary32 like quant/: kernels/meson.build compiles with -fmad=false, -prec-div=true,
 * -ftz=false; recipe.h's and obs_sum.h's helpers are shared with the CPU. */
#ifndef RQ_KQ_OBS_CUH
#define RQ_KQ_OBS_CUH

#include "quant/recipe.h"

#define KQ_OBS_BF16_MAX 0x7F7F0000u

/* cast_to_fp4's value of y (FP4), rint (INT4/INT8), E4M3's (FP8) after the clamp */
static __device__ __forceinline__ float kq_obs_round(int kind, float y)
{
	uint32_t sign = rq_f2u(y) & 0x80000000u;
	float a = rq_u2f(rq_f2u(y) & 0x7FFFFFFFu), v;
	if (kind == 0) {                                     /* RQ_OBS_FP4 */
		v = a <= 0.25f ? 0.0f : a < 0.75f ? 0.5f : a <= 1.25f ? 1.0f : a < 1.75f ? 1.5f
		  : a <= 2.5f ? 2.0f : a < 3.5f ? 3.0f : a <= 5.0f ? 4.0f : 6.0f;
		return rq_u2f(rq_f2u(v) | sign);
	}
	if (kind == 3) {                                     /* RQ_OBS_FP8 */
		uint32_t u = rq_f2u(a) < 0x43E00000u ? rq_f2u(a) : 0x43E00000u;
		v = rq_e4m3_val(rq_e4m3_code(rq_u2f(u)));
		return rq_u2f(rq_f2u(v) | sign);
	}
	float lo = kind == 1 ? -8.0f : -128.0f, hi = kind == 1 ? 7.0f : 127.0f;
	y = y < lo ? lo : y > hi ? hi : y;
	return rintf(y);
}

/* the term of weight bits wb against scale s */
static __device__ __forceinline__ float kq_obs_term(int kind, uint32_t wb, float s,
                                                    const float *T)
{
	float x = rq_bf16f(wb);
	float q = kq_obs_round(kind, rq_round_bf16(RQ_DIV(x, s)));
	float d = rq_round_bf16(RQ_ADD(rq_round_bf16(RQ_MUL(q, s)), -x));
	return T[(rq_f2u(d) >> 16) & 0x7FFFu];
}

/* the terms of a group at scale s, summed by quant/obs_sum.h in observer_ref.c's order */
struct kq_obs_src {
	int kind;
	const uint16_t *w;          /* the group's BF16 weights */
	float s;
	const float *T;
};
#define RQ_OBS_SUM_FN static __device__
#define RQ_OBS_SUM_SRC const struct kq_obs_src *
#define RQ_OBS_SUM_LD(c, i) kq_obs_term((c)->kind, (c)->w[i], (c)->s, (c)->T)
#include "quant/obs_sum.h"

/* err = bf16(tsum) of the group w[0..n) at scale s */
static __device__ float kq_obs_err(int kind, const uint16_t *w, size_t n, float s,
                                   const float *T)
{
	struct kq_obs_src src = {kind, w, s, T};
	return rq_round_bf16(rq_obs_sum(&src, n));
}

/* Group g = blockIdx.x * blockDim.x + threadIdx.x of ng groups of `group` BF16 weights
 * (row-major w): best[g] the step chosen when the search runs to its end, mask[g] (when
 * non-NULL) the improving steps below 32, as rq_obs_search_rows. P: the steps' P_i (steps
 * of them), T: rq_obs_pow_table, q: rq_obs_q(kind). */
__global__ void k_obs_search(int kind, int steps, float expand, float q, const float *P,
                             const float *T, const uint16_t *w, unsigned long long ng,
                             unsigned group, uint8_t *best, uint32_t *mask)
{
	unsigned long long g = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (g >= ng)
		return;
	const uint16_t *wg = w + g * group;
	uint32_t a = 0;
	for (unsigned j = 0; j < group; j++) {
		uint32_t v = wg[j] & 0x7FFFu;
		a = v > a ? v : a;
	}
	float e = rq_round_bf16(RQ_MUL(rq_bf16f(a), expand));
	float bestv = rq_u2f(KQ_OBS_BF16_MAX);
	int bi = 0;
	uint32_t mk = 0;
	for (int i = 0; i < steps; i++) {
		float s = rq_round_bf16(RQ_DIV(rq_round_bf16(RQ_MUL(e, P[i])), q));
		s = s == 0.0f ? 0x1p-7f : s;
		float err = kq_obs_err(kind, wg, group, s, T);
		if (err < bestv) {
			bestv = err;
			bi = i;
			mk |= i < 32 ? 1u << i : 0u;
		}
	}
	best[g] = (uint8_t)bi;
	if (mask)
		mask[g] = mk;
}

#endif
