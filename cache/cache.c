/* cache.c — entry files of the quantization cache: format, put, lookup,
 * open/close. The in-memory index, scan and eviction are in cache_index.c,
 * what entries share with whole files (cache_file.c) in cache_io.c.
 *
 * Entry file <dir>/<first 2 hex>/<32 hex of the key>.rqc, integers
 * little-endian:
 *
 *     offset  bytes  field
 *          0      8  magic "RQCACHE\0"
 *          8      4  format version (RQC_VERSION)
 *         12      4  header bytes = payload offset (64)
 *         16     16  key (the 16 bytes of rq_cache_key)
 *         32      8  payload bytes n
 *         40     16  reserved, zero
 *         56      8  XXH3-64 of bytes 0..55 (the header checks itself)
 *         64      n  payload
 *       64+n     16  XXH3-128 of the payload (XXH128_canonical_t, big-endian)
 *
 * The file is exactly 80 + n bytes; a longer or shorter file is corrupt.
 *
 * State machine of one entry (one key, on disk):
 *
 *   absent --put: create xx/<hex>.rqc.tmp.<pid>.<n> (O_EXCL), fallocate,
 *     ^       write, set atime, fsync--> tmp
 *     |   tmp --rename onto xx/<hex>.rqc, fsync xx/--> published
 *     |   tmp --any failure: unlink tmp; put returns -errno--> absent
 *     |   tmp --writer crashed: the next open/scan unlinks it when it is 15 min
 *     |         old, or its pid is dead and it is 1 min old--> absent
 *     |   published --first lookup in this process: whole file read, header,
 *     |         key, size and checksum checked--> verified (in memory:
 *     |         dev, ino, size, mtime, ctime of the file, taken by an fstat
 *     |         after our touch, which moves ctime)
 *     +-- published --a check fails: unlinked (if still the same inode),
 *     |         counted as corrupt, lookup answers -ENOENT with a message
 *     |   verified --lookup: lstat, open, fstat; identity unchanged: hit
 *     |         without reading; changed (replaced by a rename, written
 *     |         into, truncated, utime'd, touched by another process)-->
 *     |         published (verified again before any byte is trusted)
 *     |   verified --rq_cache_recheck of an open fd (the mount, before it
 *     |         serves bytes again): same rule on that fd's identity
 *     +-- published/verified --LRU eviction beyond max_bytes--> absent
 *
 * Hostile names: only a regular file of exactly 80 + n bytes, not writable
 * by group/others, is ever read. Every open is O_NOFOLLOW|O_NONBLOCK (then
 * O_NONBLOCK is cleared): a FIFO cannot block us, a symlink cannot redirect
 * us (ELOOP). A FIFO, symlink, device or (empty) directory at an entry's
 * name is a corrupt entry: removed when it is still the thing we judged.
 *
 * Trust model. The directory must be writable only by its owner, who is the
 * caller or root (rq_cache_open refuses anything else): whoever can write
 * it can feed the mount bytes. Against that owner's accidents (and other
 * processes sharing the directory) we detect: any corruption before first
 * use in a process (whole file checksummed), and any change of identity
 * after verification -- rewrite in place even with the mtime restored
 * (ctime moves), truncation, replacement by rename, a FIFO/symlink planted.
 * A changed identity is re-verified, never trusted. Not detected: bytes
 * that change on disk below an unchanged identity after verification (bit
 * rot, a raw write to the block device), or a change within the same
 * timestamp tick as our own verification; the next process (mount)
 * verifies again and catches them.
 *
 * Durability. By default a put fsyncs the entry, renames it, and fsyncs
 * xx/: a published entry survives a crash. With lazy_sync (the mount's job
 * entries) the two fsyncs are skipped and one syncfs(2) of the cache's file
 * system follows every RQC_SYNC_BYTES of puts or RQC_SYNC_S seconds, and
 * rq_cache_close: per-entry fsyncs on 2 workers cost a cold read up to a
 * fifth of its speed (strace: ~2 journal commits per job), and a crash can
 * cost nothing but work. An entry renamed before its data reached the disk
 * comes back after a crash missing, short, or with zeros or stale blocks:
 * its size, header or payload checksum fails at its first lookup in the
 * next process, so it is dropped and rebuilt -- a miss, never a wrong byte.
 * Materialized files (cache_file.c) are always fsync'd.
 *
 * Recency: every hit and put sets the file's atime explicitly (ns) and leaves
 * mtime alone, so mtime can serve as identity and atime as the shared LRU
 * clock. An entry of a foreign format version is a miss but is not deleted
 * (another build may be sharing the directory); the next put replaces it.
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it.
 *
 *   cache.c        entry files: format, put, lookup, open/close
 *   cache_file.c   whole files: materialized virtual files
 *   cache_index.c  one process's index of a cache directory, LRU, budget
 *   cache_io.c     what entries and whole files share: reads, publish
 */
