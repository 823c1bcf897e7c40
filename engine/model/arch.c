/* arch.c — the decoder families as data, chosen once from config.json's
 * model_type (never from the directory's name).
 *
 * One row per family: what the forward pass reads (struct lg_arch: q/k
 * norms, router kind, tensor names of a MoE block, the shared expert's
 * gate) and how its config.json is read (keys and defaults of transformers'
 * <Family>Config, checked against transformers 5.x's configuration_*.py and
 * modeling_*.py). Laguna keeps its own reader (config.c); every other family
 * goes through lg_hf_config_parse() below, which is driven by the row.
 * lg_config_parse() here reads config.json: the row, its reader, then
 * quantization_config's input activations (config.c).
 *
 *   family     biases                 sliding window              MoE
 *   llama      attention_bias q,k,v,o; none                        -
 *              mlp_bias gate,up,down
 *   mistral    -                      sliding_window (all layers)  -
 *   qwen2      q,k,v always           use_sliding_window: layers   -
 *                                     >= max_window_layers
 *   qwen3      attention_bias q,k,v,o as qwen2 (+ q/k norm)        -
 *   mixtral    -                      sliding_window (all layers)  block_sparse_moe, w1/w3/w2,
 *                                                                  softmax top-k, renormalised
 *   qwen2_moe  qkv_bias (default on)  use_sliding_window: even     mlp, softmax top-k,
 *                                     layers < max_window_layers   norm_topk_prob, shared expert
 *                                                                  with sigmoid gate
 *   qwen3_moe  attention_bias q,k,v,o use_sliding_window (all)     mlp, softmax, norm_topk_prob
 *              (+ q/k norm)
 * layer_types in config.json, when the family reads it, decides per layer. */
#include "engine/model/cfg_int.h"
#include "base/err.h"
#include "st/jcheck.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum sw_rule {
	SW_NONE = 0,               /* no sliding window (llama) */
	SW_ALL,                    /* sliding_window set (not null): every layer (mistral, mixtral) */
	SW_QWEN2,                  /* use_sliding_window: layer_types, else i >= max_window_layers */
	SW_QWEN2_MOE,              /* use_sliding_window: layer_types, else even i < max_window_layers */
	SW_ALL_IF_USE,             /* use_sliding_window: every layer (qwen3_moe) */
};

enum moe_kind { MOE_NONE = 0, MOE_ALL, MOE_STEP };

struct family {
	struct lg_arch a;          /* first: lg_arch_find returns &row->a */
	int (*parse)(const cJSON *root, const struct family *f, const char *path, struct lg_config *c,
	             enum lg_attn_type *types, int *heads, int *moe, struct rq_err *err);
	/* defaults of the family's config class */
	double theta, eps;         /* default_theta, rms_norm_eps */
	long max_pos;              /* max_position_embeddings */
	int head_dim;              /* head_dim (0: hidden_size / num_attention_heads) */
	/* biases */
	const char *bias_key;      /* NULL: fixed to bias_def */
	int bias_def, bias_o;      /* default; whether it covers o_proj too */
	const char *mlp_bias_key;  /* NULL: none */
	/* attention window */
	enum sw_rule sw;
	long window_def;           /* sliding_window default (-1: None) */
	/* MoE */
	enum moe_kind moe;
	const char *experts_key;   /* num_experts / num_local_experts */
	long experts_def, topk_def;
	const char *width_key;     /* routed expert width: moe_intermediate_size / intermediate_size */
	long width_def;
	const char *shared_key;    /* shared_expert_intermediate_size, NULL: none */
	long shared_def;
	const char *norm_key;      /* norm_topk_prob, NULL: always renormalised */
};

static int laguna(const cJSON *root, const struct family *f, const char *path, struct lg_config *c,
                  enum lg_attn_type *types, int *heads, int *moe, struct rq_err *err)
{
	return lg_laguna_parse(root, &f->a, path, c, types, heads, moe, err);
}

static int hf(const cJSON *root, const struct family *f, const char *path, struct lg_config *c,
              enum lg_attn_type *types, int *heads, int *moe, struct rq_err *err);

#define DENSE_EXPERTS {"gate_proj", "up_proj", "down_proj"}

