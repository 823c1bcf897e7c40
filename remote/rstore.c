/* rstore.c — the chunk store of one pinned hub commit (rstore.h).
 *
 * Chunk size. RQ_RS_CHUNK_DEFAULT = 16 MiB, weighing three things:
 *  - request latency: a range request to the hub's CDN costs one round trip
 *    and a slow start (~50-150 ms on a WAN); at the ~50-100 MB/s one
 *    connection gets, a 16 MiB chunk spends ~70-85 % of its time moving
 *    bytes, 1 MiB chunks would spend most of it waiting, and with 8
 *    connections in flight the link stays full;
 *  - wasted bytes on a random read: a 4 KiB mmap fault on a cold chunk
 *    fetches 16 MiB (~0.2 s); bigger chunks make that and the memory bound
 *    (one buffer per connection) grow linearly for little gain;
 *  - safetensors tensors: a 100 GB checkpoint's Linear weights are 4-200 MiB
 *    (Laguna's expert and attention matrices), so a tensor is one to a
 *    dozen chunks and rarely drags in much of its neighbours; a shard's
 *    header (< 1 MiB) is one request; 100 GB is ~6000 chunk files.
 *
 * State of one chunk (file f, index c; fields under s->mu):
 *
 *   absent --a reader (or readahead, or fetch_file) wants it: a struct
 *     ^       fetch in f->fl[c], queued--> in flight
 *     |   in flight --a worker: waits for memory (mem_used + len <= mem_max),
 *     |         range request into its buffer--> done (readers copy from
 *     |         the buffer; later readers too, while it is in f->fl[c])
 *     |   done --written in place into the file's data, its sums published
 *     |         (temp + rename), fl[c] cleared--> present
 *     +-- done --failed or not written: fl[c] cleared--> absent
 *     |   present --a read: the 64 KiB blocks it touches checked against
 *     |         their XXH3-64 (chunk.c), every time--> served
 *     +-- present --bad checksum or header: unlinked, logged, refetched
 *     +-- present --the file assembled: sum files unlinked--> (file)
 *
 * State of one file:
 *
 *   chunks --every chunk present (the worker storing the last one, or
 *     ^      fetch_file): assembling--> the in-order hash (below) finished
 *     |      and compared, SHA-256 (else git blob id) against the hub's;
 *     |      data fsynced and renamed to files/<id> (no copy)--> assembled
 *     |      (reads pread it; rq_rs_path names it; its sum files deleted)
 *     +-- assembling --SHA-256 differs (wrong bytes came): every chunk
 *     |      dropped, logged, refetched once--> chunks; a second
 *     |      mismatch--> failed (reads and fetch_file: -EIO, logged)
 *     +-- assembled --rq_rs_drop: chunks and file deleted--> chunks (empty)
 *
 * In-order hash (rshash.c; rfile's hash, hnext, hashing, hgen). The hub
 * gives one hash per file, so a file's bytes are hashed once, in order, as
 * they arrive, instead of read back whole after the last chunk (that
 * read-through at ~0.7 GB/s, SHA-256 by OpenSSL, sat on the critical path
 * of every cold file). Per file: an incremental hash state and hnext, the
 * first chunk not yet fed to it.
 *  - The worker that stores chunk c (its sum file published, c present)
 *    becomes the file's hasher if there is none (`hashing`, under mu: one
 *    at a time) and chunk hnext is present: it feeds chunk c from its own
 *    buffer when c == hnext (the bytes just written from that buffer, so
 *    nothing is read back), then every following chunk already present
 *    (those that came early), read back from disk (usually the page cache)
 *    with each block checked against its sum, until a chunk is missing.
 *    The worker keeps its buffer only while it hashes it (one chunk): the
 *    memory bound holds. Others just store their chunk.
 *  - fetch_file and readahead queue chunks in file order and the workers
 *    take them in order, so most chunks are hashed from their buffer; one
 *    that came before its predecessors is read back once.
 *  - Assembly waits for a running hasher, feeds what is left from disk
 *    and finishes: when every chunk was fed as it came, no byte is read
 *    back. A store opened over chunks of an earlier one (a crash, an
 *    umount, another mount) has no state for them: its first hasher reads
 *    them back, which is the old read-through, done earlier.
 *  - Anything that may change bytes already fed (a fed chunk forgotten:
 *    bad on disk, evicted, dropped, assembled by another store) resets the
 *    hash to chunk 0 (hgen + 1; a hasher at work notices when it next
 *    takes mu and starts again). A chunk found bad while hashing is
 *    forgotten and refetched, as a reader finding it would.
 *  - A mismatch behaves as before: every chunk dropped, refetched once,
 *    then failed. A chunk's bytes changed on disk after they were hashed
 *    from the buffer (another store writing the same data file) are caught
 *    by the read-back of "Sharing" below, done whenever that can happen.
 *
 * A read without RQ_RS_NOKEEP takes a reference on every fetch it needs
 * (creating the missing ones, in order, at the queue's tail), then copies
 * whichever completes first: it never holds a finished buffer while it
 * waits for another, so buffers go back to the memory pool as fast as the
 * workers fill them and mem_max cannot deadlock. A RQ_RS_NOKEEP read
 * fetches the missing pieces (one per chunk it covers, the exact bytes
 * asked for) straight into the caller's buffer through the same workers,
 * and stores nothing; chunks already present or in flight serve it.
 *
 * Disk budget (--cache-max). The store's bytes on disk (chunks: their
 * bytes + sum files; assembled files: their size) and the quantized cache's
 * (cache/: job entries and materialized files) share one limit: the mount
 * gives the store max_bytes and the cache's byte count (rq_rs_set_budget),
 * and the cache the store's count and rq_rs_trim (rq_cache_set_peer).
 *  - Before a worker stores a chunk it reserves its bytes: if the store +
 *    the cache + the chunk exceed the limit, the least recently used whole
 *    files of the store that nothing uses now (no read, fetch, assembly,
 *    chunk in flight or pin) are evicted, oldest first (rsbudget.c); if that
 *    cannot free enough, nothing is evicted and the chunk is served to its
 *    readers but not kept (counted not_kept, logged once): a read never
 *    fails for the budget, its bytes are simply fetched again next time.
 *    fetch_file (warm) then fails -ENOSPC saying to raise --cache-max.
 *  - When the cache needs room (a put, a materialized file) it asks the
 *    store first to evict what is over, the same way, then evicts its own
 *    least recently used entries for the rest: remote bytes are the cheaper
 *    to get back (a fetch, no quantization).
 *  - So on disk: store + cache <= limit. Each side counts what it is about
 *    to write before writing it (a chunk here, a materialized file there),
 *    so the other sees it; only two writers checking at the same instant
 *    can cross the limit, by one chunk or file, until the next write.
 *    Other processes sharing the directory count what they see at open.
 *  - A file opened over its limit (a smaller --cache-max than last time) is
 *    trimmed at open. A chunk's bytes are never evicted alone (they live in
 *    the file's sparse data); eviction never breaks a reader: the file is
 *    marked absent first and its chunk writers wait for the unlinks.
 *
 * Listed sizes. The model API's sizes are claims: a mirror may list a 31 KB
 * file at 10^15 bytes. Every range answer states the file's size (its
 * Content-Range total; a 416's "bytes * /TOTAL"; a 200 that ignored the
 * Range, its Content-Length); the first that differs from the listed size
 * fails the file for good (F_SIZE): its queued fetches end at once with
 * that message, later reads and fetch_files fail -EIO at once, and the
 * workers go on with other files' chunks (a mount once issued ~60,000
 * doomed requests, one per chunk of the claimed size, ahead of other
 * files). The store logs nothing of it: the callers' reads report it. A
 * file listed past RQ_RS_CHUNKS_MAX chunks is refused at open (F_LISTED,
 * no map, no request): the per-file maps (st, fl, the mount's kept map)
 * stay bounded, and fetch_file keeps a window of chunks in flight (not one
 * struct fetch per chunk of the file).
 *
 * Sharing (rsshare.c). Stores on one cache (two mounts, nodes over NFS)
 * write the same chunks/<id>-<size>/data, so another store's wrong bytes
 * can overwrite a chunk this one hashed from its buffer. Each store holds
 * a flock'd stores/<host>-<pid>-<random> while open; assembly asks whether
 * another is live (stale entries removed): if so (or flock fails) it reads
 * the data back, block sums and SHA-256 checked, before publishing
 * (verified_from_disk); else the in-order hash alone decides (fast path).
 *
 * Locking: one mutex (s->mu) guards the queues, every file's and fetch's
 * state and the counters; no I/O happens under it. budget_mu guards the
 * budget's callback and is never held with mu. done_cv: a fetch or a
 * range piece finished, an assembly ended, or the store closes; work_cv:
 * a job queued; mem_cv: a buffer freed.
 */