#include "cache/cache_int.h"

#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define RQC_VERSION 1u
#define RQC_SYNC_BYTES ((int64_t)1 << 30)  /* lazy_sync: syncfs after this much put */
#define RQC_SYNC_S 5                        /* ... or this many seconds */
#define RQC_VERIFY_BUF (1u << 20)  /* verification reads this much at a time */

static const char rqc_magic[8] = "RQCACHE";

void rq_cache_key_of(const void *desc, size_t len, struct rq_cache_key *out)
{
	XXH128_canonical_t cano;
	XXH128_canonicalFromHash(&cano, XXH3_128bits(desc, len));
	memcpy(out->b, cano.digest, 16);
}

void rq_cache_key_hex(const struct rq_cache_key *k, char out[33])
{
	rqc_hex(k, out);
}

const char *rq_cache_dir(const struct rq_cache *c)
{
	return c->dir;
}

static int64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* lazy_sync: counts a put's bytes; the put that crosses RQC_SYNC_BYTES or
 * comes RQC_SYNC_S after the last sync makes everything durable at once
 * (one thread: the one that moves synced_ns). */
static void lazy_sync_after(struct rq_cache *c, uint64_t bytes)
{
	int64_t u = atomic_fetch_add(&c->unsynced, (int64_t)bytes) + (int64_t)bytes;
	int64_t now = mono_ns(), last = atomic_load(&c->synced_ns);
	if (u < RQC_SYNC_BYTES && now - last < (int64_t)RQC_SYNC_S * 1000000000)
		return;
	if (!atomic_compare_exchange_strong(&c->synced_ns, &last, now))
		return;
	atomic_store(&c->unsynced, 0);
	syncfs(c->dfd);   /* a failure only risks a miss after a crash */
}

static void payload_sum(const void *p, size_t n, uint8_t out[16])
{
	XXH128_canonical_t cano;
	XXH128_canonicalFromHash(&cano, XXH3_128bits(p, n));
	memcpy(out, cano.digest, 16);
}

static void make_header(uint8_t h[RQC_HDR], const struct rq_cache_key *k, uint64_t n)
{
	memset(h, 0, RQC_HDR);
	memcpy(h, rqc_magic, 8);
	rqc_put_le32(h + 8, RQC_VERSION);
	rqc_put_le32(h + 12, RQC_HDR);
	memcpy(h + 16, k->b, 16);
	rqc_put_le64(h + 32, n);
	rqc_put_le64(h + 56, XXH3_64bits(h, 56));
}

/* Reads the whole entry behind fd and checks it against key and size.
 * VERIFY_OK, VERIFY_CORRUPT / VERIFY_FOREIGN with err describing why, or
 * -errno when the file could not be read (err set). */
