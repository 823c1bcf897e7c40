/* cache_file.c — whole files: a materialized virtual file (a requantized
 * shard, up to ~15 GB) stored so that the kernel can read it directly (FUSE
 * passthrough). The data file holds the virtual file's bytes and nothing
 * else; its integrity lives in a sidecar beside it:
 *
 *     <dir>/files/<32 hex of the key>.bin   the bytes, exactly `size` of them
 *     <dir>/files/<32 hex of the key>.sum   the sidecar, 64 bytes:
 *
 *     offset  bytes  field (integers little-endian)
 *          0      8  magic "RQCFILE\0"
 *          8      4  format version (RQF_VERSION)
 *         12      4  sidecar bytes (64)
 *         16     16  key (the 16 bytes of rq_cache_key)
 *         32      8  data bytes n (the size of the .bin)
 *         40     16  XXH3-128 of the data (XXH128_canonical_t, big-endian)
 *         56      8  XXH3-64 of bytes 0..55 (the sidecar checks itself)
 *
 * State machine of one file (one key, on disk):
 *
 *   absent --begin: create files/<hex>.bin.tmp.<pid>.<n> (O_EXCL), fallocate
 *     ^       `size` (a full disk fails here)--> writing
 *     |   writing --write: pwrite at the end, XXH3-128 state updated--> writing
 *     |   writing --commit (all `size` bytes given): set atime, fsync, rename
 *     |         onto <hex>.bin--> data only (a miss to everyone: no sidecar);
 *     |         write <hex>.sum.tmp.<pid>.<n>, fsync, rename onto <hex>.sum,
 *     |         fsync files/--> published (verified: we hashed what we wrote)
 *     |   writing/data only --any failure, or abort: temp unlinked, and a .bin
 *     |         we had renamed unlinked too (with any .sum)--> absent
 *     |   temps of a crashed writer --scan: 15 min old, or pid dead and 1 min
 *     |         old (as entries' temps)--> absent
 *     |   data only / sidecar only (crash) --a miss; the scan removes such a
 *     |         name once its ctime is 15 min old; a commit replaces it--> absent
 *     |   published --first open in this process: lstat, open O_NOFOLLOW|
 *     |         O_NONBLOCK, regular, exact size, not group/other-writable,
 *     |         sidecar good and matching, then the whole file hashed (8 MiB
 *     |         reads) while its identity holds--> verified
 *     +-- published --any check fails: both names unlinked (when the .bin is
 *     |         still the inode judged), counted corrupt, -ENOENT + message
 *     |   verified --open: identity (taken after our touch) unchanged: no
 *     |         read; changed: published again (hashed before any trust)
 *     |   verified --rq_cache_file_recheck of an fd: the same rule on the fd
 *     +-- published/verified --LRU eviction (not while pinned), remove--> absent
 *
 * A sidecar of a foreign format version is a miss and left alone (another
 * build sharing the directory; the next commit replaces it). Trust model,
 * recency (atime set explicitly; passthrough reads never move ctime) and
 * hostile names: as entries (cache.c). The sum of a key is kept in memory
 * once known, so an fd can be re-verified after its names are gone. */
#include "cache/cache_int.h"

#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define RQF_VERSION 1u
#define RQF_SUM_BYTES 64u
#define RQF_VERIFY_BUF (8u << 20)  /* verification reads this much at a time */

static const char rqf_magic[8] = "RQCFILE";

struct rq_cache_writer {
	struct rq_cache *c;
	struct rq_cache_key key;
	uint64_t size;             /* bytes declared at begin */
	uint64_t written;          /* bytes given so far (the next write's offset) */
	int fd;                    /* the data temp, O_WRONLY */
	bool failed;               /* a write failed: commit refuses */
	bool counted;              /* size is in c->writing (from begin to commit/abort) */
	XXH3_state_t *xs;          /* XXH3-128 of bytes 0..written */
	char tmp[RQC_REL_MAX];     /* "files/<hex>.bin.tmp.<pid>.<n>" */
	char path[PATH_MAX];       /* "<dir>/files/<hex>.bin", for messages */
};

/* Names of file k, relative and (for messages) full. */
struct names {
	char bin[RQC_REL_MAX], sum[RQC_REL_MAX];
	char bpath[PATH_MAX], spath[PATH_MAX];
};

