/* qdev.c — the quantizer device: CUDA through kernels/kquant.h when asked
 * for or available, else the CPU through quant/ and a thread pool.
 *
 * The GPU's state machine (q->state, under q->mu):
 *
 *   CPU       --device cpu: never changes.
 *   READY     a context is open (q->cur) and passed the bit-exactness
 *             self-check; GPU jobs take turns on it (q->busy).
 *   OPENING   one job thread creates a context outside the lock; other GPU
 *             jobs wait for it.
 *   IDLE      no context: released after gpu_idle_s without jobs (reaper),
 *             so that an inference server gets the whole GPU; the next job
 *             reopens it (-> OPENING).
 *   BACKOFF   failure number q->fails, at q->t_fail, reason q->why: jobs run
 *             on the CPU until q->retry_at = t_fail + min(5 s * 2^(fails-1),
 *             300 s); the first job after that goes to OPENING, once no
 *             retired context is left (the primary context is one per
 *             process: a fresh one needs the old one reset). A GPU job that
 *             completes sets fails back to 0.
 *   DISABLED  a permanent failure, or auto found no usable GPU at open: CPU
 *             for the rest of the mount, reason in q->why.
 *
 *   IDLE/BACKOFF(due) --job--> OPENING --ok--> READY
 *   OPENING or READY --transient failure--> BACKOFF (the context is retired)
 *   OPENING or READY --permanent failure--> DISABLED (retired)
 *   READY --idle > gpu_idle_s, nothing staged--> IDLE (retired)
 *
 * Transient (kquant's errors): -ENOMEM (cudaMalloc or the context does not
 * fit: vLLM holds the card), -EBUSY (exclusive-process mode, another owner),
 * -ETIMEDOUT (the watchdog, or a launch timeout), -EIO (any other CUDA error;
 * a fresh context follows). Permanent: -ENODEV (no device or driver, kernels
 * not built for its compute capability), -EPROTO (the self-check's bytes
 * differ from the CPU's), -EINVAL (a --gpu-mem below kquant's minimum).
 *
 * Bytes: a job's bytes are rq_quantize_job's on either device; a GPU job that
 * fails is rerun on the CPU from the same inputs, which rewrites every output
 * byte. The watchdog: each GPU job gets gpu_timeout_s (10 s) + 1 s per GB of
 * input; kquant polls its events against that deadline, so a kernel that
 * never completes fails the job (CPU rerun) instead of blocking every job.
 *
 * Retired contexts (q->retired): a context leaving READY may still have
 * staged buffers lent to callers (their pinned memory belongs to it), and one
 * with a hung kernel blocks in kq_close until the kernel ends. So it waits on
 * the list until its lent count is 0 and the reaper thread closes it outside
 * the lock; no job ever waits for that.
 *
 * Staging (rq_quantizer_stage): pinned buffers of the READY context, at most
 * QD_PIN_MAX bytes per context, kept for reuse on the context's free list
 * when returned; the lent ones are on q->lent so that a job can tell which of
 * its inputs are pinned (kquant then DMAs straight from them).
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it.
 *
 *   qdev_scheme.c  the data-free schemes' jobs, the MSE search on the GPU
 *   qdev.c         the quantizer device: CUDA or CPU, fallback, idle release
 *   qdev_stage.c   staging buffers for job inputs
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                       /* pthread_timedjoin_np */
#endif
#include "qdev/qdev.h"
#include "qdev/qdev_int.h"
#include "base/err.h"
#include "base/pool.h"
#include "kernels/kquant.h"
#include "quant/observer_int.h"   /* the MSE search's self-check */
#include "quant/quant.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static double now_of(const struct rq_quantizer *q)
{
	return q->o.now ? q->o.now() : mono();
}

