/* mkckpt_config.c — the JSON files of a synthetic Laguna checkpoint, written
 * byte for byte as transformers / huggingface_hub write them:
 * json.dumps(obj, indent=2, sort_keys=True) + "\n", ensure_ascii, floats in
 * Python's repr (1e-06, 500000.0, 1.4852030263919618), ints as ints.
 *
 * config.json follows Laguna S 2.1's schema (transformers' LagunaConfig plus
 * the keys vLLM reads: mlp_only_layers, decoder_sparse_step, norm_topk_prob,
 * moe_router_score_func, qkv_bias) and carries compressed-tensors'
 * quantization_config for NVFP4 with an ignore list as compressed-tensors
 * writes it: every unquantized Linear by exact name, then the rule that keeps
 * the routed experts of layers A..B in BF16 (the 2026-08-01 revision). */
#include "tools/mkckpt/mkckpt.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int finish(cJSON *root, struct jt_buf *out)
{
	if (!root)
		return -ENOMEM;
	jt_dump_python(out, root, 0);   /* json.dumps(indent=2, sort_keys=True) */
	jt_put(out, "\n", 1);
	cJSON_Delete(root);
	return out->oom ? -ENOMEM : 0;
}

/* ---- the files ---------------------------------------------------------- */

static void add_float(cJSON *o, const char *key, double v)
{
	char t[32];
	jt_py_float(t, v);
	cJSON_AddRawToObject(o, key, t);
}

static cJSON *int_array(const int *v, int n)
{
	return cJSON_CreateIntArray(v, n);
}

/* The regex of the rule: ^model\.layers\.<A..B>\.mlp\.experts(\..*)?$ with
 * 40..47 written 4[0-7] as poolside wrote it. */
static void rule_text(int a, int b, char *out, size_t cap)
{
	char num[100];
	if (a == b) {
		snprintf(num, sizeof num, "%d", a);
	} else if (a / 10 == b / 10) {
		if (a >= 10)
			snprintf(num, sizeof num, "%d[%d-%d]", a / 10, a % 10, b % 10);
		else
			snprintf(num, sizeof num, "[%d-%d]", a, b);
	} else {
		size_t k = (size_t)snprintf(num, sizeof num, "(?:");
		for (int l = a; l <= b && k < sizeof num - 8; l++)
			k += (size_t)snprintf(num + k, sizeof num - k, "%s%d", l > a ? "|" : "", l);
		snprintf(num + k, sizeof num - k, ")");
	}
	snprintf(out, cap, "re:^model\\.layers\\.%s\\.mlp\\.experts(\\..*)?$", num);
}

static cJSON *quant_args(int weights)
{
	cJSON *q = cJSON_CreateObject();
	cJSON_AddNullToObject(q, "actorder");
	cJSON_AddNullToObject(q, "block_structure");
	if (weights)
		cJSON_AddFalseToObject(q, "dynamic");
	else
		cJSON_AddStringToObject(q, "dynamic", "local");
	cJSON_AddNumberToObject(q, "group_size", 16);
	cJSON_AddNumberToObject(q, "num_bits", 4);
	cJSON_AddStringToObject(q, "observer", weights ? "memoryless_minmax" : "static_minmax");
	cJSON_AddItemToObject(q, "observer_kwargs", cJSON_CreateObject());
	cJSON_AddStringToObject(q, "scale_dtype", "torch.float8_e4m3fn");
	cJSON_AddStringToObject(q, "strategy", "tensor_group");
	cJSON_AddTrueToObject(q, "symmetric");
	cJSON_AddStringToObject(q, "type", "float");
	cJSON_AddNullToObject(q, "zp_dtype");
	return q;
}

