/* qconfig_int.h — inside plan/qconfig*.c: the JSON model_free_ptq writes for a
 * scheme (cJSON trees) and the text edits that put it into config.json in
 * the file's own style. */
#ifndef RQ_PLAN_QCONFIG_INT_H
#define RQ_PLAN_QCONFIG_INT_H

#include <stddef.h>
#include <cjson/cJSON.h>
#include "quant/scheme.h"
#include "quant/observer.h"
#include "st/jtext.h"

#define QC_CT_VERSION "0.19.0"   /* compressed-tensors whose model_dump we write */

/* 0 when scheme s has a compressed-tensors preset here, else -EINVAL. */
int qc_preset_find(enum rq_scheme s);
/* One config group for scheme s with targets and the weights' observer o (as model_dump
 * writes it); in_obs: W4A4's input_activations observer (NULL: the preset's). */
cJSON *qc_group_json(enum rq_scheme s, enum rq_observer o, const char *in_obs,
                     const char *const *targets, size_t nt);
/* The whole quantization_config model_free_ptq writes for a plain model. */
cJSON *qc_config_json(enum rq_scheme s, enum rq_observer o, const char *in_obs,
                      const char *group_name,
                      const char *const *targets, size_t nt, const char *const *ignore,
                      size_t ni);

/* Text edits. Each appends the whole edited text of s (n bytes) to out and
 * returns 0, -EPROTO (s is not shaped as expected) or -ENOMEM. */
/* Inserts "key": v as the new last member of the object at s[obj], written
 * in that object's style (pretty with its indentation, or compact with its
 * separators). An empty object gets a pretty member when `pretty` is set. */
int qc_insert_member(struct jt_buf *out, const char *s, size_t n, size_t obj, const char *key,
                     const cJSON *v, int pretty);
/* Replaces the value of member key of the object at s[obj] by text. */
int qc_replace_value(struct jt_buf *out, const char *s, size_t n, size_t obj, const char *key,
                     const char *text);

#endif
