/* rstore.h — the files of one pinned hub commit (hf://ORG/NAME@<commit>), read
 * by byte range through a local chunk cache (issue 20, items 2, 3, 5).
 *
 * Contract (the header both the store and its users code against; the store's
 * own comment in rstore.c says how):
 *  - A file is cut in aligned chunks of chunk_size bytes. A read asks for the
 *    chunks it covers; a chunk missing from the cache is fetched by one of
 *    `connections` worker threads (each its own hub handle), stored in the
 *    cache checksummed and keyed by the file's identity (LFS sha256, else the
 *    git blob id) and chunk index, then served. Several readers of one chunk
 *    wait on one fetch; a slow chunk blocks only its own readers.
 *  - Sequential reads start readahead of the next chunks.
 *  - A read with RQ_RS_NOKEEP (a requantized module's BF16 input: only its
 *    quantized output is cached) is fetched to memory and not stored.
 *  - Once every chunk of a file is present it is assembled into one real file
 *    in the cache, checked against its sha256 (mismatch: dropped, refetched,
 *    logged, never served as verified); rq_rs_path() then names it.
 *  - offline: nothing is fetched; a missing chunk fails -ENETUNREACH naming
 *    the file, range and HF_HUB_OFFLINE.
 *  - Faults (drops, 5xx, 429, stalls, short or wrong bodies) are retried by
 *    hub/; then the read fails -EIO with a message naming file and range.
 *  - A listed size is a claim: the first answer whose stated size (its
 *    Content-Range total, or a whole body's length) differs from it fails
 *    the file for good at once (its queued fetches ended, every read -EIO
 *    naming file, listed size and the server's); a file listed past
 *    RQ_RS_CHUNKS_MAX chunks is refused without a request. Memory never
 *    grows with a listed size: per-file maps are bounded, a whole-file
 *    fetch keeps a bounded window of chunks in flight.
 *    Memory: at most mem_max bytes of chunk buffers in flight, whatever the
 *    readers do. rq_rs_close() returns promptly with fetches in flight.
 *  - Disk: the store's files count against a byte budget (max_bytes: the
 *    mount's --cache-max, shared with the quantized cache through
 *    rq_rs_set_budget); the least recently used whole files not in use are
 *    evicted to stay under it, else a chunk is served but not kept (rstore.c
 *    says the policy).
 * Thread-safe: every function but open/close may be called from any thread. */
#ifndef RQ_REMOTE_RSTORE_H
#define RQ_REMOTE_RSTORE_H

#include <stddef.h>
#include <stdint.h>

struct rq_err;
struct rq_rs;

struct rq_rs_file {
	const char *name;          /* relative name in the repo */
	uint64_t size;
	const char *sha256;        /* 64 hex (LFS), or NULL */
	const char *blob_id;       /* 40 hex git blob id, or NULL */
};

/* The most chunks one file may span (rstore.c "Listed sizes"): a file listed
 * larger is refused (its reads fail -EIO saying so), so that no claimed size
 * makes the store allocate: at the default chunk size, 1 TiB (the hub's own
 * largest files are tens of GB). */
#define RQ_RS_CHUNKS_MAX (1u << 16)

struct rq_rs_opts {
	const char *endpoint;      /* NULL: $HF_ENDPOINT, else the hub */
	const char *repo;          /* ORG/NAME */
	const char *commit;        /* 40 hex: every request uses it */
	const struct rq_rs_file *files;   /* [nfiles], copied */
	size_t nfiles;
	const char *cache_dir;     /* the requantfs cache directory; the store owns <cache_dir>/remote/ */
	uint32_t chunk_size;       /* 0: the default (rstore.c says why) */
	int connections;           /* 0: the default */
	int readahead;             /* chunks ahead of a sequential reader; -1: the default, 0: off */
	uint64_t mem_max;          /* 0: the default */
	int offline;               /* 1: never connect (HF_HUB_OFFLINE=1) */
	uint64_t max_bytes;        /* budget of bytes on disk (with rq_rs_set_budget's others);
	                              0: unlimited */
	void (*log)(void *ctx, const char *msg);   /* faults and refetches, may be NULL */
	void *log_ctx;
};

int rq_rs_open(const struct rq_rs_opts *o, struct rq_rs **out, struct rq_err *err);
/* Ends every read and fetch in flight or queued (-ECANCELED) and makes every
 * later call fail so (rq_rs_drop: does nothing); the store stays valid until
 * rq_rs_close. For a caller whose other threads may be inside the store:
 * cancel, join them, then close (close frees what they would touch).
 * Idempotent; NULL is fine. */
void rq_rs_cancel(struct rq_rs *s);
void rq_rs_close(struct rq_rs *s);

#define RQ_RS_NOKEEP 1u
#define RQ_RS_NORA 2u      /* not a sequential reader's: no readahead, its position kept */
/* Bytes [off, off + len) of file i into buf; blocks until they are here.
 * 0 or -errno (-EIO, -ENETUNREACH, -EACCES, -ENOMEM) with a message. */