#include "remote/rstore.h"
#include "remote/chunk.h"
#include "remote/rstore_int.h"
#include "base/err.h"
#include "hub/hub.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
static void *buf_get(struct rq_rs *s, uint32_t len)
{
	if (len == s->chunk_size && s->npool)
		return s->pool[--s->npool];
	return malloc(len);
}

void rqr_log(struct rq_rs *s, const char *fmt, ...)
{
	if (!s->log)
		return;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	s->log(s->log_ctx, msg);   /* names inside were escaped by rq_errf where they came from */
}

uint32_t rqr_chunk_len(const struct rq_rs *s, const struct rfile *f, uint64_t c)
{
	uint64_t a = c * s->chunk_size;
	return (uint32_t)(f->size - a < s->chunk_size ? f->size - a : s->chunk_size);
}

int rqr_enter(struct rq_rs *s)
{
	pthread_mutex_lock(&s->mu);
	int rc = atomic_load(&s->closing) ? -ECANCELED : 0;
	if (!rc)
		s->active++;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void rqr_leave(struct rq_rs *s)
{
	pthread_mutex_lock(&s->mu);
	if (!--s->active)
		pthread_cond_broadcast(&s->done_cv);
	pthread_mutex_unlock(&s->mu);
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
static void unqueue(struct rq_rs *s, struct job *j)
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

static struct job *dequeue(struct rq_rs *s)
{
	struct job *j = s->hi_head ? s->hi_head : s->lo_head;
	if (j)
		unqueue(s, j);
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
			unqueue(s, &ft->j);
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
static void end_job(struct rq_rs *s, struct job *j, const struct rq_err *e)
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

/* The server stated `server` bytes for file fi (mu held): unless that is its
 * listed size, the file fails for good (F_SIZE) and its queued fetches end
 * now. 0, or -EIO with the file's message. */
static int check_size(struct rq_rs *s, size_t fi, uint64_t server, struct rq_err *e)
{
	struct rfile *f = &s->files[fi];
	if (server == RQ_HUB_SIZE_UNKNOWN || server == f->size)
		return 0;
	if (f->failed != F_SIZE) {
		f->failed = F_SIZE;
		f->server_size = server;
		struct rq_err fe = {0};
		rqr_failed_err(s, f, &fe);
		for (int hi = 0; hi < 2; hi++) {
			struct job *j = hi ? s->hi_head : s->lo_head, *next;
			for (; j; j = next) {
				next = j->next;
				if (j->fi != fi)
					continue;
				unqueue(s, j);
				end_job(s, j, &fe);
			}
		}
		pthread_cond_broadcast(&s->done_cv);
	}
	return rqr_failed_err(s, f, e);
}

/* One range request on the worker's connection; hub retries counted, the
 * size the server states checked against the listed one. */
static int fetch_bytes(struct rq_rs *s, struct worker *w, size_t fi, uint64_t off,
                       uint64_t len, void *buf, struct rq_err *e)
{
	const struct rfile *f = &s->files[fi];
	int rc = rq_hub_fetch_range(w->hub, s->repo, s->commit, f->name, off, len, buf, NULL, e);
	struct rq_hub_stats hs;
	rq_hub_get_stats(w->hub, &hs);
	pthread_mutex_lock(&s->mu);
	s->st.retries += hs.retries - w->retries_seen;
	w->retries_seen = hs.retries;
	int src = rc == -ECANCELED ? 0 : check_size(s, fi, rq_hub_server_size(w->hub), e);
	pthread_mutex_unlock(&s->mu);
	if (src)
		return src;
	if (rc)
		rq_err_prefix(e, "%s bytes %llu-%llu", f->name, (unsigned long long)off,
		              (unsigned long long)(off + len - 1));
	return rc;
}

/* A failed fetch's log line: none for a file failed for good (its readers
 * report it, once each) nor for a cancel. */
static void log_fetch_failure(struct rq_rs *s, size_t fi, int rc, uint64_t c,
                              const struct rq_err *e)
{
	pthread_mutex_lock(&s->mu);
	int quiet = rc == -ECANCELED || s->files[fi].failed == F_SIZE;
	pthread_mutex_unlock(&s->mu);
	if (quiet)
		return;
	if (c == UINT64_MAX)
		rqr_log(s, "remote: fetch failed: %s", e->msg);
	else
		rqr_log(s, "remote: fetch failed (chunk %llu): %s", (unsigned long long)c, e->msg);
}

/* Worker: chunk c of a file, into a buffer taken from mem_max, then stored.
 * The queue's reference is now the worker's. */
static void run_chunk(struct rq_rs *s, struct worker *w, struct fetch *ft)
{
	size_t fi = ft->j.fi;
	struct rfile *f = &s->files[fi];
	uint64_t c = ft->j.c, off = c * s->chunk_size;
	struct rq_err e = {0};
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	while (!atomic_load(&s->closing) && s->mem_used + ft->len > s->mem_max)
		pthread_cond_wait(&s->mem_cv, &s->mu);
	if (atomic_load(&s->closing)) {
		rc = rq_errf(&e, -ECANCELED, "%s: the store is closing", f->name);
	} else if (f->failed >= F_SIZE) {          /* failed while this chunk was taken */
		rc = rqr_failed_err(s, f, &e);
	} else if (!(ft->buf = buf_get(s, ft->len))) {
		rc = rq_errf(&e, -ENOMEM, "%s: no memory for a chunk of %u bytes", f->name, ft->len);
	} else {
		s->mem_used += ft->len;
		if (s->mem_used > s->mem_peak)
			s->mem_peak = s->mem_used;
	}
	pthread_mutex_unlock(&s->mu);
	if (!rc)
		rc = fetch_bytes(s, w, fi, off, ft->len, ft->buf, &e);
	if (rc)
		log_fetch_failure(s, fi, rc, c, &e);
	pthread_mutex_lock(&s->mu);
	ft->done = 1;
	ft->rc = rc;
	ft->err = e;
	if (rc) {
		if (rc != -ECANCELED)
			s->st.failures++;
	} else {
		s->st.fetched_bytes += ft->len;
		s->st.fetched_chunks++;
	}
	pthread_cond_broadcast(&s->done_cv);
	int whole = f->assembled;                     /* assembled meanwhile: nothing to store */
	pthread_mutex_unlock(&s->mu);
	int wrc = rc ? rc : whole ? -EEXIST : 0;
	uint64_t need = rqr_chunk_file_size(ft->len);
	int reserved = 0;
	if (!wrc) {   /* room under the budget (evicting other files), counted now */
		reserved = !(wrc = rqr_reserve(s, fi, need));
		if (wrc && !atomic_exchange(&s->warned_budget, 1))
			rqr_log(s, "remote: the cache is at its --cache-max and nothing more can be "
			        "evicted now (in use): chunks of %s and others are served but not "
			        "kept (fetched again when read); raise --cache-max", f->name);
	}
	if (!wrc) {   /* the waiters copy from the buffer meanwhile */
		pthread_mutex_lock(&s->mu);
		while (f->evicting && !atomic_load(&s->closing))   /* its unlinks end first */
			pthread_cond_wait(&s->done_cv, &s->mu);
		pthread_mutex_unlock(&s->mu);
		wrc = rqr_chunk_write(s->dfd, f->dir, c, s->chunk_size, f->idhash, ft->buf, ft->len);
		if (wrc && !atomic_exchange(&s->warned_write, 1)) {
			rqr_log(s, "remote: cannot store chunks under %s/%s (%s): serving from memory "
			        "only; free space in the cache directory", s->root, f->dir,
			        strerror(-wrc));
		}
	}
	pthread_mutex_lock(&s->mu);
	if (f->fl[c] == ft)                           /* (a failed one may be replaced already) */
		f->fl[c] = NULL;
	pthread_cond_broadcast(&s->done_cv);          /* fetch_file waits for this */
	int complete = 0, stored = 0;
	ft->stored = !wrc;
	if (!wrc && f->st[c] == CH_ABSENT) {   /* its bytes were counted by rqr_reserve */
		stored = 1;
		f->st[c] = CH_PRESENT;
		f->npresent++;
		complete = f->npresent == f->nchunks && !f->assembled && !f->assembling &&
		           !f->failed;
		if (complete)
			f->assembling = 1;
	} else if (reserved) {
		s->st.bytes_on_disk -= need < s->st.bytes_on_disk ? need : s->st.bytes_on_disk;
	}
	if (!stored)
		rqr_unref(s, ft);
	pthread_mutex_unlock(&s->mu);
	if (stored)   /* the in-order hash (from this buffer when c is next); it unrefs ft */
		rqr_hash_stored(s, fi, ft);
	if (complete) {   /* the last chunk: the file becomes one real file */
		struct rq_err ae = {0};
		int arc = rqr_assemble_file(s, fi, &ae);
		if (arc == -EBADMSG) {
			pthread_mutex_lock(&s->mu);
			rqr_refetch_all(s, fi);
			pthread_mutex_unlock(&s->mu);
		}
	}
}

/* Worker: a RQ_RS_NOKEEP piece, straight into the reader's buffer. */
static void run_range(struct rq_rs *s, struct worker *w, struct job *j)
{
	struct rq_err e = {0};
	pthread_mutex_lock(&s->mu);
	int rc = s->files[j->fi].failed >= F_SIZE ? rqr_failed_err(s, &s->files[j->fi], &e) : 0;
	pthread_mutex_unlock(&s->mu);
	if (!rc)
		rc = fetch_bytes(s, w, j->fi, j->off, j->len, j->dst, &e);
	if (rc)
		log_fetch_failure(s, j->fi, rc, UINT64_MAX, &e);
	pthread_mutex_lock(&s->mu);
	struct group *g = j->g;
	if (rc) {
		if (rc != -ECANCELED)
			s->st.failures++;
		if (!g->rc) {
			g->rc = rc;
			g->err = e;
		}
	} else {
		s->st.fetched_bytes += j->len;
	}
	g->pending--;
	pthread_cond_broadcast(&s->done_cv);
	pthread_mutex_unlock(&s->mu);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct rq_rs *s = w->s;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		struct job *j = NULL;
		while (!atomic_load(&s->closing) && !(j = dequeue(s)))
			pthread_cond_wait(&s->work_cv, &s->mu);
		if (!j)
			break;
		if (j->kind == JOB_CHUNK)
			((struct fetch *)j)->queued = 0;
		pthread_mutex_unlock(&s->mu);
		if (j->kind == JOB_CHUNK)
			run_chunk(s, w, (struct fetch *)j);
		else
			run_range(s, w, j);
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int rq_rs_open(const struct rq_rs_opts *o, struct rq_rs **out, struct rq_err *err)
{
	if (!o->repo || !*o->repo || !o->commit || strlen(o->commit) != 40 ||
	    strspn(o->commit, "0123456789abcdef") != 40)
		return rq_errf(err, -EINVAL, "remote store: repository '%s' needs a pinned commit (40 "
		               "lowercase hex), not '%s'", o->repo ? o->repo : "",
		               o->commit ? o->commit : "");
	if (!o->cache_dir || !*o->cache_dir)
		return rq_errf(err, -EINVAL, "remote store of %s: no cache directory", o->repo);
	uint32_t cs = o->chunk_size ? o->chunk_size : RQ_RS_CHUNK_DEFAULT;
	if (cs < 4096 || cs > (1u << 30))
		return rq_errf(err, -EINVAL, "remote store: chunk size %u is not from 4 KiB to 1 GiB",
		               cs);
	struct rq_rs *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	int rc = -ENOMEM;
	s->dfd = s->reg_fd = -1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->budget_mu, NULL);
	pthread_cond_init(&s->work_cv, NULL);
	pthread_cond_init(&s->done_cv, NULL);
	pthread_cond_init(&s->mem_cv, NULL);
	s->chunk_size = cs;
	s->nworkers = o->connections > 0 ? o->connections : RQ_RS_CONN_DEFAULT;
	if (s->nworkers > RQ_RS_CONN_MAX)
		s->nworkers = RQ_RS_CONN_MAX;
	s->readahead = o->readahead >= 0 ? o->readahead : s->nworkers;
	s->mem_max = o->mem_max ? o->mem_max : 2ull * (uint64_t)s->nworkers * cs;
	if (s->mem_max < cs)
		s->mem_max = cs;                       /* one chunk at a time at least */
	s->pool = calloc((size_t)(s->mem_max / cs) + 1, sizeof *s->pool);   /* NULL: no pool */
	s->offline = o->offline;
	s->max_bytes = o->max_bytes;
	s->log = o->log;
	s->log_ctx = o->log_ctx;
	s->repo = strdup(o->repo);
	s->commit = strdup(o->commit);
	s->endpoint = o->endpoint ? strdup(o->endpoint) : NULL;
	if (!s->repo || !s->commit || (o->endpoint && !s->endpoint) ||
	    asprintf(&s->root, "%s/remote", o->cache_dir) < 0) {
		s->root = NULL;
		goto fail;
	}
	char sub[4200];
	snprintf(sub, sizeof sub, "%s/chunks", s->root);
	if ((rc = rqr_mkdir_p(sub)) == 0) {
		snprintf(sub, sizeof sub, "%s/files", s->root);
		rc = rqr_mkdir_p(sub);
	}
	if (rc) {
		rc = rq_errf(err, rc, "remote store: cannot create %s: %s (choose a writable --cache "
		             "directory)", sub, strerror(-rc));
		goto fail;
	}
	s->dfd = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dfd < 0) {
		rc = rq_errf(err, -errno, "remote store: cannot open %s: %s", s->root, strerror(errno));
		goto fail;
	}
	rqr_share_register(s);
	rc = -ENOMEM;
	s->files = calloc(o->nfiles ? o->nfiles : 1, sizeof *s->files);
	if (!s->files)
		goto fail;
	s->nfiles = o->nfiles;
	for (size_t i = 0; i < o->nfiles; i++) {
		struct rfile *f = &s->files[i];
		f->size = o->files[i].size;
		f->nchunks = f->size / cs + (f->size % cs != 0);   /* (no overflow near 2^64) */
		if (f->nchunks > RQ_RS_CHUNKS_MAX) {   /* refused: no map sized by a claim */
			f->failed = F_LISTED;
			f->nchunks = 0;
		}
		f->name = strdup(o->files[i].name);
		f->st = calloc(f->nchunks ? f->nchunks : 1, 1);
		f->fl = calloc(f->nchunks ? f->nchunks : 1, sizeof *f->fl);
		if (!f->name || !f->st || !f->fl)
			goto fail;
		if ((rc = rqr_name_file(s, f, &o->files[i], err)))
			goto fail;
		rc = -ENOMEM;
		if (f->failed != F_LISTED)
			rqr_scan_file(s, f);
	}
	if (!s->offline) {
		s->workers = calloc((size_t)s->nworkers, sizeof *s->workers);
		if (!s->workers)
			goto fail;
		for (int i = 0; i < s->nworkers; i++) {
			s->workers[i].s = s;
			if ((rc = rq_hub_open(s->endpoint, &s->workers[i].hub, err)))
				goto fail;
		}
		for (int i = 0; i < s->nworkers; i++) {
			if ((rc = -pthread_create(&s->workers[i].tid, NULL, worker_main, &s->workers[i]))) {
				rq_errf(err, rc, "remote store: cannot start a thread: %s", strerror(-rc));
				goto fail;
			}
			s->workers[i].started = 1;
		}
	}
	if (s->max_bytes && s->st.bytes_on_disk > s->max_bytes)   /* a smaller limit than before */
		rq_rs_trim(s, s->st.bytes_on_disk - s->max_bytes);
	*out = s;
	return 0;
fail:
	rq_rs_close(s);
	return rc;
}

void rq_rs_cancel(struct rq_rs *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	atomic_store(&s->closing, 1);
	struct job *j;
	while ((j = dequeue(s))) {               /* queued work ends now, cancelled */
		struct rq_err e = {0};
		rq_errf(&e, -ECANCELED, "%s: the store is closing", s->files[j->fi].name);
		end_job(s, j, &e);
	}
	pthread_cond_broadcast(&s->work_cv);
	pthread_cond_broadcast(&s->done_cv);
	pthread_cond_broadcast(&s->mem_cv);
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; s->workers && i < s->nworkers; i++)
		if (s->workers[i].hub)
			rq_hub_cancel(s->workers[i].hub);   /* requests in flight end at once */
}

void rq_rs_close(struct rq_rs *s)
{
	if (!s)
		return;
	rq_rs_cancel(s);                           /* again, if a caller did: nothing queued */
	for (int i = 0; s->workers && i < s->nworkers; i++)
		if (s->workers[i].started)
			pthread_join(s->workers[i].tid, NULL);
	pthread_mutex_lock(&s->mu);
	while (s->active)                          /* callers see -ECANCELED and leave */
		pthread_cond_wait(&s->done_cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; s->workers && i < s->nworkers; i++)
		rq_hub_close(s->workers[i].hub);
	free(s->workers);
	for (size_t i = 0; s->files && i < s->nfiles; i++) {
		free(s->files[i].name);
		free(s->files[i].apath);
		free(s->files[i].st);
		free(s->files[i].fl);
		free(s->files[i].ra_want);
		rqr_hash_free(s->files[i].hash);
	}
	free(s->files);
	for (int i = 0; i < s->npool; i++)
		free(s->pool[i]);
	free(s->pool);
	if (s->dfd >= 0) {
		rqr_share_unregister(s);
		close(s->dfd);
	}
	free(s->root);
	free(s->repo);
	free(s->commit);
	free(s->endpoint);
	pthread_cond_destroy(&s->work_cv);
	pthread_cond_destroy(&s->done_cv);
	pthread_cond_destroy(&s->mem_cv);
	pthread_mutex_destroy(&s->budget_mu);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

int rq_rs_set_readahead_mask(struct rq_rs *s, size_t i, const uint8_t *want)
{
	if (i >= s->nfiles)
		return -EINVAL;
	struct rfile *f = &s->files[i];
	uint8_t *w = NULL;
	if (want && !(w = malloc(f->nchunks ? f->nchunks : 1)))
		return -ENOMEM;
	if (w)
		memcpy(w, want, f->nchunks);
	pthread_mutex_lock(&s->mu);
	uint8_t *old = f->ra_want;
	f->ra_want = w;
	pthread_mutex_unlock(&s->mu);
	free(old);
	return 0;
}

const char *rq_rs_file_id(const struct rq_rs *s, size_t i)
{
	return i < s->nfiles ? s->files[i].id : NULL;
}

uint32_t rq_rs_chunk_size(const struct rq_rs *s)
{
	return s->chunk_size;
}

const char *rq_rs_path(struct rq_rs *s, size_t i)
{
	if (i >= s->nfiles)
		return NULL;
	pthread_mutex_lock(&s->mu);
	const char *p = s->files[i].assembled ? s->files[i].apath : NULL;
	pthread_mutex_unlock(&s->mu);
	return p;
}

void rq_rs_drop(struct rq_rs *s, size_t i)
{
	if (i >= s->nfiles || rqr_enter(s))
		return;
	struct rfile *f = &s->files[i];
	pthread_mutex_lock(&s->mu);
	while ((f->assembling || f->evicting) && !atomic_load(&s->closing))
		pthread_cond_wait(&s->done_cv, &s->mu);
	int had = f->assembled;
	uint64_t was = had ? f->size : 0;
	for (uint64_t c = 0; c < f->nchunks; c++) {
		if (f->st[c] != CH_ABSENT)
			was += rqr_chunk_file_size(rqr_chunk_len(s, f, c));
		f->st[c] = CH_ABSENT;
	}
	f->npresent = 0;
	rqr_hash_reset(s, f);
	f->assembled = 0;
	if (f->failed == F_HASH)                  /* a fresh start: fetched again if read */
		f->failed = F_OK;                     /* (a size the server contradicts stays) */
	f->sha_fails = 0;
	s->st.bytes_on_disk -= was < s->st.bytes_on_disk ? was : s->st.bytes_on_disk;
	pthread_mutex_unlock(&s->mu);
	rqr_chunk_drop_all(s->dfd, f->dir);
	if (had)
		unlink(f->apath);
	rqr_leave(s);
}

void rq_rs_stats(struct rq_rs *s, struct rq_rs_stats *out)
{
	pthread_mutex_lock(&s->mu);
	*out = s->st;
	out->mem_peak = s->mem_peak;
	out->hashed_from_buffer = s->hashed_buf;
	out->hashed_from_disk = s->hashed_disk;
	pthread_mutex_unlock(&s->mu);
}
