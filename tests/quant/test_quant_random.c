/* test_quant_random.c — fast path == scalar oracle, byte for byte, on random
 * tensors of many shapes and kinds, for every recipe variant, every
 * instruction-set variant of the fast path this CPU runs, and every thread
 * count 1..rq_cpu_count()+2 (TAP). */
#include "quant/quant.h"
#include "quant/quant_int.h"
#include "base/pool.h"
#include "tests/tap.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint32_t rnd(void)
{
	return tap_xorshift(&rng);
}

/* roughly N(0, 1): sum of uniforms */
static float gauss(void)
{
	float s = 0;
	for (int i = 0; i < 4; i++)
		s += (float)(rnd() & 0xFFFF) / 65536.0f;
	return (s - 2.0f) * 1.7320508f;
}

enum kind {
	K_GAUSS,       /* realistic weights ~0.02 with a few outliers */
	K_ZERO_GROUPS, /* a third of the groups all zero (some -0.0) */
	K_TINY,        /* subnormal BF16 and values near 2^-126 */
	K_TIES,        /* E2M1 midpoints times a power of two, +-1 ulp */
	K_WIDE,        /* magnitudes from 2^-60 to 2^60 in one tensor */
	K_HUGE,        /* near the BF16 maximum: tiny gs */
	K_ALL_TINY,    /* amax below ~8e-36: gs = 1.0 and all scales 0x20 */
	K_BITS,        /* any finite BF16 bit pattern */
	K_COUNT
};
static const char *const kind_name[K_COUNT] = {
	"gauss", "zero-groups", "tiny", "ties", "wide", "huge", "all-tiny", "random-bits"};

static uint16_t finite_bits(void)
{
	uint16_t b;
	do
		b = (uint16_t)rnd();
	while ((b & 0x7F80) == 0x7F80);
	return b;
}

static void fill(uint16_t *w, size_t rows, size_t cols, enum kind k)
{
	static const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 0.5f, 3.0f};
	size_t n = rows * cols;
	for (size_t i = 0; i < n; i++) {
		float x = 0;
		uint16_t b;
		switch (k) {
		case K_GAUSS:
			x = gauss() * 0.02f * ((rnd() % 1000) == 0 ? 20.0f : 1.0f);
			b = rq_f32_to_bf16(x);
			break;
		case K_ZERO_GROUPS:
			b = ((i / 16) % 3 == 1) ? (uint16_t)((rnd() & 1) << 15)
			                        : rq_f32_to_bf16(gauss() * 0.01f);
			break;
		case K_TINY:
			b = (uint16_t)((rnd() & 0x8000) | (rnd() % 0x0100));   /* subnormals, 2^-126.. */
			if (rnd() % 8 == 0)
				b = rq_f32_to_bf16(gauss() * 1e-30f);
			break;
		case K_TIES: {
			x = mids[rnd() % 10] * ldexpf(1.0f, (int)(rnd() % 5) - 8);
			b = rq_f32_to_bf16(x);
			int d = (int)(rnd() % 5) - 2;           /* -2..2 ulp, mostly exact */
			if (d == 1 || d == -1)
				b = (uint16_t)(b + d);
			b |= (uint16_t)((rnd() & 1) << 15);
			break;
		}
		case K_WIDE:
			b = rq_f32_to_bf16(gauss() * ldexpf(1.0f, (int)(rnd() % 121) - 60));
			break;
		case K_HUGE:
			b = (uint16_t)(0x7F00 + rnd() % 0x80) | (uint16_t)((rnd() & 1) << 15);
			if (rnd() % 3 == 0)
				b = rq_f32_to_bf16(gauss());
			break;
		case K_ALL_TINY:
			b = (uint16_t)((rnd() & 0x8000) | (rnd() % 0x0300));
			break;
		default:
			b = finite_bits();
			break;
		}
		w[i] = b;
	}
}

