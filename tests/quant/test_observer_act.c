/* test_observer_act.c — the input scales' MSE search (quant/observer_act.c): the fast
 * search (one thread and a pool) bit for bit its scalar oracle on random BF16 batches
 * (outliers, all-zero and one-sign groups, strided rows, one token to many), the
 * refusals, and the moving average's roundings. Against llm-compressor itself:
 * tests/fs/test_calib_mse.py. */
#include "quant/observer.h"
#include "quant/observer_int.h"
#include "quant/quant.h"
#include "quant/quant_int.h"
#include "base/pool.h"
#include "tests/tap.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double unif(void)
{
	return (tap_xorshift64(&rng) >> 11) * 0x1p-53;
}

static float bf(double x)
{
	return rq_bf16_to_f32(rq_f32_to_bf16((float)x));
}

/* rows x cols (stride ld) of BF16 activations: gaussian-ish, a few outlier columns (as
 * attention and MLP inputs have), group 0 all zero, group 1 all positive when asked */
static void fill(float *x, size_t T, size_t cols, size_t ld, int shape)
{
	for (size_t t = 0; t < T; t++)
		for (size_t c = 0; c < ld; c++) {
			double g = (unif() + unif() + unif() - 1.5) * 2.0;
			if (c % 37 == 5)
				g *= 40.0;                   /* outlier channels */
			if (shape == 1 && unif() < 0.01)
				g *= 300.0;                  /* rare outlier tokens */
			if (shape == 2)
				g *= 1e-3;                   /* tiny: the scale floor 2^-7 acts */
			if (c < 16 && cols > 16)
				g = 0.0;
			if (c >= 16 && c < 32 && cols > 32)
				g = fabs(g) + 0.5;
			x[t * ld + c] = c < cols ? bf(g) : NAN;   /* padding is never read */
		}
}

static void test_fast_vs_ref(struct rq_pool *pool)
{
	static const struct { size_t T, cols, ld; int shape; } cases[] = {
		{1, 16, 16, 0}, {3, 64, 80, 0}, {37, 576, 576, 1}, {200, 576, 600, 0},
		{64, 1536, 1536, 1}, {256, 64, 64, 2}, {5, 48, 48, 2},
	};
	int nc = sizeof cases / sizeof cases[0];
	for (int k = 0; k < nc; k++) {
		size_t T = cases[k].T, cols = cases[k].cols, ld = cases[k].ld, ng = cols / 16;
		float *x = malloc(T * ld * sizeof *x);
		float *lo = malloc(ng * 4 * sizeof *lo), *hi = lo + ng, *rlo = hi + ng, *rhi = rlo + ng;
		fill(x, T, cols, ld, cases[k].shape);
		int b = rq_obs_act_mse_ref(x, ld, T, cols, rlo, rhi), eq = !b, a = 0;
		for (int isa = 0; isa <= rq_quant_isa_max(); isa++) {   /* every variant */
			rq_quant_isa_force(isa);
			a |= rq_obs_act_mse(x, ld, T, cols, lo, hi, k % 2 ? pool : NULL);
			eq &= !memcmp(lo, rlo, ng * sizeof *lo) && !memcmp(hi, rhi, ng * sizeof *hi);
		}
		rq_quant_isa_force(-1);
		eq &= !a;
		/* the search chose a range no wider than the batch's and not below 0.81 of it */
		int shrunk = 0;
		for (size_t g = 0; g < ng; g++) {
			float amax = 0, chosen = fmaxf(fabsf(lo[g]), fabsf(hi[g]));
			for (size_t t = 0; t < T; t++)
				for (size_t j = 0; j < 16; j++)
					amax = fmaxf(amax, fabsf(x[t * ld + g * 16 + j]));
			eq &= chosen <= amax && chosen >= bf(amax * 0.81f) * 0.999f;
			shrunk += chosen < amax;
		}
		TAP_OK(eq, "T %zu cols %zu (stride %zu, %s, %s): fast == oracle on all %zu groups, every "
		       "instruction-set variant "
		       "(%d chose a range below the batch's max)", T, cols, ld,
		       cases[k].shape == 1 ? "outlier tokens" : cases[k].shape == 2 ? "tiny values"
		       : "plain", k % 2 ? "pool" : "one thread", ng, shrunk);
		free(x);
		free(lo);
	}
}

/* rq_obs_act_rows' binary32 sums, before the BF16 rounding, against the oracle's
 * (rq_obs_act_err_ref's *sum) at every step of every group, bit for bit, in every
 * instruction-set variant: a different order or rounding shows here before it changes a
 * chosen range. Includes tiny values (the 2^-7 floor, subnormal quotients) and a group
 * whose scales fall below 2^-126 (the division path). */
