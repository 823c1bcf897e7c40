/* rshash.c — the in-order whole-file hash of the remote store: each file's
 * SHA-256 (or git blob id) fed as its chunks arrive, so assembly only
 * finishes it (the design is written at the top of rstore.c, "In-order
 * hash"; the fields are rfile's hash, hnext, hashing, hgen). */
#include "remote/rstore_int.h"
#include "remote/chunk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Feeds f's hash from hnext on while the next chunk is present: chunk
 * ft->j.c from ft's buffer (its bytes as they were written), the others
 * read back from disk with their block sums checked. ft (may be NULL): a
 * reference the caller hands over, dropped as soon as the first chunk is
 * fed (so a buffer is held for the hash of one chunk only). The caller set
 * f->hashing; it is cleared here (done_cv broadcast). 0 when it stopped at
 * a missing chunk or the end; else -errno (-EBADMSG, -ENOENT: chunk *bad is
 * bad or gone on disk) and the hash starts again from chunk 0. */
static int advance(struct rq_rs *s, size_t fi, struct fetch *ft, int64_t *bad)
{
	struct rfile *f = &s->files[fi];
	int rc = 0;
	*bad = -1;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		uint64_t c = f->hnext;
		unsigned gen = f->hgen;
		if (ft && c != ft->j.c) {            /* its buffer is not needed (any more) */
			rqr_unref(s, ft);
			ft = NULL;
		}
		if (c >= f->nchunks || f->st[c] == CH_ABSENT || f->assembled ||
		    atomic_load(&s->closing))
			break;
		pthread_mutex_unlock(&s->mu);
		uint32_t len = rqr_chunk_len(s, f, c);
		int from_buf = ft && c == ft->j.c;
		if (!f->hash && !(f->hash = rqr_hash_new(f->sha256[0] ? f->sha256 : NULL,
		                                         f->blob_id[0] ? f->blob_id : NULL, f->size)))
			rc = -ENOMEM;
		else if (from_buf)
			rc = rqr_hash_update(f->hash, ft->buf, len);
		else
			rc = rqr_chunk_hash(s->dfd, f->dir, c, s->chunk_size, f->idhash, len, f->hash);
		pthread_mutex_lock(&s->mu);
		if (gen != f->hgen || rc) {          /* reset meanwhile, or fed in part */
			rqr_hash_free(f->hash);
			f->hash = NULL;
			f->hnext = 0;
			if (ft) {                        /* from disk from now on */
				rqr_unref(s, ft);
				ft = NULL;
			}
			if (!rc)
				continue;
			f->hgen++;
			*bad = (int64_t)c;
			break;
		}
		f->hnext = c + 1;
		if (from_buf)
			s->hashed_buf += len;
		else
			s->hashed_disk += len;
	}
	if (ft)
		rqr_unref(s, ft);
	f->hashing = 0;
	pthread_cond_broadcast(&s->done_cv);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void rqr_hash_stored(struct rq_rs *s, size_t fi, struct fetch *ft)
{
	struct rfile *f = &s->files[fi];
	pthread_mutex_lock(&s->mu);
	int go = !f->hashing && f->hnext < f->nchunks && f->st[f->hnext] != CH_ABSENT &&
	         !f->assembled && !f->failed;
	if (go)
		f->hashing = 1;
	else
		rqr_unref(s, ft);
	pthread_mutex_unlock(&s->mu);
	if (!go)
		return;
	int64_t bad;
	int rc = advance(s, fi, ft, &bad);
	if ((rc != -EBADMSG && rc != -ENOENT) || bad < 0)
		return;
	/* a chunk bad (or gone) on disk: forgotten and fetched again, as a
	 * reader finding it would */
	pthread_mutex_lock(&s->mu);
	int was = f->st[bad] != CH_ABSENT;
	if (was) {
		if (rc == -EBADMSG) {
			char name[512];
			snprintf(name, sizeof name, "%s/%016llx", f->dir, (unsigned long long)bad);
			unlinkat(s->dfd, name, 0);
			s->st.refetches++;
		}
		rqr_forget_chunk(s, f, (uint64_t)bad);
		if (rc == -EBADMSG && !f->fl[bad])
			rqr_want_chunk(s, fi, (uint64_t)bad, 0, 0);
	}
	pthread_mutex_unlock(&s->mu);
	if (was && rc == -EBADMSG)
		rqr_log(s, "remote: %s/%s/%016llx is corrupt (checksum, header or size): dropped, "
		        "fetching chunk %lld of %s again", s->root, f->dir, (unsigned long long)bad,
		        (long long)bad, f->name);
}

int rqr_hash_finish(struct rq_rs *s, size_t fi, int64_t *bad, char got[65])
{
	struct rfile *f = &s->files[fi];
	int rc = 0;
	*bad = -1;
	got[0] = 0;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (f->hashing && !atomic_load(&s->closing))
			pthread_cond_wait(&s->done_cv, &s->mu);
		if (atomic_load(&s->closing)) {
			rc = -ECANCELED;
			break;
		}
		if (f->hnext >= f->nchunks)
			break;
		if (f->st[f->hnext] == CH_ABSENT) {    /* gone meanwhile: fetched again */
			*bad = (int64_t)f->hnext;
			rc = -EBADMSG;
			break;
		}
		f->hashing = 1;
		pthread_mutex_unlock(&s->mu);
		rc = advance(s, fi, NULL, bad);
		pthread_mutex_lock(&s->mu);
		if (rc)
			break;
	}
	struct rqr_hash *h = NULL;
	if (!rc) {   /* taken: the hash ends here; hnext stays at the end so no
		              * worker starts another until the caller resets it */
		h = f->hash;
		f->hash = NULL;
	}
	pthread_mutex_unlock(&s->mu);
	if (rc)
		return rc == -ENOENT ? -EBADMSG : rc;   /* (*bad names the chunk gone) */
	if (!h && !(h = rqr_hash_new(f->sha256[0] ? f->sha256 : NULL,
	                             f->blob_id[0] ? f->blob_id : NULL, f->size)))
		return -ENOMEM;                        /* (an empty file has no chunk to feed it) */
	rc = rqr_hash_final(h, got);
	rqr_hash_free(h);
	return rc;
}
