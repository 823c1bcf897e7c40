/* rsfile.c — one remote file's state as every layer above changes it (a
 * chunk forgotten, its in-order hash reset, why it failed), its identity
 * and names, and what the cache already holds of it at open; and what every
 * file of the store shares: the gate API calls pass (close waits for them),
 * the log and the clock (rstore.h; the states are written at the top of
 * rstore.c, the lock rules on the fields in rstore_int.h). */
#include "remote/rstore_int.h"
#include "remote/chunk.h"

#include <dirent.h>
#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TMP_STALE_S (15 * 60)   /* a temp file this old is a crashed writer's (as cache/) */

/* ---- the store's gate, log and clock ---------------------------------- */

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

int64_t rqr_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- a file's state --------------------------------------------------- */

uint32_t rqr_chunk_len(const struct rq_rs *s, const struct rfile *f, uint64_t c)
{
	uint64_t a = c * s->chunk_size;
	return (uint32_t)(f->size - a < s->chunk_size ? f->size - a : s->chunk_size);
}

int rqr_failed_err(const struct rq_rs *s, const struct rfile *f, struct rq_err *err)
{
	if (f->failed == F_SIZE)
		return rq_errf(err, -EIO, "%s: the model API lists it at %llu bytes, the server "
		               "says %llu: not served (a mirror or proxy that does not serve the "
		               "commit as listed; check HF_ENDPOINT)", f->name,
		               (unsigned long long)f->size, (unsigned long long)f->server_size);
	if (f->failed == F_LISTED)
		return rq_errf(err, -EIO, "%s: the model API lists it at %llu bytes, more than the "
		               "%llu (%u chunks) the remote store takes per file, far beyond any real "
		               "model file: not fetched (a wrong listing; check HF_ENDPOINT)", f->name,
		               (unsigned long long)f->size, (unsigned long long)rq_rs_max_file(s),
		               RQ_RS_CHUNKS_MAX);
	return rq_errf(err, -EIO, "%s: its bytes from the server hashed twice to %s %s, not the "
	               "hub's %s (a corrupt mirror or CDN? check HF_ENDPOINT); nothing of it is "
	               "served", f->name, f->hash_name, f->bad_sha, f->want);
}

uint64_t rq_rs_max_file(const struct rq_rs *s)
{
	return (uint64_t)s->chunk_size * RQ_RS_CHUNKS_MAX;
}

void rqr_forget_chunk(struct rq_rs *s, struct rfile *f, uint64_t c)
{
	if (f->st[c] == CH_ABSENT)
		return;
	if (c < f->hnext || (f->hashing && c == f->hnext))
		rqr_hash_reset(s, f);            /* its bytes were (being) hashed */
	f->st[c] = CH_ABSENT;
	f->npresent--;
	uint64_t b = rqr_chunk_file_size(rqr_chunk_len(s, f, c));
	s->st.bytes_on_disk -= b < s->st.bytes_on_disk ? b : s->st.bytes_on_disk;
}

void rqr_hash_reset(struct rq_rs *s, struct rfile *f)
{
	(void)s;
	f->hgen++;
	if (f->hashing)
		return;                    /* its hasher starts again when it next looks */
	rqr_hash_free(f->hash);
	f->hash = NULL;
	f->hnext = 0;
}

/* ---- a file's identity and what the cache holds of it (at open) ------- */

/* The identity of a file (chunk.h) and its derived names. */
int rqr_name_file(struct rq_rs *s, struct rfile *f, const struct rq_rs_file *in,
                     struct rq_err *err)
{
	if (in->sha256 && *in->sha256) {
		if (strlen(in->sha256) != 64 || strspn(in->sha256, "0123456789abcdef") != 64)
			return rq_errf(err, -EINVAL, "%s: LFS sha256 '%s' is not 64 lowercase hex digits",
			               in->name, in->sha256);
		memcpy(f->sha256, in->sha256, 65);
		snprintf(f->id, sizeof f->id, "%s", in->sha256);
	} else if (in->blob_id && *in->blob_id) {
		if (strlen(in->blob_id) != 40 || strspn(in->blob_id, "0123456789abcdef") != 40)
			return rq_errf(err, -EINVAL, "%s: git blob id '%s' is not 40 lowercase hex digits",
			               in->name, in->blob_id);
		snprintf(f->id, sizeof f->id, "git-%s", in->blob_id);
		memcpy(f->blob_id, in->blob_id, 41);
	} else {
		XXH3_state_t *x = XXH3_createState();
		if (!x)
			return -ENOMEM;
		XXH3_128bits_reset(x);
		XXH3_128bits_update(x, s->repo, strlen(s->repo) + 1);
		XXH3_128bits_update(x, s->commit, strlen(s->commit) + 1);
		XXH3_128bits_update(x, in->name, strlen(in->name) + 1);
		XXH128_hash_t h = XXH3_128bits_digest(x);
		XXH3_freeState(x);
		snprintf(f->id, sizeof f->id, "name-%016llx%016llx", (unsigned long long)h.high64,
		         (unsigned long long)h.low64);
	}
	snprintf(f->want, sizeof f->want, "%s", f->sha256[0] ? f->sha256 : f->blob_id);
	f->hash_name = f->sha256[0] ? "sha256" : "git blob id";
	f->idhash = XXH3_64bits(f->id, strlen(f->id));
	snprintf(f->dir, sizeof f->dir, "chunks/%s-%u", f->id, s->chunk_size);
	if (asprintf(&f->apath, "%s/files/%s", s->root, f->id) < 0) {
		f->apath = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* What the cache already holds of f: its assembled file, else its chunks
 * (names and sizes; the bytes are checksummed at first use). */
void rqr_scan_file(struct rq_rs *s, struct rfile *f)
{
	struct stat st;
	if (stat(f->apath, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == f->size) {
		f->last_use = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
		f->assembled = 1;
		s->st.bytes_on_disk += f->size;
		rqr_chunk_drop_all(s->dfd, f->dir);   /* left by a crash after the rename */
		return;
	}
	int fd = openat(s->dfd, f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	if (fstatat(fd, "data", &st, AT_SYMLINK_NOFOLLOW) == 0)   /* its last chunk stored */
		f->last_use = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	struct dirent *e;
	while ((e = readdir(d))) {
		char *end;
		if (strstr(e->d_name, ".tmp.")) {        /* a writer's, or a crashed writer's */
			if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    time(NULL) - st.st_mtime > TMP_STALE_S)
				unlinkat(fd, e->d_name, 0);
			continue;
		}
		if (strlen(e->d_name) != 16)
			continue;
		unsigned long long c = strtoull(e->d_name, &end, 16);
		if (*end || c >= f->nchunks || f->st[c] != CH_ABSENT)
			continue;
		uint32_t len = rqr_chunk_len(s, f, c);
		if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
		    (uint64_t)st.st_size == rqr_sum_file_size(len)) {
			f->st[c] = CH_PRESENT;
			f->npresent++;
			s->st.bytes_on_disk += rqr_chunk_file_size(len);
		}
	}
	closedir(d);
}

int rqr_mkdir_p(const char *path)
{
	char buf[4096];
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}
