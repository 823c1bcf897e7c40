/* test_cache_peer.c — max_bytes shared with a neighbour (cache.h:
 * rq_cache_set_peer, rq_cache_trim): the neighbour (a fake remote store
 * here: a byte count and a trim that frees what it is allowed to) is asked
 * to free the excess first; the cache evicts its own least recently used
 * entries for the rest; entries + neighbour stay <= max_bytes; with no
 * neighbour nothing changes; rq_cache_trim frees what it is asked, LRU
 * first. TAP. */
#include "base/err.h"
#include "cache/cache.h"
#include "tests/tap.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { N = 100000 };

struct fake {
	uint64_t held;             /* bytes the neighbour holds */
	uint64_t evictable;        /* of which it may free */
	uint64_t asked, calls;     /* what trim was asked, in all, and how often */
};

static uint64_t fake_bytes(void *ctx)
{
	return ((struct fake *)ctx)->held;
}

static uint64_t fake_trim(void *ctx, uint64_t n)
{
	struct fake *f = ctx;
	f->asked += n;
	f->calls++;
	uint64_t got = n < f->evictable ? n : f->evictable;
	f->evictable -= got;
	f->held -= got;
	return got;
}

static struct rq_cache_key key_of(int i)
{
	char d[32];
	snprintf(d, sizeof d, "peer-%d", i);
	struct rq_cache_key k;
	rq_cache_key_of(d, strlen(d), &k);
	return k;
}

static int put(struct rq_cache *c, int i)
{
	static uint8_t buf[N];
	memset(buf, i, sizeof buf);
	struct rq_cache_key k = key_of(i);
	struct rq_err e = {0};
	return rq_cache_put(c, &k, buf, N, &e);
}

static int has(struct rq_cache *c, int i)
{
	struct rq_cache_key k = key_of(i);
	return rq_cache_has(c, &k);
}

static struct rq_cache_stats stats(struct rq_cache *c)
{
	struct rq_cache_stats s;
	rq_cache_get_stats(c, &s);
	return s;
}

int main(void)
{
	char root[] = "/tmp/rq-cache-peer-XXXXXX";
	if (!mkdtemp(root)) {
		printf("Bail out! mkdtemp\n");
		return 1;
	}
	const uint64_t max = 5 * (uint64_t)N + N / 2;
	struct rq_cache_opts o = {.dir = root, .max_bytes = max};
	struct rq_cache *c = NULL;
	struct rq_err e = {0};
	if (rq_cache_open(&o, &c, &e)) {
		printf("Bail out! open %s: %s\n", root, e.msg);
		return 1;
	}
	struct fake f = {.held = 2 * (uint64_t)N, .evictable = N};
	struct rq_cache_peer p = {.bytes = fake_bytes, .trim = fake_trim, .ctx = &f};
	rq_cache_set_peer(c, &p);
	for (int i = 0; i < 3; i++)
		put(c, i);
	TAP_OK(f.calls == 0 && stats(c).bytes == 3 * (uint64_t)N,
	       "3 entries + the neighbour's 2: under the limit, nobody asked to trim");
	put(c, 3);                 /* 4 + 2 > 5.5: the neighbour frees first */
	TAP_OK(f.calls == 1 && f.asked == N / 2 && f.held == 2 * (uint64_t)N - N / 2 &&
	       stats(c).bytes == 4 * (uint64_t)N && stats(c).evicted == 0,
	       "a 4th entry: the neighbour asked for the excess (%llu bytes) and freed it; no "
	       "entry evicted", (unsigned long long)f.asked);
	put(c, 4);                 /* the neighbour can free only N/2 more: entry 0 goes */
	struct rq_cache_stats s = stats(c);
	TAP_OK(f.evictable == 0 && !has(c, 0) && has(c, 1) && has(c, 4) && s.evicted == 1 &&
	       s.bytes + f.held <= max, "a 5th: the neighbour frees what it can, the least "
	       "recently used entry goes for the rest (%llu + %llu <= %llu)",
	       (unsigned long long)s.bytes, (unsigned long long)f.held, (unsigned long long)max);
	f.held += 2 * (uint64_t)N; /* the neighbour grew (nothing of it evictable) */
	put(c, 5);
	s = stats(c);
	TAP_OK(s.bytes + f.held <= max && has(c, 5) && has(c, 4) && !has(c, 1) && !has(c, 3),
	       "the neighbour grew by 2 entries' worth: the next put evicts down to %llu + %llu "
	       "<= %llu", (unsigned long long)s.bytes, (unsigned long long)f.held,
	       (unsigned long long)max);
	uint64_t before = s.bytes;
	uint64_t got = rq_cache_trim(c, N / 2);
	s = stats(c);
	TAP_OK(got == N && s.bytes == before - got && !has(c, 4) && has(c, 5),
	       "rq_cache_trim(N / 2): one entry (%llu bytes) freed, the least recently used",
	       (unsigned long long)got);
	rq_cache_set_peer(c, NULL);
	f.held = 0;
	put(c, 6);
	got = rq_cache_trim(c, UINT64_MAX);
	TAP_OK(!has(c, 5) && stats(c).bytes == 0 && got == 2 * (uint64_t)N,
	       "no neighbour: the cache alone; trim everything frees %llu", (unsigned long long)got);
	rq_cache_close(c);
	if (!tap_failed)
		tap_rmtree(root);
	return tap_done();
}