static const struct family families[] = {
	{.a = {"laguna", 1, LG_ROUTER_SIGMOID, "mlp", DENSE_EXPERTS, 0}, .parse = laguna},
	{.a = {"llama", 0, LG_ROUTER_SOFTMAX, "mlp", DENSE_EXPERTS, 0}, .parse = hf,
	 .theta = 10000, .eps = 1e-6, .max_pos = 2048, .bias_key = "attention_bias", .bias_o = 1,
	 .mlp_bias_key = "mlp_bias", .sw = SW_NONE, .window_def = -1},
	{.a = {"mistral", 0, LG_ROUTER_SOFTMAX, "mlp", DENSE_EXPERTS, 0}, .parse = hf,
	 .theta = 10000, .eps = 1e-6, .max_pos = 4096 * 32, .sw = SW_ALL, .window_def = 4096},
	{.a = {"qwen2", 0, LG_ROUTER_SOFTMAX, "mlp", DENSE_EXPERTS, 0}, .parse = hf,
	 .theta = 10000, .eps = 1e-6, .max_pos = 32768, .bias_def = 1, .sw = SW_QWEN2,
	 .window_def = 4096},
	{.a = {"qwen3", 1, LG_ROUTER_SOFTMAX, "mlp", DENSE_EXPERTS, 0}, .parse = hf,
	 .theta = 10000, .eps = 1e-6, .max_pos = 32768, .head_dim = 128, .bias_key = "attention_bias",
	 .bias_o = 1, .sw = SW_QWEN2, .window_def = 4096},
	{.a = {"mixtral", 0, LG_ROUTER_SOFTMAX, "block_sparse_moe", {"w1", "w3", "w2"}, 0}, .parse = hf,
	 .theta = 1e6, .eps = 1e-5, .max_pos = 4096 * 32, .sw = SW_ALL, .window_def = -1,
	 .moe = MOE_ALL, .experts_key = "num_local_experts", .experts_def = 8, .topk_def = 2,
	 .width_key = "intermediate_size", .width_def = 14336},
	{.a = {"qwen2_moe", 0, LG_ROUTER_SOFTMAX, "mlp", DENSE_EXPERTS, 1}, .parse = hf,
	 .theta = 10000, .eps = 1e-6, .max_pos = 32768, .bias_key = "qkv_bias", .bias_def = 1,
	 .sw = SW_QWEN2_MOE, .window_def = 4096, .moe = MOE_STEP, .experts_key = "num_experts",
	 .experts_def = 60, .topk_def = 4, .width_key = "moe_intermediate_size", .width_def = 1408,
	 .shared_key = "shared_expert_intermediate_size", .shared_def = 5632,
	 .norm_key = "norm_topk_prob"},
	{.a = {"qwen3_moe", 1, LG_ROUTER_SOFTMAX, "mlp", DENSE_EXPERTS, 0}, .parse = hf,
	 .theta = 10000, .eps = 1e-6, .max_pos = 32768, .bias_key = "attention_bias", .bias_o = 1,
	 .sw = SW_ALL_IF_USE, .window_def = 4096, .moe = MOE_STEP, .experts_key = "num_experts",
	 .experts_def = 128, .topk_def = 8, .width_key = "moe_intermediate_size", .width_def = 768,
	 .norm_key = "norm_topk_prob"},
};

#define N_FAMILIES (sizeof families / sizeof families[0])

const struct lg_arch *lg_arch_find(const char *model_type)
{
	for (size_t i = 0; model_type && i < N_FAMILIES; i++)
		if (!strcmp(families[i].a.model_type, model_type))
			return &families[i].a;
	return NULL;
}

const char *lg_arch_list(void)
{
	return "laguna, llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe";
}

int lg_arch_parse(const cJSON *root, const struct lg_arch *a, const char *path, struct lg_config *c,
                  enum lg_attn_type *types, int *heads, int *moe, struct rq_err *err)
{
	const struct family *f = (const struct family *)((const char *)a - offsetof(struct family, a));
	c->arch = a;
	return f->parse(root, f, path, c, types, heads, moe, err);
}

