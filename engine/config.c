/* config.c — config.json and generation_config.json of a Laguna checkpoint.
 *
 * The defaults are transformers' LagunaConfig's; the keys only vLLM knows
 * (mlp_only_layers, decoder_sparse_step, flat rope_parameters with
 * swa_rope_parameters, top-level partial_rotary_factor, norm_topk_prob,
 * moe_router_score_func, qkv_bias, swa_attention_sink_enabled) are honoured
 * or refused the way vLLM reads them. Every refusal names the key. */
#include "engine/model.h"
#include "base/err.h"
#include "st/jcheck.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small JSON readers: 0, or -EINVAL naming the key ---- */

static const cJSON *key(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_num(const cJSON *o, const char *k, int required, double def, double *out,
                   const char *path, struct rq_err *err)
{
	const cJSON *v = key(o, k);
	if (!v) {
		if (required)
			return rq_errf(err, -EINVAL, "%s: \"%s\" is missing", path, k);
		*out = def;
		return 0;
	}
	if (!cJSON_IsNumber(v))
		return rq_errf(err, -EINVAL, "%s: \"%s\" is not a number", path, k);
	*out = v->valuedouble;
	return 0;
}

static int get_int(const cJSON *o, const char *k, int required, long def, long lo, long hi,
                   long *out, const char *path, struct rq_err *err)
{
	double d = 0;
	int rc = get_num(o, k, required, (double)def, &d, path, err);
	if (rc)
		return rc;
	if (d != floor(d) || d < lo || d > hi)
		return rq_errf(err, -EINVAL, "%s: \"%s\" = %g is not an integer in [%ld, %ld]",
		               path, k, d, lo, hi);
	*out = (long)d;
	return 0;
}

static int get_bool(const cJSON *o, const char *k, int def, int *out, const char *path,
                    struct rq_err *err)
{
	const cJSON *v = key(o, k);
	if (!v) {
		*out = def;
		return 0;
	}
	if (!cJSON_IsBool(v))
		return rq_errf(err, -EINVAL, "%s: \"%s\" is not true/false", path, k);
	*out = cJSON_IsTrue(v);
	return 0;
}

static const char *get_str(const cJSON *o, const char *k)
{
	const cJSON *v = key(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- RoPE: transformers' rope init functions, in the same float32 steps ---- */

static double yarn_mscale(double scale, double mscale)
{
	return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_correction_dim(double rot, int dim, double base, double max_pos)
{
	return (dim * log(max_pos / (rot * 2 * M_PI))) / (2 * log(base));
}

/* p: this layer type's rope dict; top: the rope_parameters object transformers
 * reads `truncate` from (the whole nested dict for the nested form). */
static int rope_init(struct lg_rope *r, const cJSON *p, const cJSON *top, const cJSON *root,
                     int head_dim, long max_pos, const char *what, const char *path,
                     struct rq_err *err)
{
	double theta = 0, prf = 0, d = 0;
	int rc;
	memset(r, 0, sizeof *r);
	const char *type = get_str(p, "rope_type");
	if (!type)
		type = get_str(p, "type");
	if (!type)
		type = "default";
	if (strcmp(type, "default") && strcmp(type, "yarn"))
		return rq_errf(err, -ENOTSUP, "%s: %s rope_type \"%s\" is not supported (default, yarn)",
		               path, what, type);
	snprintf(r->type, sizeof r->type, "%s", type);
	/* rope_theta / partial_rotary_factor: the per-type value, else the
	 * top-level one (transformers' standardize_rope_params setdefault). */
	if ((rc = get_num(root, "rope_theta", 0, 10000.0, &d, path, err)) ||
	    (rc = get_num(p, "rope_theta", 0, d, &theta, path, err)))
		return rc;
	if ((rc = get_num(root, "partial_rotary_factor", 0, 1.0, &d, path, err)) ||
	    (rc = get_num(p, "partial_rotary_factor", 0, d, &prf, path, err)))
		return rc;
	if (!(theta > 1) || !(prf > 0 && prf <= 1))
		return rq_errf(err, -EINVAL, "%s: %s rope_theta %g / partial_rotary_factor %g out of range",
		               path, what, theta, prf);
	int dim = (int)(head_dim * prf);
	if (dim < 2 || dim % 2 || dim / 2 > LG_ROPE_MAX)
		return rq_errf(err, -EINVAL, "%s: %s rotary dim %d (head_dim %d x %g) must be even and <= %d",
		               path, what, dim, head_dim, prf, 2 * LG_ROPE_MAX);
	r->rot_dim = dim;
	r->theta = theta;
	r->attn_scale = 1.0f;
	int half = dim / 2;
	/* pos_freqs = base ** (arange(0, dim, 2, float32) / dim), in float32 */
	float pos_freq[LG_ROPE_MAX];
	for (int i = 0; i < half; i++) {
		float e = (float)(2 * i) / (float)dim;
		pos_freq[i] = (float)pow(theta, (double)e);
	}
	if (!strcmp(type, "default")) {
		for (int i = 0; i < half; i++)
			r->inv_freq[i] = 1.0f / pos_freq[i];
		return 0;
	}
	/* YaRN (_compute_yarn_parameters) */
	double factor = 0, attn_factor = 0, mscale = 0, mscale_all = 0, beta_fast = 0, beta_slow = 0;
	double omax = 0;
	if ((rc = get_num(p, "factor", 1, 0, &factor, path, err)) ||
	    (rc = get_num(p, "mscale", 0, 0, &mscale, path, err)) ||
	    (rc = get_num(p, "mscale_all_dim", 0, 0, &mscale_all, path, err)) ||
	    (rc = get_num(p, "beta_fast", 0, 0, &beta_fast, path, err)) ||
	    (rc = get_num(p, "beta_slow", 0, 0, &beta_slow, path, err)) ||
	    (rc = get_num(p, "original_max_position_embeddings", 0, (double)max_pos, &omax, path, err)))
		return rc;
	if (!(factor > 0) || !(omax > 0))
		return rq_errf(err, -EINVAL, "%s: %s yarn factor %g / original_max_position_embeddings %g",
		               path, what, factor, omax);
	if (key(p, "attention_factor")) {
		if ((rc = get_num(p, "attention_factor", 1, 0, &attn_factor, path, err)))
			return rc;
	} else if (mscale != 0 && mscale_all != 0) {
		attn_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all);
	} else {
		attn_factor = yarn_mscale(factor, 1);
	}
	if (beta_fast == 0)
		beta_fast = 32;
	if (beta_slow == 0)
		beta_slow = 1;
	int truncate = 1;
	if ((rc = get_bool(top, "truncate", 1, &truncate, path, err)))
		return rc;
	double low = yarn_correction_dim(beta_fast, dim, theta, omax);
	double high = yarn_correction_dim(beta_slow, dim, theta, omax);
	if (truncate) {
		low = floor(low);
		high = ceil(high);
	}
	if (low < 0)
		low = 0;
	if (high > dim - 1)
		high = dim - 1;
	if (low == high)
		high += 0.001;
	float span = (float)(high - low), flo = (float)low, ffac = (float)factor;
	for (int i = 0; i < half; i++) {
		float ramp = ((float)i - flo) / span;
		ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
		float extrap_factor = 1.0f - ramp;
		float extrap = 1.0f / pos_freq[i];
		float interp = 1.0f / (ffac * pos_freq[i]);
		float a = interp * (1.0f - extrap_factor);
		float b = extrap * extrap_factor;
		r->inv_freq[i] = a + b;
	}
	r->attn_scale = (float)attn_factor;
	return 0;
}

/* ---- quantization_config: compressed-tensors weight schemes, no transforms ----
 *
 * The tensors decide how each Linear is read (model.c); the config is checked
 * only for what the tensors cannot say: a format or weight type this engine
 * does not dequantize. Accepted formats and weights:
 *   nvfp4-pack-quantized  float, 4 bits, tensor_group, group 16      (NVFP4, NVFP4A16)
 *   float-quantized,      float, 8 bits, channel or tensor           (FP8_DYNAMIC, FP8)
 *   naive-quantized
 *   pack-quantized        int, 1..8 bits, group or channel           (W4A16, W8A16, ..._ASYM)
 * mixed-precision as the top-level format defers to each group's own.
 * Activation quantization (input_activations) is not computed: the engine
 * runs every Linear on binary32 activations (A16), which is what the dynamic
 * FP8/INT activation schemes approximate. */

static int check_weights(const cJSON *w, const char *fmt, const char *gname, const char *path,
                         struct rq_err *err)
{
	double bits = 0, gsz = 0;
	const char *type = get_str(w, "type");
	const char *strat = get_str(w, "strategy");
	int rc;
	if ((rc = get_num(w, "num_bits", 0, 0, &bits, path, err)))
		return rc;
	const cJSON *gj = key(w, "group_size");
	if (gj && cJSON_IsNumber(gj))
		gsz = gj->valuedouble;
	if (!strcmp(fmt, "nvfp4-pack-quantized")) {
		if ((bits && bits != 4) || (gsz && gsz != 16) || (type && strcmp(type, "float")) ||
		    (strat && strcmp(strat, "tensor_group")))
			return rq_errf(err, -ENOTSUP, "%s: quantization_config group \"%s\": weights must be "
			               "4-bit float, tensor_group, group 16 (NVFP4)", path, gname);
		return 0;
	}
	if (!strcmp(fmt, "float-quantized") || !strcmp(fmt, "naive-quantized")) {
		if ((bits && bits != 8) || (type && strcmp(type, "float")) ||
		    (strat && strcmp(strat, "channel") && strcmp(strat, "tensor")))
			return rq_errf(err, -ENOTSUP, "%s: quantization_config group \"%s\" (%s): weights must "
			               "be 8-bit float with channel or tensor scales (FP8, FP8_DYNAMIC); "
			               "block and group FP8 are not supported by this engine",
			               path, gname, fmt);
		return 0;
	}
	/* pack-quantized */
	if (bits < 1 || bits > 8 || (type && strcmp(type, "int")) ||
	    (strat && strcmp(strat, "group") && strcmp(strat, "channel")))
		return rq_errf(err, -ENOTSUP, "%s: quantization_config group \"%s\" (pack-quantized): "
		               "weights must be 1..8-bit int with group or channel scales (W4A16, W8A16)",
		               path, gname);
	return 0;
}

static int check_quant(const cJSON *q, const char *path, struct rq_err *err)
{
	if (!q)
		return 0;
	const char *qm = get_str(q, "quant_method");
	if (qm && strcmp(qm, "compressed-tensors"))
		return rq_errf(err, -ENOTSUP, "%s: quantization_config.quant_method \"%s\" is not supported "
		               "(compressed-tensors only)", path, qm);
	static const char *const refused[] = {"transform_config", "transforms", "rotations"};
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		const cJSON *t = key(q, refused[i]);
		/* compressed-tensors writes "transform_config": {} when there is none */
		if (t && !((cJSON_IsObject(t) || cJSON_IsArray(t)) && !cJSON_GetArraySize(t)) &&
		    !cJSON_IsFalse(t))
			return rq_errf(err, -ENOTSUP, "%s: quantization_config.%s (a transform/rotation) is not "
			               "supported by this engine", path, refused[i]);
	}
	static const char *const formats[] = {"nvfp4-pack-quantized", "float-quantized",
	                                      "naive-quantized", "pack-quantized"};
	const char *top_fmt = get_str(q, "format");
	if (top_fmt && !strcmp(top_fmt, "mixed-precision"))
		top_fmt = NULL;
	const cJSON *groups = key(q, "config_groups"), *g;
	cJSON_ArrayForEach(g, groups) {
		const char *gname = g->string ? g->string : "?";
		const char *fmt = get_str(g, "format");
		if (!fmt)
			fmt = top_fmt ? top_fmt : "nvfp4-pack-quantized";
		int known = 0;
		for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
			known |= !strcmp(fmt, formats[i]);
		if (!known)
			return rq_errf(err, -ENOTSUP, "%s: quantization_config group \"%s\" has format \"%s\" "
			               "(this engine reads nvfp4-pack-quantized, float-quantized and "
			               "pack-quantized; other formats and architectures: serve with vLLM)",
			               path, gname, fmt);
		const cJSON *w = key(g, "weights");
		int rc;
		if (w && cJSON_IsObject(w) && (rc = check_weights(w, fmt, gname, path, err)))
			return rc;
	}
	return 0;
}

static int refuse_true(const cJSON *root, const char *k, const char *path, struct rq_err *err)
{
	int v = 0, rc = get_bool(root, k, 0, &v, path, err);
	if (rc)
		return rc;
	return v ? rq_errf(err, -ENOTSUP, "%s: \"%s\": true is not supported by this engine", path, k) : 0;
}

static int parse_eos(const cJSON *o, int *eos, int *n, const char *path, struct rq_err *err)
{
	const cJSON *v = key(o, "eos_token_id"), *e;
	if (!v)
		return 0;
	*n = 0;
	if (cJSON_IsNumber(v)) {
		eos[(*n)++] = (int)v->valuedouble;
		return 0;
	}
	if (!cJSON_IsArray(v))
		return rq_errf(err, -EINVAL, "%s: \"eos_token_id\" is neither a number nor a list", path);
	cJSON_ArrayForEach(e, v) {
		if (!cJSON_IsNumber(e))
			return rq_errf(err, -EINVAL, "%s: \"eos_token_id\" holds a non-number", path);
		if (*n < 8)
			eos[(*n)++] = (int)e->valuedouble;
	}
	return 0;
}

/* The per-layer MLP plan: mlp_layer_types (transformers) and/or
 * mlp_only_layers + decoder_sparse_step (vLLM); they must agree. */
static int mlp_plan(const cJSON *root, int n, int n_experts, int *moe, const char *path,
                    struct rq_err *err)
{
	long step;
	int rc = get_int(root, "decoder_sparse_step", 0, 1, 0, 1 << 20, &step, path, err);
	if (rc)
		return rc;
	if (step != 1)
		return rq_errf(err, -ENOTSUP, "%s: \"decoder_sparse_step\" = %ld is not supported (1 only)",
		               path, step);
	const cJSON *types = key(root, "mlp_layer_types"), *only = key(root, "mlp_only_layers"), *e;
	for (int i = 0; i < n; i++)
		moe[i] = i != 0;     /* LagunaConfig's default: first layer dense */
	if (types) {
		if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != n)
			return rq_errf(err, -EINVAL, "%s: \"mlp_layer_types\" must list %d layers", path, n);
		int i = 0;
		cJSON_ArrayForEach(e, types) {
			const char *s = cJSON_IsString(e) ? e->valuestring : "";
			if (!strcmp(s, "dense"))
				moe[i] = 0;
			else if (!strcmp(s, "sparse"))
				moe[i] = 1;
			else
				return rq_errf(err, -EINVAL, "%s: mlp_layer_types[%d] = \"%s\" (dense or sparse)",
				               path, i, s);
			i++;
		}
	}
	if (only) {
		if (!cJSON_IsArray(only))
			return rq_errf(err, -EINVAL, "%s: \"mlp_only_layers\" is not a list", path);
		int *dense = calloc(n, sizeof *dense);
		if (!dense)
			return rq_errf(err, -ENOMEM, "out of memory");
		cJSON_ArrayForEach(e, only) {
			if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= n) {
				free(dense);
				return rq_errf(err, -EINVAL, "%s: \"mlp_only_layers\" holds a bad layer index", path);
			}
			dense[(int)e->valuedouble] = 1;
		}
		for (int i = 0; i < n; i++) {
			int m = !dense[i] && n_experts > 0;
			if (types && m != moe[i]) {
				free(dense);
				return rq_errf(err, -EINVAL, "%s: mlp_layer_types and mlp_only_layers disagree "
				               "at layer %d", path, i);
			}
			moe[i] = m;
		}
		free(dense);
	}
	return 0;
}

