/* export.h — write a plan's virtual files as real files. The same segments
 * the mount serves, so export and mount cannot disagree. */
#ifndef RQ_FS_EXPORT_H
#define RQ_FS_EXPORT_H

#include <stdint.h>

struct rq_plan;
struct rq_quantizer;
struct rq_err;

/* Called after each job and each file: jobs done, bytes written so far. */
typedef void (*rq_export_progress_fn)(void *ctx, uint64_t jobs_done, uint64_t bytes);

/* Writes every virtual file under dst (created if missing; an existing
 * non-empty dst is refused with -EEXIST). Files are written under temporary
 * names (.<name>.requantfs-tmp), fsync'd, and renamed only when all are
 * complete; on failure the temporaries are removed, so nothing in dst ever
 * looks complete unless it is. */
int rq_export(const struct rq_plan *p, struct rq_quantizer *q, const char *dst,
              rq_export_progress_fn progress, void *ctx, struct rq_err *err);

#endif
