/* cache.h — a content-addressed, checksummed, crash-safe store of
 * quantization job outputs, shareable by several processes.
 *
 * Knows nothing of safetensors: a key is 16 bytes (XXH3-128 of a canonical
 * descriptor the caller builds), a value is an opaque payload. Entries are
 * files <dir>/<2 hex>/<32 hex>.rqc holding magic, format version, key,
 * payload size, payload, XXH3-128 of the payload. Published atomically
 * (temp file in the same directory, write, fsync, rename, fsync dir). */
#ifndef RQ_CACHE_H
#define RQ_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct rq_err;
struct rq_cache;

struct rq_cache_key {
	uint8_t b[16];
};

struct rq_cache_opts {
	const char *dir;          /* created if missing (mkdir -p) */
	uint64_t max_bytes;       /* LRU eviction above this many payload bytes, 0 = unlimited */
	int lazy_sync;            /* job entries: no fsync per put; one syncfs of the cache's
	                             file system every RQC_SYNC_S seconds or RQC_SYNC_BYTES
	                             of puts, and at close (see "Durability" in cache.c) */
};

struct rq_cache_stats {
	uint64_t entries, bytes;  /* on disk now (this process's view); bytes counts payload */
	uint64_t files, file_bytes; /* whole files (rq_cache_file_*) among them: their count
	                             and bytes (also included in entries and bytes) */
	uint64_t hits, misses, corrupt, evicted, put_failed;
	uint64_t writing;         /* bytes of whole files being written (room made at begin) */
};

/* -EACCES/-ENOTDIR/-EROFS... with a message naming the directory when it is
 * not a writable directory. -EPERM when the directory (or one of its xx/
 * subdirectories) is writable by group or others (sticky or not), or owned
 * by a user other than the caller and root: whoever can write the directory
 * can feed the mount bytes (see the trust model in cache.c). */
int rq_cache_open(const struct rq_cache_opts *o, struct rq_cache **out, struct rq_err *err);
void rq_cache_close(struct rq_cache *c);
const char *rq_cache_dir(const struct rq_cache *c);

/* XXH3-128 of a descriptor (the caller's canonical text). */
void rq_cache_key_of(const void *desc, size_t len, struct rq_cache_key *out);
void rq_cache_key_hex(const struct rq_cache_key *k, char out[33]);

/* What an entry file looked like (fstat) when its bytes were last checked.
 * Any write, truncation, utime, chmod or rename changes at least one field
 * (ctime moves on every change of the inode), so an unchanged identity means
 * unchanged bytes -- up to the file system's timestamp granularity. */
struct rq_cache_ident {
	uint64_t dev, ino, size;  /* size in bytes of the whole entry file */
	int64_t mtime, ctime;     /* ns since the epoch */
};

/* Looks an entry up. On a hit returns 0 with an open read-only fd, the
 * payload's offset in it and (when id is not NULL) the file's identity as
 * verified; the payload is `size` bytes. The first lookup of a key in this
 * process reads the whole entry and checks its checksum (later lookups
 * trust it while its identity -- dev, inode, size, mtime, ctime -- is
 * unchanged). Never blocks on, follows or reads anything but a regular file
 * of exactly size + 80 bytes. -ENOENT on a miss; a corrupt/truncated/wrong-
 * size entry, or a FIFO, symlink, directory or device at its name, is
 * deleted, counted, described in err and reported as -ENOENT too (a miss to
 * rebuild). The caller closes fd.
 * On a plain miss err is cleared (empty msg), so `r == -ENOENT && err.msg[0]`
 * means "a bad entry was dropped: log it". Other -errno: the entry could not
 * be read (err says why). A hit marks the entry most recently used. */
int rq_cache_lookup(struct rq_cache *c, const struct rq_cache_key *k, uint64_t size,
                    int *fd, uint64_t *payload_off, struct rq_cache_ident *id,
                    struct rq_err *err);

/* Re-checks an fd returned by rq_cache_lookup before its bytes are served
 * again: fstat()s it and compares with *id.
 *   0        identity unchanged: the bytes are the ones verified;
 *   1        identity changed (touched by another process, rewritten...) but
 *            the whole file verified again: *id is the new identity (bytes
 *            read from fd before this call may predate the change: read
 *            them again);
 *   -ESTALE  the file is corrupt now (err says why): it is deleted when it
 *            is still the entry, counted as corrupt, forgotten; close fd and
 *            rebuild;
 *   other -errno: it could not be checked (err says why).
 * Several threads may share one *id: the cache serializes access to it. */
int rq_cache_recheck(struct rq_cache *c, const struct rq_cache_key *k, int fd, uint64_t size,
                     struct rq_cache_ident *id, struct rq_err *err);

/* Convenience: lookup + read the payload into buf (size bytes). */
int rq_cache_get(struct rq_cache *c, const struct rq_cache_key *k, uint64_t size,
                 uint8_t *buf, struct rq_err *err);

/* Publishes an entry atomically. A concurrent put of the same key by another
 * process is fine (last rename wins; both are identical). -ENOSPC/-EDQUOT/-EIO
 * with a message; nothing partial is ever visible under the final name.
 * Evicts least-recently-used entries beyond max_bytes afterwards. */
int rq_cache_put(struct rq_cache *c, const struct rq_cache_key *k, const uint8_t *buf,
                 uint64_t size, struct rq_err *err);

/* rq_cache_put, and on success a read-only fd on the published entry with
 * its payload offset and identity (as rq_cache_lookup gives, without a
 * second lookup): the caller serves from it at once. The caller closes fd.
 * -ESTALE when another process replaced the entry in between (it is put). */
int rq_cache_put_open(struct rq_cache *c, const struct rq_cache_key *k, const uint8_t *buf,
                      uint64_t size, int *fd, uint64_t *payload_off, struct rq_cache_ident *id,
                      struct rq_err *err);

