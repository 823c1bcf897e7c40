/* observer.c — llm-compressor's data-free MSE weight observers (observer.h).
 *
 * FACTS, read from llmcompressor 0.14.0.1 (observers/mse.py, observers/mse_quant.py,
 * observers/base.py, modifiers/quantization/calibration.py, entrypoints/model_free/) and
 * compressed-tensors 0.19.0 (quantization/utils/helpers.py calculate_qparams and
 * generate_gparam, lifecycle/forward_helpers.py _quantize_dequantize, quant_args.py), torch
 * 2.14 on the CPU, and checked tensor for tensor by tests/quant/test_observer_peer.c
 * (tools/golden/gen_observer_golden.py):
 *
 * Names. "memoryless_mse" and "nvfp4_expanded_mse" ("fouroversix" is an alias) are the
 * data-free ones. "mse" is the moving-average observer; for weights calibration.py swaps it
 * for memoryless_mse under oneshot, while model_free_ptq renames it "static_mse", which is
 * not registered (it fails): requantfs's "mse" is memoryless_mse.
 *   memoryless_mse:     expand 1.0, maxshrink 0.20, grid 100 -> 20 steps, patience 5
 *   nvfp4_expanded_mse: expand 1.8, maxshrink 1 - 0.8/1.8, grid 200 -> int(111.1) = 111
 *                       steps (p = 1 .. 0.45: 1.8x down to 0.81x), patience 1000 (never
 *                       stops); norm 2.4 for both
 * Both run the eager _grid_search_mse on CPU tensors (the Triton backend is CUDA-only).
 *
 * The search (mse_quant.py), on the weight flattened to (1, rows, groups, group) (channel:
 * (1, rows, 1, cols)), all in the weight's dtype (BF16 here):
 *   min = amin(dims 0,-1) * expand; max = amax * expand          BF16 x python float: the
 *                                           float is taken as binary32 (torch's opmath)
 *   step i: p = 1 - i/grid; candidate min*p, max*p                 BF16 again
 *     calculate_qparams(min, max, args, global_scale=None) with scale_dtype REMOVED for
 *     NVFP4 (TENSOR_GROUP): scale = bf16(max(|min|, |max|) / Q), 0 -> finfo(BF16).eps 2^-7;
 *     no global scale and no FP8 rounding in the search
 *     fake_quantize(w, scale, zp=0, strategy TOKEN): bf16(w / scale), clamp, round (FP4:
 *     cast_to_fp4's bounds; INT: torch.round; FP8: .to(float8_e4m3fn)), bf16(q * scale)
 *     err = torch.sum((q - w).abs().pow(2.4), dims (0,-1)): BF16 subtract, abs, pow with
 *     the exponent rounded to BF16 (2.40625; exhaustively checked: bf16 of the correctly
 *     rounded power), a binary32 sum in SumKernel's order (observer_ref.c) rounded to BF16
 *   improved = err < best (BF16, best starts at BF16 max): best, min, max updated; the
 *   loop stops when `patience` steps in a row improved no group OF THE TENSOR
 *   -> per group a chosen min/max (never above bf16(expand * max|w|)).
 * Since BF16 rounding is monotonic and odd, max(|min_i|, |max_i|) = bf16(bf16(A*E) * P_i)
 * with A = max |w| of the group: the search is one range per group (observer_int.h).
 *
 * The qparams (base.py get_qparams): calculate_qparams(chosen min, max, args with
 * scale_dtype, global_scale) -- the minmax formulas with A replaced by the chosen range:
 *   NVFP4: global scale = generate_gparam over the CHOSEN ranges of every fused observer
 *          (q/k/v, gate/up share it as for minmax): gs = bf16(bf16(1/R) * 2688), R = the
 *          largest chosen range; group scale E4M3(min(gs * bf16(r/6), 448)), 0 -> 0.125
 *          (expanded ranges above A raise R, so gs can be lower than minmax's)
 *   INT4/INT8/FP8: scale = bf16(r / Q), 0 -> 2^-7
 * and the compressor writes codes from them exactly as for minmax (scheme.c).
 *
 * Near ties. The error sums are BF16 values from a binary32 sum whose order is torch's on
 * the machine that ran it (the order above is x86-64's); another order can round a sum
 * differently and flip a comparison between two candidates whose sums are within a BF16
 * rounding of each other. tests/quant/test_observer_peer.c counts such groups. */