int rq_rs_read(struct rq_rs *s, size_t i, uint64_t off, uint64_t len, void *buf,
               unsigned flags, struct rq_err *err);

/* Sequential readahead of file i fetches only chunks c with want[c] != 0
 * (want: [chunks of file i], copied; NULL: every chunk, the default). A
 * mount gives the chunks that hold bytes it presents unchanged, so chunks
 * holding only what it requantizes are never fetched whole. 0 or -ENOMEM. */
int rq_rs_set_readahead_mask(struct rq_rs *s, size_t i, const uint8_t *want);

/* File i's identity (chunk.h): its LFS sha256 (64 hex), else "git-" + its
 * git blob id (a small repo's plain git file), else "name-" + a hash of
 * repo, commit and name; stable for the commit, safe in a file name. The
 * key for what a caller keeps about the file beside the store (the mount's
 * shard heads, for offline mounts). NULL when i is out of range. */
const char *rq_rs_file_id(const struct rq_rs *s, size_t i);

/* The chunk size in bytes (chunks are aligned on multiples of it). */
uint32_t rq_rs_chunk_size(const struct rq_rs *s);

/* The assembled, verified local file of file i, or NULL while it is not.
 * Under a budget an unpinned file may be evicted at any time: a caller that
 * opens it pins it first (rq_rs_pin) and keeps the pin while it holds the
 * fd (an fd on an evicted file still reads the right bytes, but its disk
 * space is then freed only at close, uncounted). */
const char *rq_rs_path(struct rq_rs *s, size_t i);

/* Fetches every missing chunk of file i (in parallel), assembles and verifies
 * it (warm). progress(ctx, bytes_done) may be NULL. Its chunks queue behind
 * readers' (a warm never delays a read). Not evicted while it runs; pin i
 * before it to keep the result (rq_rs_path). Under a budget that cannot
 * hold it: -ENOSPC naming --cache-max. */
int rq_rs_fetch_file(struct rq_rs *s, size_t i, void (*progress)(void *ctx, uint64_t bytes),
                     void *ctx, struct rq_err *err);

/* 1 when file i's reads fail for good (-EIO, whatever is retried): its
 * bytes hashed wrong twice, the server stated a size other than the listed
 * one, or it is listed larger than the store takes; else 0. The message is
 * the one its reads get. A caller that fails once and for all on it (a
 * mount: one log line, not one per read) asks this after a failure. */
int rq_rs_failed(struct rq_rs *s, size_t i);

/* The largest file size the store takes (RQ_RS_CHUNKS_MAX chunks): a
 * caller sizes its per-chunk maps only for files up to it. */
uint64_t rq_rs_max_file(const struct rq_rs *s);

/* Drops file i's chunks (its presented bytes now live elsewhere in the cache,
 * e.g. a materialized shard). Reads still work: they fetch again. */
void rq_rs_drop(struct rq_rs *s, size_t i);

/* The budget: the store's bytes on disk plus others(ctx) (the bytes of the
 * quantized cache sharing --cache-max; NULL: none) stay <= max_bytes (0:
 * unlimited). Takes effect at once (trims what is over). others is called
 * without the store's lock, from any thread, never after this returns with
 * another function: pass NULL before what ctx names goes away. */
void rq_rs_set_budget(struct rq_rs *s, uint64_t max_bytes, uint64_t (*others)(void *ctx),
                      void *ctx);

/* Evicts least recently used whole files of the store (a file's chunks, or
 * its assembled copy) that nothing uses now (no read, fetch, assembly or
 * pin) until `bytes` are freed or none is left; the bytes freed. Evicted
 * bytes are fetched again when read. Safe from any thread not holding the
 * caller's own locks that the store's `others` takes. */
uint64_t rq_rs_trim(struct rq_rs *s, uint64_t bytes);

/* Pins (+1) or unpins (-1) file i: never evicted while pinned (a caller
 * that keeps an fd on rq_rs_path's file pins it first, so its bytes stay
 * counted while they are on disk). rq_rs_drop still drops it. */
void rq_rs_pin(struct rq_rs *s, size_t i, int delta);

struct rq_rs_stats {
	uint64_t fetched_bytes, fetched_chunks, cached_hits, retries, failures, refetches;
	uint64_t bytes_on_disk;    /* chunks (bytes + sums) and assembled files, as counted */
	uint64_t evicted_files, evicted_bytes;   /* by the budget */
	uint64_t not_kept;         /* chunks served but not stored: over budget */
	uint64_t mem_peak;         /* the most bytes of chunk buffers held at once (<= mem_max) */
	/* the whole-file hash fed as chunks come (rstore.c "In-order hash"): bytes
	 * hashed from the fetch's buffer, and read back from disk (a chunk that
	 * came before the ones ahead of it, or one stored by an earlier store) */
	uint64_t hashed_from_buffer, hashed_from_disk;
	/* assemblies that read the whole file back from disk before publishing
	 * it, because another live store shares the cache (rstore.c) */
	uint64_t verified_from_disk;
};
void rq_rs_stats(struct rq_rs *s, struct rq_rs_stats *out);

#endif