static void qlog(struct rq_quantizer *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void qlog(struct rq_quantizer *q, const char *fmt, ...)
{
	if (!q->o.log)
		return;
	char line[640];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	q->o.log(q->o.log_arg, line);
}

static int permanent(int rc)
{
	return rc == -ENODEV || rc == -EPROTO || rc == -EINVAL;
}

static const char *hint(int rc)
{
	switch (rc) {
	case -ENOMEM:
		return " (another process, e.g. vLLM, holds the GPU memory?)";
	case -EBUSY:
		return " (exclusive-process compute mode with another process on the GPU?)";
	case -ETIMEDOUT:
		return " (watchdog: a hung or starved kernel; its context is reset)";
	case -EIO:
		return " (its context is reset before the retry)";
	case -EPROTO:
		return " (the GPU's bytes differ from the CPU's)";
	default:
		return "";
	}
}

/* ---- contexts ------------------------------------------------------------ */

static int self_check_obs(struct kq_ctx *k, const uint16_t *w, double (*now)(void), char *msg,
                          size_t len);

/* The self-check: a fused pair and a single module, every recipe, on the
 * GPU against the CPU, then the MSE search (self_check_obs); -EPROTO with
 * the first difference in msg. Inputs
 * cover zeros, both signs, ties and a wide range of magnitudes. */
static int self_check(struct rq_quantizer *q, struct kq_ctx *k, char *msg, size_t len)
{
	enum { R0 = 8, R1 = 4, C = 256 };
	static uint16_t w[R0 * C + R1 * C];
	static uint8_t out[2][2][(R0 + R1) * C / 2 + (R0 + R1) * C / 16];
	uint64_t x = 0x9E3779B97F4A7C15ull;
	for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint16_t e = (uint16_t)(0x3000 + (x >> 20) % 0x1800);   /* 2^-31 .. 2^17 */
		w[i] = (uint16_t)((x & 0x8000) | (i % 7 == 0 ? 0 : e));
	}
	w[5] = 0x41A8;                                /* 21.0 */
	for (int r = 0; r < RQ_RECIPE_COUNT; r++) {
		struct rq_qmod m[2][2];
		float gs[2] = {0, 0};
		int bad = -1, rc;
		for (int s = 0; s < 2; s++) {
			uint8_t *o = out[s][0];
			m[s][0] = (struct rq_qmod){.w = w, .rows = R0, .cols = C, .packed = o,
			                           .scales = o + R0 * C / 2};
			o = out[s][1];
			m[s][1] = (struct rq_qmod){.w = w + R0 * C, .rows = R1, .cols = C, .packed = o,
			                           .scales = o + R1 * C / 2};
		}
		for (int n = 1; n <= 2; n++) {
			rc = rq_quantize_job((enum rq_recipe)r, m[0], n, &gs[0], &bad, q->pool);
			if (rc < 0) {
				snprintf(msg, len, "self-check: the CPU refused its input (%d)", rc);
				return -EPROTO;
			}
			struct kq_job_opts jo = {.timeout_s = QD_TIMEOUT_S, .now = q->o.now};
			rc = kq_quantize_job_opt(k, (enum rq_recipe)r, m[1], n, &jo, &gs[1], &bad, msg, len);
			if (rc < 0)
				return rc;                        /* a device error: msg says which */
			if (memcmp(&gs[0], &gs[1], 4) || memcmp(out[0][0], out[1][0], R0 * C * 9 / 16) ||
			    (n == 2 && memcmp(out[0][1], out[1][1], R1 * C * 9 / 16))) {
				size_t at = 0;
				uint32_t g0, g1;
				memcpy(&g0, &gs[0], 4);
				memcpy(&g1, &gs[1], 4);
				while (at < R0 * C * 9 / 16 && out[0][0][at] == out[1][0][at])
					at++;
				snprintf(msg, len, "bit-exactness self-check failed (recipe %s, %d module%s): "
				         "global scale %08X vs CPU %08X, first byte difference at %zu",
				         rq_recipe_name((enum rq_recipe)r), n, n == 1 ? "" : "s",
				         g1, g0, at);
				return -EPROTO;
			}
		}
	}
	return self_check_obs(k, w, q->o.now, msg, len);
}

