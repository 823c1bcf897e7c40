/* bench_synth.c — synthetic Laguna models for the engine benchmarks and the
 * memory-plan test: config.json's shapes, no weights (bench_synth.h). */
#include "tools/bench/bench_synth.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct lg_linear lin(int kind, int rows, int cols)
{
	return (struct lg_linear){.kind = kind, .rows = rows, .cols = cols, .global_scale = 200.0f};
}

static float *filled(size_t n, float v, int *fail)
{
	float *p = malloc(sizeof(float) * (n ? n : 1));
	if (!p)
		*fail = 1;
	for (size_t i = 0; p && i < n; i++)
		p[i] = v;
	return p;
}

int bench_synth_model(const char *config_json, int nvfp4_experts, struct lg_model **out,
                      struct rq_err *err)
{
	struct lg_model *m = calloc(1, sizeof *m);
	enum lg_attn_type *types = NULL;
	int *heads = NULL, *moe = NULL, fail = 0;
	if (!m)
		return rq_errf(err, -ENOMEM, "out of memory");
	int rc = lg_config_parse(config_json, "(synthetic config)", &m->cfg, &types, &heads, &moe, err);
	if (rc) {
		free(m);
		return rc;
	}
	const struct lg_config *c = &m->cfg;
	int H = c->hidden, hd = c->head_dim, nkv = c->n_kv_heads, E = c->n_experts;
	int ek = nvfp4_experts ? LG_W_NVFP4 : LG_W_BF16;
	m->layers = calloc(c->n_layers, sizeof *m->layers);
	m->final_norm = filled(H, 1.0f, &fail);
	m->lm_head = lin(LG_W_BF16, c->vocab, H);
	fail |= !m->layers;
	for (int i = 0; !fail && i < c->n_layers; i++) {
		struct lg_layer *L = &m->layers[i];
		int nh = heads[i];
		L->type = types[i];
		L->n_heads = nh;
		L->moe = moe[i];
		L->attn_norm = filled(H, 1.0f, &fail);
		L->mlp_norm = filled(H, 1.0f, &fail);
		L->q_norm = filled(hd, 1.0f, &fail);
		L->k_norm = filled(hd, 1.0f, &fail);
		L->q = lin(LG_W_BF16, nh * hd, H);
		L->k = L->v = lin(LG_W_BF16, nkv * hd, H);
		L->g = lin(LG_W_BF16, c->gate == LG_GATE_PER_ELEMENT ? nh * hd : nh, H);
		L->o = lin(LG_W_BF16, H, nh * hd);
		if (!L->moe) {
			L->gate = L->up = lin(LG_W_BF16, c->inter, H);
			L->down = lin(LG_W_BF16, H, c->inter);
			continue;
		}
		L->router = lin(LG_W_BF16, E, H);
		L->bias = filled(E, 0.0f, &fail);
		L->sg = L->su = lin(LG_W_BF16, c->shared_inter, H);
		L->sd = lin(LG_W_BF16, H, c->shared_inter);
		L->eg = calloc(E, sizeof *L->eg);
		L->eu = calloc(E, sizeof *L->eu);
		L->ed = calloc(E, sizeof *L->ed);
		fail |= !L->eg || !L->eu || !L->ed;
		for (int e = 0; !fail && e < E; e++) {
			L->eg[e] = L->eu[e] = lin(ek, c->moe_inter, H);
			L->ed[e] = lin(ek, H, c->moe_inter);
		}
	}
	free(types);
	free(heads);
	free(moe);
	if (fail) {
		bench_synth_free(m);
		return rq_errf(err, -ENOMEM, "out of memory");
	}
	*out = m;
	return 0;
}

void bench_synth_free(struct lg_model *m)
{
	if (!m)
		return;
	for (int i = 0; m->layers && i < m->cfg.n_layers; i++) {
		struct lg_layer *L = &m->layers[i];
		free(L->attn_norm);
		free(L->mlp_norm);
		free(L->q_norm);
		free(L->k_norm);
		free(L->bias);
		free(L->eg);
		free(L->eu);
		free(L->ed);
	}
	free(m->layers);
	free(m->final_norm);
	free(m);
}

/* config.json text of Laguna S 2.1 at `layers` depth (every 4th layer full)
 * with `experts` routed experts (top-10, or all when fewer). */
void bench_laguna_config(char *buf, size_t len, int layers, int experts)
{
	char types[8192] = "", heads[4096] = "";
	for (int l = 0; l < layers; l++) {
		int full = l % 4 == 0;
		snprintf(types + strlen(types), sizeof types - strlen(types), "%s\"%s\"", l ? "," : "",
		         full ? "full_attention" : "sliding_attention");
		snprintf(heads + strlen(heads), sizeof heads - strlen(heads), "%s%d", l ? "," : "",
		         full ? 48 : 72);
	}
	snprintf(buf, len,
	    "{\"architectures\":[\"LagunaForCausalLM\"],\"attention_bias\":false,\"bos_token_id\":2,"
	    "\"decoder_sparse_step\":1,\"eos_token_id\":[2,24],\"gating\":true,\"head_dim\":128,"
	    "\"hidden_act\":\"silu\",\"hidden_size\":3072,\"intermediate_size\":12288,"
	    "\"layer_types\":[%s],\"max_position_embeddings\":1048576,\"mlp_only_layers\":[0],"
	    "\"model_type\":\"laguna\",\"moe_intermediate_size\":1024,\"moe_routed_scaling_factor\":2.5,"
	    "\"moe_router_logit_softcapping\":0.0,\"moe_router_score_func\":\"sigmoid\","
	    "\"norm_topk_prob\":true,\"num_attention_heads\":48,\"num_attention_heads_per_layer\":[%s],"
	    "\"num_experts\":%d,\"num_experts_per_tok\":%d,\"num_hidden_layers\":%d,"
	    "\"num_key_value_heads\":8,\"pad_token_id\":9,\"qkv_bias\":false,\"rms_norm_eps\":1e-06,"
	    "\"rope_parameters\":{\"full_attention\":{\"attention_factor\":1.4852030263919618,"
	    "\"beta_fast\":32.0,\"beta_slow\":1.0,\"factor\":128.0,\"original_max_position_embeddings\":8192,"
	    "\"partial_rotary_factor\":0.5,\"rope_theta\":500000.0,\"rope_type\":\"yarn\"},"
	    "\"sliding_attention\":{\"partial_rotary_factor\":1.0,\"rope_theta\":10000.0,"
	    "\"rope_type\":\"default\"}},\"shared_expert_intermediate_size\":1024,\"sliding_window\":512,"
	    "\"swa_attention_sink_enabled\":false,\"tie_word_embeddings\":false,\"vocab_size\":100352}",
	    types, heads, experts, experts < 10 ? experts : 10, layers);
}
