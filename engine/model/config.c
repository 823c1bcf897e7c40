/* config.c — config.json (Laguna's reader, quantization_config) and
 * generation_config.json. The family dispatch (lg_config_parse) and the
 * other families' readers are arch.c, above this file.
 *
 * Laguna:
 * The defaults are transformers' LagunaConfig's; the keys only vLLM knows
 * (mlp_only_layers, decoder_sparse_step, flat rope_parameters with
 * swa_rope_parameters, top-level partial_rotary_factor, norm_topk_prob,
 * moe_router_score_func, qkv_bias, swa_attention_sink_enabled) are honoured
 * or refused the way vLLM reads them. Every refusal names the key. */
#include "engine/model/model.h"
#include "engine/model/cfg_int.h"
#include "base/err.h"
#include "st/jcheck.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
 *
 * input_activations (cfg_quant_acts): what vLLM computes, the engine computes
 * (the rule: kernels/ek_actq_rule.h; applied in forward*.c):
 *   nvfp4-pack-quantized  float, 4 bits, tensor_group, group 16, dynamic
 *                         "local" (W4A4): NVFP4 inputs with the module's static
 *                         input_global_scale
 *   float-quantized       float, 8 bits, strategy token, dynamic (FP8_DYNAMIC):
 *                         FP8 per-token inputs
 * Other activation schemes (static per-tensor FP8 with input_scale, INT8
 * activations of pack-quantized groups) are not computed: those Linears run
 * on binary32 activations (A16) as before. */

static int check_weights(const cJSON *w, const char *fmt, const char *gname, const char *path,
                         struct rq_err *err)
{
	double bits = 0, gsz = 0;
	const char *type = cfg_str(w, "type");
	const char *strat = cfg_str(w, "strategy");
	int rc;
	if ((rc = cfg_num(w, "num_bits", 0, 0, &bits, path, err)))
		return rc;
	const cJSON *gj = cfg_key(w, "group_size");
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

int cfg_check_quant(const cJSON *q, const char *path, struct rq_err *err)
{
	if (!q)
		return 0;
	const char *qm = cfg_str(q, "quant_method");
	if (qm && strcmp(qm, "compressed-tensors"))
		return rq_errf(err, -ENOTSUP, "%s: quantization_config.quant_method \"%s\" is not supported "
		               "(compressed-tensors only)", path, qm);
	static const char *const refused[] = {"transform_config", "transforms", "rotations"};
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		const cJSON *t = cfg_key(q, refused[i]);
		/* compressed-tensors writes "transform_config": {} when there is none */
		if (t && !((cJSON_IsObject(t) || cJSON_IsArray(t)) && !cJSON_GetArraySize(t)) &&
		    !cJSON_IsFalse(t))
			return rq_errf(err, -ENOTSUP, "%s: quantization_config.%s (a transform/rotation) is not "
			               "supported by this engine", path, refused[i]);
	}
	static const char *const formats[] = {"nvfp4-pack-quantized", "float-quantized",
	                                      "naive-quantized", "pack-quantized"};
	const char *top_fmt = cfg_str(q, "format");
	if (top_fmt && !strcmp(top_fmt, "mixed-precision"))
		top_fmt = NULL;
	const cJSON *groups = cfg_key(q, "config_groups"), *g;
	cJSON_ArrayForEach(g, groups) {
		const char *gname = g->string ? g->string : "?";
		const char *fmt = cfg_str(g, "format");
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
		const cJSON *w = cfg_key(g, "weights");
		int rc;
		if (w && cJSON_IsObject(w) && (rc = check_weights(w, fmt, gname, path, err)))
			return rc;
	}
	return 0;
}

/* A group's input_activations (NULL or null: none). *nv / *fp8 set to 1 when
 * the group asks for NVFP4 / FP8-per-token inputs; other schemes leave both 0
 * (A16, see above); an NVFP4 group asking for anything but W4A4 is refused. */
static int group_act(const cJSON *ia, const char *fmt, const char *gname, const char *path,
                     int *nv, int *fp8, struct rq_err *err)
{
	*nv = *fp8 = 0;
	if (!ia || !cJSON_IsObject(ia))
		return 0;
	double bits = 0, gsz = 0;
	int rc;
	if ((rc = cfg_num(ia, "num_bits", 0, 0, &bits, path, err)))
		return rc;
	const cJSON *gj = cfg_key(ia, "group_size"), *dyn = cfg_key(ia, "dynamic");
	if (gj && cJSON_IsNumber(gj))
		gsz = gj->valuedouble;
	const char *type = cfg_str(ia, "type"), *strat = cfg_str(ia, "strategy");
	if (!strcmp(fmt, "nvfp4-pack-quantized")) {
		if (bits != 4 || gsz != 16 || (type && strcmp(type, "float")) || !strat ||
		    strcmp(strat, "tensor_group") || !cJSON_IsString(dyn) || strcmp(dyn->valuestring, "local"))
			return rq_errf(err, -ENOTSUP, "%s: quantization_config group \"%s\": input_activations "
			               "must be NVFP4 (4-bit float, tensor_group, group 16, dynamic \"local\" "
			               "with a static input_global_scale) or null (NVFP4A16); this engine "
			               "computes no other activation scheme for NVFP4 weights", path, gname);
		*nv = 1;
		return 0;
	}
	if (!strcmp(fmt, "float-quantized") || !strcmp(fmt, "naive-quantized"))
		*fp8 = (!bits || bits == 8) && (!type || !strcmp(type, "float")) && strat &&
		       !strcmp(strat, "token") && cJSON_IsTrue(dyn);
	return 0;
}

