/* observe.c — slots and names of the calibration observer (observe.h). */
#include "engine/model/observe.h"
#include "engine/model/model.h"
#include "engine/model/torch_bf16.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
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