/* Sizes, scalars and token ids (config.json keys, transformers' defaults). */
static int parse_sizes(const cJSON *root, struct lg_config *cp, const char *path,
                       struct rq_err *err)
{
	struct lg_config c = *cp;
	long v = 0;
	double d = 0;
	int rc;
	#define INT(k, req, def, lo, hi, dst) \
	do { if ((rc = get_int(root, k, req, def, lo, hi, &v, path, err))) return rc; dst = (int)v; } while (0)
	INT("hidden_size", 1, 0, 1, 1 << 20, c.hidden);
	INT("num_hidden_layers", 1, 0, 1, 4096, c.n_layers);
	INT("vocab_size", 1, 0, 1, 1 << 26, c.vocab);
	INT("num_attention_heads", 1, 0, 1, 4096, c.n_heads_max);
	INT("num_key_value_heads", 1, 0, 1, 4096, c.n_kv_heads);
	INT("head_dim", 0, c.hidden / c.n_heads_max, 1, 1 << 16, c.head_dim);
	INT("intermediate_size", 1, 0, 1, 1 << 24, c.inter);
	INT("num_experts", 0, 0, 0, 1 << 16, c.n_experts);
	INT("num_experts_per_tok", 0, 0, 0, 1 << 16, c.top_k);
	INT("moe_intermediate_size", 0, 0, 0, 1 << 24, c.moe_inter);
	INT("shared_expert_intermediate_size", 0, 0, 0, 1 << 24, c.shared_inter);
	INT("sliding_window", 0, 512, 1, 1L << 30, c.sliding_window);
	INT("bos_token_id", 0, -1, -1, 1 << 26, c.bos);
	INT("pad_token_id", 0, -1, -1, 1 << 26, c.pad);
#undef INT
	if ((rc = get_int(root, "max_position_embeddings", 0, 131072, 1, 1L << 40, &v, path, err)))
		return rc;
	c.max_pos = v;
	if ((rc = get_num(root, "rms_norm_eps", 0, 1e-6, &d, path, err)))
		return rc;
	c.eps = (float)d;
	if ((rc = get_num(root, "moe_routed_scaling_factor", 0, 1.0, &d, path, err)))
		return rc;
	c.routed_scale = (float)d;
	if ((rc = get_num(root, "moe_router_logit_softcapping", 0, 0.0, &d, path, err)))
		return rc;
	if (d < 0)
		return rq_errf(err, -EINVAL, "%s: moe_router_logit_softcapping %g < 0", path, d);
	c.router_softcap = (float)d;
	if ((rc = get_bool(root, "norm_topk_prob", 1, &c.norm_topk, path, err)) ||
	    (rc = get_bool(root, "tie_word_embeddings", 0, &c.tie_embeddings, path, err)))
		return rc;
	c.n_eos = 0;
	if ((rc = parse_eos(root, c.eos, &c.n_eos, path, err)))
		return rc;
	*cp = c;
	return 0;
}

