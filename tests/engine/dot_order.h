/* dot_order.h — what test_ops_bits.c and test_qdot.c check lg_matmul against: the scalar
 * sum in ops.h's order (16 partial sums over i ≡ j mod 16, products rounded then added,
 * then acc[j] += acc[j + w] for w = 8, 4, 2, 1), over the row lg_linear_row gives, at one
 * token and in a batch. Both tests are built without FMA contraction. */
#ifndef RQ_TESTS_ENGINE_DOT_ORDER_H
#define RQ_TESTS_ENGINE_DOT_ORDER_H

#include "engine/model/ops.h"
#include "base/pool.h"
#include "tests/tap.h"

#include <math.h>

static float ref_dot(const float *a, const float *b, int n)
{
	float acc[16] = {0};
	for (int i = 0; i < n; i++) {
		float p = a[i] * b[i];   /* rounded: built without FMA contraction */
		acc[i % 16] += p;
	}
	for (int w = 8; w >= 1; w /= 2)
		for (int j = 0; j < w; j++)
			acc[j] += acc[j + w];
	return acc[0];
}

static float rnd(uint64_t *s)
{
	float m = (float)(tap_xorshift(s) & 0xFFFFFF) / 16777216.0f - 0.5f;
	return ldexpf(m, (int)(tap_xorshift(s) % 24) - 12);
}

/* The same bits, or both NaN: the sign of a NaN is which NaN operand an add
 * met first (x86 returns the first), and the one case here (NaN scale bytes)
 * meets NaNs in every lane; no path promises that. */
static int same(float a, float b)
{
	return !memcmp(&a, &b, 4) || (isnan(a) && isnan(b));
}

/* Every row of W at one token (the fast path) and in a batch of T == the order's sum over
 * lg_linear_row's row, bit for bit; on 1 and 2 threads (pool2). The inputs come from s. */
static int check_tokens(const struct lg_linear *W, int T, struct rq_pool *pool2, uint64_t *s,
                        const char *what)
{
	int R = W->rows, K = W->cols, bad = 0;
	float *x = malloc(sizeof *x * T * K), *row = malloc(sizeof *row * K);
	float *y1 = malloc(sizeof *y1 * T * R), *yb = malloc(sizeof *yb * T * R);
	float *ref = malloc(sizeof *ref * T * R), *scratch = malloc(sizeof(float) * 2 * 4 * K);
	for (int i = 0; i < T * K; i++)
		x[i] = rnd(s);
	for (int r = 0; r < R; r++) {
		lg_linear_row(W, r, row);
		for (int t = 0; t < T; t++)
			ref[t * R + r] = ref_dot(row, x + (size_t)t * K, K);
	}
	for (int p = 0; p < 2 && !bad; p++) {
		struct rq_pool *pool = p ? pool2 : NULL;
		for (int t = 0; t < T; t++) {
			struct lg_mm mm = {.W = W, .x = x + (size_t)t * K, .ldx = K, .y = y1 + (size_t)t * R,
			                   .ldy = R, .T = 1};
			lg_matmul(pool, scratch, K, &mm, 1);
		}
		struct lg_mm mb = {.W = W, .x = x, .ldx = K, .y = yb, .ldy = R, .T = T};
		lg_matmul(pool, scratch, K, &mb, 1);
		for (int i = 0; i < T * R && !bad; i++)
			if (!same(y1[i], ref[i]) || !same(yb[i], ref[i])) {
				printf("# %s: token %d row %d: one token %.9g, batch %.9g, the order's %.9g\n",
				       what, i / R, i % R, y1[i], yb[i], ref[i]);
				bad = 1;
			}
	}
	free(x);
	free(row);
	free(y1);
	free(yb);
	free(ref);
	free(scratch);
	return !bad;
}

#endif
