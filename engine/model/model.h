/* model.h — a decoder checkpoint directory, mapped and bound by name.
 *
 * Families (config.json's model_type, never the directory's name): laguna,
 * llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe. What differs
 * between them is data chosen once at load (struct lg_arch, arch.c): tensor
 * names, router kind, biases, q/k norms, sliding-window rule, defaults.
 *
 * lg_model_open() reads config.json (every size comes from it), parses the
 * header of every *.safetensors file in the directory (fs/st.h), maps each
 * file read-only and binds every tensor the forward pass needs by its
 * checkpoint name, checking dtype and shape. A Linear is NVFP4 when its
 * header holds <m>.weight_packed / weight_scale / weight_global_scale
 * (compressed-tensors nvfp4-pack-quantized, with or without input_global_scale),
 * FP8 when <m>.weight is F8_E4M3 with <m>.weight_scale (float-quantized), INT
 * when <m>.weight_packed is I32 with weight_scale and weight_shape
 * (pack-quantized, W4A16/W8A16, zero point when asymmetric), BF16 when
 * <m>.weight is BF16: the header decides, per tensor, never an assumption. Features this engine
 * does not compute (attention sinks, non-sigmoid routers, biases, rotations,
 * ...) are refused with an error that names the config key or tensor.
 *
 * The directory may be the FUSE mount, the 08-01 source or an export: the
 * engine reads checkpoints only through files, like vLLM. A model is
 * immutable after open and may be read from any thread. */
#ifndef RQ_ENGINE_MODEL_H
#define RQ_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

struct rq_err;

enum lg_wkind {
	LG_W_BF16 = 0,     /* <m>.weight BF16 [rows, cols] */
	LG_W_NVFP4 = 1,    /* <m>.weight_packed U8 / weight_scale F8_E4M3 / weight_global_scale F32
	                      (nvfp4-pack-quantized; NVFP4A16 when input_global_scale is absent) */
	LG_W_FP8 = 2,      /* <m>.weight F8_E4M3 [rows, cols] + weight_scale (float-quantized,
	                      e.g. FP8_DYNAMIC: per output channel) */
	LG_W_INT = 3,      /* <m>.weight_packed I32 + weight_scale + weight_shape I64 [2]
	                      (+ weight_zero_point when asymmetric) (pack-quantized, W4A16/W8A16) */
	LG_W_F16 = 4,      /* <m>.weight F16 [rows, cols] (w8 points at it) */
	LG_W_F32 = 5,      /* <m>.weight F32 [rows, cols] (w8 points at it) */
};

/* How a Linear's input is quantized before its product, as the checkpoint's
 * quantization_config asks and vLLM computes (kernels/ek_actq_rule.h has the
 * exact rule): the matmul then runs on the dequantized values. */
enum lg_act {
	LG_A_NONE = 0,     /* binary32 activations (A16: weight-only schemes, BF16) */
	LG_A_NVFP4 = 1,    /* NVFP4 W4A4: per 16 inputs, E4M3 scale under the static
	                      input_global_scale (in_gs), values on the E2M1 grid */
	LG_A_FP8_TOKEN = 2,/* FP8 dynamic per token: scale amax/448, values E4M3 */
};

/* dtype of an FP8/INT weight_scale (and of nothing else): as the checkpoint has it */
enum lg_sdtype { LG_S_BF16 = 0, LG_S_F16 = 1, LG_S_F32 = 2 };

/* A Linear: y[rows] = W[rows][cols] · x[cols] (+ bias[rows]). Pointers are into
 * the mapped files (no alignment assumed past what the kind reads with memcpy).
 *
 * Dequantization, row by row, in binary32 (ops.c lg_linear_row):
 *   BF16  w = bf16(w)                                   exact widening
 *   NVFP4 w = e2m1(code) · e4m3(scale) / global_scale
 *   FP8   w = e4m3(w8) · s                              one binary32 product
 *   INT   w = (q − z) · s,  q = field − 2^(bits−1), z likewise from weight_zero_point (0 when
 *         symmetric)                                    one binary32 product
 * with s = qscale[sr][c / (cols / groups)], sr = r when srows == rows, 0 when srows == 1.
 * For FP8 and INT the product is exact whenever the scale is BF16 or F16 (at most 4 + 11
 * or 9 + 11 significant bits); compressed-tensors' decompress() would round it to the
 * scale's dtype afterwards, this engine keeps the binary32 value (like NVFP4). */