void rq_cache_get_stats(struct rq_cache *c, struct rq_cache_stats *s);

/* ---- a neighbour under the same limit -------------------------------------
 * Another store whose bytes count against max_bytes too (an hf:// mount's
 * remote chunk store, remote/rstore.h: one --cache-max for both). bytes(ctx)
 * says what it holds now; trim(ctx, n) evicts what it can of its least
 * recently used, unused files, up to about n bytes, and returns the bytes it
 * freed. Eviction here then keeps entries + files + bytes(ctx) <= max_bytes,
 * asking trim for the excess first (the neighbour's bytes are the cheaper
 * to get back), evicting entries and files least recently used for the
 * rest. The callbacks are called without the cache's lock, from any
 * thread; the neighbour must outlive the cache (or be unset by NULL). */
struct rq_cache_peer {
	uint64_t (*bytes)(void *ctx);
	uint64_t (*trim)(void *ctx, uint64_t n);
	void *ctx;
};
void rq_cache_set_peer(struct rq_cache *c, const struct rq_cache_peer *p);

/* Evicts least-recently-used entries and files (never a pinned file) until
 * n bytes are freed or nothing evictable is left; the bytes freed. For a
 * neighbour that needs room under the shared limit. The peer is not asked. */
uint64_t rq_cache_trim(struct rq_cache *c, uint64_t n);

/* ---- whole files ---------------------------------------------------------
 * A materialized virtual file (a whole requantized shard) stored so that the
 * kernel can read it directly (FUSE passthrough): its bytes alone, at
 * <dir>/files/<32 hex>.bin, beside a sidecar <32 hex>.sum that holds magic,
 * format version, key, size and the XXH3-128 of the bytes (and checks
 * itself). Published data first, then the sidecar (each temp -> fsync ->
 * rename, then fsync of files/): a data file without a matching sidecar is
 * not a file (a miss; replaced by the next commit, removed by a scan once
 * 15 minutes old). Layout and state machine: cache_file.c. Files count towards
 * max_bytes with the entries and are evicted least-recently-used with them,
 * except while pinned. The same trust model as entries: verified (the whole
 * file hashed) on first use in a process, then trusted while its identity
 * holds; never follows, blocks on or reads anything but a regular file. */
struct rq_cache_writer;

/* Starts writing file k of exactly `size` bytes: evicts to make room for
 * `size` under max_bytes, then creates a temp file in files/ with its space
 * reserved (fallocate: a full disk fails here, -ENOSPC/-EDQUOT with a
 * message). */
int rq_cache_file_begin(struct rq_cache *c, const struct rq_cache_key *k, uint64_t size,
                        struct rq_cache_writer **w, struct rq_err *err);
/* Appends n bytes, hashed as they go. -errno (ENOSPC...) with a message;
 * -EINVAL past `size`. After a failure only abort is useful (commit fails). */
int rq_cache_file_write(struct rq_cache_writer *w, const void *buf, size_t n,
                        struct rq_err *err);
/* Every byte written: fsync, publish. On success *fd is a read-only fd on
 * the published file and *id its identity (as rq_cache_file_open gives).
 * w is freed either way; on failure nothing is left under the final names
 * (-EINVAL when fewer than `size` bytes were written). Marks it used, then
 * evicts beyond max_bytes (never k). */
int rq_cache_file_commit(struct rq_cache_writer *w, int *fd, struct rq_cache_ident *id,
                         struct rq_err *err);
void rq_cache_file_abort(struct rq_cache_writer *w);   /* accepts NULL */

/* Opens file k (size bytes): the sidecar must match and the bytes hash to
 * its sum. Results as rq_cache_lookup: 0 with fd and id; -ENOENT miss (err
 * cleared); a bad file is removed, counted corrupt, described in err and
 * reported -ENOENT; other -errno. Marks it used. */
int rq_cache_file_open(struct rq_cache *c, const struct rq_cache_key *k, uint64_t size,
                       int *fd, struct rq_cache_ident *id, struct rq_err *err);
/* As rq_cache_recheck, for an fd of rq_cache_file_open/commit. A changed
 * fd is hashed against the sum this process learnt for k (kept while k is
 * pinned, even after its names are removed), else against the sidecar at
 * the name; with neither it is -ESTALE. */
int rq_cache_file_recheck(struct rq_cache *c, const struct rq_cache_key *k, int fd,
                          uint64_t size, struct rq_cache_ident *id, struct rq_err *err);
/* Is there a published file k (1/0: a stat of the .bin and the .sum,
 * both regular files; nothing verified)? */
int rq_cache_file_has(struct rq_cache *c, const struct rq_cache_key *k);
/* Pins (+1) or unpins (-1) file k: eviction never removes a pinned file
 * (the mount pins the files it serves). Pins are this process's, in memory;
 * a pin taken before the file exists, or held while it is removed and
 * written again, holds. No I/O: an unpinned file over the limit goes at
 * the next eviction (a put, begin or commit). */
void rq_cache_file_pin(struct rq_cache *c, const struct rq_cache_key *k, int delta);
/* Removes file k (sidecar, then data) / entry k now and forgets it: 0, or
 * -ENOENT when absent, other -errno when a name could not be unlinked. An
 * fd open on it stays good. The mount drops job entries once every file
 * made from them is materialized. */
int rq_cache_file_remove(struct rq_cache *c, const struct rq_cache_key *k);
int rq_cache_remove(struct rq_cache *c, const struct rq_cache_key *k);
/* Is there an entry k on disk (1/0: a stat of its name, a regular file;
 * nothing verified)? */
int rq_cache_has(struct rq_cache *c, const struct rq_cache_key *k);

#endif