static void names_of(const struct rq_cache *c, const struct rq_cache_key *k, struct names *n)
{
	rqc_file_rel(k, n->bin, n->sum);
	snprintf(n->bpath, sizeof n->bpath, "%s/%s", c->dir, n->bin);
	snprintf(n->spath, sizeof n->spath, "%s/%s", c->dir, n->sum);
}

static void canon(XXH128_hash_t h, uint8_t out[16])
{
	XXH128_canonical_t cano;
	XXH128_canonicalFromHash(&cano, h);
	memcpy(out, cano.digest, 16);
}

static void make_sidecar(uint8_t s[RQF_SUM_BYTES], const struct rq_cache_key *k, uint64_t n,
                         const uint8_t sum[16])
{
	memset(s, 0, RQF_SUM_BYTES);
	memcpy(s, rqf_magic, 8);
	rqc_put_le32(s + 8, RQF_VERSION);
	rqc_put_le32(s + 12, RQF_SUM_BYTES);
	memcpy(s + 16, k->b, 16);
	rqc_put_le64(s + 32, n);
	memcpy(s + 40, sum, 16);
	rqc_put_le64(s + 56, XXH3_64bits(s, 56));
}

/* Reads and checks the sidecar of k: 0 with the data's sum; -ENOENT none
 * (a plain miss); VERIFY_CORRUPT / VERIFY_FOREIGN with err saying why;
 * other -errno (err set). */
static int read_sidecar(struct rq_cache *c, const struct rq_cache_key *k, uint64_t size,
                        const struct names *nm, uint8_t sum[16], struct rq_err *err)
{
	int fd = -1;
	struct stat st;
	bool judged;
	const char *p = nm->spath;
	int r = rqc_open_name(c, nm->sum, "cache file sidecar", p, &fd, &st, &judged, err);
	if (r < 0)
		return r;
	if (r > 0)
		return VERIFY_CORRUPT;
	uint8_t s[RQF_SUM_BYTES];
	uint64_t got = 0;
	if ((uint64_t)st.st_size != RQF_SUM_BYTES) {
		close(fd);
		return rqc_bad(err, VERIFY_CORRUPT, "cache file sidecar %s is %llu bytes, not %u", p,
		               (unsigned long long)st.st_size, RQF_SUM_BYTES);
	}
	r = rqc_pread_all(fd, s, RQF_SUM_BYTES, 0, &got);
	close(fd);
	if (r < 0)
		return rq_errf(err, r, "cannot read cache file sidecar %s: %s", p, strerror(-r));
	if (got < RQF_SUM_BYTES)
		return rqc_bad(err, VERIFY_CORRUPT, "cache file sidecar %s is truncated", p);
	if (memcmp(s, rqf_magic, 8))
		return rqc_bad(err, VERIFY_CORRUPT, "cache file sidecar %s has a bad magic", p);
	if (rqc_get_le32(s + 8) != RQF_VERSION)
		return rqc_bad(err, VERIFY_FOREIGN, "cache file sidecar %s has format version %u, "
		               "this build reads %u: a miss", p, rqc_get_le32(s + 8), RQF_VERSION);
	if (rqc_get_le32(s + 12) != RQF_SUM_BYTES || rqc_get_le64(s + 56) != XXH3_64bits(s, 56))
		return rqc_bad(err, VERIFY_CORRUPT, "cache file sidecar %s is corrupt", p);
	if (memcmp(s + 16, k->b, 16))
		return rqc_bad(err, VERIFY_CORRUPT, "cache file sidecar %s holds another key", p);
	if (rqc_get_le64(s + 32) != size)
		return rqc_bad(err, VERIFY_CORRUPT, "cache file sidecar %s describes %llu bytes, %llu "
		               "were expected", p, (unsigned long long)rqc_get_le64(s + 32),
		               (unsigned long long)size);
	memcpy(sum, s + 40, 16);
	return 0;
}

struct check_arg {
	uint64_t size;
	const uint8_t *sum;
};

/* Hashes the whole file behind fd: VERIFY_OK when it is exactly size bytes
 * hashing to sum; VERIFY_CORRUPT (err says why); -errno. */