/* Features this engine does not compute: refused by name. */
static int refuse_features(const cJSON *root, const char *path, struct rq_err *err)
{
	int rc, b = 0;
	const char *act = get_str(root, "hidden_act");
	if (act && strcmp(act, "silu"))
		return rq_errf(err, -ENOTSUP, "%s: hidden_act \"%s\" is not supported (silu only)", path, act);
	if ((rc = refuse_true(root, "attention_bias", path, err)) ||
	    (rc = refuse_true(root, "qkv_bias", path, err)) ||
	    (rc = refuse_true(root, "swa_attention_sink_enabled", path, err)) ||
	    (rc = refuse_true(root, "moe_apply_router_weight_on_input", path, err)))
		return rc;
	const char *sf = get_str(root, "moe_router_score_func");
	if (sf && strcmp(sf, "sigmoid")) {
		return rq_errf(err, -ENOTSUP, "%s: moe_router_score_func \"%s\" is not supported (sigmoid only; "
		               "transformers has no other)", path, sf);
	}
	if ((rc = get_bool(root, "moe_router_use_sigmoid", 1, &b, path, err)))
		return rc;
	if (!b)
		return rq_errf(err, -ENOTSUP, "%s: moe_router_use_sigmoid false is not supported", path);
	if (key(root, "rope_scaling"))
		return rq_errf(err, -ENOTSUP, "%s: legacy \"rope_scaling\" is not supported (use rope_parameters)",
		               path);
	if ((rc = check_quant(key(root, "quantization_config"), path, err)))
		return rc;
	return 0;
}

