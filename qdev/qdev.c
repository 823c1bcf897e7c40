/* qdev.c — the quantizer device: CUDA through kernels/kquant.h when asked
 * for or available, else the CPU through quant/ and a thread pool.
 *
 * GPU context life cycle (all under gpu_mu):
 *   closed --job--> open --idle > gpu_idle_s (reaper thread)--> closed
 *   open --CUDA error--> closed, CPU from then on (fallback reason recorded)
 * A closed context is reopened by the next job, so an inference server that
 * starts loading from the mount gets the whole GPU while the mount is idle. */
#include "qdev/qdev.h"
#include "base/err.h"
#include "base/pool.h"
#include "kernels/kquant.h"
#include "quant/quant.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

int rq_device_parse(const char *s, enum rq_device_kind *kind, int *index)
{
	if (!s || !strcmp(s, "auto")) {
		*kind = RQ_DEVICE_AUTO;
		*index = 0;
		return 0;
	}
	if (!strcmp(s, "cpu") || !strcmp(s, "cuda")) {
		*kind = s[1] == 'p' ? RQ_DEVICE_CPU : RQ_DEVICE_CUDA;
		*index = 0;
		return 0;
	}
	if (strncmp(s, "cuda:", 5))
		return -EINVAL;
	char *end;
	errno = 0;
	long v = strtol(s + 5, &end, 10);
	if (errno || end == s + 5 || *end || v < 0 || v > 1024)
		return -EINVAL;
	*kind = RQ_DEVICE_CUDA;
	*index = (int)v;
	return 0;
}

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

/* Opens CUDA device `index` for q (before any thread shares q). Without one,
 * -ENODEV with the reason in msg. */
static int open_gpu(struct rq_quantizer *q, int index, char *msg, size_t len)
{
	int n = kq_device_count();
	if (!kq_compiled())
		snprintf(msg, len, "requantfs was built without CUDA");
	else if (n <= index)
		snprintf(msg, len, "no CUDA device %d (found %d)", index, n);
	else
		kq_open(index, q->o.gpu_mem, &q->k, msg, len);
	if (!q->k)
		return -ENODEV;
	q->cuda_index = index;
	q->last_use = mono();
	snprintf(q->device, sizeof q->device, "cuda:%d %s", index, kq_name(q->k));
	return 0;
}

int rq_quantizer_open(const struct rq_quantizer_opts *o, struct rq_quantizer **out,
                      struct rq_err *err)
{
	const char *dev = o->device ? o->device : "auto";
	enum rq_device_kind kind;
	int index;
	if (rq_device_parse(dev, &kind, &index))
		return rq_errf(err, -EINVAL, "--device %s: expected auto, cpu, cuda or cuda:N", dev);
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
	char msg[256] = "";
	if (kind != RQ_DEVICE_CPU && open_gpu(q, index, msg, sizeof msg)) {
		if (kind == RQ_DEVICE_CUDA) {
			rq_quantizer_close(q);
			return rq_errf(err, -ENODEV, "--device %s: %s; use --device cpu or auto", dev, msg);
		}
		snprintf(q->fallback, sizeof q->fallback, "no usable GPU (%s); quantizing on the "
		         "CPU with %d threads", msg, rq_pool_size(q->pool));
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

int rq_quantizer_run(struct rq_quantizer *q, enum rq_recipe r, const struct rq_qmod *m, int n,
                     float *gs, int *bad)
{
	int rc = -ENODEV;
	if (q->cuda_index >= 0)
		rc = run_gpu(q, r, m, n, gs, bad);
	if (rc == -ENODEV)
		rc = rq_quantize_job(r, m, n, gs, bad, q->pool);
	return rc;
}
