/* observe.c — slots and names of the calibration observer (observe.h). */
#include "engine/model/observe.h"
#include "engine/model/model.h"
#include "engine/model/torch_bf16.h"
#include "quant/observer.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

float lg_obs_scale(float amax, int bf16)
{
	/* generate_gparam: amax clamped to F32's tiny, 2688 / amax, NaN and inf
	 * (an all-zero input, a quotient past the dtype's range) replaced by 1.0 */
	if (!(amax > 0) || !isfinite(amax))
		return 1.0f;
	/* torch evaluates `2688 / t` as t.reciprocal() * 2688 (Tensor.__rtruediv__):
	 * two roundings in t's dtype, which the BF16 peer's scales show */
	if (bf16)
		amax = lg_bf16(amax);
	float r = 1.0f / amax;
	if (bf16 && isfinite(r))
		r = lg_bf16(r);
	float s = r * (448.0f * 6.0f);
	if (bf16 && isfinite(s))
		s = lg_bf16(s);
	return isfinite(s) && s <= FLT_MAX ? s : 1.0f;
}

int lg_obs_per_layer(const struct lg_model *m)
{
	return LG_OBS_FIXED + 3 * m->cfg.n_experts;
}

size_t lg_obs_count(const struct lg_model *m)
{
	return (size_t)m->cfg.n_layers * lg_obs_per_layer(m);
}

int lg_obs_name(const struct lg_model *m, size_t i, char *buf, size_t len)
{
	const struct lg_config *c = &m->cfg;
	int per = lg_obs_per_layer(m);
	if (i >= lg_obs_count(m))
		return -ENOENT;
	int li = (int)(i / per), k = (int)(i % per);
	const struct lg_layer *L = &m->layers[li];
	const char *shared = L->shared_plural ? "shared_experts" : "shared_expert";
	static const char *const attn[] = {"q_proj", "k_proj", "v_proj", "g_proj", "o_proj"};
	static const char *const mlp[] = {"gate_proj", "up_proj", "down_proj"};
	int n;
	if (k <= LG_OBS_O) {
		if (k == LG_OBS_G && c->gate == LG_GATE_NONE)
			return -ENOENT;
		n = snprintf(buf, len, "model.layers.%d.self_attn.%s", li, attn[k]);
	} else if (k <= LG_OBS_DOWN) {
		if (L->moe)
			return -ENOENT;
		n = snprintf(buf, len, "model.layers.%d.mlp.%s", li, mlp[k - LG_OBS_GATE]);
	} else if (k <= LG_OBS_SD) {
		if (!L->moe || c->shared_inter <= 0)
			return -ENOENT;
		n = snprintf(buf, len, "model.layers.%d.mlp.%s.%s", li, shared, mlp[k - LG_OBS_SG]);
	} else if (k == LG_OBS_SGATE) {
		if (!L->moe || c->shared_inter <= 0 || !c->arch->shared_gate)
			return -ENOENT;
		n = snprintf(buf, len, "model.layers.%d.mlp.shared_expert_gate", li);
	} else {
		if (!L->moe)
			return -ENOENT;
		int e = (k - LG_OBS_FIXED) / 3, p = (k - LG_OBS_FIXED) % 3;
		n = snprintf(buf, len, "model.layers.%d.%s.experts.%d.%s", li, c->arch->moe_block, e,
		             c->arch->expert[p]);
	}
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* ------------------------------------------------ the minmax and mse input observers */

static const char *const kind_names[LG_OBS_KINDS] = {"static_minmax", "minmax", "mse"};

const char *lg_obs_kind_name(enum lg_obs_kind k)
{
	return (unsigned)k < LG_OBS_KINDS ? kind_names[k] : "?";
}

int lg_obs_kind_parse(const char *s, enum lg_obs_kind *out)
{
	for (int k = 0; k < LG_OBS_KINDS; k++)
		if (!strcmp(s, kind_names[k])) {
			*out = (enum lg_obs_kind)k;
			return 0;
		}
	return -EINVAL;
}

/* minmax's statistics of one batch: amin, amax per group of 16 (over dims 0 and -1 of the
 * input flattened to (T, cols/16, 16): min_max.py _get_min_max) */
static void batch_minmax(const float *x, size_t ldx, int T, int cols, float *lo, float *hi)
{
	for (int g = 0; g < cols / 16; g++)
		lo[g] = hi[g] = x[(size_t)g * 16];
	for (int t = 0; t < T; t++)
		for (int c = 0; c < cols; c++) {
			float v = x[(size_t)t * ldx + c];
			lo[c / 16] = fminf(lo[c / 16], v);
			hi[c / 16] = fmaxf(hi[c / 16], v);
		}
}

void lg_obs_batch(struct lg_obs *obs, size_t base, const int *slots, int ns, const float *x,
                  size_t ldx, int T, int cols, struct rq_pool *pool)
{
	if (obs->err || T <= 0 || obs->kind == LG_OBS_STATIC_MINMAX)
		return;
	if (cols % 16) {        /* NVFP4's groups: every Linear a W4A4 scheme takes has them */
		obs->err = -EINVAL;
		return;
	}
	int ng = cols / 16;
	float *lo = malloc(2 * (size_t)ng * sizeof *lo), *hi = lo + ng;
	if (!lo) {
		obs->err = -ENOMEM;
		return;
	}
	int rc = 0;
	if (obs->kind == LG_OBS_MSE)
		rc = rq_obs_act_mse(x, ldx, (size_t)T, (size_t)cols, lo, hi, pool);
	else
		batch_minmax(x, ldx, T, cols, lo, hi);
	/* each slot of the same input folds the same batch (q/k/v, gate/up: their own
	 * observers in llm-compressor, so their own moving averages, equal ones) */
	for (int j = 0; j < ns && !rc; j++) {
		size_t i = base + (size_t)slots[j];
		if (!obs->lo[i]) {
			if (!(obs->lo[i] = malloc(2 * (size_t)ng * sizeof *lo))) {
				rc = -ENOMEM;
				break;
			}
			obs->hi[i] = obs->lo[i] + ng;
			obs->groups[i] = ng;
			memcpy(obs->lo[i], lo, 2 * (size_t)ng * sizeof *lo);
			continue;
		}
		if (obs->groups[i] != ng) {
			rc = -EINVAL;
			break;
		}
		for (int g = 0; g < ng; g++) {
			obs->lo[i][g] = rq_obs_lerp(obs->lo[i][g], lo[g], 1);
			obs->hi[i][g] = rq_obs_lerp(obs->hi[i][g], hi[g], 1);
		}
	}
	free(lo);
	obs->err = rc;
}

float lg_obs_amax(const struct lg_obs *obs, size_t i)
{
	if (obs->kind == LG_OBS_STATIC_MINMAX || !obs->lo || !obs->lo[i])
		return obs->amax[i];
	/* base.py get_global_scale: max(max_vals.max(), -min_vals.min()), then
	 * generate_gparam's clamp of min to <= 0 and max to >= 0 */
	float a = 0.0f;
	for (int g = 0; g < obs->groups[i]; g++)
		a = fmaxf(a, fmaxf(obs->hi[i][g], -obs->lo[i][g]));
	return a;
}

void lg_obs_release(struct lg_obs *obs, size_t slots)
{
	if (!obs || !obs->lo)
		return;
	for (size_t i = 0; i < slots; i++) {
		free(obs->lo[i]);
		obs->lo[i] = obs->hi[i] = NULL;
	}
}
