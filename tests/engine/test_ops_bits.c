/* test_ops_bits.c — engine/model/ops.c's vector paths give the bits of the order
 * ops.h promises: lg_dot (AVX2), and a BF16 matmul at decode (one token: the
 * mapped row's dot) and in a batch (rows widened, four at a time), each
 * equal bit for bit to a plain scalar sum in that order (16 partial sums
 * over i ≡ j mod 16, products rounded then added, then acc[j] += acc[j + w]
 * for w = 8, 4, 2, 1), at widths with and without a tail of n % 16, odd row
 * counts, on one thread and two. Run twice by meson: with the AVX2 paths
 * and with RQ_ENGINE_NO_AVX2=1 (the portable ones), so both give the same. The
 * order and the matmul check are dot_order.h's, shared with test_qdot.c. */
#include "tests/engine/dot_order.h"

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
			for (int i = 0; i < R * K; i++) {
				float f = rnd(&s);
				uint32_t u;
				memcpy(&u, &f, 4);
				w[i] = (uint16_t)(u >> 16);
			}
			struct lg_linear W = {.kind = LG_W_BF16, .rows = R, .cols = K, .w = w};
			TAP_OK(check_tokens(&W, T, pool2, &s, "BF16"), "BF16 %d x %d, 1 and 2 threads: one "
			       "token at a time and a batch of %d == the scalar order, bit for bit", R, K, T);
			free(w);
		}
	}
	rq_pool_destroy(pool2);
	return tap_done();
}
