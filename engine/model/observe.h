/* observe.h — the calibration observer: max|x| of the input of every Linear
 * a W4A4 scheme would quantize, gathered while the CPU forward runs
 * (lg_state_observe in forward.h), for `requantfs calib run`.
 *
 * Which Linears: every projection of every layer that the engine binds —
 * attention q/k/v/o (and Laguna's g_proj), the dense MLP's gate/up/down,
 * each routed expert's gate/up/down, the shared expert's gate/up/down and
 * its gate (qwen2_moe) — that is, --scheme's module selection with its
 * default ignore list (plan/plan_scheme.c): lm_head, the embedding and the
 * MoE routers (<block>.gate) are left out. Laguna's 08-01 rule covers the
 * routed experts of layers 40–47, a subset of this set.
 *
 * Layout: one slot per (layer, Linear), layer-major, lg_obs_per_layer()
 * slots per layer: the LG_OBS_* below, then 3 per routed expert (gate, up,
 * down of expert e at LG_OBS_FIXED + 3e + 0/1/2). A slot whose Linear the
 * model does not have (a dense layer's experts, ...) stays unnamed. */
#ifndef RQ_ENGINE_OBSERVE_H
#define RQ_ENGINE_OBSERVE_H

#include <stddef.h>

struct lg_model;

enum lg_obs_slot {
	LG_OBS_Q, LG_OBS_K, LG_OBS_V, LG_OBS_G, LG_OBS_O,
	LG_OBS_GATE, LG_OBS_UP, LG_OBS_DOWN,           /* dense MLP */
	LG_OBS_SG, LG_OBS_SU, LG_OBS_SD, LG_OBS_SGATE, /* shared expert, its sigmoid gate */
	LG_OBS_FIXED
};

/* Which of llm-compressor's activation observers (its registry's names) makes the
 * input scales; what `calib run --observer` takes. */
enum lg_obs_kind {
	LG_OBS_STATIC_MINMAX = 0, /* "static_minmax": max |x| over every token (the NVFP4
	                             preset's input observer) */
	LG_OBS_MINMAX,            /* "minmax": per group of 16 columns, min and max of each
	                             batch, folded by a moving average (rq_obs_lerp) */
	LG_OBS_MSE,               /* "mse": per group, the range rq_obs_act_mse chooses for
	                             each batch, folded by the same moving average */
	LG_OBS_KINDS
};
const char *lg_obs_kind_name(enum lg_obs_kind k);          /* "static_minmax", ... */
int lg_obs_kind_parse(const char *s, enum lg_obs_kind *out); /* -EINVAL if unknown */

/* What the forward fills while a state observes (caller-owned arrays of
 * lg_obs_count() entries, zeroed before the first batch, and the struct zeroed but for
 * the members the caller sets). */
struct lg_obs {
	float *amax;      /* [slots] max |x| over the tokens observed (0: none yet) */
	long *tokens;     /* [slots] tokens whose input the slot saw */
	int all_experts;  /* 1: every token also goes through every routed expert for the
	                     observer only (the forward keeps its top-k) */
	enum lg_obs_kind kind;  /* set by the caller; MINMAX and MSE need a BF16 forward
	                           (lg_state_round_bf16): their statistics are BF16 values */
	/* MINMAX, MSE: a batch is one forward call (calib run feeds a sequence as one); per
	 * slot its groups' statistics folded over the batches so far (BF16 values); the
	 * caller allocates the three arrays of lg_obs_count() entries zeroed, lg_obs_batch
	 * each slot's groups at its first batch, lg_obs_release frees those */
	float **lo, **hi;       /* [slots] -> [groups = cols / 16], or NULL before the first batch */
	int *groups;            /* [slots] */
	int err;                /* the first failure of a batch's search (-ENOMEM, -EDOM:
	                           a NaN/Inf input, -EINVAL), 0; the forward cannot return it */
};

struct rq_pool;
/* One batch of the input of slots[0..ns) of layer slot base `base` (rows [0, T) of x,
 * stride ldx, cols wide) folded into obs (MINMAX, MSE; the forward's observer calls it).
 * Allocates obs->lo/hi/groups on first use; a failure goes to obs->err. */
void lg_obs_batch(struct lg_obs *obs, size_t base, const int *slots, int ns, const float *x,
                  size_t ldx, int T, int cols, struct rq_pool *pool);
/* The amax whose scale slot i gets: MINMAX and MSE: max(0, max of its groups' hi, -min of
 * lo) (llm-compressor's get_global_scale); STATIC_MINMAX: amax[i]. */
float lg_obs_amax(const struct lg_obs *obs, size_t i);
/* Frees what lg_obs_batch allocated (not amax, tokens); NULL is fine. */
void lg_obs_release(struct lg_obs *obs, size_t slots);

/* The input_global_scale of an observed amax, llm-compressor's convention
 * (compressed-tensors generate_gparam, computed in the dtype of the observed
 * activations): 448·6 / amax, evaluated as torch does `2688 / t`:
 * reciprocal(amax) · 2688. bf16 = 1 (a BF16 checkpoint, whose forward the
 * peer runs in BF16): amax is first rounded to BF16 — the max of the BF16
 * activations the peer observes, since rounding is monotonic — and the
 * reciprocal and the product are each rounded to BF16 (to nearest even), then
 * widened to F32; bf16 = 0: the same in F32. amax <= 0 (an input that was all
 * zero), NaN or a result past the dtype's range (amax below ~2.7e-36): 1.0, as
 * generate_gparam writes (its nan_to_num: "no global scaling"). Not the
 * fallback of a routed expert that saw no token: calib run gives it its
 * layer's largest amax (the peer leaves that scale uninitialized). */
float lg_obs_scale(float amax, int bf16);

int lg_obs_per_layer(const struct lg_model *m);
size_t lg_obs_count(const struct lg_model *m);
/* The checkpoint module name of slot i (e.g. model.layers.3.mlp.experts.5.up_proj)
 * into buf; -ENOENT when the model has no Linear there, -ENAMETOOLONG. */
int lg_obs_name(const struct lg_model *m, size_t i, char *buf, size_t len);

#endif
