/* torch_bf16.c — torch's CPU summation orders and exp (torch_bf16.h). */
#include "engine/torch_bf16.h"

#include <math.h>

/* Vector clones where the CPU has them (as engine/ops.c): the same
 * operations in the same order in every clone (no FMA), so the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LG_TORCH_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LG_TORCH_CLONES
#endif

/* Σ a[i]·b[i] in the order of torch's CPU BF16 dot (bf16_dot_with_fp32_arith,
 * the x86 AVX2 build: what its BF16 GEMM runs for a Linear and for q·kᵀ):
 * 64 F32 lanes over blocks of 64, the 8 registers folded pairwise (r += r+4,
 * r += r+2, r += r+1) and the last summed by hsum8; then blocks of 16 into 8
 * lanes, hsum8, added; then one product at a time. With BF16 inputs each
 * product is exact, so this is the same bits (checked against torch 2.14's
 * F.linear and matmul on the shapes of SmolLM2: no output differs). */
LG_TORCH_CLONES float lg_torch_dot(const float *a, const float *b, int n)
{
	float acc[64] = {0}, t[8] = {0};
	int n64 = n & ~63, n16 = n & ~15;
	for (int j = 0; j < n64; j += 64)
		for (int e = 0; e < 64; e++)
			acc[e] += a[j + e] * b[j + e];
	for (int off = 32; off >= 8; off /= 2)
		for (int e = 0; e < off; e++)
			acc[e] += acc[e + off];
	float sum = lg_torch_hsum8(acc);
	for (int j = n64; j < n16; j += 16) {
		for (int l = 0; l < 8; l++)
			t[l] += a[j + l] * b[j + l];
		for (int l = 0; l < 8; l++)
			t[l] += a[j + 8 + l] * b[j + 8 + l];
	}
	sum += lg_torch_hsum8(t);
	for (int j = n16; j < n; j++)
		sum += a[j] * b[j];
	return sum;
}

/* 2^q from its exponent bits, q a normal exponent. */
static inline float pow2i(int q)
{
	uint32_t u = (uint32_t)(q + 127) << 23;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* e^d as torch's Vectorized<float>::exp computes it on AVX2 (SLEEF's
 * Sleef_expf8_u10: a Cody-Waite reduction by ln 2 in two parts, a degree-5
 * minimax polynomial, each step one FMA, the scaling by 2^q in two halves).
 * Used by the BF16 mode's softmax and SiLU, whose last bits decide BF16
 * roundings. */
float lg_torch_expf(float d)
{
	if (d != d)
		return d;
	if (d < -104.0f)
		return 0.0f;
	if (d > 100.0f)
		return INFINITY;
	float qf = rintf(d * 1.442695040888963407359924681001892137426645954152985934135449f);
	int q = (int)qf;
	float r = fmaf(qf, -0.693145751953125f, d);
	r = fmaf(qf, -1.428606765330187045e-06f, r);
	float u = 0.000198527617612853646278381f;
	u = fmaf(u, r, 0.00139304355252534151077271f);
	u = fmaf(u, r, 0.00833336077630519866943359f);
	u = fmaf(u, r, 0.0416664853692054748535156f);
	u = fmaf(u, r, 0.166666671633720397949219f);
	u = fmaf(u, r, 0.5f);
	u = 1.0f + fmaf(r * r, u, r);
	int h = q >> 1;
	u = u * pow2i(h);
	return u * pow2i(q - h);
}

/* Σ x[i]² as torch's CPU sum over a contiguous last dimension adds them
 * (SumKernel.cpp's vectorized inner sum on AVX2): 8-float vectors, taken 4 at
 * a time into 4 vector accumulators with a cascade of 4 levels (level step
 * 2^max(4, ceil(log2(groups)) / 4) groups), the leftover vectors into the
 * first, the 4 accumulators added in order, then a scalar over the leftover
 * values and the 8 lanes in order. Squares of BF16 values are exact. */
float lg_torch_sumsq(const float *x, int n)
{
	enum { LV = 4, ILP = 4, W = 8 };
	float acc[LV][ILP][W];
	memset(acc, 0, sizeof acc);
	int nv = n / W, groups = nv / ILP, lg = 0;
	while ((1 << lg) < groups)
		lg++;
	int lp = lg / LV > 4 ? lg / LV : 4;
	long step = 1L << lp, mask = step - 1;
	long i = 0;
#define ADDV(dst, v) for (int l = 0; l < W; l++) dst[l] += x[(size_t)(v) * W + l] * x[(size_t)(v) * W + l]
	while (i + step <= groups) {
		for (long j = 0; j < step; j++, i++)
			for (int k = 0; k < ILP; k++)
				ADDV(acc[0][k], i * ILP + k);
		for (int j = 1; j < LV; j++) {
			for (int k = 0; k < ILP; k++)
				for (int l = 0; l < W; l++) {
					acc[j][k][l] += acc[j - 1][k][l];
					acc[j - 1][k][l] = 0;
				}
			if (i & (mask << (j * lp)))
				break;
		}
	}
	for (; i < groups; i++)
		for (int k = 0; k < ILP; k++)
			ADDV(acc[0][k], i * ILP + k);
	for (int j = 1; j < LV; j++)
		for (int k = 0; k < ILP; k++)
			for (int l = 0; l < W; l++)
				acc[0][k][l] += acc[j][k][l];
	for (int v = groups * ILP; v < nv; v++)
		ADDV(acc[0][0], v);
#undef ADDV
	for (int k = 1; k < ILP; k++)
		for (int l = 0; l < W; l++)
			acc[0][0][l] += acc[0][k][l];
	float sum = 0;
	for (int t = nv * W; t < n; t++)
		sum += x[t] * x[t];
	for (int l = 0; l < W; l++)
		sum += acc[0][0][l];
	return sum;
}

