/* job.c — a plan job's SRC side: checks that each SRC file is still the one
 * the plan was made from, preads the modules' weights (BF16, or F16/F32 for a
 * data-free scheme), and has the quantizer device (qdev/) quantize them:
 * the Laguna fix through rq_quantizer_run (then the global scale after each
 * module's packed bytes and scales), any other scheme through
 * rq_quantizer_run_scheme, which writes the scheme's whole layout.
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it.
 *
 *   job.c  one module's bytes: cache key, SRC identity, the run on qdev
 */
#include "job/job.h"
#include "cache/cache.h"
#include "plan/plan.h"
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
#include <xxhash.h>

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

static int read_weight(const struct rq_plan *p, const struct rq_module *m, int fd, void *w,
                       struct rq_err *err)
{
	uint64_t len = rq_mod_in_bytes(m), got = 0;
	if (p->reader) {        /* a remote SRC (hf://): a range of a pinned commit */
		int rc = p->reader->read(p->reader->ctx, p->srcs[m->src].ridx, m->w_off, len, w, err);
		if (rc)
			rq_err_prefix(err, "reading %s.weight", m->name);
		return rc;
	}
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

/* The Laguna fix: NVFP4 with the recipe, one global scale written after each
 * module's packed bytes and scales (exactly as before issue 12). */
static int quantize_laguna(struct rq_quantizer *q, const struct rq_plan *p,
                           const struct rq_job *job, void *const *w, uint8_t *out, int *bad)
{
	struct rq_qmod qm[RQ_JOB_MAX_MODS];
	for (int s = 0; s < job->nmod; s++) {
		const struct rq_module *m = &p->mods[job->mod[s]];
		qm[s] = (struct rq_qmod){.w = w[s], .rows = m->rows, .cols = m->cols,
		                         .packed = out + job->mod_off[s],
		                         .scales = out + job->mod_off[s] + m->rows * m->cols / 2};
	}
	float gs = 0;
	int rc = rq_quantizer_run_named(q, p->recipe, qm, job->nmod, p->mods[job->mod[0]].name, &gs,
	                                bad);
	for (int s = 0; s < job->nmod && !rc; s++)
		memcpy(out + rq_mod_gs_off(p, &p->mods[job->mod[s]]), &gs, 4);   /* F32 LE */
	return rc;
}

/* A data-free scheme: the module outputs back to back, as rq_scheme_layout. */
static int quantize_scheme(struct rq_quantizer *q, const struct rq_plan *p,
                           const struct rq_job *job, void *const *w, uint8_t *out, int *bad)
{
	struct rq_smod sm[RQ_JOB_MAX_MODS];
	for (int s = 0; s < job->nmod; s++) {
		const struct rq_module *m = &p->mods[job->mod[s]];
		sm[s] = (struct rq_smod){.w = w[s], .dtype = m->dtype, .rows = m->rows,
		                         .cols = m->cols, .out = out + job->mod_off[s]};
	}
	return rq_quantizer_run_scheme(q, p->mod_scheme, p->mod_recipe, p->observer, sm, job->nmod,
	                               bad);
}

int rq_job_run(struct rq_quantizer *q, const struct rq_plan *p, size_t j, const int *src_fds,
               uint8_t *out, struct rq_err *err)
{
	const struct rq_job *job = &p->jobs[j];
	void *w[RQ_JOB_MAX_MODS] = {NULL, NULL, NULL};
	/* a remote SRC is a pinned commit: its files cannot change under the plan */
	int rc = p->reader ? 0 : check_job_srcs(p, job, src_fds, err);     /* before reading */
	for (int s = 0; s < job->nmod && !rc; s++) {
		const struct rq_module *m = &p->mods[job->mod[s]];
		w[s] = rq_quantizer_stage(q, rq_mod_in_bytes(m));   /* pinned while the GPU is in use */
		if (!w[s]) {
			rc = rq_errf(err, -ENOMEM, "no memory for %s (%llu bytes)", m->name,
			             (unsigned long long)rq_mod_in_bytes(m));
			break;
		}
		rc = read_weight(p, m, src_fds[m->src], w[s], err);
	}
	int bad = 0;
	if (!rc) {
		rc = p->mod_scheme == RQ_SCHEME_NVFP4 ? quantize_laguna(q, p, job, w, out, &bad)
		                                  : quantize_scheme(q, p, job, w, out, &bad);
		if (bad < 0 || bad >= job->nmod)
			bad = 0;
		const struct rq_module *bm = &p->mods[job->mod[bad]];
		if (rc == -EDOM)
			rq_errf(err, rc, "%s.weight (in SRC %s) holds NaN or Inf; it cannot be quantized",
			        bm->name, p->srcs[bm->src].name);
		else if (rc == -ENOTSUP)
			rq_errf(err, rc, "quantizing %s.weight (in SRC %s): --scheme %s with recipe %s "
			        "and observer %s is not implemented for its dtype in this build",
			        bm->name, p->srcs[bm->src].name, rq_scheme_name(p->mod_scheme),
			        rq_recipe_name(p->mod_recipe), rq_observer_name(p->observer));
		else if (rc == -ERANGE)
			rq_errf(err, rc, "%s.weight (in SRC %s) holds a weight so large that --observer "
			        "%s's range (1.8 max|w|) overflows BF16; use --observer minmax or mse",
			        bm->name, p->srcs[bm->src].name, rq_observer_name(p->observer));
		else if (rc)
			rq_errf(err, rc, "quantizing %s failed: %s", p->mods[job->mod[0]].name,
			        strerror(-rc));
	}
	if (!rc && !p->reader)
		rc = check_job_srcs(p, job, src_fds, err);    /* nothing changed while read */
	for (int s = 0; s < RQ_JOB_MAX_MODS; s++)
		rq_quantizer_unstage(q, w[s]);
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
	/* The Laguna fix keeps its descriptor byte for byte (warm caches stay
	 * valid); any other scheme names itself and its version first. */
	rc = append(&s, &len, &cap, "requantfs job\n");
	if (!rc && p->scheme != RQ_SCHEME_NVFP4)
		rc = append(&s, &len, &cap, "scheme %s %d\n", rq_scheme_name(p->scheme),
		            RQ_SCHEME_VERSION);
	else if (!rc && p->mod_scheme != RQ_SCHEME_NVFP4)   /* Laguna --rule-scheme */
		rc = append(&s, &len, &cap, "rule-scheme %s %d recipe %s\n",
		            rq_scheme_name(p->mod_scheme), RQ_SCHEME_VERSION,
		            rq_recipe_name(p->mod_recipe));
	/* an MSE observer's bytes are its own (minmax keys stay as they were) */
	if (!rc && p->observer != RQ_OBSERVER_MINMAX)
		rc = append(&s, &len, &cap, "observer %s %d\n", rq_observer_name(p->observer),
		            RQ_OBSERVER_VERSION);
	if (!rc)
		rc = append(&s, &len, &cap, "recipe %s %d\nmodules %d out %" PRIu64 "\n",
		            rq_recipe_name(p->recipe), RQ_RECIPE_VERSION, jb->nmod, jb->out_size);
	for (int k = 0; !rc && k < jb->nmod; k++) {
		const struct rq_module *md = &p->mods[jb->mod[k]];
		const struct rq_srcfile *sf = &p->srcs[md->src];
		if (sf->blob_sha256[0])
			rc = append(&s, &len, &cap, "src sha256:%s\n", sf->blob_sha256);
		else if (p->reader)     /* hf://ORG/NAME@<commit>/<file>: immutable */
			rc = append(&s, &len, &cap, "src remote:%s\n", sf->path);
		else
			rc = append(&s, &len, &cap, "src dev=%ju ino=%ju size=%" PRIu64 " mtime_ns=%"
			            PRId64 " ctime_ns=%" PRId64 "\n", (uintmax_t)sf->dev,
			            (uintmax_t)sf->ino, sf->size, sf->mtime_ns, sf->ctime_ns);
		if (!rc && p->reader && p->reader->unverified)   /* not the sha256's bytes, maybe */
			rc = append(&s, &len, &cap, "src unverified ranges\n");
		if (!rc)
			rc = append(&s, &len, &cap, "tensor %s.weight %s [%" PRIu64 ",%" PRIu64 "] at %"
			            PRIu64 " len %" PRIu64 " slot %d at %" PRIu64 "\ncalib %08" PRIx32 "\n",
			            md->name, rq_src_name(md->dtype), md->rows, md->cols, md->w_off,
			            rq_mod_in_bytes(md), k, jb->mod_off[k], md->input_gs_bits);
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

int rq_file_key(const struct rq_plan *p, size_t i, struct rq_cache_key *key)
{
	const struct rq_vfile *f = &p->files[i];
	const struct rq_srcfile *sf = &p->srcs[f->src];
	XXH3_state_t *mem = XXH3_createState();
	if (!mem)
		return -ENOMEM;
	XXH3_128bits_reset(mem);
	size_t njobs = 0;
	for (size_t k = 0; k < f->nseg; k++) {
		if (f->seg[k].kind == RQ_SEG_MEM) {
			XXH3_128bits_update(mem, &f->seg[k].off, sizeof f->seg[k].off);
			XXH3_128bits_update(mem, f->seg[k].mem, f->seg[k].len);
		}
		njobs += f->seg[k].kind == RQ_SEG_JOB;
	}
	XXH128_hash_t mh = XXH3_128bits_digest(mem);
	XXH3_freeState(mem);
	size_t cap = 512 + njobs * 40 + strlen(f->name) + strlen(sf->path);
	char *s = malloc(cap);
	if (!s)
		return -ENOMEM;
	/* A hub blob is content-addressed: its sha256 names the bytes (a chmod
	 * of the blob keeps the file); a plain SRC file is its identity. */
	int n = snprintf(s, cap, "requantfs file 1\nname %s size %" PRIu64 "\n", f->name, f->size);
	if (sf->blob_sha256[0])
		n += snprintf(s + n, cap - (size_t)n, "src sha256:%s\n", sf->blob_sha256);
	else if (p->reader)
		n += snprintf(s + n, cap - (size_t)n, "src remote:%s\n", sf->path);
	else
		n += snprintf(s + n, cap - (size_t)n, "src dev=%ju ino=%ju size=%" PRIu64 " mtime_ns=%"
		              PRId64 " ctime_ns=%" PRId64 "\n", (uintmax_t)sf->dev, (uintmax_t)sf->ino,
		              sf->size, sf->mtime_ns, sf->ctime_ns);
	if (p->reader && p->reader->unverified)   /* its SRC ranges too, not only its jobs */
		n += snprintf(s + n, cap - (size_t)n, "src unverified ranges\n");
	n += snprintf(s + n, cap - (size_t)n, "mem %016" PRIx64 "%016" PRIx64 "\n", mh.high64,
	              mh.low64);
	/* each job once, in the order of its first segment */
	uint8_t *seen = calloc(p->njobs ? p->njobs : 1, 1);
	if (!seen) {
		free(s);
		return -ENOMEM;
	}
	for (size_t k = 0; k < f->nseg; k++) {
		const struct rq_seg *g = &f->seg[k];
		if (g->kind != RQ_SEG_JOB || seen[g->job])
			continue;
		seen[g->job] = 1;
		struct rq_cache_key jk;
		if (rq_job_key(p, (size_t)g->job, &jk, NULL)) {
			free(seen);
			free(s);
			return -ENOMEM;
		}
		char hex[33];
		rq_cache_key_hex(&jk, hex);
		n += snprintf(s + n, cap - (size_t)n, "job %s\n", hex);
	}
	free(seen);
	rq_cache_key_of(s, (size_t)n, key);
	free(s);
	return 0;
}
