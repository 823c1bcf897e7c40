/* qconfig.h — the virtual config.json's quantization_config for a scheme
 * (issue 12), edited as text: every byte outside the edit is kept (SPEC.md
 * §4: number formatting, key order, escapes and unicode survive).
 *
 * - config.json without quantization_config: one is inserted as the new last
 *   member of the top-level object, equal (as parsed JSON) to what
 *   llm-compressor 0.14.0.1 model_free_ptq writes for the scheme, with
 *   config_groups {"group_0": targets, weights, input_activations, ...} and
 *   the caller's ignore list; written in the file's own indentation style.
 * - config.json with a compressed-tensors quantization_config: its groups are
 *   kept byte for byte, a new group "group_N" (next free N) is appended for
 *   the scheme, the `drop` ignore entries are removed (with one separating
 *   comma and the whitespace between, as today's Laguna rewrite does) and
 *   "format" becomes "mixed-precision" when the groups' formats now differ.
 *   The new group's targets are chosen here so that no module matches two
 *   groups (see qconfig.c for vLLM's matching order): the dropped entries
 *   that match newly quantized modules, the exact names of the newly
 *   quantized modules no dropped entry matches, and the names vLLM fuses
 *   q/k/v and gate/up into (...qkv_proj, ...gate_up_proj).
 * - any other quantization_config (not compressed-tensors, a group already
 *   using a chosen target, a shape this code cannot edit safely) is refused
 *   with a message naming config.json. */
#ifndef RQ_PLAN_QCONFIG_H
#define RQ_PLAN_QCONFIG_H

#include <stddef.h>
#include "quant/scheme.h"
#include "quant/observer.h"

struct rq_err;

struct rq_qconfig_edit {
	enum rq_scheme scheme;             /* not RQ_SCHEME_NVFP4 (the Laguna edit stays in plan_files.c) */
	enum rq_observer observer;         /* the weights' observer: minmax (0) keeps the preset's
	                                      "observer" (null; W4A4: memoryless_minmax), another
	                                      writes its llm-compressor name (rq_observer_llmc) */
	const char *input_observer;        /* W4A4: input_activations' "observer" to write (the
	                                      calibration's: static_minmax, minmax, mse); NULL: the
	                                      preset's static_minmax */
	const char *const *targets;        /* [ntargets] --targets as given ("Linear" by default); */
	size_t ntargets;                   /*   used only when config.json has no quantization_config */
	const char *const *ignore;         /* [nignore] --ignore as written ("lm_head" by default); */
	size_t nignore;                    /*   used only when config.json has no quantization_config */
	const size_t *drop;                /* [ndrop] indexes into the EXISTING quantization_config.ignore */
	size_t ndrop;                      /*   of entries to remove (any order, no duplicates); an
	                                      entry dropped must match no module other than newly
	                                      quantized ones (it may become a target) */
	const char *const *modules;        /* [nmodules] names of the modules newly quantized (e.g. */
	size_t nmodules;                   /*   "model.layers.40.mlp.experts.3.gate_proj"); used only
	                                      with an existing quantization_config, to choose the new
	                                      group's targets */
	const char *const *new_targets;    /* [nnew_targets] with an existing quantization_config: */
	size_t nnew_targets;               /*   the new group's targets as given (the Laguna fix's
	                                      --rule-scheme: anchored re: per layer) instead of the
	                                      chosen ones; checked the same way. NULL: choose */
};

/* Rewrites config.json (cfg, len bytes) for edit e. On success *out is a
 * malloc'ed buffer (NUL-terminated, *out_len bytes without the NUL) owned by
 * the caller. -EPROTO: config.json is not a JSON object or its
 * quantization_config cannot be edited (err says why and what to do);
 * -EINVAL: a bad edit (drop index out of range, no targets); -ENOMEM. */
int rq_qconfig_rewrite(const char *cfg, size_t len, const struct rq_qconfig_edit *e,
                       char **out, size_t *out_len, struct rq_err *err);

#endif