static int verify(int fd, const struct stat *st, const struct rq_cache_key *k, uint64_t size,
                  const char *path, struct rq_err *err)
{
	uint8_t h[RQC_HDR], sum[RQC_TRAILER], want[RQC_TRAILER];
	uint64_t got = 0;
	uint64_t fsize = (uint64_t)st->st_size;
	if (fsize < RQC_OVERHEAD)
		return rqc_bad(err, VERIFY_CORRUPT, "cache entry %s is truncated (%llu bytes, less than "
		               "its header and checksum)", path, (unsigned long long)fsize);
	int r = rqc_pread_all(fd, h, RQC_HDR, 0, &got);
	if (r < 0)
		return rq_errf(err, r, "cannot read cache entry %s: %s", path, strerror(-r));
	if (got < RQC_HDR)
		return rqc_bad(err, VERIFY_CORRUPT, "cache entry %s is truncated", path);
	if (memcmp(h, rqc_magic, 8))
		return rqc_bad(err, VERIFY_CORRUPT, "cache entry %s has a bad magic", path);
	if (rqc_get_le32(h + 8) != RQC_VERSION)
		return rqc_bad(err, VERIFY_FOREIGN, "cache entry %s has format version %u, this build "
		               "reads %u: a miss", path, rqc_get_le32(h + 8), RQC_VERSION);
	if (rqc_get_le32(h + 12) != RQC_HDR || rqc_get_le64(h + 56) != XXH3_64bits(h, 56))
		return rqc_bad(err, VERIFY_CORRUPT, "cache entry %s has a corrupt header", path);
	if (memcmp(h + 16, k->b, 16))
		return rqc_bad(err, VERIFY_CORRUPT, "cache entry %s holds another key", path);
	uint64_t n = rqc_get_le64(h + 32);
	if (n != fsize - RQC_OVERHEAD)
		return rqc_bad(err, VERIFY_CORRUPT, "cache entry %s is %llu bytes but its header says "
		               "%llu payload bytes (truncated or overwritten)", path,
		               (unsigned long long)fsize, (unsigned long long)n);
	if (n != size)
		return rqc_bad(err, VERIFY_CORRUPT, "cache entry %s holds %llu payload bytes, %llu were "
		               "expected", path, (unsigned long long)n, (unsigned long long)size);

	uint8_t *buf = malloc(RQC_VERIFY_BUF);
	XXH3_state_t *xs = XXH3_createState();
	if (!buf || !xs) {
		free(buf);
		XXH3_freeState(xs);
		return rq_errf(err, -ENOMEM, "out of memory verifying cache entry %s", path);
	}
	XXH3_128bits_reset(xs);
	uint64_t off = RQC_HDR;
	r = VERIFY_OK;
	while (off < RQC_HDR + n) {
		uint64_t want_n = RQC_HDR + n - off;
		if (want_n > RQC_VERIFY_BUF)
			want_n = RQC_VERIFY_BUF;
		int e = rqc_pread_all(fd, buf, want_n, off, &got);
		if (e < 0) {
			r = rq_errf(err, e, "cannot read cache entry %s: %s", path, strerror(-e));
			break;
		}
		if (got < want_n) {
			r = rqc_bad(err, VERIFY_CORRUPT, "cache entry %s is truncated", path);
			break;
		}
		XXH3_128bits_update(xs, buf, want_n);
		off += want_n;
	}
	if (r == VERIFY_OK) {
		XXH128_canonical_t cano;
		XXH128_canonicalFromHash(&cano, XXH3_128bits_digest(xs));
		memcpy(want, cano.digest, 16);
		int e = rqc_pread_all(fd, sum, RQC_TRAILER, RQC_HDR + n, &got);
		if (e < 0)
			r = rq_errf(err, e, "cannot read cache entry %s: %s", path, strerror(-e));
		else if (got < RQC_TRAILER)
			r = rqc_bad(err, VERIFY_CORRUPT, "cache entry %s is truncated", path);
		else if (memcmp(sum, want, 16))
			r = rqc_bad(err, VERIFY_CORRUPT, "cache entry %s fails its payload checksum", path);
	}
	XXH3_freeState(xs);
	free(buf);
	return r;
}