static cJSON *quantization_config(const struct mk_model *m)
{
	cJSON *qc = cJSON_CreateObject();
	cJSON *groups = cJSON_AddObjectToObject(qc, "config_groups");
	cJSON *g0 = cJSON_AddObjectToObject(groups, "group_0");
	cJSON_AddStringToObject(g0, "format", "nvfp4-pack-quantized");
	cJSON_AddItemToObject(g0, "input_activations", quant_args(0));
	cJSON_AddNullToObject(g0, "output_activations");
	cJSON *targets = cJSON_AddArrayToObject(g0, "targets");
	cJSON_AddItemToArray(targets, cJSON_CreateString("Linear"));
	cJSON_AddItemToObject(g0, "weights", quant_args(1));
	cJSON_AddStringToObject(qc, "format", "nvfp4-pack-quantized");
	cJSON_AddNullToObject(qc, "global_compression_ratio");

	/* every Linear that is not quantized, in module order, then lm_head */
	cJSON *ign = cJSON_AddArrayToObject(qc, "ignore");
	char name[200];
	static const char *attn[] = {"q_proj", "k_proj", "v_proj", "o_proj", "g_proj"};
	static const char *mlp[] = {"gate_proj", "up_proj", "down_proj"};
	for (int l = 0; l < m->layers; l++) {
		for (int i = 0; i < 5; i++) {
			snprintf(name, sizeof name, "model.layers.%d.self_attn.%s", l, attn[i]);
			cJSON_AddItemToArray(ign, cJSON_CreateString(name));
		}
		if (l == 0) {
			for (int i = 0; i < 3; i++) {
				snprintf(name, sizeof name, "model.layers.0.mlp.%s", mlp[i]);
				cJSON_AddItemToArray(ign, cJSON_CreateString(name));
			}
			continue;
		}
		snprintf(name, sizeof name, "model.layers.%d.mlp.gate", l);
		cJSON_AddItemToArray(ign, cJSON_CreateString(name));
		for (int i = 0; i < 3; i++) {
			snprintf(name, sizeof name, "model.layers.%d.mlp.shared_expert.%s", l, mlp[i]);
			cJSON_AddItemToArray(ign, cJSON_CreateString(name));
		}
	}
	cJSON_AddItemToArray(ign, cJSON_CreateString("lm_head"));
	if (m->with_rule) {
		rule_text(m->bf16_a, m->bf16_b, name, sizeof name);
		cJSON_AddItemToArray(ign, cJSON_CreateString(name));
	}
	cJSON_AddNullToObject(qc, "kv_cache_scheme");
	cJSON_AddStringToObject(qc, "quant_method", "compressed-tensors");
	cJSON_AddStringToObject(qc, "quantization_status", "compressed");
	cJSON_AddItemToObject(qc, "sparsity_config", cJSON_CreateObject());
	cJSON_AddItemToObject(qc, "transform_config", cJSON_CreateObject());
	cJSON_AddStringToObject(qc, "version", "0.20.1");
	return qc;
}

