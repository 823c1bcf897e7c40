/* state.c — a forward state's buffers (KV cache, one batch's activations,
 * scratch) sized once from the model and the batch, and its small setters.
 * The layers that use them: forward.c. */
#include "engine/model/forward_int.h"
#include "engine/model/fastattn.h"
#include "engine/model/ops.h"
#include "base/err.h"
#include "base/pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void *zalloc(struct lg_state *s, size_t n, size_t size, int *fail)
{
	void *p = calloc(n ? n : 1, size);
	if (!p)
		*fail = 1;
	s->bytes += n * size;
	return p;
}

int lg_state_create(const struct lg_model *m, int max_ctx, int max_batch, struct rq_pool *pool,
                    struct lg_state **out, struct rq_err *err)
{
	const struct lg_config *c = &m->cfg;
	if (max_ctx < 1)
		return rq_errf(err, -EINVAL, "context length %d < 1", max_ctx);
	struct lg_state *s = calloc(1, sizeof *s);
	if (!s)
		return rq_errf(err, -ENOMEM, "out of memory");
	int fail = 0, L = c->n_layers, H = c->hidden, E = c->n_experts, K = c->top_k;
	s->m = m;
	s->pool = pool;
	s->max_ctx = max_ctx;
	s->B = max_batch > 0 ? max_batch : 64;
	if (s->B > max_ctx)
		s->B = max_ctx;
	s->nthreads = rq_pool_size(pool);
	s->qd = c->n_heads_max * c->head_dim;
	s->kvd = c->n_kv_heads * c->head_dim;
	s->fd = c->inter > c->shared_inter ? c->inter : c->shared_inter;
	int B = s->B, BK = B * (K > 0 ? K : 1);
	s->kc = zalloc(s, L, sizeof *s->kc, &fail);
	s->vc = zalloc(s, L, sizeof *s->vc, &fail);
	s->cap = zalloc(s, L, sizeof *s->cap, &fail);
	for (int i = 0; i < L && !fail; i++) {
		long cap = max_ctx;
		if (m->layers[i].type == LG_SLIDING && (long)c->sliding_window + B - 1 < cap)
			cap = (long)c->sliding_window + B - 1;
		s->cap[i] = (int)cap;
		if (cap > s->max_cap)
			s->max_cap = (int)cap;
		s->kc[i] = zalloc(s, (size_t)cap * s->kvd, sizeof(float), &fail);
		s->vc[i] = zalloc(s, (size_t)cap * s->kvd, sizeof(float), &fail);
	}
	s->x = zalloc(s, (size_t)B * H, sizeof(float), &fail);
	s->xn = zalloc(s, (size_t)B * H, sizeof(float), &fail);
	s->q = zalloc(s, (size_t)B * s->qd, sizeof(float), &fail);
	s->att = zalloc(s, (size_t)B * s->qd, sizeof(float), &fail);
	s->g = zalloc(s, (size_t)B * s->qd, sizeof(float), &fail);
	s->k = zalloc(s, (size_t)B * s->kvd, sizeof(float), &fail);
	s->v = zalloc(s, (size_t)B * s->kvd, sizeof(float), &fail);
	s->y = zalloc(s, (size_t)B * H, sizeof(float), &fail);
	s->ys = zalloc(s, (size_t)B * H, sizeof(float), &fail);
	s->h1 = zalloc(s, (size_t)B * s->fd, sizeof(float), &fail);
	s->h2 = zalloc(s, (size_t)B * s->fd, sizeof(float), &fail);
	s->rl = zalloc(s, (size_t)B * E, sizeof(float), &fail);
	s->sgl = zalloc(s, B, sizeof(float), &fail);
	s->tsel = zalloc(s, BK, sizeof(int), &fail);
	s->tw = zalloc(s, BK, sizeof(float), &fail);
	s->cnt = zalloc(s, (size_t)E + 1, sizeof(int), &fail);
	s->slot_tok = zalloc(s, BK, sizeof(int), &fail);
	s->slot_w = zalloc(s, BK, sizeof(float), &fail);
	s->xe = zalloc(s, (size_t)BK * H, sizeof(float), &fail);
	s->ge = zalloc(s, (size_t)BK * c->moe_inter, sizeof(float), &fail);
	s->ue = zalloc(s, (size_t)BK * c->moe_inter, sizeof(float), &fail);
	s->de = zalloc(s, (size_t)BK * H, sizeof(float), &fail);
	s->mm = zalloc(s, 2 * (size_t)E + 8, sizeof *s->mm, &fail);
	s->cosb = zalloc(s, 2 * (size_t)B * LG_ROPE_MAX, sizeof(float), &fail);
	s->sinb = zalloc(s, 2 * (size_t)B * LG_ROPE_MAX, sizeof(float), &fail);
	s->scores = zalloc(s, (size_t)s->nthreads * LG_FATTN_HEADS * s->max_cap, sizeof(float), &fail);
	s->pv = zalloc(s, (size_t)s->nthreads * 4 * c->head_dim, sizeof(float), &fail);
	size_t st = H;
	int widths[] = {s->qd, c->inter, c->moe_inter, c->shared_inter};
	for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
		if ((size_t)widths[i] > st)
			st = widths[i];
	s->stride = (st + 15) & ~(size_t)15;
	s->scratch = zalloc(s, (size_t)s->nthreads * 4 * s->stride, sizeof(float), &fail);
	if (m->n_act) {
		/* the most input floats one matmul() call quantizes: q/k/v/g (or the
		 * shared expert's gate/up/router/gate) on H each, o on qd, the routed
		 * experts' gate/up on B·K rows, their down (+ the shared down) */
		size_t k1 = K > 0 ? (size_t)K : 1, w = 4 * (size_t)H;
		size_t cand[] = {(size_t)s->qd, (size_t)s->fd + k1 * c->moe_inter, 2 * k1 * H};
		for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
			if (cand[i] > w)
				w = cand[i];
		s->xq_cap = (size_t)B * w;
		s->xq = zalloc(s, s->xq_cap, sizeof(float), &fail);
	}
	if (fail) {
		lg_state_free(s);
		return rq_errf(err, -ENOMEM, "out of memory for a %d-token context", max_ctx);
	}
	*out = s;
	return 0;
}

void lg_state_free(struct lg_state *s)
{
	if (!s)
		return;
	for (int i = 0; s->kc && i < s->m->cfg.n_layers; i++) {
		free(s->kc[i]);
		free(s->vc[i]);
	}
	void *bufs[] = {s->kc, s->vc, s->cap, s->x, s->xn, s->q, s->att, s->g, s->k, s->v, s->y, s->ys,
	                s->h1, s->h2, s->rl, s->sgl, s->tsel, s->tw, s->cnt, s->slot_tok, s->slot_w, s->xe, s->ge, s->ue, s->de,
	                s->mm, s->cosb, s->sinb, s->scores, s->pv, s->scratch, s->xq};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		free(bufs[i]);
	free(s);
}

void lg_state_reset(struct lg_state *s)
{
	s->pos = 0;
}

int lg_state_pos(const struct lg_state *s)
{
	return s->pos;
}

size_t lg_state_bytes(const struct lg_state *s)
{
	return s->bytes;
}

void lg_state_observe(struct lg_state *s, struct lg_obs *obs)
{
	s->obs = obs;
}

void lg_state_round_bf16(struct lg_state *s, int on)
{
	s->bf16 = !!on;
}

void lg_state_fast(struct lg_state *s, int on)
{
	s->fast = !!on;
}
