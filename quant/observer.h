/* observer.h — how a scheme's group ranges are chosen: llm-compressor's weight observers.
 *
 * Pure arithmetic, no I/O. RQ_OBSERVER_MINMAX is what every scheme of scheme.h computes
 * (each group's scale from its max |w|). The two data-free MSE observers of llm-compressor
 * 0.14.0.1 search, per group, the range that minimizes sum |fake_quant(w) - w|^2.4 over a
 * grid of candidate ranges, bit-exact with its eager (CPU torch) path; the facts and the
 * arithmetic are written at the top of observer.c. Sources: BF16 only (-ENOTSUP otherwise).
 * Schemes: every data-free scheme but the Laguna fix (RQ_SCHEME_NVFP4, whose fp32 recipe
 * llm-compressor does not compute); NVFP4 takes RQ_RECIPE_BF16 only. */
#ifndef RQ_OBSERVER_H
#define RQ_OBSERVER_H

#include <stddef.h>
#include <stdint.h>

#include "quant/scheme.h"

enum rq_observer {
	RQ_OBSERVER_MINMAX = 0,         /* "minmax": the group's max |w| (llm-compressor's
	                                   default, memoryless_minmax for weights) */
	RQ_OBSERVER_MSE,                /* "mse": memoryless_mse: 20 candidates p * max|w|,
	                                   p = 1, 0.99 .. 0.81; stops after 5 steps in which
	                                   no group of the tensor improved */
	RQ_OBSERVER_EXPANDED_MSE,       /* "expanded-mse": nvfp4_expanded_mse (alias
	                                   fouroversix): 112 candidates p * bf16(1.8 max|w|),
	                                   p = 1, 0.995 .. 0.445 (1.8x down to ~0.8x) */
};
#define RQ_OBSERVER_COUNT 3
/* Bumped whenever an output byte of an MSE observer could change (cache keys add it to
 * RQ_SCHEME_VERSION and RQ_RECIPE_VERSION for modules quantized with one). */
#define RQ_OBSERVER_VERSION 1

int rq_observer_parse(const char *s, enum rq_observer *out);   /* -EINVAL if unknown */
const char *rq_observer_name(enum rq_observer o);              /* "minmax", "mse", ... */
/* The name of llm-compressor's observer that computes it on weights (its registry in
 * llmcompressor/observers/): "memoryless_minmax", "memoryless_mse", "nvfp4_expanded_mse".
 * An MSE observer's name is the weights' "observer" of config.json's quantization_config
 * (as model_free_ptq writes it); minmax leaves the scheme's own dump there: null for the
 * model_free_ptq presets (weights then get memoryless_minmax: calibration.py), and
 * "memoryless_minmax" for --scheme nvfp4 (oneshot's). llm-compressor's "minmax" is the
 * moving-average observer of activations, which requantfs never runs on weights. */
const char *rq_observer_llmc(enum rq_observer o);

/* 0 when scheme s with recipe r and source dtype src can take observer o, else -ENOTSUP
 * (MINMAX: every valid triple; the MSE observers: BF16 sources, not RQ_SCHEME_NVFP4, and
 * RQ_RECIPE_BF16), -EINVAL for a value out of range. */
int rq_observer_ok(enum rq_scheme s, enum rq_recipe r, enum rq_src_dtype src,
                   enum rq_observer o);

/* rq_scheme_quantize with the group ranges chosen by observer o (MINMAX: exactly
 * rq_scheme_quantize). Same modules, layout and fusion (the NVFP4 schemes' n modules share
 * one global scale, computed from the ranges the search chose, as llm-compressor does).
 * Errors as rq_scheme_quantize (-EDOM NaN/Inf, -EINVAL shape, *bad = module index), plus
 * -ENOTSUP (rq_observer_ok), -ERANGE (a weight so large that 1.8 |w| overflows BF16: the
 * expanded search is undefined there) and -ENOMEM (the search's per-group scratch).
 * Threaded over pool (NULL = caller). Outputs are undefined on error. */
int rq_scheme_quantize_obs(enum rq_scheme s, enum rq_recipe r, enum rq_observer o,
                           const struct rq_smod *m, int n, int *bad, struct rq_pool *pool);

/* Another device's search (qdev/ wires kernels/' GPU twin in here): for the module
 * w[rows][cols] in groups of `group` columns, exactly what the CPU search gives per group
 * (quant/observer_int.h: best[], and mask[] when non-NULL), for rq_obs_kind(scheme) `kind`
 * and rq_obs_params(observer) p. Returns 0 when done, or any negative errno and the module
 * is searched on the CPU instead (the same bytes either way). Called from the calling
 * thread, once per module, after the module's weights were checked (no NaN/Inf, no
 * overflow of the expanded range); the chosen ranges, the global scale, the scales and the
 * codes are then computed on the CPU as without it. */
struct rq_obs_params;
struct rq_obs_dev {
	int (*search)(void *arg, int kind, const struct rq_obs_params *p, const uint16_t *w,
	              size_t rows, size_t cols, size_t group, uint8_t *best, uint32_t *mask);
	void *arg;
};
/* rq_scheme_quantize_obs with the search of each module offered to dev first (NULL: the
 * CPU for all); on_dev (n entries, or NULL) gets 1 for each module dev searched. */
int rq_scheme_quantize_obs_dev(enum rq_scheme s, enum rq_recipe r, enum rq_observer o,
                               const struct rq_smod *m, int n, int *bad, struct rq_pool *pool,
                               const struct rq_obs_dev *dev, int *on_dev);

/* The input scales' MSE observer (observer_act.c; `calib run --observer mse`):
 * llm-compressor's search (memoryless_mse's parameters, NVFP4 TENSOR_GROUP) over ONE
 * calibration batch of a Linear's input: rows [0, T) of x (row stride ldx), cols wide (a
 * multiple of 16), BF16 values held as binary32 (the activations of a BF16 forward).
 * Per group g of 16 columns, the range the search chose over the batch's T tokens:
 * lo[g] = bf16(min_g * P), hi[g] = bf16(max_g * P) (cols / 16 entries each). Threaded over
 * pool (NULL = caller). 0, -EINVAL (T = 0, cols not a multiple of 16, a value that is not
 * a BF16 value), -EDOM (NaN/Inf), -ENOMEM. */
int rq_obs_act_mse(const float *x, size_t ldx, size_t T, size_t cols, float *lo, float *hi,
                   struct rq_pool *pool);
/* The moving average of the `minmax` and `mse` observers (helpers.py lerp, averaging
 * constant 0.01): old * 0.99 + cur * 0.01, each product and the sum rounded to BF16 when
 * bf16 (the statistics of a BF16 forward), binary32 otherwise. */
float rq_obs_lerp(float old, float cur, int bf16);

#endif