/* The attention output gate: true / "per-head" one per head, "per-element"
 * one per channel, false none. */
static int parse_gate(const cJSON *root, struct lg_config *c, const char *path, struct rq_err *err)
{
	const cJSON *gt = key(root, "gating");
	if (!gt || cJSON_IsTrue(gt) || (cJSON_IsString(gt) && !strcmp(gt->valuestring, "per-head")))
		c->gate = LG_GATE_PER_HEAD;
	else if (cJSON_IsString(gt) && !strcmp(gt->valuestring, "per-element"))
		c->gate = LG_GATE_PER_ELEMENT;
	else if (cJSON_IsFalse(gt))
		c->gate = LG_GATE_NONE;
	else {
		return rq_errf(err, -ENOTSUP, "%s: \"gating\" must be true, false, \"per-head\" or \"per-element\"",
		               path);
	}
	return 0;
}

/* The per-layer plan into types/heads/moe [n_layers] (allocated by the
 * caller); used[t]: some layer is of attention type t. Sets n_heads_max. */
static int layer_plan(const cJSON *root, struct lg_config *c, enum lg_attn_type *types,
                      int *heads, int *moe, int used[2], const char *path, struct rq_err *err)
{
	int n = c->n_layers, rc;
	const cJSON *lt = key(root, "layer_types"), *e;
	if (lt && (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != n))
		return rq_errf(err, -EINVAL, "%s: \"layer_types\" must list %d layers", path, n);
	int i = 0;
	used[0] = lt == NULL;
	used[1] = 0;
	cJSON_ArrayForEach(e, lt) {
		const char *s = cJSON_IsString(e) ? e->valuestring : "";
		if (!strcmp(s, "full_attention"))
			types[i] = LG_FULL;
		else if (!strcmp(s, "sliding_attention"))
			types[i] = LG_SLIDING;
		else {
			return rq_errf(err, -ENOTSUP, "%s: layer_types[%d] = \"%s\" is not supported", path, i, s);
		}
		used[types[i]] = 1;
		i++;
	}
	const cJSON *hl = key(root, "num_attention_heads_per_layer");
	if (hl && (!cJSON_IsArray(hl) || cJSON_GetArraySize(hl) != n))
		return rq_errf(err, -EINVAL, "%s: \"num_attention_heads_per_layer\" must list %d layers", path, n);
	for (i = 0; i < n; i++)
		heads[i] = c->n_heads_max;
	i = 0;
	cJSON_ArrayForEach(e, hl) {
		if (!cJSON_IsNumber(e) || e->valuedouble < 1 || e->valuedouble > 4096)
			return rq_errf(err, -EINVAL, "%s: num_attention_heads_per_layer[%d] is bad", path, i);
		heads[i++] = (int)e->valuedouble;
	}
	c->n_heads_max = 0;
	for (i = 0; i < n; i++) {
		if (heads[i] % c->n_kv_heads)
			return rq_errf(err, -EINVAL, "%s: layer %d has %d query heads, not a multiple of %d KV heads",
			               path, i, heads[i], c->n_kv_heads);
		if (heads[i] > c->n_heads_max)
			c->n_heads_max = heads[i];
	}
	if ((rc = mlp_plan(root, n, c->n_experts, moe, path, err)))
		return rc;
	for (i = 0; i < n; i++)
		if (moe[i] && (c->n_experts < 1 || c->top_k < 1 || c->top_k > c->n_experts || c->moe_inter < 1))
			return rq_errf(err, -EINVAL, "%s: MoE layer %d needs num_experts >= num_experts_per_tok >= 1 "
			               "and moe_intermediate_size >= 1", path, i);
	return 0;
}

