/* test_arch.c — config.json of every family: transformers' defaults, the
 * per-layer plan (sliding window, dense/MoE layers), RoPE variants, and the
 * refusals that name the key (engine/model/arch.c, engine/model/rope.c).
 *
 * The expected defaults are those of transformers 5.x's configuration_*.py
 * (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, MixtralConfig,
 * Qwen2MoeConfig, Qwen3MoeConfig), written here as literals; the RoPE
 * frequencies are checked against formulas computed here in double
 * precision (linear: inv/factor; llama3: the three wavelength bands). */
#include "engine/model/model.h"
#include "base/err.h"
#include "tests/tap.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BASE "\"hidden_size\": 256, \"num_hidden_layers\": 4, \"vocab_size\": 1000, " \
             "\"num_attention_heads\": 4, \"intermediate_size\": 512"

struct parsed {
	int rc;
	struct lg_config c;
	enum lg_attn_type *types;
	int *heads, *moe;
	char msg[1100];
};

static struct parsed parse(const char *model_type, const char *extra)
{
	struct parsed p = {0};
	char js[2048];
	snprintf(js, sizeof js, "{\"model_type\": \"%s\", " BASE "%s%s}", model_type, *extra ? ", " : "",
	         extra);
	struct rq_err err = {0};
	p.rc = lg_config_parse(js, "config.json", &p.c, &p.types, &p.heads, &p.moe, &err);
	snprintf(p.msg, sizeof p.msg, "%s", err.msg);
	return p;
}

static void done(struct parsed *p)
{
	if (!p->rc) {
		free(p->types);
		free(p->heads);
		free(p->moe);
	}
}

static void check_defaults(void)
{
	struct parsed p = parse("llama", "");
	TAP_OK(!p.rc && p.c.n_kv_heads == 4 && p.c.head_dim == 64 && p.c.eps == 1e-6f && !p.c.qkv_bias &&
	       !p.c.o_bias && !p.c.mlp_bias && !p.c.tie_embeddings && !p.c.arch->qk_norm &&
	       p.c.rope[LG_FULL].theta == 10000 && p.c.max_pos == 2048 && p.types[3] == LG_FULL &&
	       p.c.gate == LG_GATE_NONE,
	       "llama defaults: kv heads = heads, head_dim = hidden/heads, eps 1e-6, no biases, theta 1e4, "
	       "max_pos 2048, full attention (%s)", p.msg);
	done(&p);
	p = parse("llama", "\"attention_bias\": true, \"mlp_bias\": true, \"tie_word_embeddings\": true");
	TAP_OK(!p.rc && p.c.qkv_bias && p.c.o_bias && p.c.mlp_bias && p.c.tie_embeddings,
	       "llama attention_bias covers q,k,v,o; mlp_bias; tied embeddings");
	done(&p);
	p = parse("mistral", "\"num_key_value_heads\": 2");
	TAP_OK(!p.rc && p.c.sliding_window == 4096 && p.types[0] == LG_SLIDING && p.types[3] == LG_SLIDING &&
	       p.c.max_pos == 131072,
	       "mistral: sliding_window defaults to 4096 on every layer, max_pos 131072 (%s)", p.msg);
	done(&p);
	p = parse("mistral", "\"sliding_window\": null");
	TAP_OK(!p.rc && p.types[0] == LG_FULL && p.types[3] == LG_FULL, "mistral: sliding_window null: full "
	       "attention (%s)", p.msg);
	done(&p);
	p = parse("qwen2", "");
	TAP_OK(!p.rc && p.c.qkv_bias && !p.c.o_bias && p.types[3] == LG_FULL && p.c.max_pos == 32768,
	       "qwen2: q/k/v bias always, o_proj none; no window without use_sliding_window (%s)", p.msg);
	done(&p);
	p = parse("qwen2", "\"use_sliding_window\": true, \"sliding_window\": 16, \"max_window_layers\": 2");
	TAP_OK(!p.rc && p.types[1] == LG_FULL && p.types[2] == LG_SLIDING && p.types[3] == LG_SLIDING &&
	       p.c.sliding_window == 16, "qwen2: use_sliding_window slides layers >= max_window_layers (%s)",
	       p.msg);
	done(&p);
	p = parse("qwen3", "");
	TAP_OK(!p.rc && p.c.head_dim == 128 && p.c.arch->qk_norm && !p.c.qkv_bias,
	       "qwen3: head_dim 128 by default, q/k norm, attention_bias false (%s)", p.msg);
	done(&p);
	p = parse("mixtral", "");
	TAP_OK(!p.rc && p.c.eps == 1e-5f && p.c.rope[LG_FULL].theta == 1e6 && p.c.n_experts == 8 &&
	       p.c.top_k == 2 && p.c.moe_inter == 512 && p.c.norm_topk && p.moe[0] && p.moe[3] &&
	       p.types[0] == LG_FULL && !strcmp(p.c.arch->moe_block, "block_sparse_moe") &&
	       !strcmp(p.c.arch->expert[1], "w3"),
	       "mixtral: eps 1e-5, theta 1e6, 8 experts top-2 of intermediate_size, renormalised, "
	       "every layer MoE, block_sparse_moe w1/w3/w2, no window (%s)", p.msg);
	done(&p);
	p = parse("qwen2_moe", "\"mlp_only_layers\": [0]");
	TAP_OK(!p.rc && p.c.n_experts == 60 && p.c.top_k == 4 && p.c.moe_inter == 1408 &&
	       p.c.shared_inter == 5632 && !p.c.norm_topk && p.c.qkv_bias && p.c.arch->shared_gate &&
	       !p.moe[0] && p.moe[1] && p.moe[3],
	       "qwen2_moe: 60 experts top-4, 1408 wide, shared 5632 with its gate, norm_topk_prob false, "
	       "qkv_bias true, mlp_only_layers dense (%s)", p.msg);
	done(&p);
	p = parse("qwen2_moe", "\"use_sliding_window\": true, \"sliding_window\": 8, \"max_window_layers\": 3");
	TAP_OK(!p.rc && p.types[0] == LG_SLIDING && p.types[1] == LG_FULL && p.types[2] == LG_SLIDING &&
	       p.types[3] == LG_FULL, "qwen2_moe: use_sliding_window slides even layers < max_window_layers "
	       "(%s)", p.msg);
	done(&p);
	p = parse("qwen3_moe", "\"decoder_sparse_step\": 2, \"norm_topk_prob\": true");
	TAP_OK(!p.rc && p.c.n_experts == 128 && p.c.top_k == 8 && p.c.moe_inter == 768 && !p.c.shared_inter &&
	       p.c.norm_topk && !p.moe[0] && p.moe[1] && !p.moe[2] && p.moe[3] && p.c.head_dim == 64 &&
	       p.c.arch->qk_norm,
	       "qwen3_moe: 128 experts top-8, 768 wide, decoder_sparse_step 2 -> layers 1, 3 MoE, head_dim "
	       "hidden/heads (%s)", p.msg);
	done(&p);
	p = parse("laguna", "\"num_key_value_heads\": 2, \"num_experts\": 4, \"num_experts_per_tok\": 2, "
	          "\"moe_intermediate_size\": 16");
	TAP_OK(!p.rc && p.c.arch->qk_norm && p.c.arch->router == LG_ROUTER_SIGMOID && p.c.gate == LG_GATE_PER_HEAD,
	       "laguna: q/k norm, sigmoid router, per-head output gate (%s)", p.msg);
	done(&p);
}