int lg_config_parse(const char *json, const char *path, struct lg_config *out,
                    enum lg_attn_type **types_out, int **heads_out, int **moe_out,
                    struct rq_err *err)
{
	struct lg_config c;
	memset(&c, 0, sizeof c);
	enum lg_attn_type *types = NULL;
	int *heads = NULL, *moe = NULL;
	long n = 0;
	int rc;
	cJSON *root = jc_parse(json, strlen(json), path, err);
	if (!root || !cJSON_IsObject(root)) {
		rc = root || !err ? rq_errf(err, -EINVAL, "%s: not a JSON object", path) : err->code;
		goto out;
	}
	/* the family: model_type alone (absent: laguna, as the first Laguna
	 * checkpoints had none) */
	const char *mt = cfg_str(root, "model_type");
	const struct lg_arch *a = lg_arch_find(mt ? mt : "laguna");
	if (!a) {
		rc = rq_errf(err, -ENOTSUP, "%s: model_type \"%s\" is not supported (this engine runs %s)",
		             path, mt, lg_arch_list());
		goto out;
	}
	if ((rc = cfg_int(root, "num_hidden_layers", 1, 0, 1, 4096, &n, path, err)))
		goto out;
	types = calloc(n, sizeof *types);
	heads = calloc(n, sizeof *heads);
	moe = calloc(n, sizeof *moe);
	if (!types || !heads || !moe) {
		rc = rq_errf(err, -ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = lg_arch_parse(root, a, path, &c, types, heads, moe, err)) ||
	    (rc = cfg_quant_acts(cfg_key(root, "quantization_config"), &c, path, err)))
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

/* ---------------------------------------------------------------- the HF families */

/* Keys whose non-default values change the computation and that no family
 * here computes: refused by name rather than ignored. */
static int refuse_switches(const cJSON *root, const char *path, struct rq_err *err)
{
	const char *act = cfg_str(root, "hidden_act");
	if (act && strcmp(act, "silu"))
		return rq_errf(err, -ENOTSUP, "%s: hidden_act \"%s\" is not supported (silu only)", path, act);
	const cJSON *tp = cfg_key(root, "pretraining_tp");
	if (tp && !(cJSON_IsNumber(tp) && tp->valuedouble == 1))
		return rq_errf(err, -ENOTSUP, "%s: \"pretraining_tp\" other than 1 is not supported", path);
	return cfg_check_quant(cfg_key(root, "quantization_config"), path, err);
}

/* The attention window per layer (types[]) and c->sliding_window. */
static int window_plan(const cJSON *root, const struct family *f, struct lg_config *c,
                       enum lg_attn_type *types, const char *path, struct rq_err *err)
{
	int n = c->n_layers, use = 0, rc;
	long win = f->window_def, mwl = 28;
	const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
	if (sw && cJSON_IsNull(sw))
		win = -1;
	else if (sw && (rc = cfg_int(root, "sliding_window", 1, 0, 1, 1L << 30, &win, path, err)))
		return rc;
	if ((rc = cfg_bool(root, "use_sliding_window", 0, &use, path, err)) ||
	    (rc = cfg_int(root, "max_window_layers", 0, 28, 0, 1 << 20, &mwl, path, err)))
		return rc;
	for (int i = 0; i < n; i++)
		types[i] = LG_FULL;
	switch (f->sw) {
	case SW_NONE:
		win = -1;
		break;
	case SW_ALL:
		for (int i = 0; i < n && win > 0; i++)
			types[i] = LG_SLIDING;
		break;
	case SW_ALL_IF_USE:
		for (int i = 0; i < n && use; i++)
			types[i] = LG_SLIDING;
		break;
	case SW_QWEN2:
	case SW_QWEN2_MOE:
		for (int i = 0; i < n; i++)
			if (use && (f->sw == SW_QWEN2 ? i >= mwl : ((i + 1) % 2 && i < mwl)))
				types[i] = LG_SLIDING;
		const cJSON *lt = cfg_key(root, "layer_types"), *e;
		if (lt && (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != n))
			return rq_errf(err, -EINVAL, "%s: \"layer_types\" must list %d layers", path, n);
		int i = 0;
		cJSON_ArrayForEach(e, lt) {
			const char *s = cJSON_IsString(e) ? e->valuestring : "";
			if (!strcmp(s, "full_attention"))
				types[i] = LG_FULL;
			else if (!strcmp(s, "sliding_attention"))
				types[i] = LG_SLIDING;
			else
				return rq_errf(err, -ENOTSUP, "%s: layer_types[%d] = \"%s\" is not supported "
				               "(full_attention, sliding_attention)", path, i, s);
			if (types[i] == LG_SLIDING && !use)
				return rq_errf(err, -EINVAL, "%s: layer_types[%d] is sliding_attention but "
				               "\"use_sliding_window\" is false (transformers has no window then)",
				               path, i);
			i++;
		}
		break;
	}
	c->sliding_window = 0;
	for (int i = 0; i < n; i++)
		if (types[i] == LG_SLIDING) {
			if (win < 1)
				return rq_errf(err, -EINVAL, "%s: layer %d slides but \"sliding_window\" is not a "
				               "positive number", path, i);
			c->sliding_window = (int)win;
		}
	return 0;
}

/* Which layers are MoE, and the MoE sizes. */
static int moe_plan(const cJSON *root, const struct family *f, struct lg_config *c, int *moe,
                    const char *path, struct rq_err *err)
{
	int n = c->n_layers, rc;
	long v, step = 1;
	for (int i = 0; i < n; i++)
		moe[i] = 0;
	if (f->moe == MOE_NONE)
		return 0;
	if ((rc = cfg_int(root, f->experts_key, 0, f->experts_def, 0, 1 << 16, &v, path, err)))
		return rc;
	c->n_experts = (int)v;
	if ((rc = cfg_int(root, "num_experts_per_tok", 0, f->topk_def, 1, 1 << 16, &v, path, err)))
		return rc;
	c->top_k = (int)v;
	if ((rc = cfg_int(root, f->width_key, 0, f->width_def, 1, 1 << 24, &v, path, err)))
		return rc;
	c->moe_inter = (int)v;
	c->shared_inter = 0;
	if (f->shared_key) {
		if ((rc = cfg_int(root, f->shared_key, 0, f->shared_def, 0, 1 << 24, &v, path, err)))
			return rc;
		c->shared_inter = (int)v;
	}
	c->norm_topk = 1;
	if (f->norm_key && (rc = cfg_bool(root, f->norm_key, 0, &c->norm_topk, path, err)))
		return rc;
	c->routed_scale = 1.0f;
	if (f->moe == MOE_ALL) {
		for (int i = 0; i < n; i++)
			moe[i] = c->n_experts > 0;
	} else {
		/* sparse iff i not in mlp_only_layers, num_experts > 0 and (i + 1) % step == 0 */
		if ((rc = cfg_int(root, "decoder_sparse_step", 0, 1, 1, 1 << 20, &step, path, err)))
			return rc;
		for (int i = 0; i < n; i++)
			moe[i] = c->n_experts > 0 && (i + 1) % step == 0;
		const cJSON *only = cfg_key(root, "mlp_only_layers"), *e;
		if (only && !cJSON_IsArray(only))
			return rq_errf(err, -EINVAL, "%s: \"mlp_only_layers\" is not a list", path);
		cJSON_ArrayForEach(e, only) {
			if (!cJSON_IsNumber(e) || e->valuedouble != (int)e->valuedouble)
				return rq_errf(err, -EINVAL, "%s: \"mlp_only_layers\" holds a non-integer", path);
			int i = (int)e->valuedouble;
			if (i >= 0 && i < n)
				moe[i] = 0;
		}
	}
	for (int i = 0; i < n; i++)
		if (moe[i] && c->top_k > c->n_experts)
			return rq_errf(err, -EINVAL, "%s: num_experts_per_tok %d > %s %d", path, c->top_k,
			               f->experts_key, c->n_experts);
	return 0;
}

/* Biases from the family's keys. */
static int bias_plan(const cJSON *root, const struct family *f, struct lg_config *c,
                     const char *path, struct rq_err *err)
{
	int b = f->bias_def, rc;
	if (f->bias_key && (rc = cfg_bool(root, f->bias_key, f->bias_def, &b, path, err)))
		return rc;
	c->qkv_bias = b;
	c->o_bias = b && f->bias_o;
	c->mlp_bias = 0;
	if (f->mlp_bias_key && (rc = cfg_bool(root, f->mlp_bias_key, 0, &c->mlp_bias, path, err)))
		return rc;
	return 0;
}

static int hf(const cJSON *root, const struct family *f, const char *path, struct lg_config *c,
              enum lg_attn_type *types, int *heads, int *moe, struct rq_err *err)
{
	long v = 0;
	double d = 0;
	int rc;
#define INT(k, req, def, lo, hi, dst) \
	do { if ((rc = cfg_int(root, k, req, def, lo, hi, &v, path, err))) return rc; dst = (int)v; } while (0)
	INT("hidden_size", 1, 0, 1, 1 << 20, c->hidden);
	INT("num_hidden_layers", 1, 0, 1, 4096, c->n_layers);
	INT("vocab_size", 1, 0, 1, 1 << 26, c->vocab);
	INT("num_attention_heads", 1, 0, 1, 4096, c->n_heads_max);
	INT("num_key_value_heads", 0, c->n_heads_max, 1, 4096, c->n_kv_heads);
	INT("head_dim", 0, f->head_dim ? f->head_dim : c->hidden / c->n_heads_max, 1, 1 << 16, c->head_dim);
	INT("intermediate_size", 1, 0, 1, 1 << 24, c->inter);
	INT("bos_token_id", 0, -1, -1, 1 << 26, c->bos);
	INT("pad_token_id", 0, -1, -1, 1 << 26, c->pad);
#undef INT
	if ((rc = cfg_int(root, "max_position_embeddings", 0, f->max_pos, 1, 1L << 40, &v, path, err)))
		return rc;
	c->max_pos = v;
	if ((rc = cfg_num(root, "rms_norm_eps", 0, f->eps, &d, path, err)))
		return rc;
	c->eps = (float)d;
	if ((rc = cfg_bool(root, "tie_word_embeddings", 0, &c->tie_embeddings, path, err)))
		return rc;
	c->n_eos = 0;
	if ((rc = cfg_eos(root, c->eos, &c->n_eos, path, err)) ||
	    (rc = refuse_switches(root, path, err)) || (rc = bias_plan(root, f, c, path, err)))
		return rc;
	if (c->n_heads_max % c->n_kv_heads)
		return rq_errf(err, -EINVAL, "%s: num_attention_heads %d is not a multiple of "
		               "num_key_value_heads %d", path, c->n_heads_max, c->n_kv_heads);
	c->gate = LG_GATE_NONE;
	c->routed_scale = 1.0f;
	for (int i = 0; i < c->n_layers; i++)
		heads[i] = c->n_heads_max;
	if ((rc = window_plan(root, f, c, types, path, err)) || (rc = moe_plan(root, f, c, moe, path, err)))
		return rc;
	/* one rope for every layer: rope_parameters (transformers 5), else the
	 * legacy rope_scaling with a top-level rope_theta; sliding layers share it */
	const cJSON *rp = cfg_key(root, "rope_parameters");
	if (!rp)
		rp = cfg_key(root, "rope_scaling");
	if (rp && !cJSON_IsObject(rp))
		return rq_errf(err, -EINVAL, "%s: \"%s\" is not an object", path,
		               cfg_key(root, "rope_parameters") ? "rope_parameters" : "rope_scaling");
	if (rp && (cfg_key(rp, "full_attention") || cfg_key(rp, "sliding_attention")))
		return rq_errf(err, -ENOTSUP, "%s: rope_parameters per layer type is not supported for "
		               "model_type %s (one dict for all layers)", path, f->a.model_type);
	cJSON *empty = rp ? NULL : cJSON_CreateObject();
	const cJSON *p = rp ? rp : empty;
	rc = lg_rope_init(&c->rope[LG_FULL], p, p, root, c->head_dim, c->max_pos, f->theta,
	                  !rp ? "rope (no rope_parameters)" : cfg_key(root, "rope_parameters") ?
	                  "rope_parameters" : "rope_scaling",
	                  path, err);
	cJSON_Delete(empty);
	if (rc)
		return rc;
	c->rope[LG_SLIDING] = c->rope[LG_FULL];
	return 0;
}
