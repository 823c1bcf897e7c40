/* ek_gemv_cpu.c — CPU twins of ek_gemv.cu and ek_gemm.cu: the engine's
 * weight layout (NVFP4 repack, rows as floats; FP8 and INT: ek_wq_cpu.c) and
 * the products.
 *
 * Plain C, one thread. Each twin computes what its CUDA op computes, with the
 * same rounding points (fp16·2^e activations of the NVFP4 GEMV, BF16
 * activations of the BF16/NVFP4 GEMM, fp32 activations for FP8 and INT),
 * summing in a simple sequential order: the GPU differs only by summation
 * order, which the GPU tests bound. */
#include "kernels/ek_cpu_int.h"
#include "quant/quant.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Byte offset of W[r][c]'s code (nibble in *hi_nib) and of its scale, in the
 * repacked tiles (ek.h). */
static size_t fp4_code_at(int cols, int r, int c, int *hi_nib, size_t *scale_off)
{
	size_t nkc = ((size_t)cols + 63) / 64;
	size_t tile = ((size_t)(r / 16) * nkc + (size_t)(c / 64)) * 576;
	int rr = r % 16, cc = c % 64, j = cc / 16, c16 = cc % 16;
	int g = rr % 8, hi = rr / 8, second = c16 >= 8, i = (c16 % 8) / 2, odd = c16 & 1;
	int p = hi + 2 * second + 4 * odd;
	*hi_nib = p & 1;
	*scale_off = tile + 512 + (size_t)(8 * g + 4 * hi + j);
	return tile + (size_t)(16 * (4 * g + i) + 4 * j + p / 2);
}

void ek_nvfp4_repack_cpu(const uint8_t *packed, const uint8_t *scales, int rows, int cols,
                         uint8_t *out)
{
	memset(out, 0, ek_w_bytes(EK_NVFP4, rows, cols));
	for (int r = 0; r < rows; r++)
		for (int c = 0; c < cols; c++) {
			int hn;
			size_t so;
			size_t o = fp4_code_at(cols, r, c, &hn, &so);
			uint8_t b = packed[(size_t)r * (cols / 2) + c / 2];
			uint8_t code = (c & 1) ? b >> 4 : b & 15;
			out[o] |= (uint8_t)(hn ? code << 4 : code);
			if (c % 16 == 0)
				out[so] = scales[(size_t)r * (cols / 16) + c / 16];
		}
}

/* e2m1(code) · e4m3(scale) of W_e[r][c] (exact in binary32). */
static float fp4_prod(const struct ek_w *W, int e, int r, int c)
{
	const uint8_t *base = (const uint8_t *)W->data + (size_t)e * W->stride;
	int hn;
	size_t so;
	size_t o = fp4_code_at(W->cols, r, c, &hn, &so);
	uint8_t code = hn ? base[o] >> 4 : base[o] & 15;
	return rq_e2m1_to_f32(code) * rq_e4m3_to_f32(base[so]);
}

void ek_w_row_cpu(const struct ek_w *W, int e, int r, float *out)
{
	if (W->kind == EK_FP8 || W->kind == EK_INT8 || W->kind == EK_INT4) {
		ek_wq_row_cpu(W, e, r, out);
		return;
	}
	if (W->kind == EK_BF16) {
		const uint16_t *w = (const uint16_t *)((const uint8_t *)W->data + (size_t)e * W->stride);
		for (int c = 0; c < W->cols; c++)
			out[c] = rq_bf16_to_f32(w[(size_t)r * W->cols + c]);
		return;
	}
	for (int c = 0; c < W->cols; c++)
		out[c] = fp4_prod(W, e, r, c) / W->gs[e];
}

/* The NVFP4 GEMV's activation exponent: max|x|·2^e in [2^14, 2^15) (NaNs
 * ignored like fmaxf; 0 for an all-zero or infinite x; clamped to ±64). */
static int act_exp(const float *x, int n)
{
	float amax = 0;
	for (int c = 0; c < n; c++)
		if (fabsf(x[c]) > amax)
			amax = fabsf(x[c]);
	if (!(amax > 0) || isinf(amax))
		return 0;
	int e = 14 - ilogbf(amax);
	return e < -64 ? -64 : e > 64 ? 64 : e;
}

/* Token t's activations as the kernel of `mode` sees them (*ex: the NVFP4
 * GEMV's exponent, else 0). */
