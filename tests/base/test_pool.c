/* test_pool.c — base/pool.c: every item of [0, n) runs exactly once, in
 * chunks of at least `grain` items (the last one may be short), on 1..8
 * threads, for sizes around the grain and far above it; loops run back to
 * back (a decode step is hundreds of them) and after the workers went to
 * sleep; a worker late for a loop that has closed stays out of it (its ctx
 * is dead by then); a NULL pool runs inline. */
#include "base/pool.h"
#include "tests/tap.h"

#include <stdatomic.h>
#include <time.h>

#define MAXN 70000

struct ctx {
	atomic_uchar seen[MAXN];
	atomic_int short_chunks;     /* chunks under grain that do not end at n */
	atomic_int workers_used[8];
	size_t n, grain;
};

static void visit(void *vctx, size_t b, size_t e, int worker)
{
	struct ctx *c = vctx;
	if (e - b < c->grain && e != c->n)
		atomic_fetch_add(&c->short_chunks, 1);
	if (worker >= 0 && worker < 8)
		atomic_store(&c->workers_used[worker], 1);
	for (size_t i = b; i < e; i++)
		atomic_fetch_add(&c->seen[i], 1);
}

/* 1 when every item of [0, n) was seen once and no chunk but the last was short */
static int run(struct rq_pool *p, struct ctx *c, size_t n, size_t grain)
{
	for (size_t i = 0; i < n + 1 && i < MAXN; i++)
		atomic_store(&c->seen[i], 0);
	atomic_store(&c->short_chunks, 0);
	c->n = n;
	c->grain = grain ? grain : 1;
	rq_pool_for(p, n, grain, visit, c);
	for (size_t i = 0; i < n; i++)
		if (atomic_load(&c->seen[i]) != 1)
			return 0;
	if (n < MAXN && atomic_load(&c->seen[n]) != 0)
		return 0;
	return atomic_load(&c->short_chunks) == 0;
}

/* A loop's ctx is used only while rq_pool_for runs: each loop's ctx is
 * marked dead when it returns, and a callback that meets a dead ctx counts. */
static atomic_int dead_uses;

struct live { atomic_int alive; atomic_int items; };

static void touch(void *vctx, size_t b, size_t e, int worker)
{
	struct live *l = vctx;
	if (!atomic_load(&l->alive))
		atomic_fetch_add(&dead_uses, 1);
	for (volatile int k = 0; worker && k < 2000; k++)   /* a worker slower than the caller */
		;
	if (!atomic_load(&l->alive))
		atomic_fetch_add(&dead_uses, 1);
	atomic_fetch_add(&l->items, (int)(e - b));
}

/* Tiny loops back to back (the caller often takes every item before a worker
 * wakes: the worker must not enter a loop that has closed), some right after
 * the workers went to sleep. 1 when every loop ran each item once and no
 * callback ever saw a finished loop's ctx. */
static int late_workers(struct rq_pool *p, int loops)
{
	int bad = 0;
	for (int i = 0; i < loops; i++) {
		if (i % 500 == 499) {
			struct timespec ts = {0, 2 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
		struct live l;
		atomic_store(&l.alive, 1);
		atomic_store(&l.items, 0);
		size_t n = 2 + (size_t)(i % 7);
		rq_pool_for(p, n, 1, touch, &l);
		bad += atomic_load(&l.items) != (int)n;
		atomic_store(&l.alive, 0);
	}
	return !bad && !atomic_load(&dead_uses);
}

int main(void)
{
	static struct ctx c;
	static const size_t sizes[] = {0, 1, 3, 9, 56, 57, 960, 3072, 49152, 69999};
	static const size_t grains[] = {0, 1, 4, 56, 1000};
	for (int th = 1; th <= 8; th *= 2) {
		struct rq_pool *p = NULL;
		TAP_OK(rq_pool_create(th, &p) == 0 && rq_pool_size(p) == th, "pool of %d threads", th);
		if (!p)
			continue;
		int bad = 0, loops = 0;
		for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
			for (size_t g = 0; g < sizeof grains / sizeof *grains; g++, loops++)
				if (!run(p, &c, sizes[a], grains[g])) {
					bad++;
					printf("# %d threads: n %zu grain %zu: an item not run exactly once, or a short chunk\n",
					       th, sizes[a], grains[g]);
				}
		TAP_OK(!bad, "%d threads: %d loops (n 0..69999, grain 0..1000), each item once, chunks >= grain",
		       th, loops);
		/* back to back, as a decode step runs them */
		bad = 0;
		for (int i = 0; i < 2000; i++)
			bad += !run(p, &c, 960 + (size_t)(i % 7), 56);
		TAP_OK(!bad, "%d threads: 2000 loops back to back, each item once (%d bad)", th, bad);
		/* after the workers slept (they spin 100 us first) */
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
		for (int w = 0; w < 8; w++)
			atomic_store(&c.workers_used[w], 0);
		int ok = run(p, &c, 69999, 1);
		int used = 0;
		for (int w = 0; w < 8; w++)
			used += atomic_load(&c.workers_used[w]);
		TAP_OK(ok && used >= 1 && used <= th, "%d threads: a loop after a sleep, %d of them took chunks",
		       th, used);
		TAP_OK(late_workers(p, 20000), "%d threads: 20000 loops of 2..8 items, some after a sleep: "
		       "each item once, no worker uses a loop's ctx after it returned", th);
		rq_pool_destroy(p);
	}
	TAP_OK(run(NULL, &c, 1000, 7), "NULL pool: inline, each item once");
	rq_pool_destroy(NULL);
	TAP_OK(1, "rq_pool_destroy(NULL) returns");
	return tap_done();
}