/* quantization_config's input_activations into c->act_nvfp4 / act_fp8 (see
 * struct lg_config). Mixed FP8 groups (per-token inputs in one, none in
 * another) are refused: the weights cannot tell their Linears apart. */
int cfg_quant_acts(const cJSON *q, struct lg_config *c, const char *path, struct rq_err *err)
{
	int nv_a4 = 0, nv_a16 = 0, f8_tok = 0, f8_other = 0, rc;
	const char *tok_group = NULL, *other_group = NULL;
	c->act_nvfp4 = c->act_fp8 = 0;
	if (!q)
		return 0;
	const char *top_fmt = cfg_str(q, "format");
	if (top_fmt && !strcmp(top_fmt, "mixed-precision"))
		top_fmt = NULL;
	const cJSON *g;
	cJSON_ArrayForEach(g, cfg_key(q, "config_groups")) {
		const char *gname = g->string ? g->string : "?";
		const char *fmt = cfg_str(g, "format");
		if (!fmt)
			fmt = top_fmt ? top_fmt : "nvfp4-pack-quantized";
		int nv, f8;
		if ((rc = group_act(cfg_key(g, "input_activations"), fmt, gname, path, &nv, &f8, err)))
			return rc;
		if (!strcmp(fmt, "nvfp4-pack-quantized")) {
			nv_a4 += nv;
			nv_a16 += !nv;
		} else if (!strcmp(fmt, "float-quantized") || !strcmp(fmt, "naive-quantized")) {
			if (f8) {
				f8_tok++;
				tok_group = gname;
			} else {
				f8_other++;
				other_group = gname;
			}
		}
	}
	if (f8_tok && f8_other)
		return rq_errf(err, -ENOTSUP, "%s: quantization_config groups \"%s\" and \"%s\" both have "
		               "FP8 weights, one with dynamic per-token FP8 input_activations and one "
		               "without; this engine cannot tell their Linears apart (serve with vLLM)",
		               path, tok_group, other_group);
	c->act_nvfp4 = nv_a4 ? (nv_a16 ? 2 : 1) : 0;
	c->act_fp8 = f8_tok ? 1 : 0;
	return 0;
}

/* The per-layer MLP plan: mlp_layer_types (transformers) and/or
 * mlp_only_layers + decoder_sparse_step (vLLM); they must agree. */
static int mlp_plan(const cJSON *root, int n, int n_experts, int *moe, const char *path,
                    struct rq_err *err)
{
	long step;
	int rc = cfg_int(root, "decoder_sparse_step", 0, 1, 0, 1 << 20, &step, path, err);
	if (rc)
		return rc;
	if (step != 1)
		return rq_errf(err, -ENOTSUP, "%s: \"decoder_sparse_step\" = %ld is not supported (1 only)",
		               path, step);
	const cJSON *types = cfg_key(root, "mlp_layer_types"), *only = cfg_key(root, "mlp_only_layers"), *e;
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
	do { if ((rc = cfg_int(root, k, req, def, lo, hi, &v, path, err))) return rc; dst = (int)v; } while (0)
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
	if ((rc = cfg_int(root, "max_position_embeddings", 0, 131072, 1, 1L << 40, &v, path, err)))
		return rc;
	c.max_pos = v;
	if ((rc = cfg_num(root, "rms_norm_eps", 0, 1e-6, &d, path, err)))
		return rc;
	c.eps = (float)d;
	if ((rc = cfg_num(root, "moe_routed_scaling_factor", 0, 1.0, &d, path, err)))
		return rc;
	c.routed_scale = (float)d;
	if ((rc = cfg_num(root, "moe_router_logit_softcapping", 0, 0.0, &d, path, err)))
		return rc;
	if (d < 0)
		return rq_errf(err, -EINVAL, "%s: moe_router_logit_softcapping %g < 0", path, d);
	c.router_softcap = (float)d;
	if ((rc = cfg_bool(root, "norm_topk_prob", 1, &c.norm_topk, path, err)) ||
	    (rc = cfg_bool(root, "tie_word_embeddings", 0, &c.tie_embeddings, path, err)))
		return rc;
	c.n_eos = 0;
	if ((rc = cfg_eos(root, c.eos, &c.n_eos, path, err)))
		return rc;
	*cp = c;
	return 0;
}

