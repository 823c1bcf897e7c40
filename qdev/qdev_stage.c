/* qdev_stage.c — staging buffers for job inputs (rq_quantizer_stage): the
 * caller preads SRC straight into pinned memory of the GPU's context, so a
 * GPU job copies it to the device by DMA and no memcpy runs under the GPU
 * lock. Pinned buffers belong to one context (struct qgen): at most
 * QD_PIN_MAX bytes of them, kept on its free list when returned (the
 * smallest that fits is reused) and freed with it by the reaper (qdev.c):
 * neither staging nor returning a buffer ever frees pinned memory, which
 * could wait for a kernel. Plain memory whenever the GPU is not READY or the
 * bound is reached. */
#include "qdev/qdev.h"
#include "qdev/qdev_int.h"
#include "kernels/kquant.h"

#include <stdint.h>
#include <stdlib.h>

/* ---- staging ------------------------------------------------------------- */

void *rq_quantizer_stage(struct rq_quantizer *q, size_t bytes)
{
	size_t cap = (bytes + QD_PIN_ROUND - 1) / QD_PIN_ROUND * QD_PIN_ROUND;
	struct qbuf *b = NULL;
	pthread_mutex_lock(&q->mu);
	struct qgen *g = q->state == Q_READY ? q->cur : NULL;
	if (g) {                              /* the smallest returned one that fits */
		struct qbuf **best = NULL;
		for (struct qbuf **pp = &g->free; *pp; pp = &(*pp)->next) {
			if ((*pp)->cap >= bytes && (!best || (*pp)->cap < (*best)->cap))
				best = pp;
		}
		if (best) {
			b = *best;
			*best = b->next;
		} else if (g->pinned + cap > QD_PIN_MAX) {
			g = NULL;                     /* full: plain memory (freeing pinned buffers
			                                 here could wait for a running kernel) */
		}
		if (g) {                          /* lent from now on: g stays open */
			g->lent++;
			if (!b)
				g->pinned += cap;
		}
	}
	pthread_mutex_unlock(&q->mu);
	if (g && !b) {                        /* allocate outside the lock */
		b = calloc(1, sizeof *b);
		void *p = NULL;
		if (b && kq_host_alloc(g->k, cap, &p, NULL, 0) == 0) {
			*b = (struct qbuf){.p = p, .cap = cap, .gen = g};
		} else {
			free(b);
			b = NULL;
			pthread_mutex_lock(&q->mu);
			g->lent--;
			g->pinned -= cap;
			pthread_cond_broadcast(&q->cv);
			pthread_mutex_unlock(&q->mu);
		}
	}
	if (!b) {                             /* plain memory */
		b = calloc(1, sizeof *b);
		void *p = b ? malloc(bytes ? bytes : 1) : NULL;
		if (!p) {
			free(b);
			return NULL;
		}
		*b = (struct qbuf){.p = p, .cap = bytes};
	}
	pthread_mutex_lock(&q->mu);
	b->next = q->lent;
	q->lent = b;
	if (b->gen)
		q->st.staged_pinned++;
	else
		q->st.staged_plain++;
	pthread_mutex_unlock(&q->mu);
	return b->p;
}

void rq_quantizer_unstage(struct rq_quantizer *q, void *buf)
{
	if (!buf)
		return;
	pthread_mutex_lock(&q->mu);
	struct qbuf **pp = &q->lent, *b;
	while (*pp && (*pp)->p != buf)
		pp = &(*pp)->next;
	b = *pp;
	if (b) {
		*pp = b->next;
		if (b->gen) {                     /* kept for reuse; freed with its context */
			b->next = b->gen->free;
			b->gen->free = b;
			b->gen->lent--;
			pthread_cond_broadcast(&q->cv);
			b = NULL;
		}
	}
	pthread_mutex_unlock(&q->mu);
	if (b) {
		free(b->p);
		free(b);
	}
}

unsigned qd_pinned_mask(struct rq_quantizer *q, struct qgen *g, const struct rq_qmod *m,
                        int n)
{
	unsigned mask = 0;
	for (int i = 0; i < n && i < 32; i++) {
		const uint8_t *w = (const uint8_t *)m[i].w;
		size_t bytes = m[i].rows * m[i].cols * 2;
		for (struct qbuf *b = q->lent; b; b = b->next) {
			const uint8_t *p = b->p;
			if (b->gen == g && w >= p && w <= p + b->cap && bytes <= (size_t)(p + b->cap - w)) {
				mask |= 1u << i;
				break;
			}
		}
	}
	return mask;
}
