/* pool.c — persistent workers; one parallel loop at a time.
 *
 * State: `gen` counts loops started. A loop publishes fn/ctx/n/grain, bumps
 * gen and broadcasts; workers (and the caller) claim chunks with an atomic
 * cursor until it passes n, then report done. The caller waits until every
 * worker has reported for this gen, so ctx outlives all uses. */
#include "base/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct rq_pool {
	int nthreads;                 /* including the caller */
	pthread_t *tid;               /* nthreads - 1 workers */
	pthread_mutex_t loop_lock;    /* serializes rq_pool_for callers */
	pthread_mutex_t mu;           /* protects gen, done, stop */
	pthread_cond_t start_cv, done_cv;
	unsigned long gen;            /* loops started (mu) */
	int done;                     /* workers finished with gen (mu) */
	int stop;                     /* (mu) */
	/* the current loop, written before gen is bumped */
	rq_pool_fn fn;
	void *ctx;
	size_t n, chunk;
	atomic_size_t cursor;
};

int rq_cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

static void run_chunks(struct rq_pool *p, int worker)
{
	for (;;) {
		size_t b = atomic_fetch_add(&p->cursor, p->chunk);
		if (b >= p->n)
			return;
		size_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
		p->fn(p->ctx, b, e, worker);
	}
}

struct worker_arg { struct rq_pool *p; int id; };

static void *worker_main(void *arg)
{
	struct worker_arg *wa = arg;
	struct rq_pool *p = wa->p;
	int id = wa->id;
	free(wa);
	unsigned long seen = 0;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->start_cv, &p->mu);
		if (p->stop) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		seen = p->gen;
		pthread_mutex_unlock(&p->mu);
		run_chunks(p, id);
		pthread_mutex_lock(&p->mu);
		if (++p->done == p->nthreads - 1)
			pthread_cond_signal(&p->done_cv);
		pthread_mutex_unlock(&p->mu);
	}
}

int rq_pool_create(int nthreads, struct rq_pool **out)
{
	if (nthreads <= 0)
		nthreads = rq_cpu_count();
	struct rq_pool *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	p->nthreads = nthreads;
	pthread_mutex_init(&p->loop_lock, NULL);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->start_cv, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	p->tid = calloc(nthreads > 1 ? nthreads - 1 : 1, sizeof *p->tid);
	if (!p->tid) {
		free(p);
		return -ENOMEM;
	}
	for (int i = 0; i < nthreads - 1; i++) {
		struct worker_arg *wa = malloc(sizeof *wa);
		if (wa) {
			wa->p = p;
			wa->id = i + 1;
		}
		if (!wa || pthread_create(&p->tid[i], NULL, worker_main, wa) != 0) {
			free(wa);
			p->nthreads = i + 1;   /* destroy joins the ones started */
			rq_pool_destroy(p);
			return -EAGAIN;
		}
	}
	*out = p;
	return 0;
}

void rq_pool_destroy(struct rq_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->start_cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nthreads - 1; i++)
		pthread_join(p->tid[i], NULL);
	free(p->tid);
	free(p);
}

int rq_pool_size(const struct rq_pool *p)
{
	return p ? p->nthreads : 1;
}

void rq_pool_for(struct rq_pool *p, size_t n, size_t grain, rq_pool_fn fn, void *ctx)
{
	if (n == 0)
		return;
	if (grain == 0)
		grain = 1;
	if (!p || p->nthreads == 1 || n <= grain) {
		fn(ctx, 0, n, 0);
		return;
	}
	pthread_mutex_lock(&p->loop_lock);
	size_t chunks = (size_t)p->nthreads * 4;
	size_t chunk = (n + chunks - 1) / chunks;
	if (chunk < grain)
		chunk = grain;
	p->fn = fn;
	p->ctx = ctx;
	p->n = n;
	p->chunk = chunk;
	atomic_store(&p->cursor, 0);
	pthread_mutex_lock(&p->mu);
	p->done = 0;
	p->gen++;
	pthread_cond_broadcast(&p->start_cv);
	pthread_mutex_unlock(&p->mu);
	run_chunks(p, 0);
	pthread_mutex_lock(&p->mu);
	while (p->done < p->nthreads - 1)
		pthread_cond_wait(&p->done_cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
	pthread_mutex_unlock(&p->loop_lock);
}
