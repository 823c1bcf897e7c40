/* ops.c — CPU kernels of the forward pass: matmul over BF16/NVFP4 weights,
 * dot products, RMSNorm, activations. */
#include "engine/ops.h"
#include "base/pool.h"
#include "quant/quant.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* Vector clones where the CPU has them; the arithmetic (and so the bits)
 * is identical in every clone: same operations, same order, no FMA. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LG_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LG_CLONES
#endif

LG_CLONES
float lg_dot(const float *a, const float *b, int n)
{
	float acc[16] = {0};
	int i = 0;
	for (; i + 16 <= n; i += 16)
		for (int j = 0; j < 16; j++)
			acc[j] += a[i + j] * b[i + j];
	for (int j = 0; i < n; i++, j++)
		acc[j] += a[i] * b[i];
	for (int w = 8; w >= 1; w /= 2)
		for (int j = 0; j < w; j++)
			acc[j] += acc[j + w];
	return acc[0];
}

LG_CLONES
void lg_axpy(float *out, float s, const float *x, int n)
{
	for (int i = 0; i < n; i++)
		out[i] += s * x[i];
}

LG_CLONES
static void widen_bf16(const uint16_t *w, float *out, int n)
{
	for (int i = 0; i < n; i++) {
		uint32_t u = (uint32_t)w[i] << 16;
		memcpy(&out[i], &u, 4);
	}
}

/* E4M3FN byte → value; built once. */
static float e4m3_lut[256];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void lut_init(void)
{
	for (int i = 0; i < 256; i++)
		e4m3_lut[i] = rq_e4m3_to_f32((uint8_t)i);
}

/* One NVFP4 row. Per 16-column group the 16 possible values are tabulated:
 * v = (e2m1 · s) / gs. Every magnitude is 2^k or 1.5·2^k, so two divisions
 * per group, s/gs and (1.5·s)/gs, scaled by exact powers of two, give the
 * same bits as one division per weight (short of underflow). */
LG_CLONES
static void dequant_nvfp4(const uint8_t *packed, const uint8_t *scales, float gs, int cols,
                          float *out)
{
	for (int g = 0; g < cols / 16; g++) {
		float s = e4m3_lut[scales[g]];
		float f1 = s / gs, f15 = (1.5f * s) / gs;
		float lut[16] = {0.0f, 0.5f * f1, f1, f15, 2.0f * f1, 2.0f * f15, 4.0f * f1, 4.0f * f15};
		for (int i = 0; i < 8; i++)
			lut[8 + i] = -lut[i];
		const uint8_t *p = packed + g * 8;
		float *o = out + g * 16;
		for (int i = 0; i < 8; i++) {
			o[2 * i] = lut[p[i] & 15];
			o[2 * i + 1] = lut[p[i] >> 4];
		}
	}
}

void lg_linear_row(const struct lg_linear *W, int r, float *out)
{
	if (W->kind == LG_W_BF16) {
		widen_bf16(W->w + (size_t)r * W->cols, out, W->cols);
		return;
	}
	pthread_once(&lut_once, lut_init);
	dequant_nvfp4(W->packed + (size_t)r * (W->cols / 2), W->scales + (size_t)r * (W->cols / 16),
	              W->global_scale, W->cols, out);
}

struct mm_ctx {
	const struct lg_mm *mm;
	int n;
	size_t *first;             /* [n + 1] prefix sums of rows */
	float *scratch;
	size_t stride;
};

static void mm_rows(void *vctx, size_t b, size_t e, int worker)
{
	struct mm_ctx *c = vctx;
	float *row = c->scratch + (size_t)worker * c->stride;
	int k = 0;
	while (c->first[k + 1] <= b)
		k++;
	for (size_t i = b; i < e; i++) {
		while (c->first[k + 1] <= i)
			k++;
		const struct lg_mm *m = &c->mm[k];
		int r = (int)(i - c->first[k]);
		lg_linear_row(m->W, r, row);
		for (int t = 0; t < m->T; t++)
			m->y[(size_t)t * m->ldy + r] = lg_dot(row, m->x + (size_t)t * m->ldx, m->W->cols);
	}
}

void lg_matmul(struct rq_pool *pool, float *scratch, size_t stride, const struct lg_mm *mm, int n)
{
	size_t first[n + 1];
	double work = 0;
	first[0] = 0;
	for (int k = 0; k < n; k++) {
		first[k + 1] = first[k] + (mm[k].T > 0 ? (size_t)mm[k].W->rows : 0);
		work += (double)mm[k].W->rows * mm[k].W->cols * (mm[k].T + 1);
	}
	size_t rows = first[n];
	if (rows == 0)
		return;
	pthread_once(&lut_once, lut_init);
	/* chunks of at least ~64K multiply-adds keep the pool's hand-off cheap */
	double per_row = work / rows;
	size_t grain = per_row >= 65536 ? 1 : (size_t)(65536 / per_row);
	struct mm_ctx c = {.mm = mm, .n = n, .first = first, .scratch = scratch, .stride = stride};
	rq_pool_for(pool, rows, grain, mm_rows, &c);
}

void lg_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
	float ss = lg_dot(x, x, n);
	float r = 1.0f / sqrtf(ss / (float)n + eps);
	for (int i = 0; i < n; i++)
		out[i] = w[i] * (x[i] * r);
}

float lg_silu(float x)
{
	return x / (1.0f + expf(-x));
}

float lg_sigmoid(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

float lg_softplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}