struct lg_linear {
	enum lg_wkind kind;
	int rows, cols;            /* out_features, in_features */
	const uint16_t *w;         /* BF16: [rows][cols] bit patterns */
	const uint8_t *packed;     /* NVFP4: [rows][cols/2] E2M1 codes, column 2k in the low nibble */
	const uint8_t *scales;     /* NVFP4: [rows][cols/16] E4M3FN group scales */
	float global_scale;        /* NVFP4: weight_global_scale (large, ≈ 2688/amax);
	                              w = e2m1(code) · e4m3(scale) / global_scale */
	const float *gs_div;       /* NVFP4: [2][256] e4m3(b) / global_scale and
	                              (1.5 · e4m3(b)) / global_scale for every scale byte b, made
	                              once at load (owned by the model), or NULL: divide per group */
	const uint8_t *w8;         /* FP8: [rows][cols] E4M3FN bytes; F16/F32: [rows][cols] values; (0x7F/0xFF are NaN and stay NaN,
	                              as in every consumer; a compressed-tensors checkpoint has none) */
	const uint8_t *qw;         /* INT: weight_packed, [rows][words] little-endian int32; a row is one
	                              bit stream, column c in bits [c·bits, c·bits + bits) (word
	                              c·bits/32 from bit c·bits%32 up, a field may straddle two words),
	                              unsigned field = q + 2^(bits−1), q in [−2^(bits−1), 2^(bits−1)) */
	const uint8_t *qzero;      /* INT asymmetric: weight_zero_point [ceil(rows·bits/32)][groups]
	                              int32, packed the same way down each column (dim 0); NULL = 0 */
	int bits;                  /* INT: 1..8 bits per value */
	int words;                 /* INT: int32 words per row, ceil(cols·bits/32) */
	const uint8_t *qscale;     /* FP8, INT: weight_scale [srows][groups] in sdtype (a [1] or scalar
	                              tensor is srows = groups = 1) */
	enum lg_sdtype sdtype;     /* FP8, INT: qscale's dtype */
	int srows;                 /* FP8, INT: rows (per channel / per group) or 1 (per tensor) */
	int groups;                /* FP8, INT: scale columns; cols % groups == 0, one per
	                              cols/groups consecutive columns (1: per channel) */
	const float *bias;         /* <m>.bias [rows] widened to binary32 (owned by the model), or NULL */
	enum lg_act act;           /* input quantization (config.json; RQ_ENGINE_ACT_QUANT=0: none) */
	float in_gs;               /* LG_A_NVFP4: <m>.input_global_scale (large, 448·6/amax), the
	                              largest of the Linears vLLM fuses (q/k/v, gate/up) */
};

/* Bytes of weights one full pass over the Linear reads. */
size_t lg_linear_bytes(const struct lg_linear *l);

enum lg_attn_type { LG_FULL = 0, LG_SLIDING = 1 };

#define LG_ROPE_MAX 128            /* most rotary frequencies (rot_dim / 2) */

/* Rotary embedding of one layer type, computed like transformers'
 * rope init functions ('default', 'linear', 'dynamic', 'llama3', 'yarn'). */
struct lg_rope {
	int rot_dim;               /* rotated dims: int(head_dim · partial_rotary_factor), even */
	float attn_scale;          /* multiplies cos and sin (YaRN attention_factor; 1 for default) */
	float inv_freq[LG_ROPE_MAX]; /* [rot_dim/2] radians per position */
	char type[16];             /* "default", "linear", "dynamic", "llama3" or "yarn" */
	double theta;              /* rope_theta */
	long exact_ctx;            /* dynamic: positions up to which the frequencies above are
	                              transformers' (max_position_embeddings); 0 = unlimited */
};

/* How a MoE layer picks its experts. */
enum lg_router {
	LG_ROUTER_SIGMOID = 0,     /* Laguna: sigmoid scores, top-k by score + correction bias */
	LG_ROUTER_SOFTMAX = 1,     /* Mixtral / Qwen MoE: softmax over all experts in binary32, top-k,
	                              renormalised when norm_topk */
};

