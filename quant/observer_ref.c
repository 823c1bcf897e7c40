/* observer_ref.c — the MSE observers' scalar oracle (observer_int.h): the search in the
 * words of llm-compressor's eager path, one operation at a time, with the library's slow
 * conversions (convert.c); speed does not matter here. observer_fast.c must give the same
 * bytes; observer.c's header has the facts this transcribes. */
#include "quant/observer_int.h"
#include "quant/quant_int.h"
#include "quant/scheme_int.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BF16_MAX 3.38953139e38f          /* torch.finfo(bfloat16).max: best's start */
#define NORM_BF16 2.40625                /* bf16(2.4): the exponent torch's BF16 pow takes */

static struct rq_obs_params params[RQ_OBSERVER_COUNT];
static float pow_table[0x8000];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static float bf(float x)
{
	return rq_bf16_to_f32(rq_f32_to_bf16(x));
}

float rq_obs_pow_ref(float d)
{
	float a = fabsf(d);
	if (isnan(a))
		return rq_u2f(0xFFFF0000u);   /* torch's BF16 NaN (0xFFFF), as its pow gives */
	return bf((float)pow((double)a, NORM_BF16));
}

static void init(void)
{
	/* memoryless_mse: maxshrink 0.20, grid 100, patience 5, expand 1.0 (norm 2.4);
	 * nvfp4_expanded_mse: expand 1.8, maxshrink 1 - 0.8/1.8, grid 200, patience 1000 */
	static const struct { double expand, maxshrink, grid; int patience; } def[] = {
		[RQ_OBSERVER_MSE] = {1.0, 0.20, 100.0, 5},
		[RQ_OBSERVER_EXPANDED_MSE] = {1.8, 1.0 - 0.8 / 1.8, 200.0, 1000},
	};
	for (int o = RQ_OBSERVER_MSE; o < RQ_OBSERVER_COUNT; o++) {
		struct rq_obs_params *p = &params[o];
		p->expand = (float)def[o].expand;      /* torch: a python float scalar times a BF16
		                                          tensor multiplies by it as a binary32 */
		p->steps = (int)(def[o].maxshrink * def[o].grid);
		p->patience = def[o].patience;
		for (int i = 0; i < p->steps; i++)
			p->p[i] = (float)(1.0 - i / def[o].grid);
	}
	for (uint32_t b = 0; b < 0x8000u; b++)
		pow_table[b] = rq_obs_pow_ref(rq_bf16_to_f32((uint16_t)b));
}

const struct rq_obs_params *rq_obs_params(enum rq_observer o)
{
	if (o != RQ_OBSERVER_MSE && o != RQ_OBSERVER_EXPANDED_MSE)
		return NULL;
	pthread_once(&once, init);
	return &params[o];
}

const float *rq_obs_pow_table(void)
{
	pthread_once(&once, init);
	return pow_table;
}

/* ---- torch's order of additions (obs_sum.h) ---- */
#define RQ_OBS_SUM_FN static
#define RQ_OBS_SUM_SRC const float *
#define RQ_OBS_SUM_LD(c, i) ((c)[i])
#include "quant/obs_sum.h"

float rq_obs_tsum_ref(const float *v, size_t n)
{
	return rq_obs_sum(v, n);
}

/* ---- the patience of the tensor ---- */

int rq_obs_stop_step(const struct rq_obs_params *p, uint32_t any_mask)
{
	int no_improve = 0;
	for (int i = 0; i < p->steps; i++) {
		if (i < 32 && (any_mask >> i) & 1u) {
			no_improve = 0;
		} else if (++no_improve >= p->patience) {
			return i;
		}
	}
	return p->steps - 1;
}

uint32_t rq_obs_range(const struct rq_obs_params *p, uint32_t a, int step)
{
	float e = rq_round_bf16(rq_bf16f(a) * p->expand);
	return rq_f2u(rq_round_bf16(e * p->p[step])) >> 16;
}

/* ---- the oracle ---- */

static float round_kind(int kind, float y)
{
	switch (kind) {
	case RQ_OBS_FP4:
		return rq_obs_fp4(fminf(fmaxf(y, -6.0f), 6.0f));
	case RQ_OBS_INT4:
		return rintf(fminf(fmaxf(y, -8.0f), 7.0f));
	case RQ_OBS_INT8:
		return rintf(fminf(fmaxf(y, -128.0f), 127.0f));
	default:
		return rq_e4m3_to_f32(rq_f32_to_e4m3(fminf(fmaxf(y, -448.0f), 448.0f)));
	}
}

/* The search of one group x[0..n) (BF16 values widened): the step chosen when it runs to
 * the end, and in *mask the steps (< 32) that improved. */