static int check_data(int fd, const struct stat *st, const char *path, void *arg,
                      struct rq_err *err)
{
	const struct check_arg *a = arg;
	if ((uint64_t)st->st_size != a->size)
		return rqc_bad(err, VERIFY_CORRUPT, "cache file %s is %llu bytes, its sidecar says "
		               "%llu (truncated or extended)", path,
		               (unsigned long long)st->st_size, (unsigned long long)a->size);
	uint8_t *buf = malloc(RQF_VERIFY_BUF);
	XXH3_state_t *xs = XXH3_createState();
	if (!buf || !xs) {
		free(buf);
		XXH3_freeState(xs);
		return rq_errf(err, -ENOMEM, "out of memory verifying cache file %s", path);
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	XXH3_128bits_reset(xs);
	int r = VERIFY_OK;
	for (uint64_t off = 0; off < a->size;) {
		uint64_t want = a->size - off < RQF_VERIFY_BUF ? a->size - off : RQF_VERIFY_BUF;
		uint64_t got = 0;
		int e = rqc_pread_all(fd, buf, want, off, &got);
		if (e < 0) {
			r = rq_errf(err, e, "cannot read cache file %s: %s", path, strerror(-e));
			break;
		}
		if (got < want) {
			r = rqc_bad(err, VERIFY_CORRUPT, "cache file %s is truncated", path);
			break;
		}
		XXH3_128bits_update(xs, buf, want);
		off += want;
	}
	if (r == VERIFY_OK) {
		uint8_t h[16];
		canon(XXH3_128bits_digest(xs), h);
		if (memcmp(h, a->sum, 16))
			r = rqc_bad(err, VERIFY_CORRUPT, "cache file %s fails its checksum", path);
	}
	XXH3_freeState(xs);
	free(buf);
	return r;
}

/* Forgets file k's record (a pin keeps a placeholder). mu held. */
static void forget(struct rq_cache *c, const struct rq_cache_key *k)
{
	struct rqc_ent *e = rqc_find(c, k);
	if (e && (e->kind == RQC_FILE || !e->present))
		rqc_del(c, e);
}

static int file_miss(struct rq_cache *c, const struct rq_cache_key *k, struct rq_err *err)
{
	pthread_mutex_lock(&c->mu);
	c->st.misses++;
	forget(c, k);
	pthread_mutex_unlock(&c->mu);
	if (err) {
		err->code = 0;
		err->msg[0] = 0;
	}
	return -ENOENT;
}

/* Unlinks both names of k (sidecar first), when the .bin is still the inode
 * judged: another process may have published a good file meanwhile. */
static void unlink_if_same(struct rq_cache *c, const struct names *nm, const struct stat *judged)
{
	struct stat now, s;
	if (!judged || fstatat(c->dfd, nm->bin, &now, AT_SYMLINK_NOFOLLOW) < 0 ||
	    !rqc_same_file(&now, judged) || (now.st_mode & S_IFMT) != (judged->st_mode & S_IFMT))
		return;
	if (fstatat(c->dfd, nm->sum, &s, AT_SYMLINK_NOFOLLOW) == 0)
		unlinkat(c->dfd, nm->sum, S_ISDIR(s.st_mode) ? AT_REMOVEDIR : 0);  /* rmdir: if empty */
	unlinkat(c->dfd, nm->bin, S_ISDIR(now.st_mode) ? AT_REMOVEDIR : 0);
}

/* A bad file (err describes it): removed (del), counted, forgotten. del
 * false: a miss only (a foreign sidecar, a file that kept changing). */
static void drop_file(struct rq_cache *c, const struct rq_cache_key *k, const struct names *nm,
                      const struct stat *judged, bool del, bool count_miss)
{
	if (del)
		unlink_if_same(c, nm, judged);
	pthread_mutex_lock(&c->mu);
	if (count_miss)
		c->st.misses++;
	if (del)
		c->st.corrupt++;
	struct rqc_ent *e = rqc_find(c, k);
	if (e && e->kind == RQC_FILE &&
	    (!judged || del || (e->dev == judged->st_dev && e->ino == judged->st_ino)))
		rqc_del(c, e);
	pthread_mutex_unlock(&c->mu);
}

/* Records file k as verified with identity *st, used at `now`. mu held. */
static void adopt(struct rq_cache *c, const struct rq_cache_key *k, uint64_t size,
                  const uint8_t sum[16], const struct stat *st, bool verified, int64_t now)
{
	struct rqc_ent *e = rqc_find(c, k);
	if (!e)
		e = rqc_add(c, k);
	if (!e)
		return;
	rqc_set_present(c, e, RQC_FILE, size);
	rqc_set_identity(e, st);
	e->verified = verified;
	memcpy(e->sum, sum, 16);
	e->has_sum = true;
	rqc_use(c, e, now);
}

int rq_cache_file_begin(struct rq_cache *c, const struct rq_cache_key *k, uint64_t size,
                        struct rq_cache_writer **wp, struct rq_err *err)
{
	struct rq_cache_writer *w = calloc(1, sizeof *w);
	XXH3_state_t *xs = XXH3_createState();
	struct names nm;
	names_of(c, k, &nm);
	if (!w || !xs) {
		free(w);
		XXH3_freeState(xs);
		return rqc_put_fail(c, err, -ENOMEM, "file", nm.bpath, size, "out of memory");
	}
	w->c = c;
	w->key = *k;
	w->size = size;
	w->fd = -1;
	w->xs = xs;
	XXH3_128bits_reset(xs);
	memcpy(w->path, nm.bpath, sizeof w->path);