/* Features this engine does not compute: refused by name. */
static int refuse_features(const cJSON *root, const char *path, struct rq_err *err)
{
	int rc, b = 0;
	const char *act = cfg_str(root, "hidden_act");
	if (act && strcmp(act, "silu"))
		return rq_errf(err, -ENOTSUP, "%s: hidden_act \"%s\" is not supported (silu only)", path, act);
	if ((rc = cfg_refuse_true(root, "attention_bias", path, err)) ||
	    (rc = cfg_refuse_true(root, "qkv_bias", path, err)) ||
	    (rc = cfg_refuse_true(root, "swa_attention_sink_enabled", path, err)) ||
	    (rc = cfg_refuse_true(root, "moe_apply_router_weight_on_input", path, err)))
		return rc;
	const char *sf = cfg_str(root, "moe_router_score_func");
	if (sf && strcmp(sf, "sigmoid")) {
		return rq_errf(err, -ENOTSUP, "%s: moe_router_score_func \"%s\" is not supported (sigmoid only; "
		               "transformers has no other)", path, sf);
	}
	if ((rc = cfg_bool(root, "moe_router_use_sigmoid", 1, &b, path, err)))
		return rc;
	if (!b)
		return rq_errf(err, -ENOTSUP, "%s: moe_router_use_sigmoid false is not supported", path);
	if (cfg_key(root, "rope_scaling"))
		return rq_errf(err, -ENOTSUP, "%s: legacy \"rope_scaling\" is not supported (use rope_parameters)",
		               path);
	if ((rc = cfg_check_quant(cfg_key(root, "quantization_config"), path, err)))
		return rc;
	return 0;
}

/* The attention output gate: true / "per-head" one per head, "per-element"
 * one per channel, false none. */
static int parse_gate(const cJSON *root, struct lg_config *c, const char *path, struct rq_err *err)
{
	const cJSON *gt = cfg_key(root, "gating");
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
	const cJSON *lt = cfg_key(root, "layer_types"), *e;
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
	const cJSON *hl = cfg_key(root, "num_attention_heads_per_layer");
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
	const cJSON *rp = cfg_key(root, "rope_parameters");
	if (rp && !cJSON_IsObject(rp))
		return rq_errf(err, -EINVAL, "%s: \"rope_parameters\" is not an object", path);
	int nested = rp && (cfg_key(rp, "full_attention") || cfg_key(rp, "sliding_attention"));
	static const char *const tname[2] = {"full_attention", "sliding_attention"};
	cJSON *empty = cJSON_CreateObject();
	for (int t = 0; t < 2; t++) {
		if (!used[t])
			continue;
		const cJSON *p, *top;
		if (nested) {
			p = cfg_key(rp, tname[t]);
			top = rp;
			if (!p) {
				cJSON_Delete(empty);
				return rq_errf(err, -EINVAL, "%s: rope_parameters has no \"%s\" entry", path, tname[t]);
			}
		} else {
			const cJSON *swa = cfg_key(root, "swa_rope_parameters");
			p = t == LG_SLIDING && swa ? swa : rp ? rp : empty;
			top = p;
		}
		/* for messages: where the dict is */
		char where[64];
		snprintf(where, sizeof where, "%s%s%s", nested ? "rope_parameters." : "",
		         nested ? tname[t] : p == empty ? "rope (no rope_parameters)" :
		         p == rp ? "rope_parameters" : "swa_rope_parameters",
		         !nested && t == LG_SLIDING && p == empty ? " of sliding layers" : "");
		rc = lg_rope_init(&c->rope[t], p, top, root, c->head_dim, c->max_pos, 10000.0, where,
		                  path, err);
		if (rc) {
			cJSON_Delete(empty);
			return rc;
		}
	}
	cJSON_Delete(empty);
	return 0;
}

int lg_laguna_parse(const cJSON *root, const struct lg_arch *a, const char *path,
                    struct lg_config *c, enum lg_attn_type *types, int *heads, int *moe,
                    struct rq_err *err)
{
	int used[2], rc;
	(void)a;
	if ((rc = parse_sizes(root, c, path, err)) || (rc = refuse_features(root, path, err)) ||
	    (rc = parse_gate(root, c, path, err)) ||
	    (rc = layer_plan(root, c, types, heads, moe, used, path, err)) ||
	    (rc = rope_plan(root, c, used, path, err)))
		return rc;
	return 0;
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
	if ((rc = cfg_bool(root, "do_sample", 0, &g.do_sample, path, err)))
		goto out;
	if ((rc = cfg_num(root, "temperature", 0, 1.0, &d, path, err)))
		goto out;
	g.temperature = (float)d;
	if ((rc = cfg_int(root, "top_k", 0, 50, 0, 1 << 26, &v, path, err)))
		goto out;
	g.top_k = (int)v;
	if ((rc = cfg_num(root, "top_p", 0, 1.0, &d, path, err)))
		goto out;
	g.top_p = (float)d;
	if ((rc = cfg_eos(root, g.eos, &g.n_eos, path, err)))
		goto out;
	/* A generation_config that sets sampling parameters without do_sample
	 * is a serving default (vLLM applies them): sample. */
	if (!cfg_key(root, "do_sample") && (cfg_key(root, "temperature") || cfg_key(root, "top_k") || cfg_key(root, "top_p")))
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