static void test_row_sums(void)
{
	const struct rq_obs_params *p = rq_obs_params(RQ_OBSERVER_MSE);
	static const struct { size_t T, cols; int shape; } cases[] = {
		{1, 48, 0}, {37, 576, 1}, {9, 64, 2},
	};
	long bad = 0, n = 0;
	char first[160] = "";
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		size_t T = cases[k].T, cols = cases[k].cols, ng = cols / 16;
		float *x = malloc(T * cols * sizeof *x);
		fill(x, T, cols, cols, cases[k].shape);
		if (k == 2)
			for (size_t t = 0; t < T; t++)        /* group 3: scales below 2^-126 */
				for (size_t j = 0; j < 16; j++)
					x[t * cols + 48 + j] = bf(ldexp(unif() - 0.5, -128));
		for (size_t g = 0; g < ng; g++) {
			float a = 0.0f, s[RQ_OBS_MAX_STEPS];
			for (size_t t = 0; t < T; t++)
				for (size_t j = 0; j < 16; j++)
					a = fmaxf(a, fabsf(x[t * cols + g * 16 + j]));
			for (int i = 0; i < p->steps; i++) {
				s[i] = bf(bf(a * p->p[i]) / 6.0f);
				s[i] = s[i] == 0.0f ? 0x1p-7f : s[i];
			}
			for (int isa = 0; isa <= rq_quant_isa_max(); isa++) {
				float acc[RQ_OBS_MAX_STEPS] = {0};
				rq_quant_isa_force(isa);
				rq_obs_act_rows(x + g * 16, cols, T, s, p->steps, acc);
				for (int i = 0; i < p->steps; i++, n++) {
					float want;
					rq_obs_act_err_ref(x, cols, T, g, a, i, &want);
					if (rq_f2u(acc[i]) == rq_f2u(want))
						continue;
					if (!bad++)
						snprintf(first, sizeof first, "%s T %zu group %zu step %d: %a, oracle %a",
						         rq_quant_isa_name(isa), T, g, i, (double)acc[i], (double)want);
				}
			}
			rq_quant_isa_force(-1);
		}
		free(x);
	}
	if (bad)
		printf("# %s\n", first);
	TAP_OK(bad == 0 && n > 2000, "rows: %ld of %ld binary32 sums differ from the oracle's "
	       "(every step, group and variant; tiny values, a group below 2^-126)", bad, n);
}

static void test_zero_and_refusals(void)
{
	float x[4 * 32] = {0}, lo[2], hi[2];
	TAP_OK(rq_obs_act_mse(x, 32, 4, 32, lo, hi, NULL) == 0 && lo[0] == 0 && hi[1] == 0,
	       "an all-zero batch: every range 0");
	TAP_OK(rq_obs_act_mse(x, 32, 4, 24, lo, hi, NULL) == -EINVAL,
	       "cols not a multiple of 16: -EINVAL");
	TAP_OK(rq_obs_act_mse(x, 32, 0, 32, lo, hi, NULL) == -EINVAL, "no token: -EINVAL");
	x[40] = NAN;
	TAP_OK(rq_obs_act_mse(x, 32, 4, 32, lo, hi, NULL) == -EDOM, "a NaN: -EDOM");
	x[40] = INFINITY;
	TAP_OK(rq_obs_act_mse_ref(x, 32, 4, 32, lo, hi) == -EDOM, "an Inf (oracle): -EDOM");
	x[40] = 1.0f + 0x1p-20f;
	TAP_OK(rq_obs_act_mse(x, 32, 4, 32, lo, hi, NULL) == -EINVAL,
	       "a value that is not a BF16 value: -EINVAL");
}

/* the error of a group: one term per token (|d| = 0.25 where 0.25 rounds to FP4 0), the
 * tokens' row sums added in binary32, one BF16 rounding */
static void test_err_order(void)
{
	float x[3 * 16];
	for (int i = 0; i < 48; i++)
		x[i] = 0.0f;
	x[0] = 6.0f;                    /* range 6: s = 1 at step 0: 6 -> 6, no error */
	x[16 + 1] = 0.25f;              /* 0.25 -> 0 (ties down to 0): |d| = 0.25 */
	x[32 + 1] = 0.25f;
	float sum, e = rq_obs_act_err_ref(x, 16, 3, 0, 6.0f, 0, &sum);
	float t = rq_obs_pow_ref(0.25f);
	TAP_OK(sum == t + t && e == bf(t + t), "step 0's error: two tokens' terms summed in "
	       "binary32, rounded to BF16 (%g)", (double)e);
}

static void test_lerp(void)
{
	/* bf16(bf16(1 * 0.99f) + bf16(2 * 0.01f)) = bf16(0.98828125 + 0.02001953125) */
	TAP_OK(rq_obs_lerp(1.0f, 2.0f, 1) == 1.0078125f, "moving average in BF16: %.9g",
	       (double)rq_obs_lerp(1.0f, 2.0f, 1));
	TAP_OK(rq_obs_lerp(1.0f, 2.0f, 0) == 0.99f + 0.02f, "moving average in binary32: %.9g",
	       (double)rq_obs_lerp(1.0f, 2.0f, 0));
	TAP_OK(rq_obs_lerp(-3.0f, -1.0f, 1) == -rq_obs_lerp(3.0f, 1.0f, 1),
	       "a min's moving average is the max's mirrored");
}

int main(void)
{
	struct rq_pool *pool = NULL;
	if (rq_pool_create(3, &pool))
		TAP_SKIP_ALL("no thread pool (out of memory)");
	test_fast_vs_ref(pool);
	test_row_sums();
	test_zero_and_refusals();
	test_err_order();
	test_lerp();
	rq_pool_destroy(pool);
	return tap_done();
}
