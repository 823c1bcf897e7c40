/* observer_act.c — llm-compressor's MSE search on one calibration batch of an NVFP4
 * input activation (observer.h rq_obs_act_mse): the input scales' `mse` observer of
 * `calib run --observer mse`. The scalar oracle (rq_obs_act_mse_ref: one operation at a
 * time, pow() per element) and the fast search (observer_fast.c's rq_obs_act_rows: the pow
 * table, 16 steps of a value in the lanes of one register, groups in parallel) give the
 * same bits: tests/quant/test_observer_act.c.
 *
 * FACTS, read from llmcompressor 0.14.0.1 (observers/mse.py MovingAverageMSEObserver,
 * observers/mse_quant.py _grid_search_mse, observers/helpers.py _flatten_activation,
 * modifiers/quantization/calibration.py calibrate_input_hook) and torch 2.14 on the CPU;
 * checked module for module by tests/fs/test_calib_mse.py (tools/golden/
 * gen_calib_mse_golden.py):
 *
 * The hook sees one batch's input x (BF16, (1, T, cols) with batch size 1), flattened to
 * (T, cols/16, 16). The search is the weights' (observer.c's header) with the
 * observation dim 0 now T tokens long instead of 1:
 *   lo = amin(x, dims (0,-1)), hi = amax        per group of 16 columns, over T tokens
 *   step i (20 steps, P_i = (float)(1 - i/100)): candidate bf16(lo·P_i), bf16(hi·P_i);
 *     A = max(|lo|, |hi|) (calculate_qparams clamps lo to <= 0, hi to >= 0), so the scale
 *     is s_i = bf16(bf16(A·P_i) / 6), 0 -> 2^-7
 *     d = bf16(bf16(fp4(clamp(bf16(x / s_i))) · s_i) - x), T(d) = bf16(|d|^2.40625)
 *     err_i = torch.sum(T, dims (0, -1)) of a BF16 (T, G, 16) tensor: TensorIterator puts
 *       both reduced dims first (16, then T), and sum_out then takes its float
 *       accumulation buffer (ReduceOps.cpp should_use_acc_buffer: a reduced float dtype
 *       whose first two iterator dims are reduced): the tensor widened to binary32 and
 *       summed by cascade_sum, per token row the 16 values in obs_sum.h's order (8 lanes
 *       x[l] + x[8+l], then the lanes in order), each row's sum added to the output in
 *       token order (CastStoreAccumulate on a binary32 output), the result rounded to
 *       BF16 once. With T = 1 the BF16 path gives the same bits.
 *   err_i < best (BF16 max at first): the group's range becomes step i's; the search
 *     stops after 5 steps in a row that improved no group of the batch.
 *   -> lo' = bf16(lo·P), hi' = bf16(hi·P) of the chosen step (raw lo, hi: not clamped).
 * Groups are independent but for the patience, so the fast search computes every step of
 * every group (in parallel) and applies the patience to the improvement masks after
 * (rq_obs_stop_step, rq_obs_choose), as observer_fast.c does for weights. */
#include "quant/observer.h"
#include "quant/observer_int.h"
#include "quant/quant_int.h"
#include "base/pool.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GROUP 16
#define BF16_MAX 3.38953139e38f          /* torch.finfo(bfloat16).max: best's start */

static float bf(float x)
{
	return rq_round_bf16(x);
}

/* The scale of step i for a group whose range is A (BF16 value). */
static float step_scale(const struct rq_obs_params *p, float a, int i)
{
	float s = bf(bf(a * p->p[i]) / 6.0f);
	return s == 0.0f ? 0x1p-7f : s;
}

/* |d| of one value at scale s (BF16 value as binary32, d's bits are BF16). */
static float qerr(float x, float s)
{
	return fabsf(bf(bf(rq_obs_fp4(fminf(fmaxf(bf(x / s), -6.0f), 6.0f)) * s) - x));
}

/* Rows [0, T) of x checked (BF16 values, finite) and each group's lo, hi. */
static int group_bounds(const float *x, size_t ldx, size_t T, size_t cols, float *lo,
                        float *hi)
{
	if (!T || !cols || cols % GROUP)
		return -EINVAL;
	for (size_t g = 0; g < cols / GROUP; g++)
		lo[g] = hi[g] = x[g * GROUP];
	for (size_t t = 0; t < T; t++)
		for (size_t c = 0; c < cols; c++) {
			float v = x[t * ldx + c];
			if (!isfinite(v))
				return -EDOM;
			if (bf(v) != v)
				return -EINVAL;
			lo[c / GROUP] = fminf(lo[c / GROUP], v);
			hi[c / GROUP] = fmaxf(hi[c / GROUP], v);
		}
	return 0;
}

static float range_of(float lo, float hi)
{
	return fmaxf(fabsf(fminf(lo, 0.0f)), fmaxf(hi, 0.0f));
}

