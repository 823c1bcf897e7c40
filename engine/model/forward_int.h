/* forward_int.h — the forward's state, shared by forward.c (the layers) and
 * state.c (its buffers and life). Private to engine/. */
#ifndef RQ_ENGINE_FORWARD_INT_H
#define RQ_ENGINE_FORWARD_INT_H

#include "engine/model/forward.h"

#include <stddef.h>

struct rq_pool;
struct lg_obs;
struct lg_mm;

struct lg_state {
	const struct lg_model *m;
	struct rq_pool *pool;
	int max_ctx;               /* KV capacity of full-attention layers, in positions */
	int B;                     /* max tokens per batch */
	int pos;                   /* next position */
	int nthreads;
	int qd;                    /* n_heads_max · head_dim: row stride of q, att, g */
	int kvd;                   /* n_kv_heads · head_dim: row stride of k, v and of a KV slot */
	int fd;                    /* max(inter, shared_inter): row stride of h1, h2 */
	/* KV cache, per layer: [cap][kvd] keys (after norm and RoPE) and values */
	float **kc, **vc;
	int *cap;                  /* [n_layers] slots; sliding layers: a ring, slot = pos % cap */
	int max_cap;
	/* one batch */
	float *x;                  /* [B][hidden] residual stream */
	float *xn;                 /* [B][hidden] RMSNorm'd input of the current block */
	float *q;                  /* [B][qd] queries (normed and rotated in place) */
	float *att;                /* [B][qd] attention output */
	float *k, *v;              /* [B][kvd] this batch's keys and values */
	float *g;                  /* [B][qd] output-gate logits (per-head: first n_heads used) */
	float *y;                  /* [B][hidden] block output */
	float *ys;                 /* [B][hidden] shared-expert output */
	float *h1, *h2;            /* [B][fd] SwiGLU gate / up (dense and shared MLP) */
	float *rl;                 /* [B][n_experts] router logits, then sigmoid scores */
	float *sgl;                /* [B] shared-expert gate logits (arch->shared_gate) */
	int *tsel;                 /* [B·top_k] experts picked per token, best first */
	float *tw;                 /* [B·top_k] their routing weights */
	int *cnt;                  /* [n_experts + 1] slots per expert, then their first slot */
	int *slot_tok;             /* [B·top_k] token of each (token, expert) slot, grouped by expert */
	float *slot_w;             /* [B·top_k] its routing weight */
	float *xe;                 /* [B·top_k][hidden] expert inputs gathered by slot */
	float *ge, *ue;            /* [B·top_k][moe_inter] expert gate / up */
	float *de;                 /* [B·top_k][hidden] expert outputs */
	struct lg_mm *mm;          /* [2·n_experts + 8] products of one parallel loop */
	float *cosb, *sinb;        /* [2 types][B][LG_ROPE_MAX] RoPE tables of the batch */
	float *scores;             /* [nthreads][LG_FATTN_HEADS][max_cap] attention scores (the
	                              oracle's use a worker's first row) */
	float *pv;                 /* [nthreads][4][head_dim] BF16 mode: P·V's 4 partial sums */
	float *scratch;            /* [nthreads][4][stride] weight rows */
	size_t stride;
	size_t bytes;
	float *xq;                 /* [xq_cap] quantized inputs of one parallel loop's products
	                              (models with act-quantized Linears; NULL otherwise) */
	size_t xq_cap;
	struct lg_obs *obs;        /* the calibration observer, or NULL (observe.h) */
	int bf16;                  /* 1: round activations to BF16 where transformers' eager BF16
	                              forward does (lg_state_round_bf16) */
	int li;                    /* layer of the block running (for the observer) */
	int fast;                  /* 1: the Linears on the fast kernels (lg_state_fast) */
};

#endif
