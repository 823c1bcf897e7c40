/* plan_obj.c — the plan as an object: a new one, the memory its MEM
 * segments point into (kept until rq_plan_free), its modules sorted and
 * looked up by name, its files looked up by name, a file's segment at an
 * offset, and its free. plan.c, plan_rule.c, plan_w4a4.c and plan_files.c
 * fill it; the daemon and the offline commands read it. */
#include "base/grow.h"
#include "plan/plan_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct keep {
	size_t n, cap;
	void **p;
};

struct rq_plan *rq_plan_new(void)
{
	struct rq_plan *p = calloc(1, sizeof *p);
	struct keep *keep = calloc(1, sizeof *keep);
	if (!p || !keep) {
		free(p);
		free(keep);
		return NULL;
	}
	p->keep_ = keep;
	return p;
}

int rq_plan_keep(struct rq_plan *p, void *mem)
{
	struct keep *k = (struct keep *)p->keep_;
	if (RQ_GROW(k->p, k->n, k->cap, 64)) {
		free(mem);
		return -ENOMEM;
	}
	k->p[k->n++] = mem;
	return 0;
}

static int cmp_mod(const void *a, const void *b)
{
	return strcmp(((const struct rq_module *)a)->name, ((const struct rq_module *)b)->name);
}

void rq_plan_sort_mods(struct rq_plan *p)
{
	qsort(p->mods, p->nmods, sizeof *p->mods, cmp_mod);
}

long rq_plan_find_mod(const struct rq_plan *p, const char *name)
{
	struct rq_module key = {.name = (char *)name};
	struct rq_module *m = bsearch(&key, p->mods, p->nmods, sizeof *p->mods, cmp_mod);
	return m ? m - p->mods : -1;
}

void rq_plan_free(struct rq_plan *p)
{
	if (!p)
		return;
	struct keep *k = (struct keep *)p->keep_;
	if (k) {
		for (size_t i = 0; i < k->n; i++)
			free(k->p[i]);
		free(k->p);
		free(k);
	}
	for (size_t i = 0; i < p->nfiles; i++) {
		free(p->files[i].name);
		free(p->files[i].seg);
	}
	free(p->files);
	for (size_t i = 0; i < p->nmods; i++)
		free(p->mods[i].name);
	free(p->mods);
	free(p->jobs);
	rq_srcfiles_free(p->srcs, p->nsrcs);
	for (size_t i = 0; i < p->nskipped; i++)
		free(p->skipped[i]);
	free(p->skipped);
	free(p->src_dir);
	free(p->dropped_rule);
	free(p->calib_observer);
	for (size_t i = 0; i < p->ndropped; i++)
		free(p->dropped[i]);
	free(p->dropped);
	free(p);
}

static int cmp_vfile(const void *a, const void *b)
{
	return strcmp(((const struct rq_vfile *)a)->name, ((const struct rq_vfile *)b)->name);
}

long rq_plan_find_file(const struct rq_plan *p, const char *name)
{
	struct rq_vfile key = {.name = (char *)name};
	const struct rq_vfile *f = p->nfiles ? bsearch(&key, p->files, p->nfiles, sizeof key,
	                                               cmp_vfile) : NULL;
	return f ? (long)(f - p->files) : -1;
}

size_t rq_vfile_seg_at(const struct rq_vfile *f, uint64_t off)
{
	size_t lo = 0, hi = f->nseg;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (f->seg[mid].off <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}