/* The chosen step of every group from its improvement mask and the batch's patience. */
static void finish(const struct rq_obs_params *p, size_t ng, const uint32_t *mask, float *lo,
                   float *hi)
{
	uint32_t any = 0;
	for (size_t g = 0; g < ng; g++)
		any |= mask[g];
	int stop = rq_obs_stop_step(p, any);
	for (size_t g = 0; g < ng; g++) {
		int i = rq_obs_choose(mask[g], stop);
		lo[g] = bf(lo[g] * p->p[i]);
		hi[g] = bf(hi[g] * p->p[i]);
	}
}

/* ---------------------------------------------------------------- the oracle */

float rq_obs_act_err_ref(const float *x, size_t ldx, size_t T, size_t g, float a, int step,
                         float *sum)
{
	const struct rq_obs_params *p = rq_obs_params(RQ_OBSERVER_MSE);
	float s = step_scale(p, a, step), acc = 0.0f, pw[GROUP];
	for (size_t t = 0; t < T; t++) {
		for (int j = 0; j < GROUP; j++)
			pw[j] = rq_obs_pow_ref(qerr(x[t * ldx + g * GROUP + (size_t)j], s));
		acc += rq_obs_tsum_ref(pw, GROUP);
	}
	if (sum)
		*sum = acc;
	return bf(acc);
}

int rq_obs_act_mse_ref(const float *x, size_t ldx, size_t T, size_t cols, float *lo,
                       float *hi)
{
	const struct rq_obs_params *p = rq_obs_params(RQ_OBSERVER_MSE);
	size_t ng = cols / GROUP;
	int rc = group_bounds(x, ldx, T, cols, lo, hi);
	if (rc)
		return rc;
	float *best = malloc(ng * sizeof *best);
	int *pick = malloc(ng * sizeof *pick);
	if (!best || !pick) {
		free(best);
		free(pick);
		return -ENOMEM;
	}
	for (size_t g = 0; g < ng; g++) {
		best[g] = BF16_MAX;
		pick[g] = 0;
	}
	/* mse_quant.py's loop as it reads: all groups a step, the patience over the batch */
	for (int i = 0, stale = 0; i < p->steps; i++) {
		int any = 0;
		for (size_t g = 0; g < ng; g++) {
			float e = rq_obs_act_err_ref(x, ldx, T, g, range_of(lo[g], hi[g]), i, NULL);
			if (e < best[g]) {
				best[g] = e;
				pick[g] = i;
				any = 1;
			}
		}
		if (any)
			stale = 0;
		else if (++stale >= p->patience)
			break;
	}
	for (size_t g = 0; g < ng; g++) {
		lo[g] = bf(lo[g] * p->p[pick[g]]);
		hi[g] = bf(hi[g] * p->p[pick[g]]);
	}
	free(best);
	free(pick);
	return 0;
}

/* ---------------------------------------------------------------- the fast search */

struct act_ctx {
	const struct rq_obs_params *p;
	const float *x;
	size_t ldx, rows;
	const float *lo, *hi;
	uint32_t *mask;
};

/* Groups [b, e): every step's error, the improvement mask of each. */
static void act_groups(void *vctx, size_t b, size_t e, int worker)
{
	const struct act_ctx *c = vctx;
	const struct rq_obs_params *p = c->p;
	int n = p->steps;
	(void)worker;
	for (size_t g = b; g < e; g++) {
		float a = range_of(c->lo[g], c->hi[g]), s[RQ_OBS_MAX_STEPS], acc[RQ_OBS_MAX_STEPS];
		for (int i = 0; i < n; i++) {
			s[i] = step_scale(p, a, i);
			acc[i] = 0.0f;
		}
		rq_obs_act_rows(c->x + g * GROUP, c->ldx, c->rows, s, n, acc);
		float best = BF16_MAX;
		uint32_t mk = 0;
		for (int i = 0; i < n; i++) {
			float err = bf(acc[i]);
			if (err < best) {
				best = err;
				mk |= 1u << i;
			}
		}
		c->mask[g] = mk;
	}
}

int rq_obs_act_mse(const float *x, size_t ldx, size_t T, size_t cols, float *lo, float *hi,
                   struct rq_pool *pool)
{
	const struct rq_obs_params *p = rq_obs_params(RQ_OBSERVER_MSE);
	int rc = group_bounds(x, ldx, T, cols, lo, hi);
	if (rc)
		return rc;
	size_t ng = cols / GROUP;
	uint32_t *mask = malloc(ng * sizeof *mask);
	if (!mask)
		return -ENOMEM;
	struct act_ctx c = {.p = p, .x = x, .ldx = ldx, .rows = T,
	                    .lo = lo, .hi = hi, .mask = mask};
	if (pool)
		rq_pool_for(pool, ng, 1, act_groups, &c);
	else
		act_groups(&c, 0, ng, 0);
	finish(p, ng, mask, lo, hi);
	free(mask);
	return 0;
}

float rq_obs_lerp(float old, float cur, int bf16)
{
	/* helpers.py lerp: (start * (1.0 - weight)) + (end * weight), weight 0.01, each
	 * product a BF16 tensor times a python float (binary32), rounded, then the sum */
	float a = old * (float)(1.0 - 0.01), b = cur * (float)0.01;
	return bf16 ? bf(bf(a) + bf(b)) : a + b;
}