int mk_config_json(const struct mk_model *m, struct jt_buf *out)
{
	cJSON *c = cJSON_CreateObject();
	if (!c)
		return -ENOMEM;
	cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
	cJSON_AddItemToArray(arch, cJSON_CreateString("LagunaForCausalLM"));
	cJSON_AddFalseToObject(c, "attention_bias");
	add_float(c, "attention_dropout", 0.0);
	cJSON_AddNumberToObject(c, "bos_token_id", 2);
	cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
	static const int eos[] = {2, 24};
	cJSON_AddItemToObject(c, "eos_token_id", int_array(eos, 2));
	cJSON_AddTrueToObject(c, "gating");
	cJSON_AddNumberToObject(c, "head_dim", m->head_dim);
	cJSON_AddStringToObject(c, "hidden_act", "silu");
	cJSON_AddNumberToObject(c, "hidden_size", m->hidden);
	add_float(c, "initializer_range", 0.02);
	cJSON_AddNumberToObject(c, "intermediate_size", m->dense_w);
	cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
	int *heads = malloc(sizeof(int) * (size_t)m->layers);
	if (!heads) {
		cJSON_Delete(c);
		return -ENOMEM;
	}
	for (int l = 0; l < m->layers; l++) {
		cJSON_AddItemToArray(lt, cJSON_CreateString(mk_full_layer(l) ? "full_attention"
		                                                               : "sliding_attention"));
		heads[l] = mk_full_layer(l) ? m->heads_full : m->heads_sliding;
	}
	cJSON_AddNumberToObject(c, "max_position_embeddings", 1048576);
	static const int zero[] = {0};
	cJSON_AddItemToObject(c, "mlp_only_layers", int_array(zero, 1));
	cJSON_AddStringToObject(c, "model_type", "laguna");
	cJSON_AddFalseToObject(c, "moe_apply_router_weight_on_input");
	cJSON_AddNumberToObject(c, "moe_intermediate_size", m->expert_w);
	add_float(c, "moe_routed_scaling_factor", 2.5);
	add_float(c, "moe_router_logit_softcapping", 0.0);
	cJSON_AddStringToObject(c, "moe_router_score_func", "sigmoid");
	cJSON_AddTrueToObject(c, "norm_topk_prob");
	cJSON_AddNumberToObject(c, "num_attention_heads", m->heads_full);
	cJSON_AddItemToObject(c, "num_attention_heads_per_layer", int_array(heads, m->layers));
	free(heads);
	cJSON_AddNumberToObject(c, "num_experts", m->experts);
	cJSON_AddNumberToObject(c, "num_experts_per_tok", m->top_k);
	cJSON_AddNumberToObject(c, "num_hidden_layers", m->layers);
	cJSON_AddNumberToObject(c, "num_key_value_heads", m->kv_heads);
	cJSON_AddFalseToObject(c, "output_router_logits");
	cJSON_AddNumberToObject(c, "pad_token_id", 9);
	cJSON_AddFalseToObject(c, "qkv_bias");
	if (m->quantized)
		cJSON_AddItemToObject(c, "quantization_config", quantization_config(m));
	add_float(c, "rms_norm_eps", 1e-6);
	cJSON *rope = cJSON_AddObjectToObject(c, "rope_parameters");
	cJSON *full = cJSON_AddObjectToObject(rope, "full_attention");
	add_float(full, "attention_factor", 0.1 * log(128.0) + 1.0);   /* YaRN's default mscale */
	add_float(full, "beta_fast", 32.0);
	add_float(full, "beta_slow", 1.0);
	add_float(full, "factor", 128.0);
	cJSON_AddNumberToObject(full, "original_max_position_embeddings", 8192);
	add_float(full, "partial_rotary_factor", 0.5);
	add_float(full, "rope_theta", 500000.0);
	cJSON_AddStringToObject(full, "rope_type", "yarn");
	cJSON *swa = cJSON_AddObjectToObject(rope, "sliding_attention");
	add_float(swa, "partial_rotary_factor", 1.0);
	add_float(swa, "rope_theta", 10000.0);
	cJSON_AddStringToObject(swa, "rope_type", "default");
	add_float(c, "router_aux_loss_coef", 0.001);
	cJSON_AddNumberToObject(c, "shared_expert_intermediate_size", m->shared_w);
	cJSON_AddNumberToObject(c, "sliding_window", m->sliding_window);
	cJSON_AddFalseToObject(c, "swa_attention_sink_enabled");
	cJSON_AddFalseToObject(c, "tie_word_embeddings");
	cJSON_AddStringToObject(c, "torch_dtype", "bfloat16");
	cJSON_AddStringToObject(c, "transformers_version", "5.24.0");
	cJSON_AddTrueToObject(c, "use_cache");
	cJSON_AddNumberToObject(c, "vocab_size", m->vocab);
	return finish(c, out);
}

int mk_generation_config_json(struct jt_buf *out)
{
	cJSON *g = cJSON_CreateObject();
	if (!g)
		return -ENOMEM;
	cJSON_AddNumberToObject(g, "bos_token_id", 2);
	cJSON_AddTrueToObject(g, "do_sample");
	static const int eos[] = {2, 24};
	cJSON_AddItemToObject(g, "eos_token_id", int_array(eos, 2));
	cJSON_AddNumberToObject(g, "pad_token_id", 9);
	add_float(g, "temperature", 1.0);
	cJSON_AddNumberToObject(g, "top_k", 20);
	add_float(g, "top_p", 1.0);
	cJSON_AddStringToObject(g, "transformers_version", "5.24.0");
	return finish(g, out);
}

int mk_index_json(const char *const *names, const int *shard, size_t n,
                  const char *const *files, uint64_t total_size, struct jt_buf *out)
{
	cJSON *root = cJSON_CreateObject();
	if (!root)
		return -ENOMEM;
	cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
	char t[32];
	snprintf(t, sizeof t, "%llu", (unsigned long long)total_size);
	cJSON_AddRawToObject(meta, "total_size", t);   /* exact beyond 2^53 */
	cJSON *wm = cJSON_AddObjectToObject(root, "weight_map");
	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToObject(wm, names[i], cJSON_CreateString(files[shard[i]]));
	return finish(root, out);
}
