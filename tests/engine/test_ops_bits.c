/* test_ops_bits.c — engine/model/ops.c's vector paths give the bits of the order
 * ops.h promises: lg_dot (AVX2), and a BF16 matmul at decode (one token: the
 * mapped row's dot) and in a batch (rows widened, four at a time), each
 * equal bit for bit to a plain scalar sum in that order (16 partial sums
 * over i ≡ j mod 16, products rounded then added, then acc[j] += acc[j + w]
 * for w = 8, 4, 2, 1), at widths with and without a tail of n % 16, odd row
 * counts, on one thread and two. Run twice by meson: with the AVX2 paths
 * and with RQ_ENGINE_NO_AVX2=1 (the portable ones), so both give the same. */
#include "engine/model/ops.h"
#include "base/pool.h"
#include "tests/tap.h"

#include <math.h>

static float ref_dot(const float *a, const float *b, int n)
{
	float acc[16] = {0};
	for (int i = 0; i < n; i++) {
		float p = a[i] * b[i];   /* rounded: the test is built without FMA contraction */
		acc[i % 16] += p;
	}
	for (int w = 8; w >= 1; w /= 2)
		for (int j = 0; j < w; j++)
			acc[j] += acc[j + w];
	return acc[0];
}

static float bf16_f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* a float with a spread of exponents and signs, so that order shows in the bits */
static float rnd(uint64_t *s)
{
	float m = (float)(tap_xorshift(s) & 0xFFFFFF) / 16777216.0f - 0.5f;
	return ldexpf(m, (int)(tap_xorshift(s) % 24) - 12);
}

int main(void)
{
	const char *e = getenv("RQ_ENGINE_NO_AVX2");
	printf("# paths: %s\n", e && *e && strcmp(e, "0") ? "portable (RQ_ENGINE_NO_AVX2)" : "AVX2 where the CPU has it");
	uint64_t s = 0x9E3779B97F4A7C15ull;
	enum { NMAX = 1600 };
	static float a[NMAX], b[NMAX];
	int bad = 0, cases = 0;
	for (int n = 1; n <= NMAX; n += n < 80 ? 1 : 97) {
		for (int i = 0; i < n; i++) {
			a[i] = rnd(&s);
			b[i] = rnd(&s);
		}
		float x = lg_dot(a, b, n), y = ref_dot(a, b, n);
		cases++;
		if (memcmp(&x, &y, 4)) {
			if (bad++ < 5)
				printf("# lg_dot n=%d: %.9g, the order's sum %.9g\n", n, x, y);
		}
	}
	TAP_OK(!bad, "lg_dot == the scalar sum in its order, bit for bit (%d lengths 1..%d, %d differ)",
	       cases, NMAX, bad);

	struct rq_pool *pool2 = NULL;
	TAP_OK(rq_pool_create(2, &pool2) == 0, "pool of 2 threads");
	static const int widths[] = {16, 40, 72, 200, 576, 1536};
	static const int rows_of[] = {1, 2, 5, 37, 301};
	for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++) {
		int K = widths[wi];
		for (size_t ri = 0; ri < sizeof rows_of / sizeof *rows_of; ri++) {
			int R = rows_of[ri], T = 3;
			uint16_t *w = malloc(sizeof *w * R * K);
			float *x = malloc(sizeof *x * T * K), *row = malloc(sizeof *row * K);
			float *y1 = malloc(sizeof *y1 * T * R), *yb = malloc(sizeof *yb * T * R);
			float *ref = malloc(sizeof *ref * T * R), *scratch = malloc(sizeof(float) * 2 * 4 * K);
			for (int i = 0; i < R * K; i++) {
				float f = rnd(&s);
				uint32_t u;
				memcpy(&u, &f, 4);
				w[i] = (uint16_t)(u >> 16);
			}
			for (int i = 0; i < T * K; i++)
				x[i] = rnd(&s);
			for (int r = 0; r < R; r++) {
				for (int c = 0; c < K; c++)
					row[c] = bf16_f(w[(size_t)r * K + c]);
				for (int t = 0; t < T; t++)
					ref[t * R + r] = ref_dot(row, x + (size_t)t * K, K);
			}
			struct lg_linear W = {.kind = LG_W_BF16, .rows = R, .cols = K, .w = w};
			for (int p = 0; p < 2; p++) {
				struct rq_pool *pool = p ? pool2 : NULL;
				/* decode: one token at a time */
				for (int t = 0; t < T; t++) {
					struct lg_mm mm = {.W = &W, .x = x + (size_t)t * K, .ldx = K, .y = y1 + (size_t)t * R,
					                   .ldy = R, .T = 1};
					lg_matmul(pool, scratch, K, &mm, 1);
				}
				/* batch: T tokens */
				struct lg_mm mb = {.W = &W, .x = x, .ldx = K, .y = yb, .ldy = R, .T = T};
				lg_matmul(pool, scratch, K, &mb, 1);
				TAP_OK(!memcmp(y1, ref, sizeof *ref * T * R) && !memcmp(yb, ref, sizeof *ref * T * R),
				       "BF16 %d x %d, %d thread(s): one token at a time and a batch of %d == the scalar "
				       "order, bit for bit", R, K, p ? 2 : 1, T);
			}
			free(w);
			free(x);
			free(row);
			free(y1);
			free(yb);
			free(ref);
			free(scratch);
		}
	}
	rq_pool_destroy(pool2);
	return tap_done();
}
