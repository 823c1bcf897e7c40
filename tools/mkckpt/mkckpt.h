/* mkckpt.h — the pieces of `requantfs mkckpt` (synthetic Laguna checkpoints).
 *
 * mkckpt.c            options, shard files, hub layout
 * mkckpt_plan.c       the tensor list, sharding, weights, NVFP4 quantization
 * mkckpt_config.c     config.json, generation_config.json, the shard index
 * mkckpt_tokenizer.c  tokenizer.json + tokenizer_config.json (its own owner) */
#ifndef RQ_TOOLS_MKCKPT_H
#define RQ_TOOLS_MKCKPT_H

#include "st/st.h"

#include <stddef.h>
#include <stdint.h>
#include "st/jtext.h"

struct rq_err;

/* Writes tokenizer.json and tokenizer_config.json (with chat_template) into
 * dir; *vocab_size gets the vocabulary size the model must have. */
int mk_write_tokenizer(const char *dir, int *vocab_size, struct rq_err *err);

/* The model's shape and the checkpoint's form. */
struct mk_model {
	int layers;           /* num_hidden_layers; layer 0 is dense, the rest MoE */
	int hidden;           /* hidden_size */
	int head_dim;
	int heads_full;       /* query heads on full-attention layers */
	int heads_sliding;    /* query heads on sliding-window layers */
	int kv_heads;
	int vocab;
	int experts, top_k;
	int expert_w;         /* moe_intermediate_size */
	int shared_w;         /* shared_expert_intermediate_size */
	int dense_w;          /* intermediate_size (layer 0) */
	int sliding_window;
	int bf16_a, bf16_b;   /* routed experts of layers [a, b] are BF16 (the ignore rule) */
	int quantized;        /* 0: every tensor BF16, no quantization_config (--dense) */
	int with_rule;        /* the ignore rule is present (0 in the 07-22 twin) */
};

/* Layer type: 1 for full attention (every 4th layer from 0), 0 for sliding. */
static inline int mk_full_layer(int l)
{
	return l % 4 == 0;
}

/* The text of each JSON file, json.dumps(obj, indent=2, sort_keys=True) + "\n"
 * as transformers / huggingface_hub write them. 0 or -ENOMEM. */
int mk_config_json(const struct mk_model *m, struct jt_buf *out);
int mk_generation_config_json(struct jt_buf *out);
/* names[i] lives in shard file files[shard[i]]; total_size in bytes. */
int mk_index_json(const char *const *names, const int *shard, size_t n,
                  const char *const *files, uint64_t total_size, struct jt_buf *out);

/* ---- the tensor list and the weights (mkckpt_plan.c) ---------------------- */

enum mk_kind {
	MK_LINEAR,    /* BF16 ~ N(0, std) */
	MK_NORM,      /* BF16 1 + N(0, std) */
	MK_BIAS,      /* F32 N(0, std) */
	MK_QWEIGHT,   /* a routed expert projection kept in BF16 */
	MK_PACKED,    /* U8 [out, in/2] of module mod */
	MK_SCALE,     /* F8_E4M3 [out, in/16] */
	MK_WGS,       /* F32 [1] weight_global_scale */
	MK_IGS,       /* F32 [1] input_global_scale */
};

struct mk_module {       /* a routed expert projection */
	char name[96];       /* model.layers.L.mlp.experts.E.gate_proj */
	size_t rows, cols;   /* weight [rows=out][cols=in], BF16 */
	int partner;         /* the gate/up partner, -1 for down_proj */
	int zero;            /* the all-zero projection */
	float std;           /* of its BF16 weight */
};

struct mk_tensor {
	char name[128];
	enum st_dtype dtype;
	int ndim;
	uint64_t shape[2];      /* [out, in] for matrices, [n] for vectors */
	enum mk_kind kind;
	float std;              /* MK_LINEAR, MK_NORM, MK_BIAS, MK_QWEIGHT */
	int mod;             /* module index for MK_QWEIGHT .. MK_IGS, else -1 */
	int shard;
};

struct mk_plan {
	struct mk_module *mods; /* [nmods] */
	size_t nmods, capm;
	struct mk_tensor *t;    /* [n] sorted by name (bytewise) */
	size_t n, cap;
	int nshards;
};

struct mk_rng {
	uint64_t s;
};

/* The last quantization job (a module, or a gate/up pair), reused while the
 * shard writer walks its tensors. */
struct mk_qcache {
	int job;             /* first module of the job, -1 empty */
	int mods[2], n;
	uint16_t *w[2];
	uint8_t *packed[2], *scales[2];
	float gs;
};

/* The tensors of one form: the 08-01 one (nvfp4_all 0: experts of layers
 * bf16_a..bf16_b BF16), or the 07-22 twin (nvfp4_all 1); all BF16 when
 * !m->quantized. -ENOMEM. */
int mk_plan_build(const struct mk_model *m, int nvfp4_all, struct mk_plan *p);
void mk_plan_free(struct mk_plan *p);
uint64_t mk_tensor_bytes(const struct mk_tensor *t);
/* Greedy split by size in name order, plus one boundary before the first
 * tensor whose name starts with force_prefix. */
void mk_shard_by_size(struct mk_plan *p, uint64_t max, const char *force_prefix);
/* The twin's tensors go to the shard that holds the same name, or its
 * module's weight, in main. -ENOENT if one has no home. */
int mk_shard_like(struct mk_plan *twin, const struct mk_plan *main);

struct mk_rng mk_rng_for(uint64_t seed, const char *key);
float mk_rng_normal(struct mk_rng *r);
/* n BF16 values of kind k (MK_NORM: 1 + N(0, std), else N(0, std)). */
void mk_gen_bf16(struct mk_rng *r, enum mk_kind k, float std, uint16_t *out, size_t n);
float mk_input_global_scale(uint64_t seed, const struct mk_module *md);
/* Makes c hold the quantization job of module mod (its gate/up pair). */
int mk_qcache_get(struct mk_qcache *c, const struct mk_plan *p, uint64_t seed, int mod,
                  struct rq_err *err);
void mk_qcache_free(struct mk_qcache *c);

#endif