#include "quant/observer.h"
#include "quant/observer_int.h"
#include "quant/quant_int.h"
#include "base/pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct {
	const char *name, *llmc;
} observers[RQ_OBSERVER_COUNT] = {
	[RQ_OBSERVER_MINMAX] = {"minmax", "memoryless_minmax"},
	[RQ_OBSERVER_MSE] = {"mse", "memoryless_mse"},
	[RQ_OBSERVER_EXPANDED_MSE] = {"expanded-mse", "nvfp4_expanded_mse"},
};

int rq_observer_parse(const char *s, enum rq_observer *out)
{
	for (int i = 0; s && i < RQ_OBSERVER_COUNT; i++) {
		if (strcmp(s, observers[i].name) == 0) {
			*out = (enum rq_observer)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *rq_observer_name(enum rq_observer o)
{
	return (unsigned)o < RQ_OBSERVER_COUNT ? observers[o].name : "?";
}

const char *rq_observer_llmc(enum rq_observer o)
{
	return (unsigned)o < RQ_OBSERVER_COUNT ? observers[o].llmc : "?";
}

int rq_observer_ok(enum rq_scheme s, enum rq_recipe r, enum rq_src_dtype src,
                   enum rq_observer o)
{
	if ((unsigned)o >= RQ_OBSERVER_COUNT || (unsigned)s >= RQ_SCHEME_COUNT ||
	    (unsigned)r >= RQ_RECIPE_COUNT || (unsigned)src > RQ_SRC_F32)
		return -EINVAL;
	if (!rq_scheme_recipe_ok(s, r))
		return -ENOTSUP;
	if (o == RQ_OBSERVER_MINMAX)
		return 0;
	return s != RQ_SCHEME_NVFP4 && r == RQ_RECIPE_BF16 && src == RQ_SRC_BF16 ? 0 : -ENOTSUP;
}

/* ---- one module's search, threaded over rows ---- */

struct search_ctx {
	int kind;
	const struct rq_obs_params *p;
	const uint16_t *w;          /* [rows][cols] BF16 */
	size_t cols, group, gpr;    /* gpr: groups per row */
	uint8_t *best;              /* [rows * gpr] step chosen when the search runs out */
	uint32_t *mask;             /* [rows * gpr] improving steps, or NULL (no patience) */
	uint8_t *scratch;           /* [workers][sbytes] */
	size_t sbytes;
	uint16_t *rng;              /* [rows * gpr] out: the chosen range, BF16 bits */
	int bad;                    /* -EDOM / -ERANGE seen (any row) */
};

/* -EDOM (NaN/Inf) or else -ERANGE (1.8 |w| overflows BF16) for rows [begin, end), else 0:
 * both are decided by the largest |w| (BF16 bits order like values; the expansion and its
 * rounding are monotone) */
static int check_rows(const struct search_ctx *c, size_t begin, size_t end)
{
	const uint16_t *w = c->w + begin * c->cols;
	uint16_t a = 0;
	for (size_t i = 0; i < (end - begin) * c->cols; i++) {
		uint16_t v = w[i] & 0x7FFFu;
		a = v > a ? v : a;
	}
	if (a >= RQ_BF16_INF)
		return -EDOM;
	if (c->p->expand > 1.0f && (rq_f2u(rq_round_bf16(rq_bf16f(a) * c->p->expand)) &
	                            0x7F800000u) == 0x7F800000u)
		return -ERANGE;
	return 0;
}

static void check_chunk(void *arg, size_t begin, size_t end, int worker)
{
	struct search_ctx *c = arg;
	int rc = check_rows(c, begin, end);
	(void)worker;
	if (rc)
		__atomic_store_n(&c->bad, rc, __ATOMIC_RELAXED);
}

static void search_chunk(void *arg, size_t begin, size_t end, int worker)
{
	struct search_ctx *c = arg;
	int rc = check_rows(c, begin, end);
	if (rc) {
		__atomic_store_n(&c->bad, rc, __ATOMIC_RELAXED);
		return;
	}
	rq_obs_search_rows(c->kind, c->p, c->w + begin * c->cols, end - begin, c->cols, c->group,
	                   c->best + begin * c->gpr, c->mask ? c->mask + begin * c->gpr : NULL,
	                   c->scratch + (size_t)worker * c->sbytes);
}

struct range_ctx {
	struct search_ctx *s;
	int stop;                   /* the tensor's last step (patience) */
};

static void range_chunk(void *arg, size_t begin, size_t end, int worker)
{
	struct range_ctx *r = arg;
	struct search_ctx *c = r->s;
	(void)worker;
	for (size_t g = begin * c->gpr; g < end * c->gpr; g++) {
		const uint16_t *wg = c->w + g * c->group;
		uint32_t a = 0;
		for (size_t j = 0; j < c->group; j++) {
			uint32_t v = wg[j] & 0x7FFFu;
			a = v > a ? v : a;
		}
		int step = c->mask ? rq_obs_choose(c->mask[g], r->stop) : c->best[g];
		c->rng[g] = (uint16_t)rq_obs_range(c->p, a, step);
	}
}

/* One module's ranges: the search on dev when it takes it (after the weights are checked
 * here), else on the CPU pool; *on_dev = 1 when dev did it. */
static int search(int kind, const struct rq_obs_params *p, const struct rq_smod *m,
                  size_t group, uint16_t *rng, struct rq_pool *pool,
                  const struct rq_obs_dev *dev, int *on_dev)
{
	size_t gpr = m->cols / group, ng = m->rows * gpr;
	int workers = rq_pool_size(pool);
	struct search_ctx c = {kind, p, m->w, m->cols, group, gpr, malloc(ng), NULL, NULL,
	                       rq_obs_scratch_bytes(group), rng, 0};
	int rc = 0;
	if (p->patience < p->steps)
		c.mask = malloc(sizeof(uint32_t) * ng);
	c.scratch = malloc(c.sbytes * (size_t)workers);
	if (!c.best || !c.scratch || (p->patience < p->steps && !c.mask)) {
		rc = -ENOMEM;
		goto out;
	}
	size_t grain = (1024 + m->cols - 1) / m->cols;   /* the search is ~100x minmax's work */
	if (dev && dev->search) {
		rq_pool_for(pool, m->rows, (65536 + m->cols - 1) / m->cols, check_chunk, &c);
		*on_dev = !c.bad && dev->search(dev->arg, kind, p, m->w, m->rows, m->cols, group,
		                                c.best, c.mask) == 0;
	}
	if (!*on_dev && !c.bad)
		rq_pool_for(pool, m->rows, grain, search_chunk, &c);
	if (c.bad) {
		rc = c.bad;
		goto out;
	}
	uint32_t any = 0;
	for (size_t g = 0; c.mask && g < ng; g++)
		any |= c.mask[g];
	struct range_ctx r = {&c, rq_obs_stop_step(p, any)};
	rq_pool_for(pool, m->rows, grain, range_chunk, &r);
out:
	free(c.scratch);
	free(c.mask);
	free(c.best);
	return rc;
}

/* ---- the module's bytes from its ranges ---- */

struct final_ctx {
	int kind;
	const uint16_t *w;
	size_t cols, group, gpr;
	const uint16_t *rng;
	float gs;
	uint8_t *q, *scale;         /* the layout's first two tensors */
};

static void final_chunk(void *arg, size_t begin, size_t end, int worker)
{
	struct final_ctx *c = arg;
	(void)worker;
	if (c->kind == RQ_OBS_FP4) {   /* groups of 16: the minmax quantizer's rows */
		rq_quantize_rng_rows(c->w + begin * c->cols, end - begin, c->cols, c->gs,
		                     c->rng + begin * c->gpr, c->q + begin * (c->cols / 2),
		                     c->scale + begin * c->gpr);
		return;
	}
	for (size_t g = begin * c->gpr; g < end * c->gpr; g++) {
		const uint16_t *wg = c->w + g * c->group;
		float r = rq_bf16f(c->rng[g]);
		uint32_t sb = rq_f2u(rq_round_bf16(r / rq_obs_q(c->kind))) >> 16;
		sb = sb ? sb : 0x3C00u;                  /* 2^-7 */
		c->scale[2 * g] = (uint8_t)sb;
		c->scale[2 * g + 1] = (uint8_t)(sb >> 8);
		float s = rq_bf16f(sb);
		for (size_t j = 0; j < c->group; j++) {
			float y = rq_round_bf16(rq_bf16f(wg[j]) / s);
			size_t col = g * c->group + j;
			if (c->kind == RQ_OBS_FP8) {
				uint32_t u = rq_f2u(y), a = u & 0x7FFFFFFFu;
				a = a < 0x43E00000u ? a : 0x43E00000u;
				c->q[col] = (uint8_t)(rq_e4m3_code(rq_u2f(a)) | ((u >> 24) & 0x80u));
				continue;
			}
			float lo = c->kind == RQ_OBS_INT4 ? -8.0f : -128.0f;
			float hi = c->kind == RQ_OBS_INT4 ? 7.0f : 127.0f;
			y = y < lo ? lo : y > hi ? hi : y;
			uint32_t v = rq_f2u(y + 12582912.0f) - 0x4B400000u + (c->kind == RQ_OBS_INT4 ? 8u : 128u);
			if (c->kind == RQ_OBS_INT8)
				c->q[col] = (uint8_t)v;
			else if (col % 2 == 0)
				c->q[col / 2] = (uint8_t)v;
			else
				c->q[col / 2] |= (uint8_t)(v << 4);
		}
	}
}

int rq_scheme_quantize_obs(enum rq_scheme s, enum rq_recipe r, enum rq_observer o,
                           const struct rq_smod *m, int n, int *bad, struct rq_pool *pool)
{
	return rq_scheme_quantize_obs_dev(s, r, o, m, n, bad, pool, NULL, NULL);
}

int rq_scheme_quantize_obs_dev(enum rq_scheme s, enum rq_recipe r, enum rq_observer o,
                               const struct rq_smod *m, int n, int *bad, struct rq_pool *pool,
                               const struct rq_obs_dev *dev, int *on_dev)
{
	for (int i = 0; on_dev && i < n && i < 3; i++)
		on_dev[i] = 0;
	if (o == RQ_OBSERVER_MINMAX)
		return rq_scheme_quantize(s, r, m, n, bad, pool);
	const struct rq_obs_params *p = rq_obs_params(o);
	struct rq_stensor t[3][RQ_SCHEME_MAX_TENSORS];
	uint16_t *rng[3] = {NULL, NULL, NULL};
	int kind = rq_obs_kind(s), rc = 0, nt;
	uint64_t sz;
	if (!p || n < 1 || n > 3 || (unsigned)s >= RQ_SCHEME_COUNT)
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		rc = rq_scheme_layout(s, m[i].dtype, m[i].rows, m[i].cols, t[i], &nt, &sz);
		if (rc == 0)
			rc = rq_observer_ok(s, r, m[i].dtype, o);
		if (rc < 0) {
			if (bad)
				*bad = i;
			return rc;
		}
	}
	uint32_t gmax = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		size_t group = rq_scheme_group(s) ? rq_scheme_group(s) : m[i].cols;
		size_t ng = m[i].rows * m[i].cols / group;
		rng[i] = malloc(sizeof(uint16_t) * ng);
		int d = 0;
		rc = rng[i] ? search(kind, p, &m[i], group, rng[i], pool, dev, &d) : -ENOMEM;
		if (on_dev)
			on_dev[i] = d;
		if (rc < 0 && bad)
			*bad = i;
		for (size_t g = 0; rc == 0 && g < ng; g++)
			gmax = rng[i][g] > gmax ? rng[i][g] : gmax;
	}
	float gs = rq_recipe_gs(RQ_R_BF16, rq_bf16f(gmax));
	for (int i = 0; i < n && rc == 0; i++) {
		size_t group = rq_scheme_group(s) ? rq_scheme_group(s) : m[i].cols;
		struct final_ctx c = {kind, m[i].w, m[i].cols, group, m[i].cols / group, rng[i], gs,
		                      m[i].out + t[i][0].off, m[i].out + t[i][1].off};
		rq_pool_for(pool, m[i].rows, (65536 + m[i].cols - 1) / m[i].cols, final_chunk, &c);
		uint8_t *tail = m[i].out + t[i][nt - 1].off;
		if (kind == RQ_OBS_FP4) {
			memcpy(tail, &gs, 4);
		} else if (kind != RQ_OBS_FP8) {
			uint64_t v[2] = {m[i].rows, m[i].cols};
			for (int k = 0; k < 16; k++)
				tail[k] = (uint8_t)(v[k / 8] >> (8 * (k % 8)));
		}
	}
	for (int i = 0; i < n; i++)
		free(rng[i]);
	return rc;
}