	int r = 0;
	const char *what = "creating its directory";
	if (mkdirat(c->dfd, RQC_FILES_DIR, 0755) == 0)
		fsync(c->dfd);   /* make the new subdirectory itself durable */
	else if (errno != EEXIST)
		goto fail_errno;
	/* Make room first (room for `size` more bytes under max_bytes), then
	 * count them as being written, so that later evictions (and the peer
	 * sharing the limit) see them before the commit does. */
	rqc_evict(c, k, size);
	pthread_mutex_lock(&c->mu);
	c->writing += size;
	w->counted = true;
	pthread_mutex_unlock(&c->mu);
	what = "creating its temp file";
	for (int tries = 0; w->fd < 0 && tries < 8; tries++) {
		unsigned seq = __atomic_fetch_add(&c->tmp_seq, 1, __ATOMIC_RELAXED);
		snprintf(w->tmp, sizeof w->tmp, "%.42s.tmp.%ld.%u", nm.bin, (long)getpid(), seq);
		w->fd = openat(c->dfd, w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (w->fd < 0 && errno != EEXIST)   /* EEXIST: a dead namesake's leftover */
			goto fail_errno;
	}
	if (w->fd < 0) {
		r = -EEXIST;
		goto fail;
	}
	/* Reserve the blocks: a full disk fails here, before any write. */
	what = "reserving its space";
	if (size && fallocate(w->fd, 0, 0, (off_t)size) < 0 && errno != EOPNOTSUPP &&
	    errno != ENOSYS && errno != EINVAL)
		goto fail_errno;
	*wp = w;
	return 0;

fail_errno:
	r = -errno;
fail:
	rq_cache_file_abort(w);
	return rqc_put_fail(c, err, r, "file", nm.bpath, size, what);
}

int rq_cache_file_write(struct rq_cache_writer *w, const void *buf, size_t n,
                        struct rq_err *err)
{
	if (w->failed)
		return rq_errf(err, -EIO, "cache file %s not written: an earlier write failed",
		               w->path);
	if (n > w->size - w->written) {
		w->failed = true;
		return rqc_put_fail(w->c, err, -EINVAL, "file", w->path, w->size,
		                    "more bytes given than declared at begin");
	}
	int r = rqc_pwrite_all(w->fd, buf, n, w->written);
	if (r < 0) {
		w->failed = true;
		return rqc_put_fail(w->c, err, r, "file", w->path, w->size, "writing");
	}
	XXH3_128bits_update(w->xs, buf, n);
	w->written += n;
	return 0;
}

void rq_cache_file_abort(struct rq_cache_writer *w)
{
	if (!w)
		return;
	if (w->counted) {
		pthread_mutex_lock(&w->c->mu);
		w->c->writing -= w->size < w->c->writing ? w->size : w->c->writing;
		pthread_mutex_unlock(&w->c->mu);
	}
	if (w->fd >= 0) {
		close(w->fd);
		unlinkat(w->c->dfd, w->tmp, 0);
	}
	XXH3_freeState(w->xs);
	free(w);
}

/* Writes the sidecar of w under its temp name, then its final name. */
static int publish_sidecar(struct rq_cache_writer *w, const struct names *nm,
                           const uint8_t sum[16], const char **what)
{
	struct rq_cache *c = w->c;
	char tmp[RQC_REL_MAX];
	int fd = -1;
	*what = "creating its sidecar";
	for (int tries = 0; fd < 0 && tries < 8; tries++) {
		unsigned seq = __atomic_fetch_add(&c->tmp_seq, 1, __ATOMIC_RELAXED);
		snprintf(tmp, sizeof tmp, "%.42s.tmp.%ld.%u", nm->sum, (long)getpid(), seq);
		fd = openat(c->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0 && errno != EEXIST)
			return -errno;
	}
	if (fd < 0)
		return -EEXIST;
	uint8_t s[RQF_SUM_BYTES];
	make_sidecar(s, &w->key, w->size, sum);
	int r = rqc_pwrite_all(fd, s, RQF_SUM_BYTES, 0);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	*what = "publishing its sidecar";
	if (r == 0 && renameat(c->dfd, tmp, c->dfd, nm->sum) < 0)
		r = -errno;
	if (r < 0)
		unlinkat(c->dfd, tmp, 0);
	return r;
}

int rq_cache_file_commit(struct rq_cache_writer *w, int *fdp, struct rq_cache_ident *idp,
                         struct rq_err *err)
{
	struct rq_cache *c = w->c;
	struct names nm;
	names_of(c, &w->key, &nm);
	int rfd = -1, r;
	bool renamed = false;
	const char *what = "writing";
	struct stat st, after, pub;
	if (w->failed) {
		rq_cache_file_abort(w);
		return rq_errf(err, -EIO, "cache file %s not written: an earlier write failed",
		               nm.bpath);
	}
	if (w->written != w->size) {
		pthread_mutex_lock(&c->mu);
		c->st.put_failed++;
		pthread_mutex_unlock(&c->mu);
		r = rq_errf(err, -EINVAL, "cache file %s not written: %llu of its %llu bytes were "
		            "given", nm.bpath, (unsigned long long)w->written,
		            (unsigned long long)w->size);
		rq_cache_file_abort(w);
		return r;
	}
	uint8_t sum[16];
	canon(XXH3_128bits_digest(w->xs), sum);
	pthread_mutex_lock(&c->mu);
	int64_t now = rqc_tick(c);
	pthread_mutex_unlock(&c->mu);
	rqc_touch(w->fd, now);
	what = "syncing";
	if (fsync(w->fd) < 0 || fstat(w->fd, &st) < 0)
		goto fail_errno;
	/* The fd we hand back: the same inode, read-only. */
	what = "reopening";
	rfd = openat(c->dfd, w->tmp, RQC_OPEN_FLAGS);
	if (rfd < 0 || fstat(rfd, &after) < 0)
		goto fail_errno;
	if (!rqc_same_file(&after, &st)) {
		r = -ESTALE;
		goto fail;
	}
	int fl = fcntl(rfd, F_GETFL);
	if (fl < 0 || fcntl(rfd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		goto fail_errno;
	what = "closing";
	int cr = close(w->fd);
	w->fd = -1;
	if (cr < 0) {
		r = -errno;
		unlinkat(c->dfd, w->tmp, 0);
		goto fail;
	}
	what = "publishing";
	if (renameat(c->dfd, w->tmp, c->dfd, nm.bin) < 0) {
		r = -errno;
		unlinkat(c->dfd, w->tmp, 0);
		goto fail;
	}
	renamed = true;
	if ((r = publish_sidecar(w, &nm, sum, &what)) < 0)
		goto fail;
	/* Complete and visible; a failed directory sync only risks losing it
	 * in a crash, which is a miss, so it does not fail the commit. */
	rqc_fsync_dir_at(c->dfd, RQC_FILES_DIR);

	/* rename(2) moves ctime: the identity is the one after it. */
	if (fstat(rfd, &after) < 0)
		goto fail_errno;
	bool ours = fstatat(c->dfd, nm.bin, &pub, AT_SYMLINK_NOFOLLOW) == 0 &&
	            rqc_same_file(&pub, &after);
	pthread_mutex_lock(&c->mu);
	if (w->counted)                /* no longer being written: counted as a file now */
		c->writing -= w->size < c->writing ? w->size : c->writing;
	w->counted = false;
	adopt(c, &w->key, w->size, sum, &after, ours, now);
	pthread_mutex_unlock(&c->mu);
	struct rq_cache_key k = w->key;
	XXH3_freeState(w->xs);
	free(w);
	rqc_evict(c, &k, 0);
	*fdp = rfd;
	if (idp)
		rqc_ident_of(&after, idp);
	return 0;

fail_errno:
	r = -errno;
fail:
	if (renamed)
		unlink_if_same(c, &nm, &st);
	if (rfd >= 0)
		close(rfd);
	uint64_t size = w->size;
	rq_cache_file_abort(w);   /* the temp, when still there */
	return rqc_put_fail(c, err, r, "file", nm.bpath, size, what);
}

int rq_cache_file_open(struct rq_cache *c, const struct rq_cache_key *k, uint64_t size,
                       int *fdp, struct rq_cache_ident *idp, struct rq_err *err)
{
	struct names nm;
	names_of(c, k, &nm);
	int fd = -1;
	struct stat st, after;
	bool judged;
	int r = rqc_open_name(c, nm.bin, "cache file", nm.bpath, &fd, &st, &judged, err);
	if (r == -ENOENT)
		return file_miss(c, k, err);
	if (r < 0)
		return r;
	if (r > 0) {
		drop_file(c, k, &nm, judged ? &st : NULL, true, true);
		return -ENOENT;
	}
	uint8_t sum[16];
	r = read_sidecar(c, k, size, &nm, sum, err);
	if (r == -ENOENT) {
		close(fd);   /* data without a sidecar: not (yet) a file */
		return file_miss(c, k, err);
	}
	if (r != 0) {
		close(fd);
		if (r < 0)
			return r;
		drop_file(c, k, &nm, &st, r == VERIFY_CORRUPT, true);
		return -ENOENT;
	}
	if ((uint64_t)st.st_size != size) {
		close(fd);
		rqc_bad(err, 0, "cache file %s is %llu bytes, its sidecar says %llu (truncated or "
		        "extended)", nm.bpath, (unsigned long long)st.st_size,
		        (unsigned long long)size);
		drop_file(c, k, &nm, &st, true, true);
		return -ENOENT;
	}

	pthread_mutex_lock(&c->mu);
	struct rqc_ent *e = rqc_find(c, k);
	bool trusted = e && e->kind == RQC_FILE && e->present && e->verified &&
	               rqc_ent_matches(e, &st) && e->has_sum && !memcmp(e->sum, sum, 16);
	int64_t now = rqc_tick(c);
	pthread_mutex_unlock(&c->mu);

	/* Touch first, then take the identity: our own touch moves ctime. */
	rqc_touch(fd, now);
	if (trusted) {
		if (fstat(fd, &after) < 0) {
			int en = errno;
			close(fd);
			return rq_errf(err, -en, "cannot stat cache file %s: %s", nm.bpath, strerror(en));
		}
		/* Only ctime (and atime) may have moved, by our touch. */
		trusted = rqc_same_file(&after, &st) && after.st_size == st.st_size &&
		          rqc_ns(after.st_mtim) == rqc_ns(st.st_mtim);
	}
	if (!trusted) {
		struct check_arg a = { size, sum };
		r = rqc_verify_stable(fd, "cache file", nm.bpath, check_data, &a, &after, err);
		if (r != VERIFY_OK) {
			close(fd);
			if (r < 0)
				return r;
			drop_file(c, k, &nm, &st, r == VERIFY_CORRUPT, true);
			return -ENOENT;
		}
	}
	pthread_mutex_lock(&c->mu);
	adopt(c, k, size, sum, &after, true, now);
	c->st.hits++;
	pthread_mutex_unlock(&c->mu);
	*fdp = fd;
	if (idp)
		rqc_ident_of(&after, idp);
	return 0;
}

int rq_cache_file_recheck(struct rq_cache *c, const struct rq_cache_key *k, int fd,
                          uint64_t size, struct rq_cache_ident *id, struct rq_err *err)
{
	struct names nm;
	names_of(c, k, &nm);
	struct stat st, after;
	if (fstat(fd, &st) < 0)
		return rq_errf(err, -errno, "cannot stat cache file %s: %s", nm.bpath, strerror(errno));
	struct rq_cache_ident now;
	rqc_ident_of(&st, &now);
	uint8_t sum[16];
	pthread_mutex_lock(&c->mu);
	bool same = rqc_ident_eq(id, &now);
	struct rqc_ent *e = rqc_find(c, k);
	bool known = e && e->kind == RQC_FILE && e->has_sum;
	if (known)
		memcpy(sum, e->sum, 16);
	pthread_mutex_unlock(&c->mu);
	if (same)
		return 0;

	/* Changed since verified: never trusted without a full verification,
	 * against the sum we know (the names may be gone), else the sidecar's. */
	if (!known) {
		int r = read_sidecar(c, k, size, &nm, sum, err);
		if (r < 0 && r != -ENOENT)
			return r;
		if (r != 0) {
			if (r == -ENOENT)
				rqc_bad(err, 0, "cache file %s changed and its sidecar %s is gone: it "
				        "cannot be verified", nm.bpath, nm.spath);
			if (err)
				err->code = -ESTALE;
			return -ESTALE;
		}
	}
	struct check_arg a = { size, sum };
	int r = rqc_verify_stable(fd, "cache file", nm.bpath, check_data, &a, &after, err);
	if (r < 0)
		return r;
	if (r != VERIFY_OK) {
		drop_file(c, k, &nm, &st, r == VERIFY_CORRUPT, false);
		if (err)
			err->code = -ESTALE;
		return -ESTALE;
	}
	pthread_mutex_lock(&c->mu);
	rqc_ident_of(&after, id);
	e = rqc_find(c, k);
	if (e && e->kind == RQC_FILE && e->present && e->dev == after.st_dev &&
	    e->ino == after.st_ino) {
		rqc_set_identity(e, &after);   /* still the file at the name: adopt */
		e->verified = true;
	}
	pthread_mutex_unlock(&c->mu);
	return 1;
}

static bool is_reg_at(int dfd, const char *rel)
{
	struct stat st;
	return fstatat(dfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

int rq_cache_file_has(struct rq_cache *c, const struct rq_cache_key *k)
{
	char bin[RQC_REL_MAX], sum[RQC_REL_MAX];
	rqc_file_rel(k, bin, sum);
	return is_reg_at(c->dfd, bin) && is_reg_at(c->dfd, sum);
}

int rq_cache_has(struct rq_cache *c, const struct rq_cache_key *k)
{
	char rel[RQC_REL_MAX];
	rqc_rel_path(k, rel);
	return is_reg_at(c->dfd, rel);
}

void rq_cache_file_pin(struct rq_cache *c, const struct rq_cache_key *k, int delta)
{
	pthread_mutex_lock(&c->mu);
	struct rqc_ent *e = rqc_find(c, k);
	if (!e && delta > 0 && (e = rqc_add(c, k)))
		e->kind = RQC_FILE;   /* a placeholder until the file is seen */
	if (e) {
		e->pins += delta;
		if (e->pins <= 0) {
			e->pins = 0;
			if (!e->present)
				rqc_del(c, e);   /* the placeholder has nothing left to hold */
		}
	}
	pthread_mutex_unlock(&c->mu);
}

/* Unlinks a name: 1 removed, 0 absent, -errno. */
static int unlink_name(int dfd, const char *rel)
{
	if (unlinkat(dfd, rel, 0) == 0)
		return 1;
	return errno == ENOENT ? 0 : -errno;
}

int rq_cache_file_remove(struct rq_cache *c, const struct rq_cache_key *k)
{
	char bin[RQC_REL_MAX], sum[RQC_REL_MAX];
	rqc_file_rel(k, bin, sum);
	int rs = unlink_name(c->dfd, sum);   /* the sidecar first: a .bin alone is a miss */
	int rb = unlink_name(c->dfd, bin);
	pthread_mutex_lock(&c->mu);
	forget(c, k);
	pthread_mutex_unlock(&c->mu);
	if (rb < 0)
		return rb;
	if (rs < 0)
		return rs;
	return rb || rs ? 0 : -ENOENT;
}

int rq_cache_remove(struct rq_cache *c, const struct rq_cache_key *k)
{
	char rel[RQC_REL_MAX];
	rqc_rel_path(k, rel);
	int r = unlink_name(c->dfd, rel);
	pthread_mutex_lock(&c->mu);
	struct rqc_ent *e = rqc_find(c, k);
	if (e && e->kind == RQC_ENTRY)
		rqc_del(c, e);
	pthread_mutex_unlock(&c->mu);
	return r < 0 ? r : r ? 0 : -ENOENT;
}