/* RoPE per layer type in use: nested {layer_type: {...}} (transformers) or
 * flat rope_parameters + swa_rope_parameters (older configs, vLLM). */
static int rope_plan(const cJSON *root, struct lg_config *c, const int used[2], const char *path,
                     struct rq_err *err)
{
	int rc = 0;
	const cJSON *rp = key(root, "rope_parameters");
	if (rp && !cJSON_IsObject(rp))
		return rq_errf(err, -EINVAL, "%s: \"rope_parameters\" is not an object", path);
	int nested = rp && (key(rp, "full_attention") || key(rp, "sliding_attention"));
	static const char *const tname[2] = {"full_attention", "sliding_attention"};
	cJSON *empty = cJSON_CreateObject();
	for (int t = 0; t < 2; t++) {
		if (!used[t])
			continue;
		const cJSON *p, *top;
		if (nested) {
			p = key(rp, tname[t]);
			top = rp;
			if (!p) {
				cJSON_Delete(empty);
				return rq_errf(err, -EINVAL, "%s: rope_parameters has no \"%s\" entry", path, tname[t]);
			}
		} else {
			const cJSON *swa = key(root, "swa_rope_parameters");
			p = t == LG_SLIDING && swa ? swa : rp ? rp : empty;
			top = p;
		}
		rc = rope_init(&c->rope[t], p, top, root, c->head_dim, c->max_pos, tname[t], path, err);
		if (rc) {
			cJSON_Delete(empty);
			return rc;
		}
	}
	cJSON_Delete(empty);
	return 0;
}

