/* export_hf.h — SRC hf://ORG/NAME[@REV] for `export` (issue 20): no byte the
 * hub sent reaches DST (or a cache key) unverified.
 *
 * The hub gives one sha256 (LFS) or git blob id per file, no per-chunk hash,
 * so before any byte of SRC file F is used (copied or quantized), F is
 * fetched whole through the chunk store (remote/rstore.h), checked against
 * its hash (a mismatch: refetched once, then the read fails naming the file,
 * the hub's hash and what came), and read from that local copy. Only the
 * plan's shard headers (8-byte length + header) are read by range before
 * that, unverified by nature: each piece is remembered by its SHA-256 and
 * compared with F's verified copy when F is fetched (a difference fails
 * naming the file). Small files the plan reads whole (config, index) go
 * through the store too, so they are checked even without an LFS sha256
 * (by their git blob id).
 *
 * Overlap: once export said in which order it reads SRC files
 * (export_hf_order), the next file is fetched on a background thread while
 * export works on the current one, so fetching and quantizing/writing
 * overlap; a failed prefetch fails nothing by itself (the file is fetched
 * again when export reaches it, and that error is reported).
 *
 * Disk: export calls export_hf_done(F) once it no longer needs F (after the
 * last virtual file that reads it), which drops F from the store; export goes
 * shard by shard, so about two SRC files are on disk at once, and never more
 * than EXPORT_HF_HOLD fetched or being fetched (a prefetch that would pass it
 * waits for a file to be done). A file the store already held verified
 * before export (a mount's) is read, not dropped. Every function is called
 * from one thread (export's); the prefetch thread is internal. */
#ifndef RQ_TOOLS_EXPORT_HF_H
#define RQ_TOOLS_EXPORT_HF_H

#include <stddef.h>
#include <stdint.h>

/* The most SRC files export fetched that are on disk (or being fetched) at
 * once: the one export finishes, the one it works on, the next, prefetched. */
#define EXPORT_HF_HOLD 3

struct rq_err;
struct rq_src_reader;
struct export_hf;

struct export_hf_opts {
	const char *spec;          /* hf://ORG/NAME[@REV] */
	const char *endpoint;      /* NULL: $HF_ENDPOINT, else the hub */
	const char *cache_dir;     /* the store lives in <cache_dir>/remote/ (the mount's
	                              convention); NULL: a temporary directory next to dst */
	const char *dst;           /* export's DST (for the temporary directory) */
	int quiet;                 /* 0: a line per SRC file fetched (bytes, rate) on stderr */
};

/* Pins REV to its commit (model API); the store is opened at the first read.
 * 0 or -errno with a message (as cli_hf_open). */
int export_hf_open(const struct export_hf_opts *o, struct export_hf **out, struct rq_err *err);

/* The plan's reader: until export_hf_planned, range reads of a file not yet
 * verified come from the hub (remembered); whole reads, and every read after,
 * from the verified local copy. */
const struct rq_src_reader *export_hf_reader(struct export_hf *h);
/* The plan is built: from now on every read is of a verified copy. */
void export_hf_planned(struct export_hf *h);
/* Export reads reader files order[0..n) in this order (rq_export's
 * src_order, mapped to reader indices; copied): the next one is prefetched
 * while export works on one. Without it nothing is prefetched. 0 or -ENOMEM. */
int export_hf_order(struct export_hf *h, const size_t *order, size_t n);
/* Reader file i is no longer needed: dropped from the store if export
 * fetched it. */
void export_hf_done(struct export_hf *h, size_t i);

struct export_hf_stats {
	size_t files;              /* SRC files fetched and verified */
	uint64_t bytes;            /* their bytes */
	double seconds;            /* spent fetching and verifying them (summed per file: with
	                              prefetch, more than the wall time export waited) */
	double waited;             /* export waited for fetches (foreground ones, and the end of
	                              a prefetch it reached): the part not overlapped */
	size_t prefetched;         /* files fetched in the background */
	uint64_t held_max;         /* the most bytes of fetched SRC files on disk at once */
	size_t held_files_max;     /* the most fetched SRC files on disk at once */
	uint64_t refetches;        /* hash mismatches (a file is fetched again once) */
};
void export_hf_stats(const struct export_hf *h, struct export_hf_stats *st);

/* Cancels a prefetch in flight (the store's requests end at once) and
 * joins it, drops what export fetched, closes the store, removes the temporary
 * directory. NULL is fine. */
void export_hf_close(struct export_hf *h);

#endif
