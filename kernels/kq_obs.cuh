/* kq_obs.cuh — the MSE observers' search on the GPU (kq_obs.cu launches it; tests/kernels/
 * test_kq_obs_simt.cpp runs this source on the host under emul/simt.h against the CPU
 * oracle). One thread per group, observer_ref.c's arithmetic operation for operation
 * (observer_int.h's header): s_i = bf16(bf16(bf16(A E) P_i) / Q) (0 -> 2^-7), every weight's
 * T[|bf16(bf16(R(clamp(bf16(x / s))) s) - x)|] summed in torch's order (rq_obs_tsum_ref:
 * pairs of 16-chunks, the 4x4 cascade of row_sum, the tail, the 8 lanes), improvement on
 * err < best. The terms are recomputed where the cascade reads them (nothing stored per
 * weight), so any group width runs in a thread's registers and local memory.
 * IEEE binary32 like quant/: kernels/meson.build compiles with -fmad=false, -prec-div=true,
 * -ftz=false; recipe.h's helpers are shared with the CPU. */
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

/* observer_ref.c's ld: chunk idx's lane l (vec), or element idx */
static __device__ __forceinline__ float kq_obs_ld(int kind, const uint16_t *w, int vec,
                                                  size_t idx, int l, float s, const float *T)
{
	if (!vec)
		return kq_obs_term(kind, w[idx], s, T);
	return RQ_ADD(kq_obs_term(kind, w[16 * idx + (size_t)l], s, T),
	              kq_obs_term(kind, w[16 * idx + 8 + (size_t)l], s, T));
}

/* observer_ref.c's row_sum over `size` values of w (chunks when vec) into out[0..8) */
static __device__ void kq_obs_row_sum(int kind, const uint16_t *w, int vec, size_t size,
                                      float s, const float *T, float out[8])
{
	int nl = vec ? 8 : 1;
	float acc[4][4][8];
	for (int j = 0; j < 4; j++)
		for (int k = 0; k < 4; k++)
			for (int l = 0; l < 8; l++)
				acc[j][k][l] = 0.0f;
	size_t rows = size / 4, i = 0;
	int lp = 1;                                  /* CeilLog2(rows), 1 below 3 */
	while (rows > 2 && ((size_t)1 << lp) < rows)
		lp++;
	lp = lp / 4 < 4 ? 4 : lp / 4;
	size_t step = (size_t)1 << lp, mask = step - 1;
	while (i + step <= rows) {
		for (size_t j = 0; j < step; j++, i++)
			for (int k = 0; k < 4; k++)
				for (int l = 0; l < nl; l++)
					acc[0][k][l] = RQ_ADD(acc[0][k][l],
					                      kq_obs_ld(kind, w, vec, 4 * i + (size_t)k, l, s, T));
		for (int j = 1; j < 4; j++) {
			for (int k = 0; k < 4; k++)
				for (int l = 0; l < nl; l++) {
					acc[j][k][l] = RQ_ADD(acc[j][k][l], acc[j - 1][k][l]);
					acc[j - 1][k][l] = 0.0f;
				}
			if (i & (mask << (j * lp)))
				break;
		}
	}
	for (; i < rows; i++)
		for (int k = 0; k < 4; k++)
			for (int l = 0; l < nl; l++)
				acc[0][k][l] = RQ_ADD(acc[0][k][l],
				                      kq_obs_ld(kind, w, vec, 4 * i + (size_t)k, l, s, T));
	for (int j = 1; j < 4; j++)
		for (int k = 0; k < 4; k++)
			for (int l = 0; l < nl; l++)
				acc[0][k][l] = RQ_ADD(acc[0][k][l], acc[j][k][l]);
	for (size_t t = rows * 4; t < size; t++)
		for (int l = 0; l < nl; l++)
			acc[0][0][l] = RQ_ADD(acc[0][0][l], kq_obs_ld(kind, w, vec, t, l, s, T));
	for (int k = 1; k < 4; k++)
		for (int l = 0; l < nl; l++)
			acc[0][0][l] = RQ_ADD(acc[0][0][l], acc[0][k][l]);
	for (int l = 0; l < nl; l++)
		out[l] = acc[0][0][l];
}

/* err = bf16(tsum) of the group w[0..n) at scale s */
static __device__ float kq_obs_err(int kind, const uint16_t *w, size_t n, float s,
                                   const float *T)
{
	float lanes[8];
	if (n < 16) {
		kq_obs_row_sum(kind, w, 0, n, s, T, lanes);
		return rq_round_bf16(lanes[0]);
	}
	size_t nv = n / 16;
	kq_obs_row_sum(kind, w, 1, nv, s, T, lanes);
	float acc = 0.0f;
	for (size_t t = nv * 16; t < n; t++)
		acc = RQ_ADD(acc, kq_obs_term(kind, w[t], s, T));
	for (int l = 0; l < 8; l++)
		acc = RQ_ADD(acc, lanes[l]);
	return rq_round_bf16(acc);
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
