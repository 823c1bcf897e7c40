/* chunk.h — the remote store's bytes on disk (internal to remote/; rstore.c
 * keeps the state, this file the bytes; the format is written in chunk.c).
 *
 * All paths are relative to the store's directory <cache_dir>/remote/ (a
 * descriptor, dfd):
 *     chunks/<id>-<chunk_size>/data          the file being fetched, sparse
 *     chunks/<id>-<chunk_size>/<index, 16 hex>   chunk index's sums: present
 *     files/<id>                             an assembled, verified file
 * where <id> is the file's identity: its LFS sha256 (64 hex), else "git-" +
 * its blob id, else "name-" + XXH3-128 of repo, commit and name. */
#ifndef RQ_REMOTE_CHUNK_H
#define RQ_REMOTE_CHUNK_H

#include <stdint.h>
#include <stddef.h>
#include <stdatomic.h>

#define RQR_CHUNK_HDR 64u
#define RQR_BLOCK (64u << 10)      /* bytes under one checksum (chunk.c says why) */

/* Blocks of a chunk of len bytes, and what the chunk costs on disk (its
 * bytes in data + its sum file). */
uint32_t rqr_chunk_blocks(uint32_t len);
static inline uint64_t rqr_sum_file_size(uint32_t len)
{
	return RQR_CHUNK_HDR + 8 * (uint64_t)rqr_chunk_blocks(len);
}
static inline uint64_t rqr_chunk_file_size(uint32_t len)
{
	return rqr_sum_file_size(len) + len;
}

/* Stores chunk idx (len bytes) of the directory dir: written in place into
 * dir/data at idx * chunk_size, then its sum file published (temp + rename;
 * no fsync: every read checks the sums, so a torn chunk is a miss).
 * 0 or -errno. */
int rqr_chunk_write(int dfd, const char *dir, uint64_t idx, uint32_t chunk_size,
                    uint64_t idhash, const void *buf, uint32_t len);

/* Copies [at, at + n) of chunk idx (len bytes) into dst, every block it
 * touches checked (and the sum file: magic, version, index, identity, len,
 * table). -ENOENT: absent; -EBADMSG: a bad chunk (the caller drops it);
 * other -errno. */
int rqr_chunk_read(int dfd, const char *dir, uint64_t idx, uint32_t chunk_size, uint64_t idhash,
                   uint32_t len, uint64_t at, uint64_t n, void *dst);

/* The whole-file hash, fed the file's bytes in order: SHA-256 checked
 * against sha256 (64 hex) when given, else the git blob id (SHA-1 of "blob
 * <size>\0" + bytes) against blob_id (40 hex) when given, else nothing
 * (final always matches). new: NULL on -ENOMEM. update: 0 or -EIO. final
 * (once): 0 matches, -EBADMSG differs (got_hex: what came, "" when nothing
 * is checked), -EIO. free accepts NULL. */
struct rqr_hash;
struct rqr_hash *rqr_hash_new(const char *sha256, const char *blob_id, uint64_t size);
int rqr_hash_update(struct rqr_hash *h, const void *p, size_t n);
int rqr_hash_final(struct rqr_hash *h, char got_hex[65]);
void rqr_hash_free(struct rqr_hash *h);

/* Feeds chunk idx (len bytes) of dir to h, read back from dir/data 1 MiB
 * at a time, every block checked against its sum first. 0; -ENOENT
 * absent; -EBADMSG a bad chunk (h was fed part of it: start h again);
 * other -errno. */
int rqr_chunk_hash(int dfd, const char *dir, uint64_t idx, uint32_t chunk_size,
                   uint64_t idhash, uint32_t len, struct rqr_hash *h);

/* Publishes dir/data, whose bytes the caller has checked, as files/<id>:
 * its size and the sum files of its nchunks chunks checked, fsync, rename
 * (no copy, never over an existing files/<id>), fsync files/ (the caller
 * then drops dir's sum files). 0; -EBADMSG: data is not size bytes (refetch
 * it all); -ESTALE: data is gone or a chunk's sum is (another store sharing
 * the cache assembled the file and removed dir: this data is not the bytes
 * the caller checked); -EEXIST: files/<id> is there (published by another
 * store), data left as it is; other -errno. */
int rqr_publish(int dfd, const char *dir, const char *id, uint64_t size, uint64_t nchunks);

/* Unlinks every chunk of dir and dir itself; the bytes it freed. */
uint64_t rqr_chunk_drop_all(int dfd, const char *dir);

#endif
