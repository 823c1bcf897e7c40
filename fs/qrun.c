/* qrun.c — the quantizer device: CUDA through kernels/kquant.h when asked
 * for or available, else the CPU through quant/ and a thread pool.
 *
 * GPU context life cycle (all under gpu_mu):
 *   closed --job--> open --idle > gpu_idle_s (reaper thread)--> closed
 *   open --CUDA error--> closed, CPU from then on (fallback reason recorded)
 * A closed context is reopened by the next job, so an inference server that
 * starts loading from the mount gets the whole GPU while the mount is idle. */
#include "fs/qrun.h"
#include "fs/plan.h"
#include "base/err.h"
#include "base/pool.h"
#include "kernels/kquant.h"
#include "quant/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct rq_quantizer {
	struct rq_quantizer_opts o;
	struct rq_pool *pool;
	int cuda_index;           /* -1: CPU only */
	pthread_mutex_t gpu_mu;
	pthread_cond_t gpu_cv;    /* wakes the reaper early on close */
	struct kq_ctx *k;         /* open context or NULL (gpu_mu) */
	double last_use;          /* monotonic seconds of the last GPU job end (gpu_mu) */
	int stop;                 /* (gpu_mu) */
	int reaper_on;
	pthread_t reaper;
	char device[160];         /* (gpu_mu) */
	char fallback[512];       /* (gpu_mu) "" when none */
};

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *reaper_main(void *arg)
{
	struct rq_quantizer *q = arg;
	pthread_mutex_lock(&q->gpu_mu);
	while (!q->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&q->gpu_cv, &q->gpu_mu, &ts);
		if (q->k && mono() - q->last_use > q->o.gpu_idle_s) {
			kq_close(q->k);
			q->k = NULL;
		}
	}
	pthread_mutex_unlock(&q->gpu_mu);
	return NULL;
}

int rq_quantizer_open(const struct rq_quantizer_opts *o, struct rq_quantizer **out,
                      struct rq_err *err)
{
	const char *dev = o->device ? o->device : "auto";
	int want = 0, required = 0, index = 0;
	if (!strcmp(dev, "cpu")) {
		want = 0;
	} else if (!strcmp(dev, "auto")) {
		want = 1;
	} else if (!strcmp(dev, "cuda")) {
		want = required = 1;
	} else if (!strncmp(dev, "cuda:", 5) && dev[5]) {
		char *end;
		index = (int)strtol(dev + 5, &end, 10);
		if (*end || index < 0)
			return rq_errf(err, -EINVAL, "--device %s: expected auto, cpu, cuda or cuda:N", dev);
		want = required = 1;
	} else {
		return rq_errf(err, -EINVAL, "--device %s: expected auto, cpu, cuda or cuda:N", dev);
	}
	struct rq_quantizer *q = calloc(1, sizeof *q);
	if (!q)
		return -ENOMEM;
	q->o = *o;
	q->cuda_index = -1;
	pthread_mutex_init(&q->gpu_mu, NULL);
	pthread_cond_init(&q->gpu_cv, NULL);
	int rc = rq_pool_create(o->threads, &q->pool);
	if (rc) {
		free(q);
		return rq_errf(err, rc, "cannot start %d quantizer threads", o->threads);
	}
	snprintf(q->device, sizeof q->device, "cpu (%d threads)", rq_pool_size(q->pool));
	if (want) {
		char msg[256] = "";
		int n = kq_device_count();
		if (!kq_compiled())
			snprintf(msg, sizeof msg, "requantfs was built without CUDA");
		else if (n <= index)
			snprintf(msg, sizeof msg, "no CUDA device %d (found %d)", index, n);
		else
			rc = kq_open(index, o->gpu_mem, &q->k, msg, sizeof msg);
		if (q->k) {
			q->cuda_index = index;
			q->last_use = mono();
			snprintf(q->device, sizeof q->device, "cuda:%d %s", index, kq_name(q->k));
		} else if (required) {
			rq_quantizer_close(q);
			return rq_errf(err, -ENODEV, "--device %s: %s; use --device cpu or auto", dev, msg);
		} else {
			snprintf(q->fallback, sizeof q->fallback, "no usable GPU (%s); quantizing on the "
			         "CPU with %d threads", msg, rq_pool_size(q->pool));
		}
	}
	if (q->k && o->gpu_idle_s > 0) {
		if (pthread_create(&q->reaper, NULL, reaper_main, q) == 0)
			q->reaper_on = 1;
	}
	*out = q;
	return 0;
}

void rq_quantizer_close(struct rq_quantizer *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&q->gpu_mu);
	q->stop = 1;
	pthread_cond_broadcast(&q->gpu_cv);
	pthread_mutex_unlock(&q->gpu_mu);
	if (q->reaper_on)
		pthread_join(q->reaper, NULL);
	kq_close(q->k);
	rq_pool_destroy(q->pool);
	pthread_mutex_destroy(&q->gpu_mu);
	pthread_cond_destroy(&q->gpu_cv);
	free(q);
}

