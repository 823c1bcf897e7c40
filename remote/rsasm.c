/* rsasm.c — assembly of the remote store: a file whose every chunk is
 * present becomes one real file, its hash finished and compared (read back
 * first when another store shares the cache), its data renamed to
 * files/<id>; and a file another store assembled, taken as ours (the file's
 * states are written at the top of rstore.c). */
#include "remote/rstore_int.h"
#include "remote/chunk.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether f's assembled file is there (made by another store sharing the
 * cache directory: it is published only once verified). */
int rqr_on_disk(const struct rfile *f)
{
	struct stat st;
	return stat(f->apath, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == f->size;
}

/* f's assembled file was made by another store sharing the cache (mu
 * held): counted as ours now, its chunks forgotten (that store removed them). */
void rqr_adopt_assembled(struct rq_rs *s, struct rfile *f)
{
	for (uint64_t c = 0; c < f->nchunks; c++)
		rqr_forget_chunk(s, f, c);
	f->assembled = 1;
	f->last_use = rqr_now_ns();
	s->st.bytes_on_disk += f->size;
}

int rqr_assemble_file(struct rq_rs *s, size_t fi, struct rq_err *err)
{
	struct rfile *f = &s->files[fi];
	int64_t bad;
	char got[65];
	/* the hash fed as the chunks came (rshash.c), finished; then the data
	 * published as it is, unless another live store shares the cache: then
	 * its bytes may no longer be the ones hashed, and they are read back
	 * and checked whole first (rsshare.c) */
	int rc = rqr_hash_finish(s, fi, &bad, got);
	if (!rc && rqr_share_shared(s)) {
		rc = rqr_verify_disk(s, fi, &bad, got);
		pthread_mutex_lock(&s->mu);
		s->st.verified_from_disk++;
		pthread_mutex_unlock(&s->mu);
		if (rc == -ENOENT)                  /* chunks gone: assembled by another? */
			rc = rqr_on_disk(f) ? -EEXIST : -ESTALE;
	}
	if (!rc && (rc = rqr_publish(s->dfd, f->dir, f->id, f->size, f->nchunks)) == -EBADMSG)
		bad = -1;
	if (rc == -EEXIST && !rqr_on_disk(f) && unlink(f->apath) == 0)   /* a wrong-size leftover */
		rc = rqr_publish(s->dfd, f->dir, f->id, f->size, f->nchunks);
	if (rc == -EEXIST || rc == -ESTALE)     /* another store sharing the cache assembled it */
		rc = rqr_on_disk(f) ? 0 : -ESTALE;  /* published (verified by it): taken as ours */
	if (!rc) {
		pthread_mutex_lock(&s->mu);
		f->assembled = 1;                  /* readers of chunks that vanish turn to it */
		f->last_use = rqr_now_ns();
		pthread_mutex_unlock(&s->mu);
		rqr_chunk_drop_all(s->dfd, f->dir);   /* the sum files: the data was renamed */
	} else if (rc == -EBADMSG && bad < 0) {
		rqr_chunk_drop_all(s->dfd, f->dir);   /* wrong bytes: all of it goes */
	} else if (rc == -EBADMSG) {             /* one bad chunk: its sums go, it is refetched */
		char name[512];
		snprintf(name, sizeof name, "%s/%016llx", f->dir, (unsigned long long)bad);
		unlinkat(s->dfd, name, 0);
	}
	pthread_mutex_lock(&s->mu);
	f->assembling = 0;
	rqr_hash_reset(s, f);                  /* taken (or fed in part): begins again */
	if (!rc || (rc == -EBADMSG && bad < 0) || rc == -ESTALE) {
		for (uint64_t c = 0; c < f->nchunks; c++)
			rqr_forget_chunk(s, f, c);
		if (!rc)
			s->st.bytes_on_disk += f->size;
	}
	if (rc == -ESTALE) {                       /* our chunks went with another's assembly */
		s->st.refetches++;
		rc = rq_errf(err, -EBADMSG, "%s: its chunks under %s/%s were taken by another store "
		             "sharing the cache (it assembled the file, which is gone since): "
		             "fetching them again", f->name, s->root, f->dir);
	} else if (rc == -EBADMSG && bad >= 0) {
		if (f->st[bad] != CH_ABSENT)        /* else the hasher (rshash.c) found it first, */
			s->st.refetches++;          /* counted it and asked for it once */
		rqr_forget_chunk(s, f, (uint64_t)bad);
		rq_errf(err, -EBADMSG, "%s: chunk %lld on disk is corrupt", f->name, (long long)bad);
	} else if (rc == -EBADMSG) {
		s->st.refetches++;
		memcpy(f->bad_sha, got, 65);
		if (++f->sha_fails >= 2) {
			f->failed = F_HASH;
			rc = rq_errf(err, -EIO, "%s: the bytes fetched hash to %s %s, not the hub's %s, "
			             "twice: not served (a corrupt mirror or CDN? check HF_ENDPOINT)",
			             f->name, f->hash_name, got, f->want);
		} else {
			rq_errf(err, -EBADMSG, "%s: the bytes fetched hash to %s %s, not the hub's %s: "
			        "dropped, fetching them again", f->name, f->hash_name, got, f->want);
		}
	} else if (rc) {
		rq_errf(err, rc, "%s: cannot assemble %s: %s", f->name, f->apath, strerror(-rc));
	}
	pthread_cond_broadcast(&s->done_cv);
	pthread_mutex_unlock(&s->mu);
	if (rc && rc != -ECANCELED)
		rqr_log(s, "remote: %s", err->msg);
	return rc;
}