static void check_rope(void)
{
	/* linear: inv_freq / factor */
	struct parsed p = parse("llama", "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0}, "
	                        "\"rope_theta\": 500000.0");
	double worst = 0;
	for (int i = 0; !p.rc && i < 32; i++) {
		double want = pow(500000.0, -2.0 * i / 64) / 4;
		worst = fmax(worst, fabs(p.c.rope[LG_FULL].inv_freq[i] - want) / want);
	}
	TAP_OK(!p.rc && worst < 4e-7, "rope linear (legacy rope_scaling with type): inv_freq/4 within 4e-7 "
	       "(worst %.2g) %s", worst, p.msg);
	done(&p);
	/* llama3: wavelength bands of Llama 3.1 (factor 8, low 1, high 4, 8192) */
	p = parse("llama", "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, "
	          "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
	          "\"original_max_position_embeddings\": 8192}");
	worst = 0;
	int bands[3] = {0};
	for (int i = 0; !p.rc && i < 32; i++) {
		double inv = pow(500000.0, -2.0 * i / 64), wl = 2 * M_PI / inv, want;
		if (wl < 8192 / 4.0) {
			want = inv;
			bands[0]++;
		} else if (wl > 8192 / 1.0) {
			want = inv / 8;
			bands[2]++;
		} else {
			double s = (8192 / wl - 1) / (4 - 1);
			want = (1 - s) * inv / 8 + s * inv;
			bands[1]++;
		}
		worst = fmax(worst, fabs(p.c.rope[LG_FULL].inv_freq[i] - want) / want);
	}
	TAP_OK(!p.rc && worst < 2e-6 && bands[0] && bands[1] && bands[2],
	       "rope llama3: high %d / medium %d / low %d frequency bands within 2e-6 (worst %.2g) %s",
	       bands[0], bands[1], bands[2], worst, p.msg);
	done(&p);
	p = parse("llama", "\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}, "
	          "\"max_position_embeddings\": 64");
	TAP_OK(!p.rc && p.c.rope[LG_FULL].exact_ctx == 64 &&
	       fabs(p.c.rope[LG_FULL].inv_freq[1] - pow(10000.0, -2.0 / 64)) < 1e-7,
	       "rope dynamic: the default frequencies up to max_position_embeddings, exact there (%s)", p.msg);
	done(&p);
}

