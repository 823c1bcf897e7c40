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
};

struct rq_cache_stats {
	uint64_t entries, bytes;  /* on disk now (this process's view); bytes counts payload */
	uint64_t hits, misses, corrupt, evicted, put_failed;
};

/* -EACCES/-ENOTDIR/-EROFS... with a message naming the directory when it is
 * not a writable directory. */
int rq_cache_open(const struct rq_cache_opts *o, struct rq_cache **out, struct rq_err *err);
void rq_cache_close(struct rq_cache *c);
const char *rq_cache_dir(const struct rq_cache *c);

/* XXH3-128 of a descriptor (the caller's canonical text). */
void rq_cache_key_of(const void *desc, size_t len, struct rq_cache_key *out);
void rq_cache_key_hex(const struct rq_cache_key *k, char out[33]);

/* Looks an entry up. On a hit returns 0 with an open read-only fd and the
 * payload's offset in it; the payload is `size` bytes. The first lookup of a
 * key in this process reads the whole entry and checks its checksum (later
 * lookups trust it unless the file changed identity). -ENOENT on a miss;
 * a corrupt/truncated/wrong-size entry is deleted, counted, described in err
 * and reported as -ENOENT too (a miss to rebuild). The caller closes fd.
 * On a plain miss err is cleared (empty msg), so `r == -ENOENT && err.msg[0]`
 * means "a bad entry was dropped: log it". Other -errno: the entry could not
 * be read (err says why). A hit marks the entry most recently used. */
int rq_cache_lookup(struct rq_cache *c, const struct rq_cache_key *k, uint64_t size,
                    int *fd, uint64_t *payload_off, struct rq_err *err);

/* Convenience: lookup + read the payload into buf (size bytes). */
int rq_cache_get(struct rq_cache *c, const struct rq_cache_key *k, uint64_t size,
                 uint8_t *buf, struct rq_err *err);

/* Publishes an entry atomically. A concurrent put of the same key by another
 * process is fine (last rename wins; both are identical). -ENOSPC/-EDQUOT/-EIO
 * with a message; nothing partial is ever visible under the final name.
 * Evicts least-recently-used entries beyond max_bytes afterwards. */
int rq_cache_put(struct rq_cache *c, const struct rq_cache_key *k, const uint8_t *buf,
                 uint64_t size, struct rq_err *err);

void rq_cache_get_stats(struct rq_cache *c, struct rq_cache_stats *s);

#endif