int lg_config_parse(const char *json, const char *path, struct lg_config *out,
                    enum lg_attn_type **types_out, int **heads_out, int **moe_out,
                    struct rq_err *err)
{
	struct lg_config c;
	memset(&c, 0, sizeof c);
	enum lg_attn_type *types = NULL;
	int *heads = NULL, *moe = NULL, used[2];
	int rc;
	cJSON *root = jc_parse(json, strlen(json), path, err);
	if (!root || !cJSON_IsObject(root)) {
		rc = root || !err ? rq_errf(err, -EINVAL, "%s: not a JSON object", path) : err->code;
		goto out;
	}
	const char *mt = get_str(root, "model_type");
	if (mt && strcmp(mt, "laguna")) {
		rc = rq_errf(err, -ENOTSUP, "%s: model_type \"%s\" is not laguna", path, mt);
		goto out;
	}
	if ((rc = parse_sizes(root, &c, path, err)) || (rc = refuse_features(root, path, err)) ||
	    (rc = parse_gate(root, &c, path, err)))
		goto out;
	int n = c.n_layers;
	types = calloc(n, sizeof *types);
	heads = calloc(n, sizeof *heads);
	moe = calloc(n, sizeof *moe);
	if (!types || !heads || !moe) {
		rc = rq_errf(err, -ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = layer_plan(root, &c, types, heads, moe, used, path, err)) ||
	    (rc = rope_plan(root, &c, used, path, err)))
		goto out;
	*out = c;
	*types_out = types;
	*heads_out = heads;
	*moe_out = moe;
	types = NULL;
	heads = NULL;
	moe = NULL;
	rc = 0;
out:
	free(types);
	free(heads);
	free(moe);
	cJSON_Delete(root);
	return rc;
}

