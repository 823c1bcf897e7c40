/* forward_cuda.h — the forward pass of every family on a CUDA device.
 *
 * Same contract as forward.h (lg_forward): one sequence, tokens fed at the
 * next positions, logits of the last n_out tokens. The model's weights are
 * copied once to the device at lgc_create (from the mapped checkpoint through
 * pinned staging buffers; NVFP4, FP8 and symmetric INT8/INT4 Linears
 * repacked on the device into the layouts of kernels/ek.h), with attention q/k/v/g, dense gate/up and router/shared
 * gate/up each fused into one BF16 matrix when the checkpoint allows. The KV
 * cache lives on the device (BF16 by default, F32 or FP8 E4M3 on request);
 * full layers hold max_ctx positions, sliding layers a ring of window +
 * max_batch - 1. Decoding (one token, logits wanted) replays a CUDA graph
 * of the whole step; prompts run as batches of up to max_batch tokens.
 *
 * Numerics: see kernels/ek.h — batches of <= 16 tokens use the GEMV kernels
 * (fp32 activations for BF16, FP8 and INT, fp16·2^e for NVFP4), larger
 * batches the GEMM kernels (BF16 activations for BF16 and NVFP4, fp32 for FP8
 * and INT, whose weights are the CPU engine's values fl(v·s)); fp32
 * everywhere else, as the CPU engine. A Linear whose config quantizes its
 * input (W4A4 NVFP4, FP8 per token; see lg_linear act) gets it quantized
 * first, the CPU engine's rule and bits (ek_actq_*; routed experts: ek_moe_q,
 * ek_moe_a8), then the product as above. Linears the kernels do not take
 * (F16/F32, INT with zero points or other widths) are refused by name at
 * lgc_create, before any device work.
 *
 * Library code: nothing is printed; lgc_plan_text formats the memory plan
 * and lgc_stats reports the upload and step timings for the CLI. */
#ifndef RQ_ENGINE_FORWARD_CUDA_H
#define RQ_ENGINE_FORWARD_CUDA_H

#include <stddef.h>
#include "engine/model/model.h"

struct rq_err;
struct lgc;
struct lg_obs;

struct lgc_opts {
	int device;                /* CUDA ordinal */
	int max_ctx;               /* positions the sequence may reach */
	int max_batch;             /* tokens per prompt batch (<= 0: 256) */
	const char *kv;            /* KV cache type: "bf16" (NULL), "f32", "fp8" */
	size_t mem_limit;          /* device bytes the plan may use (0: free memory - 1 GiB) */
	int no_graph;              /* decode without the CUDA graph */
	int gemv_prefill;          /* prompt batches of <= 16 tokens (GEMV numerics throughout) */
	unsigned long long seed;   /* synthetic weights (lg_linear data NULL, as
	                              tools/bench/bench_synth.c makes them): fill seed */
};

/* "bf16" (or NULL), "f32", "fp8" → EK_KV_*; -1 if unknown. */
int lgc_kv_parse(const char *s);

struct lgc_plan {
	size_t weights;            /* device bytes of weights in the engine layout */
	size_t kv;                 /* KV caches of every layer */
	size_t act;                /* activations, scratch of the ops, logits */
	size_t staging;            /* device staging for the upload (freed after) */
	size_t total;              /* weights + kv + act + staging */
	size_t kv_per_pos;         /* KV bytes per position over the full layers */
	size_t budget;             /* what it must fit: mem_limit, else free - 1 GiB */
	size_t dev_free, dev_total;/* at planning (0 without a device) */
	int max_ctx, batch, kv_type, layers;
	char device[128];
};

/* Computes the plan without touching a device (budget = mem_limit). */
int lgc_plan_make(const struct lg_model *m, const struct lgc_opts *o, struct lgc_plan *p,
                  struct rq_err *err);
/* One paragraph: each part, the total, the budget and whether it fits. */
void lgc_plan_text(const struct lgc_plan *p, char *buf, size_t len);

/* Opens the device, plans (-ENOMEM with the plan in the message when it does
 * not fit, before allocating anything), allocates and uploads. The model
 * must outlive the engine. -ENODEV without CUDA or device. */
int lgc_create(const struct lg_model *m, const struct lgc_opts *o, struct lgc **out,
               struct rq_err *err);
void lgc_free(struct lgc *g);
const struct lgc_plan *lgc_plan_of(const struct lgc *g);

struct lgc_stats {
	double upload_s;           /* lgc_create's weight upload, wall clock */
	size_t upload_bytes;       /* bytes read from the checkpoint (or filled) */
	double h2d_gbs, d2d_gbs;   /* measured copy bandwidths (0 until lgc_measure_copy) */
	long decode_steps;         /* graph (or direct) single-token steps */
	double decode_s;           /* their wall clock, logits on the host included */
	long prefill_tokens;
	double prefill_s;
	int graph;                 /* 1 once the decode graph is captured */
	double weight_bytes_per_token;   /* lg_model_token_bytes, engine layout */
};
void lgc_stats(const struct lgc *g, struct lgc_stats *s);
/* Measures device and host→device copy bandwidth (bytes of scratch). */
int lgc_measure_copy(struct lgc *g, size_t bytes, struct rq_err *err);

void lgc_reset(struct lgc *g);
int lgc_pos(const struct lgc *g);
/* lg_forward on the device: -EINVAL (token id), -ENOSPC (context), -EIO. */
int lgc_forward(struct lgc *g, const int *tokens, int n, float *logits, int n_out,
                struct rq_err *err);
/* Seconds of device time of `reps` graph replays of one decode step at the
 * current position (the position does not advance; KV slot rewritten). */
int lgc_time_step(struct lgc *g, int token, int reps, double *seconds, struct rq_err *err);

/* The calibration observer (engine/model/observe.h) on the device, for `calib run`.
 * lgc_observe_start zeroes the device maxima of every slot of lg_obs_count(m)
 * and turns observing on: each later lgc_forward folds max|x| of every
 * observed Linear's input into them, the CPU observer's slots and rules
 * (lg_state_observe: the unquantized input; routed experts over the tokens
 * routed to each; all_experts: every token through every routed expert for
 * the observer only, the forward keeping its top-k), on the device, with no
 * copy to the host. Single-token steps run without the decode graph while
 * observing. The maxima are those of the CUDA engine's activations: its
 * products round their inputs to fp16/BF16 (kernels/ek.h), so they differ
 * from the CPU engine's binary32 forward by about that (tests: obs-gpu).
 * lgc_observe_read copies the maxima and counts back (one copy)
 * and folds them into obs (amax: max; tokens: sum); lgc_observe_stop turns
 * observing off. -EINVAL (all_experts without routed experts), -ENOMEM, -EIO. */
int lgc_observe_start(struct lgc *g, int all_experts, struct rq_err *err);
int lgc_observe_read(struct lgc *g, struct lg_obs *obs, struct rq_err *err);
void lgc_observe_stop(struct lgc *g);

#endif
