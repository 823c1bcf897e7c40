/* plan_int.h — shared between the plan's source files (not public). */
#ifndef RQ_FS_PLAN_INT_H
#define RQ_FS_PLAN_INT_H

#include "fs/plan.h"
#include "st/st.h"

struct rq_err;

/* srcdir.c: the regular files of SRC, sorted by name, and the SRC directory
 * actually read (resolved; a hub repo dir becomes its refs/main snapshot) in
 * p->src_dir with its mode/owner. Only regular files are presented; a
 * symlink is followed only when its target stays inside SRC or, for a hub
 * snapshot, inside the same repo's blobs/ directory. Other entries are
 * skipped (p->skipped says why), except that a checkpoint file (config.json,
 * the index, *.safetensors) that would be skipped is refused. */
int rq_src_scan(struct rq_plan *p, const char *src, struct rq_err *err);
/* The SRC file called name, or NULL. */
const struct rq_srcfile *rq_src_find(const struct rq_plan *p, const char *name);
void rq_srcfiles_free(struct rq_srcfile *f, size_t n);

/* Keeps every allocation the plan's MEM segments point into. */
int rq_plan_keep(struct rq_plan *p, void *mem);

#endif