static void check_refusals(void)
{
	static const struct { const char *mt, *extra, *key; int code; } cases[] = {
		{"gemma", "", "model_type", -ENOTSUP},
		{"llama", "\"hidden_act\": \"gelu\"", "hidden_act", -ENOTSUP},
		{"llama", "\"pretraining_tp\": 2", "pretraining_tp", -ENOTSUP},
		{"llama", "\"rope_scaling\": {\"rope_type\": \"longrope\", \"factor\": 2}", "longrope", -ENOTSUP},
		{"llama", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8}", "low_freq_factor", -EINVAL},
		{"llama", "\"rope_parameters\": {\"full_attention\": {\"rope_theta\": 1e4}}", "rope_parameters",
		 -ENOTSUP},
		{"llama", "\"num_key_value_heads\": 3", "num_key_value_heads", -EINVAL},
		{"qwen2", "\"layer_types\": [\"full_attention\", \"sliding_attention\", \"full_attention\", "
		 "\"full_attention\"]", "use_sliding_window", -EINVAL},
		{"qwen2", "\"use_sliding_window\": true, \"layer_types\": [\"full_attention\", \"chunked_attention\", "
		 "\"full_attention\", \"full_attention\"]", "layer_types[1]", -ENOTSUP},
		{"qwen3_moe", "\"num_experts\": 2, \"num_experts_per_tok\": 4", "num_experts_per_tok", -EINVAL},
		{"mixtral", "\"quantization_config\": {\"quant_method\": \"gptq\"}", "quant_method", -ENOTSUP},
		{"qwen2_moe", "\"mlp_only_layers\": 3", "mlp_only_layers", -EINVAL},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct parsed p = parse(cases[i].mt, cases[i].extra);
		TAP_OK(p.rc == cases[i].code && strstr(p.msg, cases[i].key),
		       "%s with %s: refused (%d) naming %s: %s", cases[i].mt, cases[i].extra, p.rc, cases[i].key,
		       p.rc ? p.msg : "accepted");
		done(&p);
	}
}

/* Hostile inputs, fourth round, item 10: each refusal names its real fault,
 * once: a llama3 rope with original_max_position_embeddings 0 (its factors
 * fine) names that key, not the factors, and says "rope" once; a float eos
 * id is no integer (config.json and generation_config.json), never
 * truncated onto another token. */
static void check_true_messages(void)
{
	struct parsed p = parse("llama", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, "
	                        "\"low_freq_factor\": 1, \"high_freq_factor\": 4, "
	                        "\"original_max_position_embeddings\": 0}");
	TAP_OK(p.rc == -EINVAL && strstr(p.msg, "original_max_position_embeddings is 0; it must be > 0") &&
	       strstr(p.msg, "rope_scaling (llama3)") && !strstr(p.msg, "high_freq_factor") &&
	       !strstr(p.msg, "rope rope"),
	       "llama3 original_max_position_embeddings 0: refused naming it, rope_scaling once (%s)", p.msg);
	done(&p);
	p = parse("llama", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, "
	          "\"low_freq_factor\": 4, \"high_freq_factor\": 1}");
	TAP_OK(p.rc == -EINVAL && strstr(p.msg, "high_freq_factor > low_freq_factor > 0 (high_freq_factor 1, "
	                                      "low_freq_factor 4)") && !strstr(p.msg, "rope rope"),
	       "llama3 high_freq_factor < low_freq_factor: refused naming both values (%s)", p.msg);
	done(&p);
	p = parse("llama", "\"eos_token_id\": 2.5");
	TAP_OK(p.rc == -EINVAL && strstr(p.msg, "\"eos_token_id\" = 2.5: it must be an integer token id"),
	       "config.json eos_token_id 2.5: refused as no integer (%s)", p.msg);
	done(&p);
	struct parsed q = parse("llama", "");
	static const struct { const char *json, *want; } gen[] = {
		{"{\"eos_token_id\": [2, 3.5]}", "generation_config.json: \"eos_token_id\"[1] = 3.5: it must be "
		 "an integer token id"},
		{"{\"eos_token_id\": [2, \"3\"]}", "\"eos_token_id\"[1] is not a number"},
		{"{\"eos_token_id\": 1e10}", "\"eos_token_id\" = 10000000000: it must be an integer token id"},
	};
	for (size_t i = 0; !q.rc && i < sizeof gen / sizeof gen[0]; i++) {
		struct lg_gen_defaults g;
		struct rq_err err = {0};
		int rc = lg_gen_parse(gen[i].json, &q.c, &g, &err);
		TAP_OK(rc == -EINVAL && strstr(err.msg, gen[i].want), "generation_config %s: refused: %s",
		       gen[i].json, rc ? err.msg : "accepted");
	}
	struct lg_gen_defaults g;
	struct rq_err err = {0};
	int rc = q.rc ? q.rc : lg_gen_parse("{\"eos_token_id\": [7, -1]}", &q.c, &g, &err);
	TAP_OK(!rc && g.n_eos == 2 && g.eos[0] == 7 && g.eos[1] == -1,
	       "generation_config eos_token_id [7, -1]: read (-1 never matches; transformers warns) (%s)",
	       err.msg);
	done(&q);
}

int main(void)
{
	check_defaults();
	check_rope();
	check_refusals();
	check_true_messages();
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}
