/* pool.h — a fixed set of worker threads for data-parallel loops.
 *
 * rq_pool_for() splits [0, n) into chunks of at least `grain` items and runs
 * fn on them from the workers and the calling thread; it returns when all
 * chunks are done. Calls from several threads are serialized (one loop runs
 * at a time), so a pool may be shared. A NULL pool runs fn(ctx, 0, n, 0)
 * inline. */
#ifndef RQ_BASE_POOL_H
#define RQ_BASE_POOL_H

#include <stddef.h>

struct rq_pool;

typedef void (*rq_pool_fn)(void *ctx, size_t begin, size_t end, int worker);

/* nthreads <= 0: one per online CPU. The count includes the calling thread. */
int rq_pool_create(int nthreads, struct rq_pool **out);
void rq_pool_destroy(struct rq_pool *p);
int rq_pool_size(const struct rq_pool *p);       /* 1 for NULL */
void rq_pool_for(struct rq_pool *p, size_t n, size_t grain, rq_pool_fn fn, void *ctx);
int rq_cpu_count(void);

#endif
