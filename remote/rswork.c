/* rswork.c — the remote store's workers: one thread per hub connection
 * takes the next job (demand first), fetches a chunk into a buffer of the
 * memory bound (or a RQ_RS_NOKEEP piece straight into its reader's buffer),
 * checks the size the server states, stores the chunk under the budget,
 * feeds its file's in-order hash and assembles the file its last chunk
 * completes (the states are written at the top of rstore.c). Readers hear
 * of a finished fetch through done_cv, never through a call. */
#include "remote/rstore_int.h"
#include "remote/chunk.h"
#include "hub/hub.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
				rqr_unqueue(s, j);
				rqr_end_job(s, j, &fe);
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
	} else if (!(ft->buf = rqr_buf_get(s, ft->len))) {
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

void *rqr_worker_main(void *arg)
{
	struct worker *w = arg;
	struct rq_rs *s = w->s;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		struct job *j = NULL;
		while (!atomic_load(&s->closing) && !(j = rqr_dequeue(s)))
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
