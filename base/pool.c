/* pool.c — persistent workers; one parallel loop at a time.
 *
 * State: `gen` counts loops started; `gate` is the current loop's door:
 * (gen << 17) | CLOSED | active, where active counts workers inside. A loop
 * publishes fn/ctx/n/grain, opens the gate for its gen, bumps gen and wakes
 * the workers; a worker enters only through the open gate of the loop it
 * woke for (one CAS), claims chunks with an atomic cursor until it passes n,
 * then leaves (active--). The caller claims chunks too; when none are left
 * it closes the gate (a worker that comes later does not enter, and touches
 * nothing of the loop) and waits only for the workers inside, so ctx
 * outlives all uses, and a worker the OS has not run yet (a busy machine)
 * costs the loop nothing: the caller does its share instead of waiting for
 * it to be scheduled. That wait, ~150 times a decode step, had made two
 * threads three times slower than one on a loaded VM.
 *
 * Waiting spins first, then sleeps. A decode step is hundreds of short loops
 * (a few hundred microseconds each); waking a sleeping thread through the
 * kernel for each cost a fifth of the engine's decode time. So a worker that
 * finished a loop watches `gen` for SPIN_NS before it sleeps on start_cv, and
 * the caller watches `gate` for SPIN_NS before it sleeps on done_cv. The
 * condition variables are signalled only when someone sleeps on them, and
 * a loop whose threads all spin takes no lock but loop_lock:
 *   start  caller: gen++, then if sleepers > 0: broadcast under mu;
 *          worker: under mu: sleepers++, wait while gen unchanged, sleepers--
 *   done   worker: active--, then if it was the last and caller_waits:
 *          signal under mu;
 *          caller: under mu: caller_waits = 1, wait while active > 0
 * Each side changes its atomic, then reads the other's (all sequentially
 * consistent): either the waker sees the sleeper's flag, or the sleeper's
 * re-check sees the change; and the sleeper holds mu from raising its flag
 * until it waits, so a waker that saw the flag signals after the wait began.
 * No wake-up is lost. */
#include "base/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 100000            /* how long a waiter spins before it sleeps */
#define GATE_SHIFT 17
#define CLOSED (1ull << 16)
#define ACTIVE (CLOSED - 1)

struct rq_pool {
	int nthreads;                 /* including the caller */
	pthread_t *tid;               /* nthreads - 1 workers */
	pthread_mutex_t loop_lock;    /* serializes rq_pool_for callers */
	pthread_mutex_t mu;           /* the sleeping side of the waits below */
	pthread_cond_t start_cv, done_cv;
	atomic_ulong gen;             /* loops started */
	atomic_ullong gate;           /* (gen << GATE_SHIFT) | CLOSED | workers inside */
	atomic_int stop;
	atomic_int sleepers;          /* workers asleep on start_cv (changed under mu) */
	atomic_int caller_waits;      /* the caller asleep on done_cv (changed under mu) */
	/* the current loop, written before gen is bumped */
	rq_pool_fn fn;
	void *ctx;
	size_t n, chunk;              /* items; the smallest chunk (grain) */
	atomic_size_t cursor;         /* next item to claim */
};

int rq_cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Spins until *v != old (1) or SPIN_NS pass (0). */
static int spin_ulong(atomic_ulong *v, unsigned long old, atomic_int *stop)
{
	long long t0 = now_ns();
	for (unsigned i = 1;; i++) {
		if (atomic_load_explicit(v, memory_order_acquire) != old ||
		    atomic_load_explicit(stop, memory_order_relaxed))
			return 1;
		cpu_relax();
		if (!(i & 255) && now_ns() - t0 > SPIN_NS)
			return 0;
	}
}

/* Spins until no worker is inside the gate (1) or SPIN_NS pass (0). */
static int spin_empty(atomic_ullong *gate)
{
	long long t0 = now_ns();
	for (unsigned i = 1;; i++) {
		if (!(atomic_load_explicit(gate, memory_order_acquire) & ACTIVE))
			return 1;
		cpu_relax();
		if (!(i & 255) && now_ns() - t0 > SPIN_NS)
			return 0;
	}
}