/* The MSE search's self-check: every kind and observer on a small module
 * (the weights of self_check), the GPU's steps against the CPU's. */
static int self_check_obs(struct kq_ctx *k, const uint16_t *w, double (*now)(void), char *msg,
                          size_t len)
{
	enum { R = 4, C = 256 };
	static const size_t group[4] = {16, 128, 128, C};   /* FP4, INT4, INT8, FP8 channels */
	uint8_t b[2][R * 16];
	uint32_t mk[2][R * 16];
	void *scratch = malloc(rq_obs_scratch_bytes(C));
	int rc = 0;
	if (!scratch)
		return -ENOMEM;
	for (int o = RQ_OBSERVER_MSE; o < RQ_OBSERVER_COUNT; o++) {
		const struct rq_obs_params *p = rq_obs_params((enum rq_observer)o);
		for (int kind = RQ_OBS_FP4; kind <= RQ_OBS_FP8; kind++) {
			size_t ng = R * C / group[kind];
			struct kq_job_opts jo = {.timeout_s = QD_TIMEOUT_S, .now = now};
			rq_obs_search_rows(kind, p, w, R, C, group[kind], b[0], mk[0], scratch);
			rc = kq_obs_search(k, kind, p, w, R, C, group[kind], &jo, b[1], mk[1], msg, len);
			if (rc == -E2BIG) {           /* --gpu-mem too small: the search stays on the CPU */
				rc = 0;
				continue;
			}
			if (rc == 0 && (memcmp(b[0], b[1], ng) || memcmp(mk[0], mk[1], 4 * ng))) {
				static const char *const kn[4] = {"FP4", "INT4", "INT8", "FP8"};
				snprintf(msg, len, "bit-exactness self-check failed (the %s search, %s "
				         "groups): the GPU's steps differ from the CPU's",
				         rq_observer_name((enum rq_observer)o), kn[kind]);
				rc = -EPROTO;
			}
			if (rc < 0)
				goto out;
		}
	}
out:
	free(scratch);
	return rc;
}

/* Moves g to the retired list; the reaper closes it once nothing is lent
 * from it (mu held). */
static void retire(struct rq_quantizer *q, struct qgen *g)
{
	if (!g)
		return;
	if (q->cur == g)
		q->cur = NULL;
	g->next = q->retired;
	q->retired = g;
	pthread_cond_broadcast(&q->cv);
}

/* Records a failure of the GPU (mu held): BACKOFF for a transient one,
 * DISABLED for a permanent one. what: the tensor or step it hit. */
static void fail_locked(struct rq_quantizer *q, int rc, const char *what, const char *msg)
{
	q->st.gpu_failures++;
	q->st.watchdog += rc == -ETIMEDOUT;
	q->why_rc = rc;
	q->wall_fail = time(NULL);
	q->t_fail = now_of(q);
	snprintf(q->why, sizeof q->why, "cuda:%d %s%s%s", q->cuda_index,
	         rc == -ENOMEM ? "out of memory" : rc == -EBUSY ? "busy" : rc == -ETIMEDOUT
	         ? "watchdog timeout" : rc == -EPROTO ? "not bit-exact" : rc == -ENODEV
	         ? "unusable" : "failed", what ? " " : "", what ? what : "");
	size_t l = strlen(q->why);
	snprintf(q->why + l, sizeof q->why - l, ": %s", msg[0] ? msg : strerror(-rc));
	if (permanent(rc)) {
		q->state = Q_DISABLED;
		qlog(q, "%s%s; the GPU is off for this mount, quantizing on the CPU", q->why,
		     hint(rc));
	} else {
		q->fails++;
		double d = QD_BACKOFF_FIRST_S;
		for (int i = 1; i < q->fails && d < QD_BACKOFF_MAX_S; i++)
			d *= 2;
		if (d > QD_BACKOFF_MAX_S)
			d = QD_BACKOFF_MAX_S;
		q->retry_at = q->t_fail + d;
		q->state = Q_BACKOFF;
		qlog(q, "%s%s; quantizing on the CPU, retrying the GPU in %.0f s (failure %d)",
		     q->why, hint(rc), d, q->fails);
	}
	pthread_cond_broadcast(&q->cv);
}

