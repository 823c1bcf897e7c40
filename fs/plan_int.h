/* plan_int.h — shared between the plan's source files (not public). */
#ifndef RQ_FS_PLAN_INT_H
#define RQ_FS_PLAN_INT_H

#include "fs/plan.h"
#include "fs/st.h"

struct rq_err;

/* srcdir.c: the regular files of SRC (symlinks followed; hub snapshots
 * recognised), sorted by name. *resolved gets the directory actually read. */
int rq_src_scan(const char *src, struct rq_srcfile **out, size_t *n, char **resolved,
                struct rq_err *err);
void rq_srcfiles_free(struct rq_srcfile *f, size_t n);

/* Keeps every allocation the plan's MEM segments point into. */
int rq_plan_keep(struct rq_plan *p, void *mem);

#endif
