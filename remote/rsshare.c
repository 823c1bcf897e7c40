/* rsshare.c — whether another store is live on this cache directory, and
 * the read-back that assembly does when one is (rstore.c, "Sharing").
 *
 * Stores sharing <cache>/remote write their chunks into the same data files,
 * so the in-order hash (fed from this store's buffers) proves nothing about
 * the bytes on disk once another store may have written over them. Each
 * store registers itself:
 *
 *   stores/<host>-<pid>-<random>   created as stores/.new-<same>, locked
 *                                  flock(LOCK_EX), then renamed into place
 *                                  (so a listed entry is always locked while
 *                                  its owner lives), held until close, then
 *                                  unlinked.
 *
 * "Shared?" (at each assembly): every listed entry but ours is tried with
 * flock(LOCK_EX | LOCK_NB): EWOULDBLOCK -> a live store: shared; taken -> its
 * owner died: the entry is unlinked (stale). A cache where flock does not
 * work (EINVAL, ENOLCK, EOPNOTSUPP), or where this store could not register,
 * always counts as shared: the safe path. No answer is cached: a listing
 * costs far less than the file it guards.
 *
 * The one window left: a store that registers after the check and writes a
 * chunk before the rename. A store opened later scans the chunks present and
 * does not fetch them again, so only a chunk it finds bad could be rewritten
 * there, and then with bytes its own sums and hash will check. */
#include "remote/rstore_int.h"
#include "remote/chunk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STORES "stores"

void rqr_share_register(struct rq_rs *s)
{
	s->reg_fd = -1;
	s->reg_name[0] = 0;
	s->share_always = 1;                      /* until registered */
	if (mkdirat(s->dfd, STORES, 0755) && errno != EEXIST)
		return;
	char host[64] = "host";
	if (gethostname(host, sizeof host - 1))
		snprintf(host, sizeof host, "host");
	host[sizeof host - 1] = 0;
	for (char *p = host; *p; p++)
		if (*p == '/' || *p == '.')
			*p = '_';
	uint64_t rnd;
	if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
		rnd = (uint64_t)rqr_now_ns() ^ ((uint64_t)(uintptr_t)s << 16);
	char name[sizeof s->reg_name], tmpn[sizeof s->reg_name + 16];
	snprintf(name, sizeof name, "%s-%ld-%016llx", host, (long)getpid(),
	         (unsigned long long)rnd);
	snprintf(tmpn, sizeof tmpn, STORES "/.new-%s", name);
	int fd = openat(s->dfd, tmpn, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	char dst[sizeof name + 16];
	snprintf(dst, sizeof dst, STORES "/%s", name);
	if (flock(fd, LOCK_EX | LOCK_NB) || renameat(s->dfd, tmpn, s->dfd, dst)) {
		unlinkat(s->dfd, tmpn, 0);
		close(fd);
		return;
	}
	s->reg_fd = fd;
	snprintf(s->reg_name, sizeof s->reg_name, "%s", name);
	s->share_always = 0;
}

void rqr_share_unregister(struct rq_rs *s)
{
	if (s->reg_fd < 0)
		return;
	char dst[sizeof s->reg_name + 16];
	snprintf(dst, sizeof dst, STORES "/%s", s->reg_name);
	unlinkat(s->dfd, dst, 0);                 /* unlinked while still locked */
	close(s->reg_fd);
	s->reg_fd = -1;
}

int rqr_share_shared(struct rq_rs *s)
{
	if (s->share_always)
		return 1;
	int dfd = openat(s->dfd, STORES, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return 1;                             /* cannot tell: the safe path */
	}
	int shared = 0;
	struct dirent *de;
	while (!shared && (de = readdir(d))) {
		if (de->d_name[0] == '.' || !strcmp(de->d_name, s->reg_name))
			continue;
		int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue;                         /* gone meanwhile (its owner closed) */
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			unlinkat(dirfd(d), de->d_name, 0);   /* nobody holds it: stale */
		else                                  /* EWOULDBLOCK: live; any other */
			shared = 1;                       /* failure: cannot tell, so shared */
		close(fd);
	}
	closedir(d);
	return shared;
}

int rqr_verify_disk(struct rq_rs *s, size_t fi, int64_t *bad, char got[65])
{
	struct rfile *f = &s->files[fi];
	*bad = -1;
	got[0] = 0;
	struct rqr_hash *h = rqr_hash_new(f->sha256[0] ? f->sha256 : NULL,
	                                  f->blob_id[0] ? f->blob_id : NULL, f->size);
	if (!h)
		return -ENOMEM;
	int rc = 0;
	for (uint64_t c = 0; c < f->nchunks && !rc; c++) {
		rc = rqr_chunk_hash(s->dfd, f->dir, c, s->chunk_size, f->idhash,
		                    rqr_chunk_len(s, f, c), h);
		if (rc == -EBADMSG || rc == -ENOENT)
			*bad = (int64_t)c;
	}
	if (!rc)
		rc = rqr_hash_final(h, got);
	rqr_hash_free(h);
	return rc;
}