/* A family: what config.json's model_type selects, once, at load. */
struct lg_arch {
	const char *model_type;    /* "laguna", "llama", ... */
	int qk_norm;               /* self_attn.{q,k}_norm: RMSNorm per head before RoPE */
	enum lg_router router;
	const char *moe_block;     /* module of a MoE layer: "mlp" or "block_sparse_moe" */
	const char *expert[3];     /* routed expert Linears: gate, up, down ("w1", "w3", "w2") */
	int shared_gate;           /* shared expert scaled by sigmoid(shared_expert_gate · x) */
};

enum lg_gate { LG_GATE_NONE = 0, LG_GATE_PER_HEAD = 1, LG_GATE_PER_ELEMENT = 2 };

struct lg_config {
	const struct lg_arch *arch; /* the family (static table, arch.c) */
	int qkv_bias;              /* q/k/v_proj carry a bias (attention_bias, qkv_bias) */
	int o_bias;                /* o_proj carries a bias (attention_bias) */
	int mlp_bias;              /* dense MLP gate/up/down carry a bias (llama's mlp_bias) */
	int hidden;                /* hidden_size */
	int n_layers;              /* num_hidden_layers */
	int vocab;                 /* vocab_size */
	int head_dim;              /* head_dim (default hidden / num_attention_heads) */
	int n_kv_heads;            /* num_key_value_heads */
	int n_heads_max;           /* max over layers of the query heads */
	int inter;                 /* intermediate_size: dense MLP width */
	int moe_inter;             /* moe_intermediate_size: routed expert width */
	int shared_inter;          /* shared_expert_intermediate_size (0 = none) */
	int n_experts;             /* num_experts */
	int top_k;                 /* num_experts_per_tok */
	int norm_topk;             /* norm_topk_prob: renormalize the top-k weights */
	float routed_scale;        /* moe_routed_scaling_factor */
	float router_softcap;      /* moe_router_logit_softcapping (0 = off): tanh(l/c)·c */
	float eps;                 /* rms_norm_eps */
	int sliding_window;        /* keys a sliding layer sees, itself included */
	enum lg_gate gate;         /* softplus output gate granularity */
	int tie_embeddings;        /* tie_word_embeddings */
	long max_pos;              /* max_position_embeddings */
	int bos;                   /* bos_token_id, -1 if none */
	int pad;                   /* pad_token_id, -1 if none */
	int n_eos;
	int eos[8];                /* eos_token_id (int or list) */
	struct lg_rope rope[2];    /* [LG_FULL], [LG_SLIDING] */
	/* quantization_config's input_activations, by weight form: 0 none (A16), 1 every
	 * Linear of that form, 2 (NVFP4 only) those whose checkpoint has input_global_scale
	 * (groups with and without activation quantization) */
	int act_nvfp4;             /* nvfp4-pack-quantized groups: NVFP4 inputs (W4A4) */
	int act_fp8;               /* float-quantized groups: FP8 dynamic per-token inputs */
};

struct lg_layer {
	enum lg_attn_type type;    /* layer_types[i] */
	int n_heads;               /* num_attention_heads_per_layer[i] */
	int moe;                   /* 1: sparse MoE block, 0: dense MLP */
	float *attn_norm;          /* input_layernorm [hidden] (widened to f32, owned) */
	float *mlp_norm;           /* post_attention_layernorm [hidden] */
	float *q_norm, *k_norm;    /* self_attn.{q,k}_norm [head_dim] (NULL without arch->qk_norm) */
	struct lg_linear q;        /* [n_heads·head_dim, hidden] */
	struct lg_linear k, v;     /* [n_kv_heads·head_dim, hidden] */
	struct lg_linear g;        /* [n_heads, hidden] per-head, [n_heads·head_dim, hidden] per-element */
	struct lg_linear o;        /* [hidden, n_heads·head_dim] */
	/* dense layers (moe == 0) */
	struct lg_linear gate, up; /* mlp.{gate,up}_proj [inter, hidden] */
	struct lg_linear down;     /* mlp.down_proj [hidden, inter] */
	/* MoE layers (moe == 1) */
	struct lg_linear router;   /* mlp.gate [n_experts, hidden] */
	float *bias;               /* e_score_correction_bias [n_experts] (owned; zeros if absent) */
	struct lg_linear *eg, *eu; /* experts.E.{gate,up}_proj [moe_inter, hidden], n_experts each (owned arrays) */
	struct lg_linear *ed;      /* experts.E.down_proj [hidden, moe_inter] */
	struct lg_linear sg, su;   /* shared_expert.{gate,up}_proj [shared_inter, hidden] */
	struct lg_linear sd;       /* shared_expert.down_proj [hidden, shared_inter] */
	struct lg_linear sgate;    /* shared_expert_gate [1, hidden] (arch->shared_gate) */
	int shared_plural;         /* the shared expert is named mlp.shared_experts (transformers),
	                              not mlp.shared_expert (vLLM and the checkpoints) */
};

