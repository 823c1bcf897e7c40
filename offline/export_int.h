/* export_int.h — between export.c and export_manifest.c (not public). */
#ifndef RQ_OFFLINE_EXPORT_INT_H
#define RQ_OFFLINE_EXPORT_INT_H

#include "offline/export.h"

#include <stdint.h>

struct rq_plan;
struct rq_err;

/* What export records of one linked file: the identity of the file the
 * link shows (after the link was made and named: a hard link moves its
 * inode's ctime) and the XXH3-128 of its bytes, read once at export. */
struct rq_link_rec {
	uint64_t size, ino;
	int64_t mtime_ns, ctime_ns;
	char xxh3[33];            /* XXH3-128, canonical (big-endian), 32 hex digits */
};

/* XXH3-128 of fd's first size bytes (read with pread from 0; the page cache
 * is told it may drop them) as 32 hex digits. name: the file, for messages.
 * 0, -EIO (the file ends early, named), -ENOMEM or -errno. */
int rq_export_hash_fd(int fd, uint64_t size, const char *name, char hex[33],
                      struct rq_err *err);

/* Writes the manifest (format 2): each linked file i of p (linked[i]) with
 * what rec[i] recorded, to path (created, fsync'd). */
int rq_export_manifest_write(const struct rq_plan *p, const uint8_t *linked,
                             const struct rq_link_rec *rec, enum rq_export_link mode,
                             const char *path, struct rq_err *err);

#endif