/* Enters loop g through its gate: 1 when open (active counted), 0 when
 * closed or another loop's (the worker then waits for the next). */
static int enter(struct rq_pool *p, unsigned long g)
{
	unsigned long long want = ((unsigned long long)g << GATE_SHIFT) >> GATE_SHIFT;
	unsigned long long w = atomic_load(&p->gate);
	while ((w >> GATE_SHIFT) == want && !(w & CLOSED))
		if (atomic_compare_exchange_weak(&p->gate, &w, w + 1))
			return 1;
	return 0;
}

/* Guided chunks: each claim takes 1/(2·nthreads) of what is left, at least
 * `grain` items. Big chunks while much is left keep claims rare; small ones
 * at the end keep the threads finishing together: a loop ends when its
 * slowest thread does, and a decode step is hundreds of short loops, so the
 * tail of each (one whole fixed-size chunk on one thread, at worst) was a
 * tenth of the step. */
static void run_chunks(struct rq_pool *p, int worker)
{
	size_t n = p->n, grain = p->chunk, div = 2 * (size_t)p->nthreads;
	size_t b = atomic_load_explicit(&p->cursor, memory_order_relaxed);
	for (;;) {
		if (b >= n)
			return;
		size_t c = (n - b) / div;
		if (c < grain)
			c = grain;
		size_t e = n - b > c ? b + c : n;
		if (!atomic_compare_exchange_weak_explicit(&p->cursor, &b, e, memory_order_relaxed,
		                                           memory_order_relaxed))
			continue;   /* b now holds the cursor another thread moved */
		p->fn(p->ctx, b, e, worker);
		b = atomic_load_explicit(&p->cursor, memory_order_relaxed);
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
		if (!spin_ulong(&p->gen, seen, &p->stop)) {
			pthread_mutex_lock(&p->mu);
			atomic_fetch_add(&p->sleepers, 1);
			while (!atomic_load(&p->stop) && atomic_load(&p->gen) == seen)
				pthread_cond_wait(&p->start_cv, &p->mu);
			atomic_fetch_sub(&p->sleepers, 1);
			pthread_mutex_unlock(&p->mu);
		}
		if (atomic_load(&p->stop))
			return NULL;
		seen = atomic_load_explicit(&p->gen, memory_order_acquire);
		if (!enter(p, seen))
			continue;
		run_chunks(p, id);
		if (!((atomic_fetch_sub(&p->gate, 1) - 1) & ACTIVE) && atomic_load(&p->caller_waits)) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done_cv);
			pthread_mutex_unlock(&p->mu);
		}
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
	atomic_store(&p->stop, 1);
	pthread_mutex_lock(&p->mu);
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
	p->fn = fn;
	p->ctx = ctx;
	p->n = n;
	p->chunk = grain;
	atomic_store(&p->cursor, 0);
	unsigned long g = atomic_load(&p->gen) + 1;   /* gen changes only here, under loop_lock */
	atomic_store(&p->gate, ((unsigned long long)g << GATE_SHIFT));
	atomic_store(&p->gen, g);
	if (atomic_load(&p->sleepers)) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->start_cv);
		pthread_mutex_unlock(&p->mu);
	}
	run_chunks(p, 0);
	/* no chunk left: close the gate, wait for the workers inside only */
	if ((atomic_fetch_or(&p->gate, CLOSED) & ACTIVE) && !spin_empty(&p->gate)) {
		pthread_mutex_lock(&p->mu);
		atomic_store(&p->caller_waits, 1);
		while (atomic_load(&p->gate) & ACTIVE)
			pthread_cond_wait(&p->done_cv, &p->mu);
		atomic_store(&p->caller_waits, 0);
		pthread_mutex_unlock(&p->mu);
	}
	pthread_mutex_unlock(&p->loop_lock);
}
