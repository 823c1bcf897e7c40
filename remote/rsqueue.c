/* rsqueue.c — the remote store's work: the two job queues (demand, then
 * readahead), each chunk's struct fetch and its references, and the pool of
 * whole-chunk buffers a fetch's memory returns to (the chunk's states and
 * the locking are written at the top of rstore.c). Every function here runs
 * with s->mu held. */
#include "remote/rstore_int.h"

#include <stdlib.h>

void rqr_unref(struct rq_rs *s, struct fetch *ft)
{
	if (--ft->refs)
		return;
	if (ft->buf) {
		s->mem_used -= ft->len;
		if (ft->len == s->chunk_size && s->pool &&
		    s->mem_used + (uint64_t)(s->npool + 1) * s->chunk_size <= s->mem_max)
			s->pool[s->npool++] = ft->buf;
		else
			free(ft->buf);
		pthread_cond_broadcast(&s->mem_cv);
	}
	free(ft);
}

/* A buffer for len bytes of a chunk (mu held): a kept one when whole. */
void *rqr_buf_get(struct rq_rs *s, uint32_t len)
{
	if (len == s->chunk_size && s->npool)
		return s->pool[--s->npool];
	return malloc(len);
}

/* Queues j (mu held): demand at the tail of the hi queue, readahead of lo. */
static void enqueue(struct rq_rs *s, struct job *j, int hi)
{
	struct job **tail = hi ? &s->hi_tail : &s->lo_tail;
	struct job **head = hi ? &s->hi_head : &s->lo_head;
	j->next = NULL;
	j->hi = hi;
	if (*tail)
		(*tail)->next = j;
	else
		*head = j;
	*tail = j;
	pthread_cond_signal(&s->work_cv);
}

/* Removes j from its queue (mu held). */
void rqr_unqueue(struct rq_rs *s, struct job *j)
{
	struct job **head = j->hi ? &s->hi_head : &s->lo_head;
	struct job **tail = j->hi ? &s->hi_tail : &s->lo_tail;
	struct job *prev = NULL;
	for (struct job *p = *head; p; prev = p, p = p->next) {
		if (p != j)
			continue;
		if (prev)
			prev->next = p->next;
		else
			*head = p->next;
		if (*tail == p)
			*tail = prev;
		return;
	}
}

struct job *rqr_dequeue(struct rq_rs *s)
{
	struct job *j = s->hi_head ? s->hi_head : s->lo_head;
	if (j)
		rqr_unqueue(s, j);
	return j;
}

void rqr_enqueue_range(struct rq_rs *s, struct job *j)
{
	j->kind = JOB_RANGE;
	enqueue(s, j, 1);
}

struct fetch *rqr_want_chunk(struct rq_rs *s, size_t fi, uint64_t c, int hi, int ref)
{
	struct rfile *f = &s->files[fi];
	struct fetch *ft = f->fl[c];
	if (ft && ft->done && ft->rc)
		ft = f->fl[c] = NULL;                  /* failed, not yet cleared: a new try */
	if (ft) {
		if (hi && ft->queued && !ft->j.hi) {     /* readahead a reader now waits for */
			rqr_unqueue(s, &ft->j);
			enqueue(s, &ft->j, 1);
		}
	} else {
		if (s->offline || atomic_load(&s->closing))
			return NULL;
		ft = calloc(1, sizeof *ft);
		if (!ft)
			return NULL;
		ft->j.kind = JOB_CHUNK;
		ft->j.fi = fi;
		ft->j.c = c;
		ft->len = rqr_chunk_len(s, f, c);
		ft->refs = 1;                              /* the queue's, then the worker's */
		ft->queued = 1;
		f->fl[c] = ft;
		enqueue(s, &ft->j, hi);
	}
	if (ref)
		ft->refs++;
	return ft;
}

/* Ends queued job j (mu held, j already out of its queue) with e's error. */
void rqr_end_job(struct rq_rs *s, struct job *j, const struct rq_err *e)
{
	if (j->kind == JOB_CHUNK) {
		struct fetch *ft = (struct fetch *)j;
		ft->queued = 0;
		ft->done = 1;
		ft->rc = e->code;
		ft->err = *e;
		s->files[j->fi].fl[j->c] = NULL;
		rqr_unref(s, ft);
	} else {
		if (!j->g->rc) {
			j->g->rc = e->code;
			j->g->err = *e;
		}
		j->g->pending--;
	}
}

void rqr_refetch_all(struct rq_rs *s, size_t fi)
{
	struct rfile *f = &s->files[fi];
	for (uint64_t c = 0; c < f->nchunks && !f->failed && !f->assembled; c++)
		if (f->st[c] == CH_ABSENT && !f->fl[c])
			rqr_want_chunk(s, fi, c, 0, 0);
}
