/* test_ek_util.h — shared pieces of the engine-kernel tests (test_ek_cpu.c,
 * test_ek_attn_cpu.c, test_ek_gpu.c, test_ek_wq_gpu.c): a seeded generator, random weights in
 * both forms, and tolerance checks that print the worst element. */
#ifndef RQ_TESTS_EK_UTIL_H
#define RQ_TESTS_EK_UTIL_H

#include "kernels/ek.h"
#include "quant/quant.h"
#include "tests/tap.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t tu_state = 0x9E3779B97F4A7C15ull;

static inline uint64_t tu_next(void)
{
	return tap_xorshift64(&tu_state);
}

/* uniform in [lo, hi) */
static inline float tu_unif(float lo, float hi)
{
	return lo + (hi - lo) * (float)((tu_next() >> 40) * (1.0 / 16777216.0));
}

static inline void *tu_alloc(size_t n)
{
	void *p = calloc(n ? n : 1, 1);
	if (!p)
		abort();
	return p;
}

static inline float *tu_floats(size_t n, float lo, float hi)
{
	float *p = (float *)tu_alloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		p[i] = tu_unif(lo, hi);
	return p;
}

/* A random Linear set in host memory, in the engine layout; raw keeps the
 * compressed-tensors form of NVFP4 matrices ([n][rows][cols/2] codes,
 * [n][rows][cols/16] scales) for rq_dequant_row. */
struct tu_w {
	struct ek_w w;
	uint8_t *data;
	float *gs;
	uint8_t *packed, *scales;
};

static inline void tu_w_make(struct tu_w *t, int kind, int rows, int cols, int n, float amp)
{
	memset(t, 0, sizeof *t);
	size_t one = ek_w_bytes(kind, rows, cols);
	t->data = (uint8_t *)tu_alloc(one * n);
	t->w = (struct ek_w){.kind = kind, .rows = rows, .cols = cols, .n = n, .stride = one,
	                     .data = t->data};
	if (kind == EK_BF16) {
		uint16_t *w = (uint16_t *)t->data;
		for (size_t i = 0; i < (size_t)rows * cols * n; i++)
			w[i] = rq_f32_to_bf16(tu_unif(-amp, amp));
		return;
	}
	size_t pk = (size_t)rows * cols / 2, sc = (size_t)rows * cols / 16;
	t->packed = (uint8_t *)tu_alloc(pk * n);
	t->scales = (uint8_t *)tu_alloc(sc * n);
	t->gs = (float *)tu_alloc(sizeof(float) * n);
	for (int e = 0; e < n; e++) {
		for (size_t i = 0; i < pk; i++)
			t->packed[e * pk + i] = (uint8_t)tu_next();
		for (size_t i = 0; i < sc; i++)       /* E4M3 0x08..0x6F: 2^-6 .. 240, no NaN */
			t->scales[e * sc + i] = (uint8_t)(0x08 + tu_next() % 0x68);
		t->gs[e] = tu_unif(200.0f, 3000.0f) / amp;
		ek_nvfp4_repack_cpu(t->packed + e * pk, t->scales + e * sc, rows, cols, t->data + e * one);
	}
	t->w.gs = t->gs;
}

static inline void tu_w_free(struct tu_w *t)
{
	free(t->data);
	free(t->gs);
	free(t->packed);
	free(t->scales);
}

/* |got - want| <= rtol · mag + atol for every i; prints the worst. */
static inline int tu_close(const char *what, const float *got, const double *want,
                           const double *mag, size_t n, double rtol, double atol)
{
	double worst = 0;
	size_t wi = 0;
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		double err = fabs((double)got[i] - want[i]), lim = rtol * (mag ? mag[i] : fabs(want[i])) + atol;
		if (!(err <= lim))
			bad++;
		double q = lim > 0 ? err / lim : err;
		if (!(q <= worst) || bad == 1) {
			worst = q;
			wi = i;
		}
	}
	TAP_OK(bad == 0, "%s: %zu values within %.2g rel + %.2g abs (worst at %zu: %.9g vs %.9g, "
	       "%.3f of the bound)", what, n, rtol, atol, wi, n ? got[wi] : 0.0, n ? want[wi] : 0.0,
	       worst);
	return bad == 0;
}

/* float twin outputs against each other (GPU vs CPU): mag from the twin. */
static inline int tu_close_f(const char *what, const float *got, const float *want,
                             const float *mag, size_t n, double rtol, double atol)
{
	double *w = (double *)tu_alloc(n * sizeof(double)), *m = NULL;
	for (size_t i = 0; i < n; i++)
		w[i] = want[i];
	if (mag) {
		m = (double *)tu_alloc(n * sizeof(double));
		for (size_t i = 0; i < n; i++)
			m[i] = mag[i];
	}
	int ok = tu_close(what, got, w, m, n, rtol, atol);
	free(w);
	free(m);
	return ok;
}

/* mag[t][r] = Σ_c |W_e[r][c]·x[t][c]| (the scale of a product's rounding error) */
static inline float *matvec_mag(const struct ek_w *W, int e, const float *x, int ldx, int T)
{
	float *row = tu_alloc(sizeof(float) * W->cols), *m = tu_alloc(sizeof(float) * T * W->rows);
	for (int r = 0; r < W->rows; r++) {
		ek_w_row_cpu(W, e, r, row);
		for (int t = 0; t < T; t++) {
			double s = 0;
			for (int c = 0; c < W->cols; c++)
				s += fabs((double)row[c] * x[(size_t)t * ldx + c]);
			m[(size_t)t * W->rows + r] = (float)s;
		}
	}
	free(row);
	return m;
}

#endif
