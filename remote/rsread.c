/* rsread.c — reads and whole-file fetches of the remote store (rstore.h;
 * the states and the locking are written at the top of rstore.c): each
 * piece of a read from the assembled file, a chunk on disk, a fetch in
 * flight or a range of its own; fetch_file's window of chunks in flight. */
#include "remote/rstore_int.h"
#include "remote/chunk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How one chunk of a read is answered. */
enum { P_DISK, P_FILE, P_FETCH, P_RANGE, P_DONE };

struct piece {
	int how;                   /* P_* */
	uint64_t c;                /* chunk */
	uint64_t at, n;            /* bytes [at, at + n) of the chunk */
	uint8_t *dst;
	struct fetch *ft;          /* P_FETCH: a reference */
	struct job j;              /* P_RANGE */
};

/* The contract's errors: the hub's 404/protocol failures are an EIO to a reader. */
static int reader_errno(int rc)
{
	return rc == -EACCES || rc == -ENOMEM || rc == -ECANCELED || rc == -ENETUNREACH ? rc
	                                                                                : -EIO;
}

int rq_rs_failed(struct rq_rs *s, size_t i)
{
	if (i >= s->nfiles)
		return 0;
	pthread_mutex_lock(&s->mu);
	int failed = s->files[i].failed != F_OK;
	pthread_mutex_unlock(&s->mu);
	return failed;
}

/* Pread of the assembled file. */
static int read_file(const char *path, uint64_t off, uint64_t n, uint8_t *dst)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = 0;
	while (n) {
		ssize_t r = pread(fd, dst, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rc = r < 0 ? -errno : -EIO;
			break;
		}
		dst += r;
		off += (uint64_t)r;
		n -= (uint64_t)r;
	}
	close(fd);
	return rc;
}

/* Plans piece p of file fi for a missing chunk (mu held): a fetch to wait
 * for, or (nokeep, nothing in flight) a range of its own. */
static int plan_missing(struct rq_rs *s, size_t fi, struct piece *p, int nokeep,
                        struct group *g, struct rq_err *err)
{
	struct rfile *f = &s->files[fi];
	struct fetch *cur = f->fl[p->c];
	int live = cur && !(cur->done && cur->rc);   /* a failed fetch not yet cleared: none */
	if (nokeep && !live && !s->offline && !atomic_load(&s->closing)) {
		p->how = P_RANGE;
		p->j = (struct job){.fi = fi, .off = p->c * s->chunk_size + p->at, .len = p->n,
		                    .dst = p->dst, .g = g};
		g->pending++;
		rqr_enqueue_range(s, &p->j);
		return 0;
	}
	p->ft = rqr_want_chunk(s, fi, p->c, 1, 1);
	if (p->ft) {
		p->how = P_FETCH;
		return 0;
	}
	uint64_t a = p->c * s->chunk_size + p->at;
	if (atomic_load(&s->closing))
		return rq_errf(err, -ECANCELED, "%s: the remote store is closing", f->name);
	if (s->offline)
		return rq_errf(err, -ENETUNREACH, "%s bytes %llu-%llu: not in the cache, and "
		               "HF_HUB_OFFLINE=1 forbids fetching them (unset it, or warm the mount "
		               "while online)", f->name, (unsigned long long)a,
		               (unsigned long long)(a + p->n - 1));
	return -ENOMEM;
}

/* Answers the pieces read from disk (no lock held). A chunk found bad or
 * gone is planned again as a missing one. */
