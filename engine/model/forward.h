/* forward.h — the forward pass of every family on the CPU (the reference).
 *
 * A state is one sequence: its KV cache (full-attention layers keep every
 * position; sliding layers keep a ring of sliding_window + max_batch - 1
 * positions, enough for a whole batch to see its window) and the scratch
 * buffers of one batch. lg_forward() feeds tokens at the next positions:
 * a prompt goes through as batches of up to max_batch tokens (each weight
 * read once per batch), decoding as batches of one. Results do not depend on
 * the batch split or the thread count (bit for bit).
 *
 * Numerics: binary32 throughout (activations, accumulation, softmax, KV
 * cache); BF16 weights widened exactly, NVFP4 weights dequantized exactly.
 * This is transformers' <Family>ForCausalLM run in float32 on the same
 * weights, up to summation order. */
#ifndef RQ_ENGINE_FORWARD_H
#define RQ_ENGINE_FORWARD_H

#include "engine/model/model.h"

struct rq_pool;
struct lg_state;

/* max_ctx: positions the sequence may reach (KV capacity of full layers).
 * max_batch: tokens per batch (<= 0: 64). pool may be NULL (one thread);
 * it must outlive the state. */
int lg_state_create(const struct lg_model *m, int max_ctx, int max_batch, struct rq_pool *pool,
                    struct lg_state **out, struct rq_err *err);
void lg_state_free(struct lg_state *s);
/* Forget the sequence (position 0 again). */
void lg_state_reset(struct lg_state *s);
/* Next position (tokens fed so far). */
int lg_state_pos(const struct lg_state *s);
/* Bytes of KV cache and scratch allocated. */
size_t lg_state_bytes(const struct lg_state *s);

/* Observe (engine/model/observe.h) the input of every quantizable Linear in the
 * batches that follow, into obs (NULL: stop). Observing changes no result. */
struct lg_obs;
void lg_state_observe(struct lg_state *s, struct lg_obs *obs);

/* on = 1: the forward rounds its activations to BF16 where transformers'
 * eager forward of a BF16 model does (embedding; RMSNorm's normed value in
 * F32 then BF16, times the weight rounded; every Linear's output (F32
 * accumulation, then BF16); RoPE's cos/sin, products and sums; attention
 * scores, their scaling, softmax in F32 then BF16, P·V; SwiGLU's silu and
 * product; the MoE's routing weights (softmax in F32), each weighted expert
 * output and each add; the residual adds), summing and exponentiating in
 * the order of torch 2.14's CPU kernels (AVX2 build: the BF16 GEMM's dot,
 * P·V, softmax with SLEEF's exp, RMSNorm's sum, SiLU), so that its values are
 * transformers' bit for bit (SmolLM2: every observed max equal). Slower
 * (scalar-order GEMM). For `calib run`, whose peer observes a BF16 forward;
 * 0 (the default): binary32 throughout. Choose it before the first batch. */
void lg_state_round_bf16(struct lg_state *s, int on);

/* on = 1: the fast mode, never the oracle: every Linear's product on FMA
 * kernels (engine/model/fastmm.h: register tiles over a token block for
 * prefill, FMA dots for decode), summed in another order, so the logits differ
 * from the oracle's within the tolerance docs/engine.md states, and depend on
 * the batch split. Everything else (attention, norms, the BF16 mode's
 * roundings) is unchanged. 0 (the default): the oracle. Any time. */
void lg_state_fast(struct lg_state *s, int on);

/* Feeds tokens[0..n) at positions pos..pos+n-1. logits (may be NULL when
 * n_out == 0) receives [n_out][vocab]: the logits after each of the last
 * n_out tokens (0 <= n_out <= n). -EINVAL for a token id out of range,
 * -ENOSPC when the sequence would pass max_ctx. */
int lg_forward(struct lg_state *s, const int *tokens, int n, float *logits, int n_out,
               struct rq_err *err);

#endif
