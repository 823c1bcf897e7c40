/* cache_io.c — what entry files (cache.c) and whole files (cache_file.c)
 * share: whole reads and writes, identities, the recency touch, the safe
 * open of a name (never blocking, never following), verification while a
 * file holds still, and the message of a failed write. */
#include "cache/cache_int.h"

#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rqc_pwrite_all(int fd, const uint8_t *p, uint64_t n, uint64_t off)
{
	while (n) {
		ssize_t w = pwrite(fd, p, n < RQC_IO_CHUNK ? n : RQC_IO_CHUNK, (off_t)off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (w == 0)
			return -EIO;
		p += w;
		n -= (uint64_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

int rqc_pread_all(int fd, uint8_t *p, uint64_t n, uint64_t off, uint64_t *got)
{
	uint64_t done = 0;
	while (done < n) {
		uint64_t want = n - done < RQC_IO_CHUNK ? n - done : RQC_IO_CHUNK;
		ssize_t r = pread(fd, p + done, want, (off_t)(off + done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			break;
		done += (uint64_t)r;
	}
	*got = done;
	return 0;
}

int rqc_bad(struct rq_err *err, int kind, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
		va_end(ap);
		err->code = -ENOENT;
	}
	return kind;
}

bool rqc_same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

void rqc_ident_of(const struct stat *st, struct rq_cache_ident *id)
{
	id->dev = (uint64_t)st->st_dev;
	id->ino = (uint64_t)st->st_ino;
	id->size = (uint64_t)st->st_size;
	id->mtime = rqc_ns(st->st_mtim);
	id->ctime = rqc_ns(st->st_ctim);
}

bool rqc_ident_eq(const struct rq_cache_ident *a, const struct rq_cache_ident *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime == b->mtime && a->ctime == b->ctime;
}

void rqc_set_identity(struct rqc_ent *e, const struct stat *st)
{
	e->dev = st->st_dev;
	e->ino = st->st_ino;
	e->fsize = st->st_size;
	e->mtime = rqc_ns(st->st_mtim);
	e->ctime = rqc_ns(st->st_ctim);
}

bool rqc_ent_matches(const struct rqc_ent *e, const struct stat *st)
{
	return e->dev == st->st_dev && e->ino == st->st_ino && e->fsize == st->st_size &&
	       e->mtime == rqc_ns(st->st_mtim) && e->ctime == rqc_ns(st->st_ctim);
}

/* Best effort: a file written by another user may refuse (EPERM); recency
 * then only lives in this process. */
void rqc_touch(int fd, int64_t when)
{
	struct timespec ts[2] = {
		{ .tv_sec = when / 1000000000, .tv_nsec = when % 1000000000 },
		{ .tv_sec = 0, .tv_nsec = UTIME_OMIT },
	};
	futimens(fd, ts);
}

const char *rqc_kind_of(mode_t m)
{
	return S_ISFIFO(m) ? "a FIFO" : S_ISLNK(m) ? "a symbolic link" : S_ISDIR(m) ? "a directory" :
	       S_ISCHR(m) || S_ISBLK(m) ? "a device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

int rqc_open_name(struct rq_cache *c, const char *rel, const char *what, const char *path,
                  int *fdp, struct stat *st, bool *judged, struct rq_err *err)
{
	*judged = false;
	/* lstat first: a device or FIFO is judged without even opening it. */
	if (fstatat(c->dfd, rel, st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno == ENOENT)
			return -ENOENT;
		return rq_errf(err, -errno, "cannot stat %s %s: %s", what, path, strerror(errno));
	}
	*judged = true;
	if (!S_ISREG(st->st_mode))
		return rqc_bad(err, 1, "%s %s is %s, not a regular file", what, path,
		               rqc_kind_of(st->st_mode));
	int fd = openat(c->dfd, rel, RQC_OPEN_FLAGS);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT)
			return -ENOENT;
		if (e == ELOOP || e == ENXIO || e == ENOTDIR || e == EISDIR) {
			/* replaced by a symlink (or worse) since the lstat */
			if (fstatat(c->dfd, rel, st, AT_SYMLINK_NOFOLLOW) < 0)
				*judged = false;
			return rqc_bad(err, 1, "%s %s is %s, not a regular file", what, path,
			               *judged ? rqc_kind_of(st->st_mode) : "not a regular file");
		}
		*judged = false;
		return rq_errf(err, -e, "cannot open %s %s: %s", what, path, strerror(e));
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 || fstat(fd, st) < 0) {
		int e = errno;
		close(fd);
		*judged = false;
		return rq_errf(err, -e, "cannot open %s %s: %s", what, path, strerror(e));
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		return rqc_bad(err, 1, "%s %s is %s, not a regular file", what, path,
		               rqc_kind_of(st->st_mode));
	}
	if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		close(fd);
		return rqc_bad(err, 1, "%s %s is writable by group or others (mode %04o)", what, path,
		               (unsigned)(st->st_mode & 07777));
	}
	*fdp = fd;
	return 0;
}

int rqc_verify_stable(int fd, const char *what, const char *path, rqc_check_fn check,
                      void *arg, struct stat *after, struct rq_err *err)
{
	for (int t = 0; t < RQC_VERIFY_TRIES; t++) {
		struct stat a;
		if (fstat(fd, &a) < 0)
			return rq_errf(err, -errno, "cannot stat %s %s: %s", what, path, strerror(errno));
		int r = check(fd, &a, path, arg, err);
		if (r != VERIFY_OK)
			return r;
		if (fstat(fd, after) < 0)
			return rq_errf(err, -errno, "cannot stat %s %s: %s", what, path, strerror(errno));
		struct rq_cache_ident x, y;
		rqc_ident_of(&a, &x);
		rqc_ident_of(after, &y);
		if (rqc_ident_eq(&x, &y))
			return VERIFY_OK;
	}
	return rqc_bad(err, VERIFY_UNSTABLE, "%s %s kept changing while being verified", what, path);
}

int rqc_fsync_dir_at(int dfd, const char *sub)
{
	int fd = openat(dfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return r;
}

int rqc_put_fail(struct rq_cache *c, struct rq_err *err, int r, const char *noun,
                 const char *path, uint64_t bytes, const char *doing)
{
	pthread_mutex_lock(&c->mu);
	c->st.put_failed++;
	pthread_mutex_unlock(&c->mu);
	if (r == -ENOSPC || r == -EDQUOT)
		return rq_errf(err, r, "cache %s %s (%llu bytes) not written: %s; the %s will "
		               "be rebuilt when needed (free space or lower --cache-max)", noun, path,
		               (unsigned long long)bytes, strerror(-r), noun);
	return rq_errf(err, r, "cache %s %s not written: %s: %s", noun, path, doing, strerror(-r));
}