/* Opens a context and self-checks it (no lock held: one thread, OPENING). */
static int gpu_open(struct rq_quantizer *q, struct kq_ctx **out, char *msg, size_t len)
{
	struct kq_ctx *k = NULL;
	int rc = kq_open(q->cuda_index, q->o.gpu_mem, &k, msg, len);
	if (rc == 0 && (rc = self_check(q, k, msg, len)) < 0) {
		kq_close(k);                      /* nothing was lent from it */
		k = NULL;
	}
	if (rc == 0)
		*out = k;
	return rc < 0 ? rc : rc ? -EIO : 0;
}

/* OPENING -> READY, BACKOFF or DISABLED (mu held on entry and exit; dropped
 * while the context is created). */
static void open_locked(struct rq_quantizer *q, const char *what)
{
	char msg[300] = "";
	struct kq_ctx *k = NULL;
	q->state = Q_OPENING;
	pthread_mutex_unlock(&q->mu);
	int rc = gpu_open(q, &k, msg, sizeof msg);
	struct qgen *g = rc == 0 ? calloc(1, sizeof *g) : NULL;
	if (rc == 0 && !g) {
		kq_close(k);
		rc = -ENOMEM;
		snprintf(msg, sizeof msg, "out of host memory");
	}
	pthread_mutex_lock(&q->mu);
	if (rc == 0) {
		g->k = k;
		if (!q->dev_gpu[0])
			snprintf(q->dev_gpu, sizeof q->dev_gpu, "cuda:%d %s", q->cuda_index, kq_name(k));
		q->cur = g;
		q->state = Q_READY;
		q->last_use = now_of(q);
		q->st.gpu_opens++;
		q->st.context_bytes = kq_context_bytes(k);
		if (q->st.gpu_opens == 1 && q->st.context_bytes)
			qlog(q, "cuda:%d context takes %.0f MiB of device memory beyond --gpu-mem's "
			     "buffers (NVML)", q->cuda_index, q->st.context_bytes / 1048576.0);
		if (q->fails)
			qlog(q, "cuda:%d is back after %d failure%s; quantizing on the GPU again",
			     q->cuda_index, q->fails, q->fails == 1 ? "" : "s");
		pthread_cond_broadcast(&q->cv);
	} else {
		char w[300];
		snprintf(w, sizeof w, "opening the context%s%s", what ? " for " : "", what ? what : "");
		fail_locked(q, rc, w, msg);
	}
}

/* Closes retired contexts whose buffers all came back (all of them when
 * stopping), and releases an idle one; wakes on cv or every 0.5 s. */