struct verify_arg {
	const struct rq_cache_key *k;
	uint64_t size;
};

static int verify_cb(int fd, const struct stat *st, const char *path, void *arg,
                     struct rq_err *err)
{
	const struct verify_arg *a = arg;
	return verify(fd, st, a->k, a->size, path, err);
}

/* verify() while the file holds still (see rqc_verify_stable). */
static int verify_stable(int fd, const struct rq_cache_key *k, uint64_t size, const char *path,
                         struct stat *after, struct rq_err *err)
{
	struct verify_arg a = { k, size };
	return rqc_verify_stable(fd, "cache entry", path, verify_cb, &a, after, err);
}

/* A bad entry (err describes it): removed when the name still holds what we
 * judged (another process may have renamed a good entry over it
 * meanwhile), counted, forgotten. `del` false: a miss only (foreign
 * version, unstable file). */
static void drop_bad(struct rq_cache *c, const struct rq_cache_key *k, const char *rel,
                     const struct stat *judged, bool del, bool count_miss)
{
	struct stat now;
	if (del && judged && fstatat(c->dfd, rel, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
	    rqc_same_file(&now, judged) && (now.st_mode & S_IFMT) == (judged->st_mode & S_IFMT))
		unlinkat(c->dfd, rel, S_ISDIR(now.st_mode) ? AT_REMOVEDIR : 0);  /* rmdir: if empty */
	pthread_mutex_lock(&c->mu);
	if (count_miss)
		c->st.misses++;
	if (del)
		c->st.corrupt++;
	struct rqc_ent *ent = rqc_find(c, k);
	if (ent && (!judged || (ent->dev == judged->st_dev && ent->ino == judged->st_ino) || del))
		rqc_del(c, ent);
	pthread_mutex_unlock(&c->mu);
}

static void entry_path(const struct rq_cache *c, const struct rq_cache_key *k,
                       char rel[RQC_REL_MAX], char path[PATH_MAX])
{
	rqc_rel_path(k, rel);
	snprintf(path, PATH_MAX, "%s/%s", c->dir, rel);
}

int rq_cache_lookup(struct rq_cache *c, const struct rq_cache_key *k, uint64_t size,
                    int *fdp, uint64_t *payload_off, struct rq_cache_ident *idp,
                    struct rq_err *err)
{
	char rel[RQC_REL_MAX], path[PATH_MAX];
	entry_path(c, k, rel, path);
	int fd = -1;
	struct stat st;
	bool judged;
	int r = rqc_open_name(c, rel, "cache entry", path, &fd, &st, &judged, err);
	if (r == -ENOENT) {
		pthread_mutex_lock(&c->mu);
		c->st.misses++;
		struct rqc_ent *ent = rqc_find(c, k);
		if (ent)
			rqc_del(c, ent);   /* removed by another process */
		pthread_mutex_unlock(&c->mu);
		if (err) {
			err->code = 0;
			err->msg[0] = 0;
		}
		return -ENOENT;
	}
	if (r < 0)
		return r;
	if (r > 0) {
		drop_bad(c, k, rel, judged ? &st : NULL, true, true);
		return -ENOENT;
	}

	pthread_mutex_lock(&c->mu);
	struct rqc_ent *ent = rqc_find(c, k);
	bool trusted = ent && ent->verified && rqc_ent_matches(ent, &st) &&
	               (uint64_t)st.st_size == size + RQC_OVERHEAD;
	int64_t now = rqc_tick(c);
	pthread_mutex_unlock(&c->mu);

	/* Touch first, then take the identity: our own touch moves ctime. */
	rqc_touch(fd, now);
	struct stat after;
	if (trusted) {
		if (fstat(fd, &after) < 0) {
			int e = errno;
			close(fd);
			return rq_errf(err, -e, "cannot stat cache entry %s: %s", path, strerror(e));
		}
		/* Only ctime (and atime) may have moved, by our touch. */
		trusted = rqc_same_file(&after, &st) && after.st_size == st.st_size &&
		          rqc_ns(after.st_mtim) == rqc_ns(st.st_mtim);
	}
	if (!trusted) {
		r = verify_stable(fd, k, size, path, &after, err);
		if (r < 0) {
			close(fd);
			return r;
		}
		if (r != VERIFY_OK) {
			close(fd);
			drop_bad(c, k, rel, &st, r == VERIFY_CORRUPT, true);
			return -ENOENT;
		}
	}

	pthread_mutex_lock(&c->mu);
	ent = rqc_find(c, k);
	if (!ent)
		ent = rqc_add(c, k);
	if (ent) {
		rqc_set_identity(ent, &after);
		ent->verified = true;
		rqc_set_present(c, ent, RQC_ENTRY, size);
		rqc_use(c, ent, now);
	}
	c->st.hits++;
	pthread_mutex_unlock(&c->mu);

	*fdp = fd;
	*payload_off = RQC_HDR;
	if (idp)
		rqc_ident_of(&after, idp);
	return 0;
}

int rq_cache_recheck(struct rq_cache *c, const struct rq_cache_key *k, int fd, uint64_t size,
                     struct rq_cache_ident *id, struct rq_err *err)
{
	char rel[RQC_REL_MAX], path[PATH_MAX];
	entry_path(c, k, rel, path);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return rq_errf(err, -errno, "cannot stat cache entry %s: %s", path, strerror(errno));
	struct rq_cache_ident now;
	rqc_ident_of(&st, &now);
	pthread_mutex_lock(&c->mu);
	bool same = rqc_ident_eq(id, &now);
	pthread_mutex_unlock(&c->mu);
	if (same)
		return 0;

	/* Changed since verified: never trusted without a full verification. */
	struct stat after;
	int r = verify_stable(fd, k, size, path, &after, err);
	if (r < 0)
		return r;
	if (r != VERIFY_OK) {
		drop_bad(c, k, rel, &st, r == VERIFY_CORRUPT, false);
		if (err)
			err->code = -ESTALE;
		return -ESTALE;
	}
	pthread_mutex_lock(&c->mu);
	rqc_ident_of(&after, id);
	struct rqc_ent *ent = rqc_find(c, k);
	if (ent && ent->dev == after.st_dev && ent->ino == after.st_ino) {
		rqc_set_identity(ent, &after);   /* still the file at the name: adopt */
		ent->verified = true;
	}
	pthread_mutex_unlock(&c->mu);
	return 1;
}

int rq_cache_get(struct rq_cache *c, const struct rq_cache_key *k, uint64_t size,
                 uint8_t *buf, struct rq_err *err)
{
	int fd;
	uint64_t off, got = 0;
	int r = rq_cache_lookup(c, k, size, &fd, &off, NULL, err);
	if (r < 0)
		return r;
	r = rqc_pread_all(fd, buf, size, off, &got);
	close(fd);
	if (r < 0 || got < size) {
		char h[33];
		rqc_hex(k, h);
		if (r == 0)
			r = -EIO;   /* short: the verified file shrank under us */
		return rq_errf(err, r, "cannot read cache entry %s/%.2s/%s.rqc: %s", c->dir, h, h,
		               r != -EIO || got >= size ? strerror(-r) : "it shrank while being read");
	}
	return 0;
}

static int put_entry(struct rq_cache *c, const struct rq_cache_key *k, const uint8_t *buf,
                     uint64_t size, int *fdp, uint64_t *payload_off, struct rq_cache_ident *idp,
                     struct rq_err *err)
{
	char rel[RQC_REL_MAX], tmp[RQC_REL_MAX], sub[3], path[PATH_MAX];
	rqc_rel_path(k, rel);
	memcpy(sub, rel, 2);
	sub[2] = 0;
	snprintf(path, sizeof path, "%s/%s", c->dir, rel);

	if (mkdirat(c->dfd, sub, 0755) == 0)
		fsync(c->dfd);   /* make the new subdirectory itself durable */
	else if (errno != EEXIST)
		return rqc_put_fail(c, err, -errno, "entry", path, size + RQC_OVERHEAD,
		                    "creating its directory");

	int fd = -1;
	for (int tries = 0; fd < 0 && tries < 8; tries++) {
		unsigned seq = __atomic_fetch_add(&c->tmp_seq, 1, __ATOMIC_RELAXED);
		snprintf(tmp, sizeof tmp, "%.39s.tmp.%ld.%u", rel, (long)getpid(), seq);
		fd = openat(c->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0 && errno != EEXIST)   /* EEXIST: a dead namesake's leftover */
			return rqc_put_fail(c, err, -errno, "entry", path, size + RQC_OVERHEAD,
			                    "creating its temp file");
	}
	if (fd < 0)
		return rqc_put_fail(c, err, -EEXIST, "entry", path, size + RQC_OVERHEAD,
		                    "creating its temp file");

	const char *what = "writing";
	uint64_t total = size + RQC_OVERHEAD;
	uint8_t h[RQC_HDR], sum[RQC_TRAILER];
	struct stat st;
	int r = 0;
	/* Reserve the blocks first: a full disk fails here, before any write. */
	if (fallocate(fd, 0, 0, (off_t)total) < 0 && errno != EOPNOTSUPP && errno != ENOSYS &&
	    errno != EINVAL) {
		r = -errno;
		goto fail;
	}
	make_header(h, k, size);
	payload_sum(buf, size, sum);
	if ((r = rqc_pwrite_all(fd, h, RQC_HDR, 0)) < 0 ||
	    (r = rqc_pwrite_all(fd, buf, size, RQC_HDR)) < 0 ||
	    (r = rqc_pwrite_all(fd, sum, RQC_TRAILER, RQC_HDR + size)) < 0)
		goto fail;
	/* fallocate never shrinks; it only ever reserved exactly `total`. */
	pthread_mutex_lock(&c->mu);
	int64_t now = rqc_tick(c);
	pthread_mutex_unlock(&c->mu);
	rqc_touch(fd, now);
	what = "syncing";
	if ((!c->lazy_sync && fsync(fd) < 0) || fstat(fd, &st) < 0) {
		r = -errno;
		goto fail;
	}
	what = "closing";
	int cr = close(fd);
	fd = -1;
	if (cr < 0) {
		r = -errno;
		goto fail;
	}
	what = "publishing";
	if (renameat(c->dfd, tmp, c->dfd, rel) < 0) {
		r = -errno;
		goto fail;
	}
	/* The entry is complete and visible; a failed directory sync only risks
	 * losing it in a crash, which is a miss, so it does not fail the put. */
	if (c->lazy_sync)
		lazy_sync_after(c, total);
	else
		rqc_fsync_dir_at(c->dfd, sub);

	/* rename(2) moves the inode's ctime on most file systems: the identity
	 * we trust is the one at the name now, if it is still our file. */
	struct stat pub;
	bool ours = fstatat(c->dfd, rel, &pub, AT_SYMLINK_NOFOLLOW) == 0 && rqc_same_file(&pub, &st) &&
	            pub.st_size == st.st_size && rqc_ns(pub.st_mtim) == rqc_ns(st.st_mtim);
	pthread_mutex_lock(&c->mu);
	struct rqc_ent *e = rqc_find(c, k);
	if (!e)
		e = rqc_add(c, k);
	if (e) {
		rqc_set_identity(e, ours ? &pub : &st);
		e->verified = ours;
		rqc_set_present(c, e, RQC_ENTRY, size);
		rqc_use(c, e, now);
	}
	pthread_mutex_unlock(&c->mu);
	rqc_evict(c, k, 0);
	if (fdp) {
		/* A read-only fd on the entry just published (no lookup, no second
		 * verification): it must still be our file at the name. */
		int rfd = openat(c->dfd, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		struct stat now_st;
		if (rfd < 0 || fstat(rfd, &now_st) < 0 || !rqc_same_file(&now_st, &st)) {
			if (rfd >= 0)
				close(rfd);
			return rq_errf(err, -ESTALE, "cache entry %s was replaced right after it was "
			               "written", path);
		}
		fcntl(rfd, F_SETFL, fcntl(rfd, F_GETFL) & ~O_NONBLOCK);
		*fdp = rfd;
		*payload_off = RQC_HDR;
		if (idp)
			rqc_ident_of(&now_st, idp);
	}
	return 0;

fail:
	if (fd >= 0)
		close(fd);
	unlinkat(c->dfd, tmp, 0);
	return rqc_put_fail(c, err, r, "entry", path, size + RQC_OVERHEAD, what);
}

int rq_cache_put(struct rq_cache *c, const struct rq_cache_key *k, const uint8_t *buf,
                 uint64_t size, struct rq_err *err)
{
	return put_entry(c, k, buf, size, NULL, NULL, NULL, err);
}

int rq_cache_put_open(struct rq_cache *c, const struct rq_cache_key *k, const uint8_t *buf,
                      uint64_t size, int *fd, uint64_t *payload_off, struct rq_cache_ident *id,
                      struct rq_err *err)
{
	return put_entry(c, k, buf, size, fd, payload_off, id, err);
}

void rq_cache_get_stats(struct rq_cache *c, struct rq_cache_stats *s)
{
	pthread_mutex_lock(&c->mu);
	*s = c->st;
	s->entries = c->n - c->nplace;
	s->bytes = c->bytes;
	s->files = c->files;
	s->file_bytes = c->file_bytes;
	s->writing = c->writing;
	pthread_mutex_unlock(&c->mu);
}

/* mkdir -p; err names the component that could not be made. */
static int mkdir_p(const char *dir, struct rq_err *err)
{
	char p[PATH_MAX];
	size_t len = strlen(dir);
	if (len >= sizeof p)
		return rq_errf(err, -ENAMETOOLONG, "cache directory %s: path too long", dir);
	memcpy(p, dir, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (p[i] != '/' && p[i] != 0)
			continue;
		char save = p[i];
		p[i] = 0;
		if (mkdir(p, 0755) < 0 && errno != EEXIST) {
			int e = errno;
			if (!strcmp(p, dir))
				return rq_errf(err, -e, "cannot create cache directory %s: %s", dir,
				               strerror(e));
			return rq_errf(err, -e, "cannot create cache directory %s: %s: %s", dir, p,
			               strerror(e));
		}
		p[i] = save;
	}
	return 0;
}

static const char cachedir_tag[] =
	"Signature: 8a477f597d28d172789f06886806bc55\n"
	"# This file is a cache directory tag created by requantfs.\n"
	"# For information about cache directory tags see https://bford.info/cachedir/\n";

int rq_cache_open(const struct rq_cache_opts *o, struct rq_cache **out, struct rq_err *err)
{
	if (!o || !o->dir || !o->dir[0])
		return rq_errf(err, -EINVAL, "no cache directory given");
	int r = mkdir_p(o->dir, err);
	if (r < 0)
		return r;
	struct rq_cache *c = calloc(1, sizeof *c);
	if (!c || !(c->dir = strdup(o->dir))) {
		free(c);
		return rq_errf(err, -ENOMEM, "out of memory opening cache directory %s", o->dir);
	}
	c->dfd = -1;
	c->max_bytes = o->max_bytes;
	c->lazy_sync = o->lazy_sync;
	atomic_store(&c->synced_ns, mono_ns());
	pthread_mutex_init(&c->mu, NULL);
	c->dfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->dfd < 0) {
		r = -errno;
		rq_errf(err, r, "cache directory %s: %s", o->dir,
		        r == -ENOTDIR ? "not a directory" : strerror(-r));
		goto fail;
	}
	/* Whoever can write the directory can feed the mount any bytes it
	 * likes (an entry is checksummed, but the checksum is not a secret):
	 * it must be writable by its owner only, and the owner be us or root.
	 * A sticky directory (mode 1777, /tmp-like) is refused too: others can
	 * still create entries under names that are missing. */
	struct stat dst;
	if (fstat(c->dfd, &dst) < 0) {
		r = -errno;
		rq_errf(err, r, "cache directory %s: %s", o->dir, strerror(-r));
		goto fail;
	}
	if (dst.st_mode & (S_IWGRP | S_IWOTH)) {
		r = -EPERM;
		rq_errf(err, r, "cache directory %s is writable by group or others (mode %04o): "
		        "whoever can write it can feed the mount bytes; run `chmod go-w %s`",
		        o->dir, (unsigned)(dst.st_mode & 07777), o->dir);
		goto fail;
	}
	if (rqc_dir_unsafe(&dst)) {
		r = -EPERM;
		rq_errf(err, r, "cache directory %s is owned by uid %u, not by you (uid %u) or root: "
		        "whoever owns it can feed the mount bytes", o->dir, (unsigned)dst.st_uid,
		        (unsigned)geteuid());
		goto fail;
	}
	/* Prove we can create files (catches EROFS, EACCES, and root on a
	 * read-only mount, which access(2) would not). */
	char probe[RQC_REL_MAX];
	snprintf(probe, sizeof probe, ".rqprobe.%ld.0", (long)getpid());
	int pfd = openat(c->dfd, probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (pfd < 0) {
		r = -errno;
		rq_errf(err, r, "cache directory %s is not writable: %s",
		        o->dir, strerror(-r));
		goto fail;
	}
	close(pfd);
	unlinkat(c->dfd, probe, 0);
	/* Tell backup tools this is a cache (best effort). */
	int tfd = openat(c->dfd, "CACHEDIR.TAG", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (tfd >= 0) {
		if (write(tfd, cachedir_tag, sizeof cachedir_tag - 1) < 0)
			unlinkat(c->dfd, "CACHEDIR.TAG", 0);
		close(tfd);
	}

	struct rqc_found *f = NULL;
	size_t n = 0;
	int64_t start = rqc_now_ns();
	char bad_sub[8] = "";
	r = rqc_scan(c, &f, &n, bad_sub);
	if (r == -EPERM) {
		rq_errf(err, r, "cache directory %s: its subdirectory %s/%s is writable by group or "
		        "others or owned by another user: whoever can write it can feed the mount "
		        "bytes; run `chmod go-w %s/%s` (or remove it)", o->dir, o->dir, bad_sub,
		        o->dir, bad_sub);
		goto fail;
	}
	if (r < 0) {
		rq_errf(err, r, "cannot scan cache directory %s: %s", o->dir, strerror(-r));
		goto fail;
	}
	pthread_mutex_lock(&c->mu);
	rqc_merge(c, f, n, start);
	pthread_mutex_unlock(&c->mu);
	free(f);
	/* A smaller --cache-max than last time takes effect now. */
	struct rq_cache_key none = { { 0 } };
	rqc_evict(c, &none, 0);
	*out = c;
	return 0;

fail:
	rq_cache_close(c);
	return r;
}

void rq_cache_close(struct rq_cache *c)
{
	if (!c)
		return;
	if (c->dfd >= 0 && c->lazy_sync && atomic_load(&c->unsynced) > 0)
		syncfs(c->dfd);
	if (c->dfd >= 0)
		close(c->dfd);
	rqc_free_all(c);
	pthread_mutex_destroy(&c->mu);
	free(c->dir);
	free(c);
}