static int ref_group(int kind, const struct rq_obs_params *p, const float *x, size_t n,
                     float *pw, uint32_t *mask)
{
	float amax = 0.0f, best = BF16_MAX;
	int bi = 0;
	uint32_t mk = 0;
	for (size_t j = 0; j < n; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	float e = bf(amax * p->expand);
	for (int i = 0; i < p->steps; i++) {
		float m = bf(e * p->p[i]);
		float s = bf(m / rq_obs_q(kind));
		if (s == 0.0f)
			s = 0x1p-7f;
		for (size_t j = 0; j < n; j++) {
			float q = round_kind(kind, bf(x[j] / s));
			pw[j] = rq_obs_pow_ref(bf(bf(q * s) - x[j]));
		}
		float err = bf(rq_obs_tsum_ref(pw, n));
		if (err < best) {
			best = err;
			bi = i;
			mk |= i < 32 ? 1u << i : 0u;
		}
	}
	*mask = mk;
	return bi;
}

int rq_obs_kind(enum rq_scheme s)
{
	return s == RQ_SCHEME_W4A16 ? RQ_OBS_INT4 : s == RQ_SCHEME_W8A16 ? RQ_OBS_INT8
	     : s == RQ_SCHEME_FP8_DYNAMIC ? RQ_OBS_FP8 : RQ_OBS_FP4;
}

float rq_obs_err_ref(int kind, const struct rq_obs_params *p, const uint16_t *w, size_t n,
                     int step, float *sum)
{
	float amax = 0.0f, *pw = malloc(sizeof(float) * (n ? n : 1));
	if (!pw)
		return NAN;
	for (size_t j = 0; j < n; j++)
		amax = fmaxf(amax, fabsf(rq_bf16_to_f32(w[j])));
	float s = bf(bf(bf(amax * p->expand) * p->p[step]) / rq_obs_q(kind));
	if (s == 0.0f)
		s = 0x1p-7f;
	for (size_t j = 0; j < n; j++) {
		float x = rq_bf16_to_f32(w[j]);
		pw[j] = rq_obs_pow_ref(bf(bf(round_kind(kind, bf(x / s)) * s) - x));
	}
	float t = rq_obs_tsum_ref(pw, n);
	free(pw);
	if (sum)
		*sum = t;
	return bf(t);
}

/* Module i's chosen range per group (BF16 bits, row-major) into rng[], or -errno. */
static int ref_ranges(int kind, const struct rq_obs_params *p, const struct rq_smod *m,
                      size_t group, uint16_t *rng)
{
	size_t ng = m->rows * m->cols / group;
	const uint16_t *w = m->w;
	float *x = malloc(sizeof(float) * group * 2);
	uint32_t *mask = malloc(sizeof(uint32_t) * ng);
	uint8_t *best = malloc(ng);
	int rc = 0;
	if (!x || !mask || !best) {
		rc = -ENOMEM;
		goto out;
	}
	uint32_t any = 0;
	for (size_t g = 0; g < ng; g++) {
		for (size_t j = 0; j < group; j++) {
			x[j] = rq_bf16_to_f32(w[g * group + j]);
			if (!isfinite(x[j])) {
				rc = -EDOM;
				goto out;
			}
		}
		float a = 0.0f;
		for (size_t j = 0; j < group; j++)
			a = fmaxf(a, fabsf(x[j]));
		if (isinf(bf(a * p->expand))) {
			rc = -ERANGE;
			goto out;
		}
		best[g] = (uint8_t)ref_group(kind, p, x, group, x + group, &mask[g]);
		any |= mask[g];
	}
	int stop = rq_obs_stop_step(p, any);
	for (size_t g = 0; g < ng; g++) {
		int step = p->patience < p->steps ? rq_obs_choose(mask[g], stop) : best[g];
		float a = 0.0f;
		for (size_t j = 0; j < group; j++)
			a = fmaxf(a, fabsf(rq_bf16_to_f32(w[g * group + j])));
		rng[g] = rq_f32_to_bf16(bf(bf(a * p->expand) * p->p[step]));
	}
out:
	free(best);
	free(mask);
	free(x);
	return rc;
}

/* E2M1 code of q by nearest magnitude (ties to the even index), as quant_ref.c does. */
static uint8_t e2m1_ref(float q)
{
	float aq = fabsf(q);
	int b = 0;
	for (int k = 1; k < 8; k++) {
		float d = fabsf(aq - rq_e2m1_mag[k]), db = fabsf(aq - rq_e2m1_mag[b]);
		if (d < db || (d == db && k % 2 == 0))
			b = k;
	}
	return (uint8_t)(b | (q < 0 ? 8 : 0));
}

static void put_nibble(uint8_t *p, size_t c, unsigned v)
{
	p += c / 2;
	*p = c % 2 ? (uint8_t)((*p & 0x0F) | v << 4) : (uint8_t)((*p & 0xF0) | v);
}

/* The module's bytes from its ranges (and gs for FP4): llm-compressor's calculate_qparams
 * with the chosen min/max, then the compressor, as scheme.c's oracle with rng for amax. */
static void ref_final(int kind, const struct rq_smod *m, size_t group, const uint16_t *rng,
                      float gs, const struct rq_stensor *t)
{
	const uint16_t *w = m->w;
	uint8_t *out = m->out;
	size_t ng = m->rows * m->cols / group;
	for (size_t g = 0; g < ng; g++) {
		float a = rq_bf16_to_f32(rng[g]);
		if (kind == RQ_OBS_FP4) {
			uint8_t sc = rq_f32_to_e4m3(fminf(gs * bf(a / 6.0f), 448.0f));
			sc = sc ? sc : 0x20;
			out[t[1].off + g] = sc;
			float seff = rq_e4m3_to_f32(sc) / gs;
			for (size_t j = 0; j < group; j++)
				put_nibble(out + t[0].off, g * group + j,
				           e2m1_ref(rq_bf16_to_f32(w[g * group + j]) / seff));
			continue;
		}
		float s = bf(a / rq_obs_q(kind));
		s = s == 0.0f ? 0x1p-7f : s;
		uint16_t sb = rq_f32_to_bf16(s);
		memcpy(out + t[1].off + 2 * g, &sb, 2);
		for (size_t j = 0; j < group; j++) {
			size_t c = g * group + j;
			float y = bf(rq_bf16_to_f32(w[c]) / s);
			if (kind == RQ_OBS_FP8)
				out[t[0].off + c] = rq_f32_to_e4m3(fminf(fmaxf(y, -448.0f), 448.0f));
			else if (kind == RQ_OBS_INT8)
				out[t[0].off + c] = (uint8_t)((int)round_kind(kind, y) + 128);
			else
				put_nibble(out + t[0].off, c, (unsigned)((int)round_kind(kind, y) + 8));
		}
	}
	if (kind == RQ_OBS_FP4) {
		memcpy(out + t[2].off, &gs, 4);
	} else if (kind != RQ_OBS_FP8) {
		uint64_t v[2] = {m->rows, m->cols};
		for (int k = 0; k < 16; k++)
			out[t[2].off + (size_t)k] = (uint8_t)(v[k / 8] >> (8 * (k % 8)));
	}
}

int rq_observer_quantize_ref(enum rq_scheme s, enum rq_observer o, const struct rq_smod *m,
                             int n, int *bad)
{
	const struct rq_obs_params *p = rq_obs_params(o);
	struct rq_stensor t[3][RQ_SCHEME_MAX_TENSORS];
	uint16_t *rng[3] = {NULL, NULL, NULL};
	int kind = rq_obs_kind(s), rc = 0, nt;
	uint64_t sz;
	if (!p || n < 1 || n > 3)
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		rc = rq_scheme_layout(s, m[i].dtype, m[i].rows, m[i].cols, t[i], &nt, &sz);
		if (rc == 0 && (m[i].dtype != RQ_SRC_BF16 || s == RQ_SCHEME_NVFP4))
			rc = -ENOTSUP;
		if (rc < 0) {
			if (bad)
				*bad = i;
			return rc;
		}
	}
	uint32_t gmax = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		size_t group = rq_scheme_group(s) ? rq_scheme_group(s) : m[i].cols;
		rng[i] = malloc(sizeof(uint16_t) * (m[i].rows * m[i].cols / group));
		rc = rng[i] ? ref_ranges(kind, p, &m[i], group, rng[i]) : -ENOMEM;
		if (rc < 0 && bad)
			*bad = i;
		for (size_t g = 0; rc == 0 && g < m[i].rows * m[i].cols / group; g++)
			gmax = rng[i][g] > gmax ? rng[i][g] : gmax;
	}
	if (rc == 0) {
		float gs = rq_global_scale(RQ_RECIPE_BF16, rq_bf16_to_f32((uint16_t)gmax));
		for (int i = 0; i < n; i++) {
			size_t group = rq_scheme_group(s) ? rq_scheme_group(s) : m[i].cols;
			ref_final(kind, &m[i], group, rng[i], gs, t[i]);
		}
	}
	for (int i = 0; i < n; i++)
		free(rng[i]);
	return rc;
}
