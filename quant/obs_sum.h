/* obs_sum.h — torch's order of additions for the MSE observers' error (tsum in
 * observer_int.h's header), written once for the scalar oracle (observer_ref.c's
 * rq_obs_tsum_ref, over an array) and the CUDA search (kernels/kq_obs.cuh, over terms
 * recomputed where the cascade reads them; tests/kernels/test_kq_obs_simt.cpp runs it on the
 * host). observer_fast.c keeps its own many-lane form of this order, tested against the
 * oracle. Internal to quant/, kernels/ and their tests.
 *
 * The includer defines, before including (once per translation unit):
 *   RQ_OBS_SUM_FN        the functions' qualifiers (static; static __device__)
 *   RQ_OBS_SUM_SRC       the type of the source (a pointer)
 *   RQ_OBS_SUM_LD(c, i)  value i of source c, a binary32
 * and gets rq_obs_sum(c, n): the sum of values [0, n) (n >= 1) before the BF16 rounding.
 * Every addition is RQ_ADD (recipe.h): one IEEE binary32 addition on host and device.
 *
 * torch 2.14, aten/src/ATen/native/cpu/SumKernel.cpp, cascade_sum on a BF16 tensor reduced
 * over its contiguous last dimension (the observer's sum over dims (0, -1) of
 * (1, rows, groups, group); dim 0 has size 1), accumulating in binary32:
 *   n >= 16 (vectorized_inner_sum, Vectorized<BFloat16> of 16): chunk c of 16 loads as 8
 *     binary32 lanes v_c[l] = x[16c + l] + x[16c + 8 + l]; row_sum over the chunks; then a
 *     scalar acc = 0, plus the n % 16 tail elements in order, plus the 8 lanes in order;
 *   n < 16 (scalar_inner_sum): row_sum over the elements.
 * row_sum(size): multi_row_sum over size/4 rows of 4 columns (element 4i + k), a cascade of
 * 4 levels flushed every 2^lp rows, lp = max(4, CeilLog2(rows) / 4); the leftover size % 4
 * go into column 0; then column 0 += columns 1, 2, 3. Checked against torch on this
 * project's reference machine (x86-64, torch reports AVX512 but this kernel's order is the
 * 16-wide one above) with sums built so that every other order rounds differently
 * (tools/golden/gen_observer_golden.py). */
#ifndef RQ_OBS_SUM_H
#define RQ_OBS_SUM_H

#include <stddef.h>
#include "quant/recipe.h"

/* chunk idx's lane l (vec), or element idx */
RQ_OBS_SUM_FN float rq_obs_sum_ld(RQ_OBS_SUM_SRC c, int vec, size_t idx, int l)
{
	if (!vec)
		return RQ_OBS_SUM_LD(c, idx);
	return RQ_ADD(RQ_OBS_SUM_LD(c, 16 * idx + (size_t)l),
	              RQ_OBS_SUM_LD(c, 16 * idx + 8 + (size_t)l));
}

/* row_sum over `size` values (chunks when vec) into out[0..8) (out[0] when not vec) */
RQ_OBS_SUM_FN void rq_obs_sum_rows(RQ_OBS_SUM_SRC c, int vec, size_t size, float out[8])
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
					                      rq_obs_sum_ld(c, vec, 4 * i + (size_t)k, l));
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
				                      rq_obs_sum_ld(c, vec, 4 * i + (size_t)k, l));
	for (int j = 1; j < 4; j++)
		for (int k = 0; k < 4; k++)
			for (int l = 0; l < nl; l++)
				acc[0][k][l] = RQ_ADD(acc[0][k][l], acc[j][k][l]);
	for (size_t t = rows * 4; t < size; t++)
		for (int l = 0; l < nl; l++)
			acc[0][0][l] = RQ_ADD(acc[0][0][l], rq_obs_sum_ld(c, vec, t, l));
	for (int k = 1; k < 4; k++)
		for (int l = 0; l < nl; l++)
			acc[0][0][l] = RQ_ADD(acc[0][0][l], acc[0][k][l]);
	for (int l = 0; l < nl; l++)
		out[l] = acc[0][0][l];
}

RQ_OBS_SUM_FN float rq_obs_sum(RQ_OBS_SUM_SRC c, size_t n)
{
	float lanes[8];
	if (n < 16) {
		rq_obs_sum_rows(c, 0, n, lanes);
		return lanes[0];
	}
	size_t nv = n / 16;
	rq_obs_sum_rows(c, 1, nv, lanes);
	float acc = 0.0f;
	for (size_t t = nv * 16; t < n; t++)
		acc = RQ_ADD(acc, RQ_OBS_SUM_LD(c, t));
	for (int l = 0; l < 8; l++)
		acc = RQ_ADD(acc, lanes[l]);
	return acc;
}

#endif
