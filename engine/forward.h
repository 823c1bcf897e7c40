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

#include "engine/model.h"

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

/* Observe (engine/observe.h) the input of every quantizable Linear in the
 * batches that follow, into obs (NULL: stop). Observing changes no result. */
struct lg_obs;
void lg_state_observe(struct lg_state *s, struct lg_obs *obs);

/* Feeds tokens[0..n) at positions pos..pos+n-1. logits (may be NULL when
 * n_out == 0) receives [n_out][vocab]: the logits after each of the last
 * n_out tokens (0 <= n_out <= n). -EINVAL for a token id out of range,
 * -ENOSPC when the sequence would pass max_ctx. */
int lg_forward(struct lg_state *s, const int *tokens, int n, float *logits, int n_out,
               struct rq_err *err);

#endif
