/* cfg_int.h — internal to engine/: the config.json readers shared by
 * arch.c (the dispatch, the other families), config.c (Laguna,
 * quantization_config, generation_config) and rope.c. Every function
 * returns 0 or a -errno with a message naming the key. */
#ifndef RQ_ENGINE_CFG_INT_H
#define RQ_ENGINE_CFG_INT_H

#include "engine/model/model.h"
#include <cjson/cJSON.h>

struct rq_err;

/* o[k] when present and not null, else NULL. */
const cJSON *cfg_key(const cJSON *o, const char *k);
int cfg_num(const cJSON *o, const char *k, int required, double def, double *out,
            const char *path, struct rq_err *err);
int cfg_int(const cJSON *o, const char *k, int required, long def, long lo, long hi,
            long *out, const char *path, struct rq_err *err);
int cfg_bool(const cJSON *o, const char *k, int def, int *out, const char *path,
             struct rq_err *err);
/* o[k] when it is a string, else NULL. */
const char *cfg_str(const cJSON *o, const char *k);
/* -ENOTSUP naming k when o[k] is true. */
int cfg_refuse_true(const cJSON *root, const char *k, const char *path, struct rq_err *err);
/* eos_token_id (an int or a list) into eos[8], *n; untouched when absent. */
int cfg_eos(const cJSON *o, int *eos, int *n, const char *path, struct rq_err *err);
/* quantization_config: -ENOTSUP for a format or weight type the engine does not read. */
int cfg_check_quant(const cJSON *q, const char *path, struct rq_err *err);
/* quantization_config's input_activations into c->act_nvfp4 / act_fp8. */
int cfg_quant_acts(const cJSON *q, struct lg_config *c, const char *path, struct rq_err *err);

/* One layer type's rotary table. p: its rope dict (rope_parameters, or legacy
 * rope_scaling); top: the dict transformers reads `truncate` from; root: the
 * config (top-level rope_theta, partial_rotary_factor,
 * original_max_position_embeddings); theta_def: the family's default_theta;
 * what: where the dict is, for messages ("rope_scaling",
 * "rope_parameters.full_attention", ...). */
int lg_rope_init(struct lg_rope *r, const cJSON *p, const cJSON *top, const cJSON *root,
                 int head_dim, long max_pos, double theta_def, const char *what,
                 const char *path, struct rq_err *err);

/* The family named by model_type (NULL: none of ours). */
const struct lg_arch *lg_arch_find(const char *model_type);
/* "laguna, llama, ..." for messages. */
const char *lg_arch_list(void);

/* config.json of family a into cfg (sets cfg->arch) and the per-layer plan
 * types/heads/moe [num_hidden_layers] (allocated by the caller). */
int lg_arch_parse(const cJSON *root, const struct lg_arch *a, const char *path, struct lg_config *cfg,
                  enum lg_attn_type *types, int *heads, int *moe, struct rq_err *err);
/* Laguna's reader (config.c), the laguna row's parser. */
int lg_laguna_parse(const cJSON *root, const struct lg_arch *a, const char *path,
                    struct lg_config *cfg, enum lg_attn_type *types, int *heads, int *moe,
                    struct rq_err *err);

#endif