int lg_gen_parse(const char *json, const struct lg_config *cfg, struct lg_gen_defaults *out,
                 struct rq_err *err)
{
	/* transformers GenerationConfig defaults */
	struct lg_gen_defaults g = {.do_sample = 0, .temperature = 1.0f, .top_k = 50, .top_p = 1.0f};
	g.n_eos = cfg->n_eos;
	memcpy(g.eos, cfg->eos, sizeof g.eos);
	const char *path = "generation_config.json";
	int rc = 0;
	if (!json) {
		*out = g;
		return 0;
	}
	cJSON *root = jc_parse(json, strlen(json), path, err);
	if (!root || !cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return root || !err ? rq_errf(err, -EINVAL, "%s: not a JSON object", path) : err->code;
	}
	double d = 0;
	long v = 0;
	if ((rc = get_bool(root, "do_sample", 0, &g.do_sample, path, err)))
		goto out;
	if ((rc = get_num(root, "temperature", 0, 1.0, &d, path, err)))
		goto out;
	g.temperature = (float)d;
	if ((rc = get_int(root, "top_k", 0, 50, 0, 1 << 26, &v, path, err)))
		goto out;
	g.top_k = (int)v;
	if ((rc = get_num(root, "top_p", 0, 1.0, &d, path, err)))
		goto out;
	g.top_p = (float)d;
	if ((rc = parse_eos(root, g.eos, &g.n_eos, path, err)))
		goto out;
	/* A generation_config that sets sampling parameters without do_sample
	 * is a serving default (vLLM applies them): sample. */
	if (!key(root, "do_sample") && (key(root, "temperature") || key(root, "top_k") || key(root, "top_p")))
		g.do_sample = 1;
	if (g.temperature < 0 || g.top_p <= 0 || g.top_p > 1) {
		rc = rq_errf(err, -EINVAL, "%s: temperature %g / top_p %g out of range", path,
		             g.temperature, g.top_p);
		goto out;
	}
	*out = g;
out:
	cJSON_Delete(root);
	return rc;
}