static void *reaper_main(void *arg)
{
	struct rq_quantizer *q = arg;
	pthread_mutex_lock(&q->mu);
	for (;;) {
		if (q->state == Q_READY && !q->busy && q->cur->lent == 0 && q->o.gpu_idle_s > 0 &&
		    now_of(q) - q->last_use > q->o.gpu_idle_s) {
			retire(q, q->cur);
			q->state = Q_IDLE;
			qlog(q, "cuda:%d context released after %.0f s idle", q->cuda_index,
			     q->o.gpu_idle_s);
		}
		struct qgen **pp = &q->retired;
		while (*pp && (*pp)->lent && !q->stop)
			pp = &(*pp)->next;
		struct qgen *g = *pp;
		if (g) {
			*pp = g->next;
			q->closing = 1;
			pthread_mutex_unlock(&q->mu);
			for (struct qbuf *b = g->free, *nb; b; b = nb) {
				nb = b->next;
				kq_host_free(g->k, b->p);
				free(b);
			}
			kq_close(g->k);               /* may block on a hung kernel: nobody waits */
			free(g);
			pthread_mutex_lock(&q->mu);
			q->closing = 0;
			pthread_cond_broadcast(&q->cv);
			continue;
		}
		if (q->stop)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 500000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&q->cv, &q->mu, &ts);
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

/* ---- open / close -------------------------------------------------------- */

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
	q->state = Q_CPU;
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->cv, NULL);
	int rc = rq_pool_create(o->threads, &q->pool);
	if (rc) {
		pthread_mutex_destroy(&q->mu);
		pthread_cond_destroy(&q->cv);
		free(q);
		return rq_errf(err, rc, "cannot start %d quantizer threads", o->threads);
	}
	int nt = rq_pool_size(q->pool);
	snprintf(q->dev_cpu[0], sizeof q->dev_cpu[0], "cpu (%d threads)", nt);
	snprintf(q->dev_cpu[1], sizeof q->dev_cpu[1], "cpu (%d threads; GPU backing off)", nt);
	snprintf(q->dev_cpu[2], sizeof q->dev_cpu[2], "cpu (%d threads; GPU off)", nt);
	if (kind == RQ_DEVICE_CPU) {
		*out = q;
		return 0;
	}
	char msg[300] = "";
	int n = kq_device_count();
	if (!kq_compiled())
		snprintf(msg, sizeof msg, "requantfs was built without CUDA");
	else if (n <= index)
		snprintf(msg, sizeof msg, "no CUDA device %d (found %d)", index, n);
	if (msg[0]) {
		if (kind == RQ_DEVICE_CUDA) {
			rq_quantizer_close(q);
			return rq_errf(err, -ENODEV, "--device %s: %s; use --device cpu or auto", dev, msg);
		}
		q->state = Q_DISABLED;
		snprintf(q->why, sizeof q->why, "no usable GPU (%s)", msg);
		snprintf(q->fallback, sizeof q->fallback, "no usable GPU (%s); quantizing on the "
		         "CPU with %d threads", msg, nt);
		*out = q;
		return 0;
	}
	q->cuda_index = index;
	pthread_mutex_lock(&q->mu);
	open_locked(q, NULL);
	if (q->state == Q_DISABLED && kind == RQ_DEVICE_CUDA) {
		char why[sizeof q->why];
		memcpy(why, q->why, sizeof why);
		pthread_mutex_unlock(&q->mu);
		rq_quantizer_close(q);
		return rq_errf(err, -ENODEV, "--device %s: %s; use --device cpu or auto", dev, why);
	}
	if (q->state == Q_DISABLED)
		snprintf(q->fallback, sizeof q->fallback, "no usable GPU (%s); quantizing on the "
		         "CPU with %d threads", q->why, nt);
	else if (q->state == Q_BACKOFF)
		snprintf(q->fallback, sizeof q->fallback, "GPU not available now (%s%s); quantizing "
		         "on the CPU with %d threads meanwhile, retrying the GPU in %.0f s", q->why,
		         hint(q->why_rc), nt, q->retry_at - q->t_fail);
	pthread_mutex_unlock(&q->mu);
	if (pthread_create(&q->reaper, NULL, reaper_main, q) == 0)
		q->reaper_on = 1;
	*out = q;
	return 0;
}

void rq_quantizer_close(struct rq_quantizer *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&q->mu);
	q->stop = 1;
	retire(q, q->cur);
	q->state = q->cuda_index >= 0 ? Q_DISABLED : q->state;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
	if (q->reaper_on) {                   /* it closes every retired context */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 10;
		if (pthread_timedjoin_np(q->reaper, NULL, &ts) != 0)
			return;   /* stuck behind a hung kernel: leave it all to the process exit */
	}
	for (struct qgen *g = q->retired, *ng; g; g = ng) {   /* no reaper ran */
		ng = g->next;
		for (struct qbuf *b = g->free, *nb; b; b = nb) {
			nb = b->next;
			kq_host_free(g->k, b->p);
			free(b);
		}
		kq_close(g->k);
		free(g);
	}
	for (struct qbuf *b = q->lent, *nb; b; b = nb) {   /* never returned: plain ones */
		nb = b->next;
		if (!b->gen)
			free(b->p);
		free(b);
	}
	rq_pool_destroy(q->pool);
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cv);
	free(q);
}