static void act_round(const struct ek_w *W, const float *xt, int K, int mode, float *xr, int *ex)
{
	*ex = 0;
	if (W->kind == EK_NVFP4 && mode == 0) {
		*ex = act_exp(xt, K);
		for (int c = 0; c < K; c++)
			xr[c] = ek_f16_f32(ek_f32_f16(ldexpf(xt[c], *ex)));
	} else if (mode == 1 && (W->kind == EK_BF16 || W->kind == EK_NVFP4)) {
		for (int c = 0; c < K; c++)
			xr[c] = rq_bf16_to_f32(rq_f32_to_bf16(xt[c]));
	} else {
		memcpy(xr, xt, sizeof(float) * K);
	}
}

/* Row r of member e dotted with the rounded activations xr (row: scratch). */
static float row_dot(const struct ek_w *W, int e, int r, const float *xr, int ex, int mode,
                     float *row)
{
	int K = W->cols;
	float s = 0;
	if (W->kind == EK_BF16) {
		const uint16_t *w = (const uint16_t *)((const uint8_t *)W->data +
		                    (size_t)e * W->stride) + (size_t)r * K;
		for (int c = 0; c < K; c++)
			s += rq_bf16_to_f32(w[c]) * xr[c];
		return s;
	}
	if (W->kind != EK_NVFP4) {          /* FP8, INT: exact values, fp32 x, both modes */
		ek_wq_row_cpu(W, e, r, row);
		for (int c = 0; c < K; c++)
			s += row[c] * xr[c];
		return s;
	}
	for (int c = 0; c < K; c++)
		row[c] = fp4_prod(W, e, r, c);
	if (mode == 0)
		for (int c = 0; c < K; c++)
			s += ldexpf(row[c], -14) * xr[c];
	else
		for (int c = 0; c < K; c++)
			s += row[c] * xr[c];
	return ldexpf(s, mode == 0 ? 14 - ex : 0) / W->gs[e];
}

int ek_matvec_cpu(const struct ek_w *W, int e, const float *x, int ldx, float *y, int ldy, int T,
                  int acc, int mode)
{
	int K = W->cols;
	float *row = malloc(sizeof(float) * (size_t)K * 2);
	if (!row)
		return -ENOMEM;
	float *xr = row + K;
	for (int t = 0; t < T; t++) {
		int ex;
		act_round(W, x + (size_t)t * ldx, K, mode, xr, &ex);
		for (int r = 0; r < W->rows; r++) {
			float s = row_dot(W, e, r, xr, ex, mode, row);
			float *o = &y[(size_t)t * ldy + r];
			*o = acc ? *o + s : s;
		}
	}
	free(row);
	return 0;
}

int ek_gemv_cpu(const struct ek_w *W, const float *x, int ldx, float *y, int ldy, int T, int acc)
{
	return ek_matvec_cpu(W, 0, x, ldx, y, ldy, T, acc, 0);
}

int ek_gemm_cpu(const struct ek_w *W, const float *x, int ldx, float *y, int ldy, int T, int acc)
{
	return ek_matvec_cpu(W, 0, x, ldx, y, ldy, T, acc, 1);
}

/* The fused op's twin: per token, the RMSNorm twin's values (into xn, or a
 * scratch row), then the GEMV twin on them — what ek_gemv_norm computes. */
int ek_gemv_norm_cpu(const struct ek_w *W, const float *x, int ldx, const float *nw, float eps,
                     float *xn, int ldxn, float *y, int ldy, int T, int acc)
{
	int K = W->cols;
	if (T < 1 || T > EK_GEMV_NORM_MAX_T || ldx < K || ldy < W->rows || !nw || (xn && ldxn < K))
		return -EINVAL;
	float *row = malloc(sizeof(float) * (size_t)K);
	if (!row)
		return -ENOMEM;
	int rc = 0;
	for (int t = 0; t < T && !rc; t++) {
		float *xr = xn ? xn + (size_t)t * ldxn : row;
		ek_rmsnorm_cpu(xr, K, x + (size_t)t * ldx, ldx, nw, 1, K, eps);
		rc = ek_matvec_cpu(W, 0, xr, K, y + (size_t)t * ldy, ldy, 1, acc, 0);
	}
	free(row);
	return rc;
}