static int serve_disk(struct rq_rs *s, size_t fi, struct piece *p, int nokeep, struct group *g,
                      struct rq_err *err)
{
	struct rfile *f = &s->files[fi];
	int rc;
	if (p->how == P_FILE) {
		rc = read_file(f->apath, p->c * s->chunk_size + p->at, p->n, p->dst);
	} else {
		uint32_t len = rqr_chunk_len(s, f, p->c);
		rc = rqr_chunk_read(s->dfd, f->dir, p->c, s->chunk_size, f->idhash, len, p->at, p->n,
		                    p->dst);
	}
	pthread_mutex_lock(&s->mu);
	if (!rc) {
		s->st.cached_hits++;
		p->how = P_DONE;
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	int assembled = f->assembled;
	if (rc == -ENOENT && !assembled && rqr_on_disk(f)) {   /* assembled by another store? */
		rqr_adopt_assembled(s, f);
		assembled = 1;
	}
	if (p->how != P_FILE && assembled) {           /* our chunks were assembled meanwhile */
		p->how = P_FILE;
		pthread_mutex_unlock(&s->mu);
		return serve_disk(s, fi, p, nokeep, g, err);
	}
	int corrupt = 0;
	if (p->how == P_FILE) {
		if (f->assembled) {                        /* dropped under us: fetch again */
			f->assembled = 0;
			s->st.bytes_on_disk -= f->size < s->st.bytes_on_disk ? f->size
			                                                     : s->st.bytes_on_disk;
		}
	} else {
		if (rc == -EBADMSG && f->st[p->c] != CH_ABSENT) {
			corrupt = 1;
			s->st.refetches++;
			char name[512];
			snprintf(name, sizeof name, "%s/%016llx", f->dir, (unsigned long long)p->c);
			unlinkat(s->dfd, name, 0);
		}
		rqr_forget_chunk(s, f, p->c);
	}
	uint64_t c = p->c;
	rc = plan_missing(s, fi, p, nokeep, g, err);
	pthread_mutex_unlock(&s->mu);
	if (corrupt)
		rqr_log(s, "remote: %s/%s/%016llx is corrupt (checksum, header or size): dropped, "
		        "fetching chunk %llu of %s again", s->root, f->dir, (unsigned long long)c,
		        (unsigned long long)c, f->name);
	return rc;
}

int rq_rs_read(struct rq_rs *s, size_t i, uint64_t off, uint64_t len, void *buf,
               unsigned flags, struct rq_err *err)
{
	if (i >= s->nfiles)
		return rq_errf(err, -EINVAL, "remote store: no file %zu", i);
	struct rfile *f = &s->files[i];
	if (off > f->size || len > f->size - off)
		return rq_errf(err, -EINVAL, "%s: bytes %llu+%llu are past its end (%llu bytes)",
		               f->name, (unsigned long long)off, (unsigned long long)len,
		               (unsigned long long)f->size);
	if (!len)
		return 0;
	if (rqr_enter(s))
		return rq_errf(err, -ECANCELED, "%s: the remote store is closing", f->name);
	int nokeep = !!(flags & RQ_RS_NOKEEP), rc = 0;
	uint64_t cs = s->chunk_size, c0 = off / cs, c1 = (off + len - 1) / cs;
	size_t n = (size_t)(c1 - c0 + 1);
	struct piece one[4], *p = n <= 4 ? one : calloc(n, sizeof *p);
	struct group g = {0};
	if (!p) {
		rqr_leave(s);
		return -ENOMEM;
	}
	pthread_mutex_lock(&s->mu);
	f->users++;                                /* not evicted while this read runs */
	f->last_use = rqr_now_ns();
	if (f->failed) {
		rc = rqr_failed_err(s, f, err);
		pthread_mutex_unlock(&s->mu);
		goto out;
	}
	size_t planned = 0;
	for (size_t k = 0; k < n; k++, planned++) {
		uint64_t c = c0 + k, a = c * cs, b = a + cs;
		p[k] = (struct piece){.c = c, .at = (off > a ? off : a) - a,
		                      .dst = (uint8_t *)buf + ((off > a ? off : a) - off)};
		p[k].n = (off + len < b ? off + len : b) - a - p[k].at;
		if (f->assembled)
			p[k].how = P_FILE;
		else if (f->st[c] != CH_ABSENT)
			p[k].how = P_DISK;
		else if ((rc = plan_missing(s, i, &p[k], nokeep, &g, err)))
			break;
	}
	if (!rc && !nokeep && !(flags & RQ_RS_NORA) && s->readahead > 0 && !f->assembled) {
		uint64_t prev = f->seq_next;
		if (off <= prev && off + cs >= prev)   /* starts where the last read ended */
			for (uint64_t c = c1 + 1; c <= c1 + (uint64_t)s->readahead && c < f->nchunks; c++)
				if (f->st[c] == CH_ABSENT && !f->fl[c] && (!f->ra_want || f->ra_want[c]))
					rqr_want_chunk(s, i, c, 0, 0);
		f->seq_next = off + len;
	}
	pthread_mutex_unlock(&s->mu);
	for (size_t k = 0; k < planned && !rc; k++)
		if (p[k].how == P_DISK || p[k].how == P_FILE)
			rc = serve_disk(s, i, &p[k], nokeep, &g, err);
	/* The fetches: copy each as it completes; the ranges: wait for them all.
	 * After a failure, still wait for every piece (they write into buf). */
	pthread_mutex_lock(&s->mu);
	for (;;) {
		size_t waiting = 0;
		for (size_t k = 0; k < planned; k++) {
			if (p[k].how != P_FETCH)
				continue;
			struct fetch *ft = p[k].ft;
			if (!ft->done) {
				waiting++;
				continue;
			}
			if (ft->rc && !rc)
				rc = rq_errf(err, reader_errno(ft->rc), "%s", ft->err.msg);
			if (!ft->rc && !rc) {
				pthread_mutex_unlock(&s->mu);
				memcpy(p[k].dst, ft->buf + p[k].at, p[k].n);
				pthread_mutex_lock(&s->mu);
			}
			rqr_unref(s, ft);
			p[k].how = P_DONE;
		}
		if (!waiting && !g.pending)
			break;
		pthread_cond_wait(&s->done_cv, &s->mu);
	}
	if (g.rc && !rc)
		rc = rq_errf(err, reader_errno(g.rc), "%s", g.err.msg);
	/* Every chunk present yet no file: a previous store stopped before it
	 * assembled (an umount right after the last chunk came). This reader
	 * assembles it now, once, so the file passes through from the next open
	 * (and `warm`, which reads such files whole, ends with it assembled). */
	int assemble = !rc && !f->assembled && !f->assembling && !f->failed &&
	               f->nchunks && f->npresent == f->nchunks;
	if (assemble)
		f->assembling = 1;
	pthread_mutex_unlock(&s->mu);
	if (assemble) {
		struct rq_err ae = {0};
		if (rqr_assemble_file(s, i, &ae) == -EBADMSG) {
			pthread_mutex_lock(&s->mu);
			rqr_refetch_all(s, i);
			pthread_mutex_unlock(&s->mu);
		}
	}
out:
	if (p != one)
		free(p);
	pthread_mutex_lock(&s->mu);
	f->users--;
	pthread_mutex_unlock(&s->mu);
	rqr_leave(s);
	return rc;
}

int rq_rs_fetch_file(struct rq_rs *s, size_t i, void (*progress)(void *ctx, uint64_t bytes),
                     void *ctx, struct rq_err *err)
{
	if (i >= s->nfiles)
		return rq_errf(err, -EINVAL, "remote store: no file %zu", i);
	struct rfile *f = &s->files[i];
	if (rqr_enter(s))
		return rq_errf(err, -ECANCELED, "%s: the remote store is closing", f->name);
	/* a window of chunks in flight, not one fetch per chunk of the file
	 * (rstore.c "Listed sizes"): enough to keep every connection busy */
	size_t win = 2 * (size_t)s->nworkers, nin = 0;
	struct fetch **fts = calloc(win, sizeof *fts);
	if (!fts) {
		rqr_leave(s);
		return -ENOMEM;
	}
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	f->users++;                                /* not evicted while it is fetched */
	f->last_use = rqr_now_ns();
	for (;;) {
		if (atomic_load(&s->closing)) {
			rc = rq_errf(err, -ECANCELED, "%s: the remote store is closing", f->name);
			break;
		}
		if (f->failed) {
			rc = rqr_failed_err(s, f, err);
			break;
		}
		if (f->assembled)
			break;
		if (f->assembling) {
			pthread_cond_wait(&s->done_cv, &s->mu);
			continue;
		}
		if (f->npresent == f->nchunks) {
			f->assembling = 1;
			pthread_mutex_unlock(&s->mu);
			rc = rqr_assemble_file(s, i, err);
			pthread_mutex_lock(&s->mu);
			if (rc == -EBADMSG) {
				rc = 0;
				continue;                  /* dropped: fetched again below */
			}
			if (rc)
				break;
			continue;
		}
		uint64_t done = 0, next = 0, unstored = 0;
		for (uint64_t c = 0; c < f->nchunks; c++)
			if (f->st[c] != CH_ABSENT)
				done += rqr_chunk_len(s, f, c);
		/* Queue missing chunks in order, at most win at once (behind readers);
		 * wait until each is stored (out of fl[]), not only done. */
		for (;;) {
			while (!rc && !f->failed && nin < win && next < f->nchunks) {
				uint64_t c = next++;
				if (f->st[c] != CH_ABSENT)
					continue;
				if (!(fts[nin] = rqr_want_chunk(s, i, c, 0, 1))) {
					uint64_t a = c * s->chunk_size;
					rc = s->offline ? rq_errf(err, -ENETUNREACH, "%s bytes %llu-%llu: not in "
					                          "the cache, and HF_HUB_OFFLINE=1 forbids "
					                          "fetching them", f->name, (unsigned long long)a,
					                          (unsigned long long)(a + rqr_chunk_len(s, f, c) - 1))
					   : atomic_load(&s->closing) ? -ECANCELED : -ENOMEM;
					break;
				}
				nin++;
			}
			if (!nin)
				break;
			uint64_t before = done;
			size_t ended = 0;
			for (size_t k = 0; k < nin;) {
				struct fetch *ft = fts[k];
				if (!ft->done || f->fl[ft->j.c] == ft) {
					k++;
					continue;
				}
				if (ft->rc && !rc)
					rc = rq_errf(err, reader_errno(ft->rc), "%s", ft->err.msg);
				done += ft->rc ? 0 : ft->len;
				unstored += !ft->rc && !ft->stored;
				rqr_unref(s, ft);
				fts[k] = fts[--nin];
				ended++;
			}
			if (progress && done != before) {
				pthread_mutex_unlock(&s->mu);
				progress(ctx, done);
				pthread_mutex_lock(&s->mu);
			}
			if (!ended)
				pthread_cond_wait(&s->done_cv, &s->mu);
		}
		if (!rc && f->failed)
			rc = rqr_failed_err(s, f, err);
		if (rc)
			break;
		if (unstored && !f->assembled) {   /* (chunks an assembly dropped: fetched again) */
			pthread_mutex_unlock(&s->mu);
			int other = rqr_on_disk(f);    /* another store sharing the cache made it */
			pthread_mutex_lock(&s->mu);
			if (other) {
				if (!f->assembled)
					rqr_adopt_assembled(s, f);
				continue;
			}
			rc = rq_errf(err, -ENOSPC, "%s: fetched, but its chunks could not be stored under "
			             "%s: the disk is full, or the cache is at its --cache-max with "
			             "what is over in use; free space or raise --cache-max", f->name,
			             s->root);
			break;
		}
	}
	for (size_t k = 0; k < nin; k++)
		rqr_unref(s, fts[k]);
	f->users--;
	pthread_mutex_unlock(&s->mu);
	free(fts);
	if (!rc && progress)
		progress(ctx, f->size);
	rqr_leave(s);
	return rc;
}