/* ---- what it is doing ---------------------------------------------------- */

const char *rq_quantizer_device(struct rq_quantizer *q)
{
	pthread_mutex_lock(&q->mu);
	enum qstate s = q->state;
	/* no GPU at all (auto found none at open: no failure time) is plain "cpu" */
	const char *d = s == Q_BACKOFF ? q->dev_cpu[1] : s == Q_DISABLED && q->wall_fail
	              ? q->dev_cpu[2] : s == Q_CPU || s == Q_DISABLED || !q->dev_gpu[0]
	              ? q->dev_cpu[0] : q->dev_gpu;
	pthread_mutex_unlock(&q->mu);
	return d;
}

const char *rq_quantizer_fallback_reason(struct rq_quantizer *q)
{
	return q->fallback[0] ? q->fallback : NULL;
}

const char *rq_quantizer_state(struct rq_quantizer *q)
{
	static const char *const names[] = {"cpu", "gpu", "gpu-opening", "gpu-idle", "backoff",
	                                    "disabled"};
	pthread_mutex_lock(&q->mu);
	const char *s = names[q->state];
	pthread_mutex_unlock(&q->mu);
	return s;
}

static void clock_text(time_t t, char *buf, size_t len)
{
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, len, "%H:%M:%S UTC", &tm);
}

const char *rq_quantizer_reason(struct rq_quantizer *q, char *buf, size_t len)
{
	char at[32];
	if (!len)
		return buf;
	pthread_mutex_lock(&q->mu);
	clock_text(q->wall_fail, at, sizeof at);
	double left = q->retry_at - now_of(q);
	switch (q->state) {
	case Q_CPU:
		snprintf(buf, len, "--device cpu");
		break;
	case Q_READY:
		snprintf(buf, len, "%s", "");
		break;
	case Q_OPENING:
		snprintf(buf, len, "opening the GPU context");
		break;
	case Q_IDLE:
		snprintf(buf, len, "GPU context released after %.0f s idle; the next job reopens it",
		         q->o.gpu_idle_s);
		break;
	case Q_BACKOFF:
		if (left > 0)
			snprintf(buf, len, "%s at %s%s; retrying the GPU in %.0f s (failure %d), CPU "
			         "meanwhile", q->why, at, hint(q->why_rc), left < 1 ? 1 : left, q->fails);
		else
			snprintf(buf, len, "%s at %s%s; retrying the GPU with the next job%s (failure "
			         "%d), CPU meanwhile", q->why, at, hint(q->why_rc), q->retired ||
			         q->closing ? " once the old context is released (a kernel still "
			         "running?)" : "", q->fails);
		break;
	case Q_DISABLED:
		if (!q->wall_fail)                /* auto found none at open */
			snprintf(buf, len, "%s; quantizing on the CPU", q->why);
		else
			snprintf(buf, len, "%s at %s%s; the GPU is off for this mount, CPU from now on",
			         q->why, at, hint(q->why_rc));
		break;
	}
	pthread_mutex_unlock(&q->mu);
	return buf;
}

void rq_quantizer_get_stats(struct rq_quantizer *q, struct rq_quantizer_stats *s)
{
	pthread_mutex_lock(&q->mu);
	*s = q->st;
	pthread_mutex_unlock(&q->mu);
}

/* ---- jobs ---------------------------------------------------------------- */

/* Takes the GPU for one device call (mu held on entry and exit): waits while
 * a context opens or another call runs on it, opens a released one, or one
 * whose back-off is over; returns the context with q->busy set, or NULL: run
 * on the CPU. what: the call, for the log when opening fails. */
