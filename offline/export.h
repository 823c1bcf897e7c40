/* export.h — write a plan's virtual files as real files. The same segments
 * the mount serves, so export and mount cannot disagree.
 *
 * With a link mode, a file identical to SRC is not copied: DST gets a link
 * to SRC's bytes (the resolved file: a hub snapshot's blob), and only what
 * differs (the rewritten shards, config.json, the index) is written. DST then
 * holds a manifest, EXPORT_MANIFEST, recording each linked file's identity
 * and a hash of its bytes, so `verify` can say which links no longer show
 * the bytes the export saw. */
#ifndef RQ_OFFLINE_EXPORT_H
#define RQ_OFFLINE_EXPORT_H

#include <stddef.h>
#include <stdint.h>

struct rq_plan;
struct rq_quantizer;
struct rq_cache;
struct rq_err;

#define EXPORT_MANIFEST ".requantfs-export.json"

/* Called after each job and each file: jobs done, bytes written so far. */
typedef void (*rq_export_progress_fn)(void *ctx, uint64_t jobs_done, uint64_t bytes);

enum rq_export_link {
	RQ_LINK_NONE = 0,         /* copy every file */
	RQ_LINK_SYMLINK,          /* symbolic links: relative when SRC and DST share a parent
	                             directory below /, else absolute */
	RQ_LINK_HARD,             /* hard links; -EXDEV (refused, with what to do) when DST is on
	                             another file system */
};

struct rq_export_opts {
	enum rq_export_link link;
	struct rq_cache *cache;   /* may be NULL: a requantized file already materialized there
	                             (a warmed mount's) is taken from it, verified, and a job
	                             whose output is there is not run again */
	rq_export_progress_fn progress;
	void *ctx;
	/* May be NULL: called once per SRC file s (index into plan->srcs) as soon
	 * as this export will read no more of it (at the start for a file it never
	 * reads, else after the last virtual file that reads it: its SRC ranges,
	 * or the jobs first needed there), so a caller holding a fetched copy
	 * (hf://) may drop it. Not called for the rest after a failure. */
	void (*src_done)(void *src_ctx, size_t src);
	/* May be NULL: called once, before the first file is made, with the SRC
	 * files this export may read ([n] indices into plan->srcs) in the order
	 * it first reads them (a file's SRC ranges and the jobs first needed
	 * there, file by file), so a caller fetching them (hf://) may fetch the
	 * next while export works on one. A file whose output comes whole from
	 * the cache reads nothing, so the order may name a file never read. */
	void (*src_order)(void *src_ctx, const size_t *order, size_t n);
	void *src_ctx;
};

struct rq_export_stats {
	size_t files_written, files_linked;
	uint64_t bytes_written, bytes_linked;
	size_t files_from_cache;  /* whole requantized files copied from the cache */
	size_t jobs_run, jobs_from_cache;
};

/* Writes every virtual file under dst (created if missing; an existing
 * non-empty dst is refused with -EEXIST, and one holding a dead export's
 * temporaries says so). Files (and links) are made in a private directory
 * inside dst (RQ_RESERVED_PREFIX "-tmp.XXXXXX", mkdtemp: no name SRC can
 * hold, see rq_src_name_refused), fsync'd, and renamed into dst only when all
 * are complete; on failure what was made is removed, so nothing in dst ever
 * looks complete unless it is. Before a file is linked, its SRC path is
 * checked: still a regular file inside SRC (or the snapshot's blobs/) with
 * the identity the plan saw (-ESTALE otherwise, named), and its bytes are
 * hashed (XXH3-128) for the manifest. st may be NULL. */
int rq_export(const struct rq_plan *p, struct rq_quantizer *q, const char *dst,
              const struct rq_export_opts *o, struct rq_export_stats *st, struct rq_err *err);

/* The links of an export made with a link mode, checked against its
 * manifest (what each check proves: export_manifest.c). fn is called for
 * each linked file that no longer shows what was exported, with what was
 * found, in words: without full, a file that is not a regular file with the
 * recorded size, inode and mtime, or whose ctime moved and whose bytes
 * (XXH3-128) differ from the export's; with full, one whose size or bytes
 * differ, whatever its metadata. *nlinks gets the number of links
 * checked, *nbad the number that failed. -ENOENT when dst has no manifest
 * (not a linked export), -EPROTO for a manifest that cannot be read (named),
 * -ENODATA for full on a manifest without hashes (an older export's). */
int rq_export_check_links(const char *dst, int full,
                          void (*fn)(void *ctx, const char *name, const char *why),
                          void *ctx, size_t *nlinks, size_t *nbad, struct rq_err *err);

#endif
