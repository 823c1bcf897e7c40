/* qdev_scheme.c — the data-free schemes' jobs (issue 12) on the quantizer
 * device: rq_quantizer_run_scheme (qdev.h).
 *
 * Where each part of a job runs:
 *   minmax, the NVFP4 family on BF16, one module or a gate/up pair:
 *             rq_quantizer_run (the GPU when there is one, else the CPU);
 *   minmax, the rest (F16/F32 sources, a q/k/v triple, FP8, the integer
 *             schemes): rq_scheme_quantize on the CPU pool (no GPU kernel);
 *   an MSE observer (issue 32): the search, ~100 times minmax's work, on
 *             the GPU (kernels/kquant.h kq_obs_search, bit-identical to
 *             quant/'s search) for every scheme and kind the observers take;
 *             the ranges, the global scale, the scales and the codes after it
 *             on the CPU pool exactly as without a GPU
 *             (rq_scheme_quantize_obs_dev). The GPU is taken per module
 *             (qd_gpu_take) under the same state machine as a job (qdev.c):
 *             a device failure retires the context, backs off (or turns the
 *             GPU off) and that module's search, and every later one until
 *             the GPU is back, runs on the CPU; a module too large for one
 *             row of --gpu-mem's buffers (-E2BIG) is searched on the CPU
 *             without counting as a failure.
 * Bytes are identical on either device. The stats count a job in gpu_jobs
 * when every one of its modules was searched on the GPU, else in cpu_jobs. */
#include "qdev/qdev.h"
#include "qdev/qdev_int.h"
#include "kernels/kquant.h"
#include "quant/observer.h"
#include "quant/observer_int.h"   /* struct rq_obs_params */

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct obs_job {
	struct rq_quantizer *q;
	enum rq_observer o;
};

/* rq_obs_dev.search on the GPU: 0, or -ENODEV (the GPU is not in use or
 * just failed), -E2BIG (too large for the buffers): the CPU searches it. */
static int obs_search_gpu(void *arg, int kind, const struct rq_obs_params *p,
                          const uint16_t *w, size_t rows, size_t cols, size_t group,
                          uint8_t *best, uint32_t *mask)
{
	struct obs_job *j = arg;
	struct rq_quantizer *q = j->q;
	char what[160], msg[300] = "";
	snprintf(what, sizeof what, "searching the %s ranges of a module [%zu, %zu]",
	         rq_observer_name(j->o), rows, cols);
	pthread_mutex_lock(&q->mu);
	struct qgen *g = qd_gpu_take(q, what);
	/* the watchdog: 1 s per GB of input per candidate step beyond the base */
	struct kq_job_opts jo = {.now = q->o.now,
	                         .timeout_s = qd_timeout(q, (double)rows * cols * 2 *
	                                                 p->steps)};
	pthread_mutex_unlock(&q->mu);
	if (!g)
		return -ENODEV;
	int rc = kq_obs_search(g->k, kind, p, w, rows, cols, group, &jo, best, mask, msg,
	                       sizeof msg);
	int done = rc == 0 || rc == -E2BIG;
	qd_gpu_give(q, g, rc, done ? NULL : what, msg, 0, 0);
	return done ? rc : -ENODEV;
}

int rq_quantizer_run_scheme(struct rq_quantizer *q, enum rq_scheme s, enum rq_recipe r,
                            enum rq_observer o, const struct rq_smod *m, int n, int *bad)
{
	if (o != RQ_OBSERVER_MINMAX) {
		struct obs_job j = {q, o};
		struct rq_obs_dev dev = {obs_search_gpu, &j};
		int on[3] = {0, 0, 0}, all = n >= 1 && n <= 3;
		int rc = rq_scheme_quantize_obs_dev(s, r, o, m, n, bad, q->pool,
		                                    q->cuda_index >= 0 ? &dev : NULL, on);
		for (int i = 0; i < n && i < 3; i++)
			all &= on[i];
		pthread_mutex_lock(&q->mu);
		if (all)
			q->st.gpu_jobs++;
		else
			q->st.cpu_jobs++;
		pthread_mutex_unlock(&q->mu);
		return rc;
	}
	int gpu_ok = rq_scheme_shares_scale(s) && n >= 1 && n <= 2;
	for (int i = 0; i < n && gpu_ok; i++)
		gpu_ok = m[i].dtype == RQ_SRC_BF16;
	if (!gpu_ok)
		return rq_scheme_quantize(s, r, m, n, bad, q->pool);
	struct rq_qmod qm[2];
	uint64_t gs_off[2];
	for (int i = 0; i < n; i++) {
		struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
		int nt;
		uint64_t sz;
		int rc = rq_scheme_layout(s, m[i].dtype, m[i].rows, m[i].cols, t, &nt, &sz);
		if (rc < 0 || nt != 3) {           /* packed | scales | global scale */
			*bad = i;
			return rc < 0 ? rc : -EINVAL;
		}
		qm[i] = (struct rq_qmod){.w = m[i].w, .rows = m[i].rows, .cols = m[i].cols,
		                         .packed = m[i].out + t[0].off, .scales = m[i].out + t[1].off};
		gs_off[i] = t[2].off;
	}
	float gs = 0;
	int rc = rq_quantizer_run(q, r, qm, n, &gs, bad);
	for (int i = 0; i < n && !rc; i++)
		memcpy(m[i].out + gs_off[i], &gs, 4);   /* F32 little-endian */
	return rc;
}