struct qgen *qd_gpu_take(struct rq_quantizer *q, const char *what)
{
	for (;;) {
		if (q->state == Q_BACKOFF && now_of(q) >= q->retry_at && !q->retired &&
		    !q->closing && !q->stop)
			q->state = Q_IDLE;
		if (q->state == Q_IDLE && !q->stop) {
			open_locked(q, what);
			continue;
		}
		if (q->state == Q_OPENING || (q->state == Q_READY && q->busy)) {
			pthread_cond_wait(&q->cv, &q->mu);
			continue;
		}
		break;
	}
	if (q->state != Q_READY)
		return NULL;
	q->busy = 1;
	return q->cur;
}

void qd_gpu_give(struct rq_quantizer *q, struct qgen *g, int rc, const char *failed,
                 const char *msg, int gpu_jobs, unsigned long long copied)
{
	pthread_mutex_lock(&q->mu);
	q->busy = 0;
	q->last_use = now_of(q);
	q->st.host_copied += copied;
	if (!failed) {
		q->fails = 0;
		q->st.gpu_jobs += (unsigned)gpu_jobs;
	} else {
		retire(q, g);
		fail_locked(q, rc, failed, msg);
	}
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
}

double qd_timeout(const struct rq_quantizer *q, double in_bytes)
{
	return (q->o.gpu_timeout_s > 0 ? q->o.gpu_timeout_s : QD_TIMEOUT_S) + in_bytes / 1e9;
}

/* The job on the GPU, or -ENODEV: run it on the CPU (the GPU is not in use,
 * or it just failed on this job). */
static int run_gpu(struct rq_quantizer *q, enum rq_recipe r, const struct rq_qmod *m, int n,
                   const char *name, float *gs, int *bad)
{
	pthread_mutex_lock(&q->mu);
	struct qgen *g = qd_gpu_take(q, name);
	if (!g) {
		pthread_mutex_unlock(&q->mu);
		return -ENODEV;
	}
	double in = 0;
	for (int i = 0; i < n; i++)
		in += (double)m[i].rows * m[i].cols * 2;
	struct kq_job_opts jo = {.pinned = qd_pinned_mask(q, g, m, n), .now = q->o.now,
	                         .timeout_s = qd_timeout(q, in)};
	pthread_mutex_unlock(&q->mu);

	char msg[300] = "", w[300];
	unsigned long long copied0 = kq_host_copied(g->k);
	int rc = kq_quantize_job_opt(g->k, r, m, n, &jo, gs, bad, msg, sizeof msg);
	int done = rc == 0 || rc == -EDOM || rc == -EINVAL;   /* the GPU did its part */
	if (name)
		snprintf(w, sizeof w, "quantizing %s", name);
	else
		snprintf(w, sizeof w, "quantizing a job of %d module%s [%zu, %zu]", n,
		         n == 1 ? "" : "s", m[0].rows, m[0].cols);
	qd_gpu_give(q, g, rc, done ? NULL : w, msg, 1, kq_host_copied(g->k) - copied0);
	return done ? rc : -ENODEV;
}

int rq_quantizer_run_named(struct rq_quantizer *q, enum rq_recipe r, const struct rq_qmod *m,
                           int n, const char *name, float *gs, int *bad)
{
	int rc = -ENODEV;
	if (q->cuda_index >= 0)
		rc = run_gpu(q, r, m, n, name, gs, bad);
	if (rc == -ENODEV) {
		rc = rq_quantize_job(r, m, n, gs, bad, q->pool);
		pthread_mutex_lock(&q->mu);
		q->st.cpu_jobs++;
		pthread_mutex_unlock(&q->mu);
	}
	return rc;
}

int rq_quantizer_run(struct rq_quantizer *q, enum rq_recipe r, const struct rq_qmod *m, int n,
                     float *gs, int *bad)
{
	return rq_quantizer_run_named(q, r, m, n, NULL, gs, bad);
}
