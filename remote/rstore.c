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
 *
 * The folder is one straight line (held by tests/tools/test_layout.py):
 * each file calls only the files below it (rstore_int.h declares them in
 * this order), and nothing calls back up: a worker that finishes a fetch
 * wakes its readers through done_cv, and the budget evicts by marking the
 * file empty itself (the waits are on condition variables, never calls).
 *
 *   api       rstore.c    open, cancel, close, drop, path, stats: lifecycle
 *   read      rsread.c    rq_rs_read, rq_rs_fetch_file: pieces from the
 *                         assembled file, chunks on disk, fetches, ranges
 *   workers   rswork.c    the worker threads: a job's range request, the
 *                         size the server states, a chunk stored, hashed,
 *                         its file assembled when it was the last one
 *   assembly  rsasm.c     a complete file checked and renamed to files/<id>;
 *                         one another store assembled, taken as ours
 *   hash      rshash.c    the in-order hash, fed as the chunks are stored
 *   sharing   rsshare.c   other live stores on the cache; the read-back
 *   budget    rsbudget.c  --cache-max: reserve, evict, trim, pin
 *   queue     rsqueue.c   the job queues, fetches and their references, the
 *                         buffer pool (all under mu)
 *   file      rsfile.c    a file's state (a chunk forgotten, its hash reset,
 *                         why it failed), identity, scan at open; the
 *                         store's gate (enter/leave), log and clock
 *   chunks    chunk.c     chunk files: data, block sums, publish, hashes
 */
#include "remote/rstore.h"
#include "remote/chunk.h"
#include "remote/rstore_int.h"
#include "base/err.h"
#include "hub/hub.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
			if ((rc = -pthread_create(&s->workers[i].tid, NULL, rqr_worker_main,
			                          &s->workers[i]))) {
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
	while ((j = rqr_dequeue(s))) {           /* queued work ends now, cancelled */
		struct rq_err e = {0};
		rq_errf(&e, -ECANCELED, "%s: the store is closing", s->files[j->fi].name);
		rqr_end_job(s, j, &e);
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