/* Sampling defaults from generation_config.json (transformers' defaults
 * when the file or a key is absent). */
struct lg_gen_defaults {
	int do_sample;             /* 0: greedy */
	float temperature;         /* 1.0 */
	int top_k;                 /* 50 (0 = off) */
	float top_p;               /* 1.0 (1 = off) */
	int n_eos;
	int eos[8];                /* generation_config eos_token_id, else config's */
};

struct lg_file;

struct lg_model {
	struct lg_config cfg;
	struct lg_gen_defaults gen;
	char *dir;
	const uint16_t *embed;     /* model.embed_tokens.weight [vocab][hidden] BF16, NULL when the
	                              embedding is quantized (or synthetic, in benchmarks) */
	struct lg_linear embed_q;  /* model.embed_tokens as bound, [vocab, hidden], any kind; the
	                              CPU engine reads row `token` of it when embed is NULL */
	float *final_norm;         /* model.norm.weight [hidden] (owned) */
	struct lg_linear lm_head;  /* [vocab, hidden]; the embedding when tied */
	struct lg_layer *layers;   /* [n_layers] */
	int n_nvfp4, n_bf16;       /* Linears bound in each form */
	int n_fp8, n_int;
	int n_act;                 /* Linears whose input is quantized (act != LG_A_NONE) */
	size_t n_files;
	struct lg_file *files;     /* the mapped *.safetensors */
	float **owned;             /* [n_owned] biases widened at load, freed with the model */
	size_t n_owned, cap_owned;
};

/* Opens MODEL_DIR. -ENOENT/-EIO (files), -EPROTO (bad file or missing
 * tensor), -EINVAL (bad config), -ENOTSUP (a feature this engine refuses). */
int lg_model_open(const char *dir, struct lg_model **out, struct rq_err *err);
/* The most lg_model_open() reads of a model directory's small files; a
 * larger one is refused naming the cap (real ones are far below: a config a
 * few KiB, an index a few MiB). Each of them, and each shard, must be a
 * regular file or a link to one: a FIFO or a device is refused, never
 * waited on or read without end (base/file.h). */
#define LG_CONFIG_MAX ((size_t)16 << 20)   /* config.json, generation_config.json */
#define LG_INDEX_MAX ((size_t)64 << 20)    /* model.safetensors.index.json */
void lg_model_close(struct lg_model *m);

/* Weight bytes read to decode one token: every dense weight, the shared
 * expert, the router, top_k average routed experts per MoE layer, lm_head
 * and one embedding row. */
double lg_model_token_bytes(const struct lg_model *m);

/* Parses config.json text into cfg and the per-layer plan (layer types,
 * heads, dense/MoE) of the family its model_type names (absent: laguna),
 * applying the defaults of that family's transformers config class (and,
 * for Laguna, vLLM's loader), refusing unknown features with the key named.
 * types/heads/moe are malloc'd arrays of n_layers. Exposed for tests. */
int lg_config_parse(const char *json, const char *path, struct lg_config *cfg,
                    enum lg_attn_type **types, int **heads, int **moe, struct rq_err *err);

/* Parses generation_config.json text (NULL text = absent file). */
int lg_gen_parse(const char *json, const struct lg_config *cfg, struct lg_gen_defaults *g,
                 struct rq_err *err);

#endif