const char *rq_quantizer_device(struct rq_quantizer *q)
{
	return q->device;
}

const char *rq_quantizer_fallback_reason(struct rq_quantizer *q)
{
	return q->fallback[0] ? q->fallback : NULL;
}

/* The identity the plan recorded; a SRC file replaced or rewritten since then
 * must never feed a job. */
static int check_src(const struct rq_plan *p, int s, int fd, struct rq_err *err)
{
	const struct rq_srcfile *f = &p->srcs[s];
	struct stat st;
	if (fstat(fd, &st) < 0)
		return rq_errf(err, -errno, "SRC %s: %s", f->name, strerror(errno));
	int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if ((uint64_t)st.st_size != f->size || st.st_ino != f->ino || st.st_dev != f->dev ||
	    mt != f->mtime_ns)
		return rq_errf(err, -ESTALE, "SRC %s changed after the plan was made (size %llu -> "
		               "%llu); remount to serve the new file", f->name,
		               (unsigned long long)f->size, (unsigned long long)st.st_size);
	return 0;
}

static int read_weight(const struct rq_plan *p, const struct rq_module *m, int fd, uint16_t *w,
                       struct rq_err *err)
{
	uint64_t len = m->rows * m->cols * 2, got = 0;
	int rc = check_src(p, m->src, fd, err);
	if (rc)
		return rc;
	while (got < len) {
		ssize_t r = pread(fd, (char *)w + got, len - got, m->w_off + got);
		if (r <= 0)
			return rq_errf(err, r < 0 ? -errno : -EIO, "SRC %s: reading %s.weight: %s",
			               p->srcs[m->src].name, m->name,
			               r < 0 ? strerror(errno) : "file ends early");
		got += r;
	}
	posix_fadvise(fd, m->w_off, len, POSIX_FADV_DONTNEED);
	return check_src(p, m->src, fd, err);
}

static int run_gpu(struct rq_quantizer *q, enum rq_recipe r, const struct rq_qmod *qm, int n,
                   float *gs, int *bad)
{
	pthread_mutex_lock(&q->gpu_mu);
	char msg[256] = "";
	int rc = -ENODEV;
	if (q->cuda_index >= 0 && !q->k)
		kq_open(q->cuda_index, q->o.gpu_mem, &q->k, msg, sizeof msg);
	if (q->k) {
		rc = kq_quantize_job(q->k, r, qm, n, gs, bad, msg, sizeof msg);
		q->last_use = mono();
	}
	if (rc == -EIO || (rc == -ENODEV && q->cuda_index >= 0)) {
		/* a dying or vanished GPU: never again this mount, CPU from now on */
		snprintf(q->fallback, sizeof q->fallback, "GPU cuda:%d failed (%s); quantizing on the "
		         "CPU with %d threads from now on", q->cuda_index, msg, rq_pool_size(q->pool));
		snprintf(q->device, sizeof q->device, "cpu (%d threads, after GPU failure)",
		         rq_pool_size(q->pool));
		kq_close(q->k);
		q->k = NULL;
		q->cuda_index = -1;
		rc = -ENODEV;
	}
	pthread_mutex_unlock(&q->gpu_mu);
	return rc;
}

int rq_job_run(struct rq_quantizer *q, const struct rq_plan *p, size_t j, const int *src_fds,
               uint8_t *out, struct rq_err *err)
{
	const struct rq_job *job = &p->jobs[j];
	struct rq_qmod qm[2];
	uint16_t *w[2] = {NULL, NULL};
	int rc = 0;
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
		rc = -ENODEV;
		if (q->cuda_index >= 0)
			rc = run_gpu(q, p->recipe, qm, job->nmod, &gs, &bad);
		if (rc == -ENODEV)
			rc = rq_quantize_job(p->recipe, qm, job->nmod, &gs, &bad, q->pool);
		if (rc == -EDOM)
			rq_errf(err, rc, "%s.weight (in SRC %s) holds NaN or Inf; it cannot be quantized",
			        p->mods[job->mod[bad]].name, p->srcs[p->mods[job->mod[bad]].src].name);
		else if (rc)
			rq_errf(err, rc, "quantizing %s failed: %s", p->mods[job->mod[0]].name,
			        strerror(-rc));
	}
	for (int s = 0; s < job->nmod && !rc; s++) {
		const struct rq_module *m = &p->mods[job->mod[s]];
		memcpy(out + rq_mod_gs_off(p, m), &gs, 4);   /* F32 little-endian */
	}
	free(w[0]);
	free(w[1]);
	return rc;
}