int main(void)
{
	static const size_t shapes[][2] = {
		{1, 16}, {3, 48}, {2, 1024}, {5, 1040}, {16, 256}, {7, 3072}, {64, 64}, {33, 2064},
		{130, 512},
	};
	int nthreads_max = rq_cpu_count() + 2;
	struct rq_pool *pools[64] = {0};
	if (nthreads_max > 64)
		nthreads_max = 64;
	for (int t = 1; t <= nthreads_max; t++)
		if (rq_pool_create(t, &pools[t - 1]) != 0)
			TAP_SKIP_ALL("cannot create a pool of %d threads", t);

	size_t maxn = 0;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		if (shapes[s][0] * shapes[s][1] > maxn)
			maxn = shapes[s][0] * shapes[s][1];
	uint16_t *w = malloc(maxn * 2);
	uint8_t *p_ref = malloc(maxn / 2), *s_ref = malloc(maxn / 16);
	uint8_t *p = malloc(maxn / 2), *sc = malloc(maxn / 16);
	if (!w || !p_ref || !s_ref || !p || !sc)
		TAP_SKIP_ALL("out of memory");

	int isa_max = rq_quant_isa_max();
	printf("# fast-path variants: ");
	for (int isa = 0; isa <= isa_max; isa++)
		printf("%s ", rq_quant_isa_name(isa));
	printf("(default %s)\n", rq_quant_isa_name(rq_quant_isa()));
	for (int k = 0; k < K_COUNT; k++) {
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
			size_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
			fill(w, rows, cols, (enum kind)k);
			uint16_t amax, amax_f;
			int rc = rq_absmax_bf16(w, n, &amax, NULL);
			int same_amax = rc == 0;
			for (int isa = 0; isa <= isa_max; isa++) {
				rq_quant_isa_force(isa);
				for (int t = 1; t <= nthreads_max; t++) {
					int rc2 = rq_absmax_bf16_fast(w, n, &amax_f, NULL, pools[t - 1]);
					same_amax &= rc2 == 0 && amax_f == amax;
				}
			}
			rq_quant_isa_force(-1);
			TAP_OK(same_amax, "%s %zux%zu: absmax fast == ref (%d ISA variants x 1..%d threads)",
			       kind_name[k], rows, cols, isa_max + 1, nthreads_max);
			for (int v = 0; v < RQ_RECIPE_COUNT; v++) {
				enum rq_recipe r = (enum rq_recipe)v;
				float gs = rq_global_scale(r, rq_bf16_to_f32(amax));
				rq_quantize_ref(r, w, rows, cols, gs, p_ref, s_ref);
				int ok = 1;
				for (int isa = 0; isa <= isa_max && ok; isa++) {
					rq_quant_isa_force(isa);
					for (int t = 0; t <= nthreads_max && ok; t++) {
						memset(p, 0x5A, n / 2);
						memset(sc, 0x5A, n / 16);
						rq_quantize_fast(r, w, rows, cols, gs, p, sc,
						                 t ? pools[t - 1] : NULL);
						if (memcmp(p, p_ref, n / 2) || memcmp(sc, s_ref, n / 16)) {
							ok = 0;
							printf("# mismatch: %s, %d threads\n",
							       rq_quant_isa_name(isa), t);
						}
					}
				}
				rq_quant_isa_force(-1);
				/* the job API agrees too (absmax + gs + fast) */
				float jgs = 0;
				struct rq_qmod m = {w, rows, cols, p, sc};
				int jrc = rq_quantize_job(r, &m, 1, &jgs, NULL, pools[nthreads_max - 1]);
				int jok = jrc == 0 && rq_f2u(jgs) == rq_f2u(gs) && !memcmp(p, p_ref, n / 2) &&
				          !memcmp(sc, s_ref, n / 16);
				TAP_OK(ok && jok, "%s %zux%zu %s: fast == ref (ISA variants, pool NULL and "
				       "1..%d threads) and job", kind_name[k], rows, cols, rq_recipe_name(r),
				       nthreads_max);
			}
		}
	}
	/* the all-tiny kind must actually hit the gs = 1.0 fallback */
	fill(w, 4, 64, K_ALL_TINY);
	uint16_t amax;
	rq_absmax_bf16(w, 256, &amax, NULL);
	TAP_OK(rq_global_scale(RQ_RECIPE_FP32, rq_bf16_to_f32(amax)) == 1.0f,
	       "all-tiny tensors get gs = 1.0 (amax 0x%04X)", amax);

	for (int t = 1; t <= nthreads_max; t++)
		rq_pool_destroy(pools[t - 1]);
	free(w);
	free(p_ref);
	free(s_ref);
	free(p);
	free(sc);
	return tap_done();
}
