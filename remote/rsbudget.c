/* rsbudget.c — the remote store's disk budget (rstore.h: rq_rs_set_budget,
 * rq_rs_trim, rq_rs_pin; the policy is written at the top of rstore.c,
 * "Disk budget").
 *
 * Unit of eviction: a whole file of the store, i.e. everything one repo
 * file holds on disk: its chunk directory (sparse data + sum files) or its
 * assembled copy. A chunk alone cannot go (its bytes sit inside the file's
 * sparse data). A file is in use, and never evicted, while
 *   users > 0    a read or fetch_file of it is running,
 *   pins > 0     a caller holds its assembled copy open (rq_rs_pin),
 *   assembling   its chunks are being checked and renamed,
 *   evicting     another thread is evicting it,
 *   fl[c]        a chunk of it is being fetched (readahead included): the
 *                worker will store it.
 * Eviction under mu marks the file empty (every chunk absent, not assembled,
 * bytes uncounted) and sets evicting; the unlinks run without the lock; a
 * worker about to store a chunk of an evicting file waits until the
 * unlinks are done (so its chunk is not unlinked under it). A read that
 * comes meanwhile sees the file absent and fetches. Victims: the least
 * recently used (last_use: a read, a stored chunk, an assembly; at open the
 * mtime on disk). Stores sharing the cache directory (other mounts) count
 * and evict what each sees; a file one of them evicts under another's
 * reader is a miss there (ENOENT or a bad sum: fetched again), never a
 * wrong byte. */
#include "remote/rstore_int.h"
#include "remote/chunk.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The bytes f holds on disk as counted in bytes_on_disk (mu held). */
static uint64_t held(const struct rq_rs *s, const struct rfile *f)
{
	if (f->assembled)
		return f->size;
	uint64_t b = 0;
	for (uint64_t c = 0; f->npresent && c < f->nchunks; c++)
		if (f->st[c] != CH_ABSENT)
			b += rqr_chunk_file_size(rqr_chunk_len(s, f, c));
	return b;
}

/* Whether f may be evicted now (mu held): something on disk, nothing using it. */
static int evictable(const struct rfile *f)
{
	if ((!f->assembled && !f->npresent) || f->users || f->pins || f->assembling ||
	    f->evicting)
		return 0;
	for (uint64_t c = 0; c < f->nchunks; c++)
		if (f->fl[c])
			return 0;
	return 1;
}

/* The least recently used evictable file but keep, or SIZE_MAX (mu held). */
static size_t pick(const struct rq_rs *s, size_t keep)
{
	size_t best = SIZE_MAX;
	for (size_t i = 0; i < s->nfiles; i++) {
		const struct rfile *f = &s->files[i];
		if (i == keep || !evictable(f))
			continue;
		if (best == SIZE_MAX || f->last_use < s->files[best].last_use)
			best = i;
	}
	return best;
}

/* Evicts up to `want` bytes (never file keep); the bytes freed. No lock held. */
static uint64_t trim(struct rq_rs *s, uint64_t want, size_t keep)
{
	uint64_t freed = 0;
	pthread_mutex_lock(&s->mu);
	while (freed < want && !atomic_load(&s->closing)) {
		size_t i = pick(s, keep);
		if (i == SIZE_MAX)
			break;
		struct rfile *f = &s->files[i];
		uint64_t b = held(s, f);
		int had = f->assembled;
		for (uint64_t c = 0; c < f->nchunks; c++)
			f->st[c] = CH_ABSENT;
		f->npresent = 0;
		rqr_hash_reset(s, f);
		f->assembled = 0;
		f->evicting = 1;
		s->st.bytes_on_disk -= b < s->st.bytes_on_disk ? b : s->st.bytes_on_disk;
		s->st.evicted_files++;
		s->st.evicted_bytes += b;
		freed += b;
		pthread_mutex_unlock(&s->mu);
		rqr_chunk_drop_all(s->dfd, f->dir);
		if (had)
			unlink(f->apath);
		rqr_log(s, "remote: %s evicted from the cache (%llu bytes, the least recently used "
		        "file nothing reads now) to stay under --cache-max; fetched again when read",
		        f->name, (unsigned long long)b);
		pthread_mutex_lock(&s->mu);
		f->evicting = 0;
		pthread_cond_broadcast(&s->done_cv);
	}
	pthread_mutex_unlock(&s->mu);
	return freed;
}

/* What the others sharing the budget hold now (budget_mu: never with mu). */
static uint64_t others_bytes(struct rq_rs *s)
{
	pthread_mutex_lock(&s->budget_mu);
	uint64_t b = s->others ? s->others(s->others_ctx) : 0;
	pthread_mutex_unlock(&s->budget_mu);
	return b;
}

int rqr_reserve(struct rq_rs *s, size_t fi, uint64_t need)
{
	for (int tries = 0; tries < 3; tries++) {
		pthread_mutex_lock(&s->mu);
		int limited = s->max_bytes != 0;
		pthread_mutex_unlock(&s->mu);
		uint64_t other = limited ? others_bytes(s) : 0;   /* (no limit: nobody asked) */
		pthread_mutex_lock(&s->mu);
		uint64_t max = s->max_bytes, have = s->st.bytes_on_disk;
		if (!max || have + other + need <= max) {
			s->st.bytes_on_disk += need;
			s->files[fi].last_use = rqr_now_ns();
			pthread_mutex_unlock(&s->mu);
			return 0;
		}
		/* Evict only when that is enough: files dropped for a chunk that is
		 * not kept anyway would be fetched again for nothing. */
		uint64_t over = have + other + need - max, can = 0;
		for (size_t i = 0; i < s->nfiles && can < over; i++)
			if (i != fi && evictable(&s->files[i]))
				can += held(s, &s->files[i]);
		pthread_mutex_unlock(&s->mu);
		if (can < over || !trim(s, over, fi))
			break;
	}
	pthread_mutex_lock(&s->mu);
	s->st.not_kept++;
	pthread_mutex_unlock(&s->mu);
	return -ENOSPC;
}

uint64_t rq_rs_trim(struct rq_rs *s, uint64_t bytes)
{
	if (!bytes || rqr_enter(s))
		return 0;
	uint64_t got = trim(s, bytes, SIZE_MAX);
	rqr_leave(s);
	return got;
}

void rq_rs_set_budget(struct rq_rs *s, uint64_t max_bytes, uint64_t (*others)(void *ctx),
                      void *ctx)
{
	pthread_mutex_lock(&s->budget_mu);
	s->others = others;
	s->others_ctx = ctx;
	pthread_mutex_unlock(&s->budget_mu);
	pthread_mutex_lock(&s->mu);
	s->max_bytes = max_bytes;
	uint64_t have = s->st.bytes_on_disk;
	pthread_mutex_unlock(&s->mu);
	if (!max_bytes)
		return;
	uint64_t other = others_bytes(s);
	if (have + other > max_bytes)
		rq_rs_trim(s, have + other - max_bytes);
}

void rq_rs_pin(struct rq_rs *s, size_t i, int delta)
{
	if (i >= s->nfiles)
		return;
	pthread_mutex_lock(&s->mu);
	struct rfile *f = &s->files[i];
	f->pins += delta;
	if (f->pins < 0)
		f->pins = 0;
	f->last_use = rqr_now_ns();
	pthread_mutex_unlock(&s->mu);
}
