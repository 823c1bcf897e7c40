/* chunk.h — chunk files and assembled files of the remote store on disk
 * (internal to remote/; rstore.c keeps the state, this file the bytes).
 *
 * All paths are relative to the store's directory <cache_dir>/remote/ (a
 * descriptor, dfd):
 *     chunks/<id>-<chunk_size>/<index, 16 hex>   one chunk (format in chunk.c)
 *     files/<id>                                 an assembled, verified file
 * where <id> is the file's identity: its LFS sha256 (64 hex), else "git-" +
 * its blob id, else "name-" + XXH3-128 of repo, commit and name. */
#ifndef RQ_REMOTE_CHUNK_H
#define RQ_REMOTE_CHUNK_H

#include <stdint.h>
#include <stddef.h>
#include <stdatomic.h>

#define RQR_CHUNK_HDR 64u
#define RQR_BLOCK (64u << 10)      /* bytes under one checksum (chunk.c says why) */

/* Blocks of a chunk of len bytes, and the size of its file. */
uint32_t rqr_chunk_blocks(uint32_t len);
static inline uint64_t rqr_chunk_file_size(uint32_t len)
{
	return RQR_CHUNK_HDR + 8 * (uint64_t)rqr_chunk_blocks(len) + len;
}

/* Publishes chunk idx (len payload bytes) of the directory dir: a temp file
 * written then renamed over the name (crash-safe; no fsync: every chunk is
 * checksummed before its first use, so a torn one is a miss). 0 or -errno. */
int rqr_chunk_write(int dfd, const char *dir, uint64_t idx, uint64_t idhash, const void *buf,
                    uint32_t len);

/* Copies [at, at + n) of chunk idx's payload into dst, every block it
 * touches checked (and the header: magic, version, index, identity, len,
 * block table). -ENOENT: absent; -EBADMSG: a bad chunk (the caller drops
 * it); other -errno. */
int rqr_chunk_read(int dfd, const char *dir, uint64_t idx, uint64_t idhash, uint32_t len,
                   uint64_t at, uint64_t n, void *dst);

/* Assembles files/<id> from its nchunks chunks (streamed: each chunk
 * checked, the whole file hashed as it is written to a temp file, fsync,
 * rename, fsync files/). The hash: SHA-256 against sha256 (64 hex) when
 * given, else the git blob id (SHA-1 of "blob <size>\0" + bytes) against
 * blob_id (40 hex) when given, else none. 0 published; -EBADMSG +
 * *bad_chunk (>= 0): that chunk is bad (the caller drops it); -EBADMSG +
 * *bad_chunk = -1: the hash differs (got_hex says what came); -ECANCELED
 * when *stop became nonzero; other -errno. */
int rqr_assemble(int dfd, const char *dir, const char *id, uint64_t idhash, uint64_t size,
                 uint32_t chunk_size, const char *sha256, const char *blob_id,
                 const atomic_int *stop, int64_t *bad_chunk, char got_hex[65]);

/* Unlinks every chunk of dir and dir itself; the bytes it freed. */
uint64_t rqr_chunk_drop_all(int dfd, const char *dir);

#endif
