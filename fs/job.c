/* job.c — a plan job's SRC side: checks that each SRC file is still the one
 * the plan was made from, preads the modules' BF16 rows, has the quantizer
 * device (qdev/) quantize them, and writes the global scale after each
 * module's packed bytes and scales. */
#include "fs/job.h"
#include "cache/cache.h"
#include "fs/plan.h"
#include "base/err.h"
#include "qdev/qdev.h"
#include "quant/quant.h"

#include <errno.h>
#include <stdio.h>
#include <stdarg.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int64_t ns_of(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int same_as_plan(const struct stat *st, const struct rq_srcfile *f)
{
	return (uint64_t)st->st_size == f->size && st->st_ino == f->ino && st->st_dev == f->dev &&
	       ns_of(st->st_mtim) == f->mtime_ns && ns_of(st->st_ctim) == f->ctime_ns;
}

/* The identity the plan recorded (inode, size, mtime, ctime), of the open
 * file (a rewrite in place) and of the name (a replacement): a SRC file
 * changed since then must never feed a job. -ESTALE when it changed. */
static int check_src(const struct rq_plan *p, int s, int fd, struct rq_err *err)
{
	const struct rq_srcfile *f = &p->srcs[s];
	struct stat st, at;
	if (fstat(fd, &st) < 0)
		return rq_errf(err, -errno, "SRC %s: %s", f->name, strerror(errno));
	if (!same_as_plan(&st, f) || stat(f->path, &at) < 0 || !same_as_plan(&at, f))
		return rq_errf(err, -ESTALE, "SRC %s changed after the plan was made; remount to "
		               "serve the new file", f->path);
	return 0;
}

/* Each distinct SRC file of job j, checked once. */
static int check_job_srcs(const struct rq_plan *p, const struct rq_job *job, const int *fds,
                          struct rq_err *err)
{
	int rc = 0;
	for (int s = 0; s < job->nmod && !rc; s++) {
		int src = p->mods[job->mod[s]].src;
		if (s == 0 || src != p->mods[job->mod[0]].src)
			rc = check_src(p, src, fds[src], err);
	}
	return rc;
}

static int read_weight(const struct rq_plan *p, const struct rq_module *m, int fd, uint16_t *w,
                       struct rq_err *err)
{
	uint64_t len = m->rows * m->cols * 2, got = 0;
	while (got < len) {
		ssize_t r = pread(fd, (char *)w + got, len - got, m->w_off + got);
		if (r <= 0)
			return rq_errf(err, r < 0 ? -errno : -EIO, "SRC %s: reading %s.weight: %s",
			               p->srcs[m->src].name, m->name,
			               r < 0 ? strerror(errno) : "file ends early");
		got += r;
	}
	/* Read once, quantized once: do not keep a second copy in the page cache. */
	posix_fadvise(fd, m->w_off, len, POSIX_FADV_DONTNEED);
	return 0;
}

int rq_job_run(struct rq_quantizer *q, const struct rq_plan *p, size_t j, const int *src_fds,
               uint8_t *out, struct rq_err *err)
{
	const struct rq_job *job = &p->jobs[j];
	struct rq_qmod qm[2];
	uint16_t *w[2] = {NULL, NULL};
	int rc = check_job_srcs(p, job, src_fds, err);     /* before reading */
	for (int s = 0; s < job->nmod && !rc; s++) {
		const struct rq_module *m = &p->mods[job->mod[s]];
		w[s] = malloc(m->rows * m->cols * 2);
		if (!w[s]) {
			rc = rq_errf(err, -ENOMEM, "no memory for %s (%llu bytes)", m->name,
			             (unsigned long long)(m->rows * m->cols * 2));
			break;
		}
		rc = read_weight(p, m, src_fds[m->src], w[s], err);
		qm[s] = (struct rq_qmod){.w = w[s], .rows = m->rows, .cols = m->cols,
		                         .packed = out + job->mod_off[s],
		                         .scales = out + job->mod_off[s] + m->rows * m->cols / 2};
	}
	float gs = 0;
	int bad = 0;
	if (!rc) {
		rc = rq_quantizer_run(q, p->recipe, qm, job->nmod, &gs, &bad);
		if (rc == -EDOM)
			rq_errf(err, rc, "%s.weight (in SRC %s) holds NaN or Inf; it cannot be quantized",
			        p->mods[job->mod[bad]].name, p->srcs[p->mods[job->mod[bad]].src].name);
		else if (rc)
			rq_errf(err, rc, "quantizing %s failed: %s", p->mods[job->mod[0]].name,
			        strerror(-rc));
	}
	if (!rc)
		rc = check_job_srcs(p, job, src_fds, err);    /* nothing changed while read */
	for (int s = 0; s < job->nmod && !rc; s++) {
		const struct rq_module *m = &p->mods[job->mod[s]];
		memcpy(out + rq_mod_gs_off(p, m), &gs, 4);   /* F32 little-endian */
	}
	free(w[0]);
	free(w[1]);
	return rc;
}

/* ---- the cache key ----------------------------------------------------- */

static int append(char **s, size_t *len, size_t *cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int append(char **s, size_t *len, size_t *cap, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(*s + *len, *cap - *len, fmt, ap);
		va_end(ap);
		if (n < 0)
			return -EINVAL;
		if ((size_t)n < *cap - *len) {
			*len += (size_t)n;
			return 0;
		}
		size_t nc = (*cap + (size_t)n) * 2;
		char *v = realloc(*s, nc);
		if (!v)
			return -ENOMEM;
		*s = v;
		*cap = nc;
	}
}

int rq_job_key(const struct rq_plan *p, size_t j, struct rq_cache_key *key, char **desc)
{
	const struct rq_job *jb = &p->jobs[j];
	size_t len = 0, cap = 512;
	char *s = malloc(cap);
	int rc;
	if (!s)
		return -ENOMEM;
	s[0] = 0;
	rc = append(&s, &len, &cap, "requantfs job\nrecipe %s %d\nmodules %d out %" PRIu64 "\n",
	            rq_recipe_name(p->recipe), RQ_RECIPE_VERSION, jb->nmod, jb->out_size);
	for (int k = 0; !rc && k < jb->nmod; k++) {
		const struct rq_module *md = &p->mods[jb->mod[k]];
		const struct rq_srcfile *sf = &p->srcs[md->src];
		if (sf->blob_sha256[0])
			rc = append(&s, &len, &cap, "src sha256:%s\n", sf->blob_sha256);
		else
			rc = append(&s, &len, &cap, "src dev=%ju ino=%ju size=%" PRIu64 " mtime_ns=%"
			            PRId64 " ctime_ns=%" PRId64 "\n", (uintmax_t)sf->dev,
			            (uintmax_t)sf->ino, sf->size, sf->mtime_ns, sf->ctime_ns);
		if (!rc)
			rc = append(&s, &len, &cap, "tensor %s.weight BF16 [%" PRIu64 ",%" PRIu64 "] at %"
			            PRIu64 " len %" PRIu64 " slot %d at %" PRIu64 "\ncalib %08" PRIx32 "\n",
			            md->name, md->rows, md->cols, md->w_off, md->rows * md->cols * 2, k,
			            jb->mod_off[k], md->input_gs_bits);
	}
	if (rc) {
		free(s);
		return rc;
	}
	rq_cache_key_of(s, len, key);
	if (desc)
		*desc = s;
	else
		free(s);
	return 0;
}
