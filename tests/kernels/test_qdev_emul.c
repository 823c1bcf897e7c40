/* test_qdev_emul.c — qdev/ (the quantizer device's state machine) on the
 * emulated GPU of emul/cuda_runtime.h, with injected faults and a fake
 * clock, so that nothing sleeps for the back-off (suite kernels, every build).
 *
 * Every job's bytes (global scale, packed codes, scales) are compared with
 * rq_quantize_job on the CPU, whatever device ran them. Cases:
 *   - a healthy GPU: jobs on the GPU, context cost measured, pinned staging
 *     copies nothing on the host, plain buffers are memcpy'd
 *   - cudaMalloc out of memory during a job: CPU, same bytes; back-off; the
 *     context is released; after the back-off the GPU again
 *   - the card held by another process (all but 256 MiB): the context does
 *     not fit; back-off doubles 5, 10, 20 ... and stops at 300 s; when the
 *     memory comes back, the GPU again
 *   - a busy device (exclusive-process mode) at open: back-off, then the GPU
 *   - sticky launch and query failures: CPU, context reset, GPU again
 *   - a kernel that never completes: the watchdog fails the job over to the
 *     CPU (same bytes); no retry while the old context cannot be released;
 *     once it is, a fresh context
 *   - permanent: no kernel image, a GPU that is not bit-exact (self-check),
 *     no device: CPU for good with the reason; --device cuda refuses
 *   - idle release and reopen
 *   - four threads staging and running jobs while faults come and go
 *   - the MSE observers' search (issue 32): every observer x scheme on the
 *     GPU (one launch per module) with the CPU's bytes, --device cpu; a
 *     launch failure and a hung search kernel fail over to the CPU with the
 *     same bytes and the same back-off; a module larger than --gpu-mem's
 *     buffers goes through in row chunks; a row too large for them keeps the
 *     search on the CPU without a failure; a search that is not bit-exact
 *     (corrupt_obs) is caught by the context's self-check: GPU off, CPU bytes */
#include "qdev/qdev.h"
#include "base/err.h"
#include "quant/observer.h"
#include "quant/quant.h"
#include "quant/scheme.h"
#include "tests/kernels/emul/kq_emul.h"
#include "tests/kernels/kq_testdata.h"
#include "tests/tap.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the fake clock ---- */

static pthread_mutex_t clk_mu = PTHREAD_MUTEX_INITIALIZER;
static double clk_t = 1000, clk_step;   /* step: added at every reading (watchdog test) */

static double fake_now(void)
{
	pthread_mutex_lock(&clk_mu);
	double t = clk_t;
	clk_t += clk_step;
	pthread_mutex_unlock(&clk_mu);
	return t;
}

static void clk_add(double dt)
{
	pthread_mutex_lock(&clk_mu);
	clk_t += dt;
	pthread_mutex_unlock(&clk_mu);
}

static void clk_auto(double step)
{
	pthread_mutex_lock(&clk_mu);
	clk_step = step;
	pthread_mutex_unlock(&clk_mu);
}

/* ---- the log ---- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];

static void log_line(void *arg, const char *line)
{
	(void)arg;
	pthread_mutex_lock(&log_mu);
	size_t l = strlen(log_text);
	snprintf(log_text + l, sizeof log_text - l, "%s\n", line);
	pthread_mutex_unlock(&log_mu);
	printf("# log: %s\n", line);
}

static int log_has(const char *s)
{
	pthread_mutex_lock(&log_mu);
	int r = strstr(log_text, s) != NULL;
	pthread_mutex_unlock(&log_mu);
	return r;
}

/* ---- jobs and their reference bytes ---- */

struct tjob {
	int n;
	size_t rows[2], cols[2];
	uint16_t *w[2];
	uint8_t *ref[2];          /* packed | scales from the CPU */
	float gs;
};

static uint64_t seed = 0xB5026F5AA96619E9ull;

static void tjob_make(struct tjob *j, int n, size_t rows, size_t cols)
{
	memset(j, 0, sizeof *j);
	j->n = n;
	struct rq_qmod m[2];
	for (int i = 0; i < n; i++) {
		j->rows[i] = rows;
		j->cols[i] = cols;
		j->w[i] = malloc(rows * cols * 2);
		j->ref[i] = malloc(rows * cols * 9 / 16);
		kq_fill(j->w[i], rows, cols, (enum kq_dist)(i % KQ_DIST_COUNT), &seed);
		m[i] = (struct rq_qmod){.w = j->w[i], .rows = rows, .cols = cols,
		                        .packed = j->ref[i], .scales = j->ref[i] + rows * cols / 2};
	}
	int bad = -1;
	if (rq_quantize_job(RQ_RECIPE_FP32, m, n, &j->gs, &bad, NULL))
		abort();
}

static void tjob_free(struct tjob *j)
{
	for (int i = 0; i < j->n; i++) {
		free(j->w[i]);
		free(j->ref[i]);
	}
}

/* Runs j through q (inputs staged by q when staged, else malloc'd); 1 when
 * the bytes are the CPU's. */
static int run_same(struct rq_quantizer *q, const struct tjob *j, int staged, const char *name)
{
	struct rq_qmod m[2];
	void *in[2] = {NULL, NULL};
	uint8_t *out[2] = {NULL, NULL};
	int ok = 1;
	for (int i = 0; i < j->n; i++) {
		size_t e = j->rows[i] * j->cols[i];
		in[i] = staged ? rq_quantizer_stage(q, e * 2) : malloc(e * 2);
		out[i] = malloc(e * 9 / 16);
		if (!in[i] || !out[i])
			return 0;
		memcpy(in[i], j->w[i], e * 2);     /* "pread" */
		memset(out[i], 0xA5, e * 9 / 16);
		m[i] = (struct rq_qmod){.w = in[i], .rows = j->rows[i], .cols = j->cols[i],
		                        .packed = out[i], .scales = out[i] + e / 2};
	}
	float gs = -1;
	int bad = -1;
	int rc = rq_quantizer_run_named(q, RQ_RECIPE_FP32, m, j->n, name, &gs, &bad);
	ok = rc == 0 && memcmp(&gs, &j->gs, 4) == 0;
	for (int i = 0; i < j->n; i++) {
		ok = ok && memcmp(out[i], j->ref[i], j->rows[i] * j->cols[i] * 9 / 16) == 0;
		if (staged)
			rq_quantizer_unstage(q, in[i]);
		else
			free(in[i]);
		free(out[i]);
	}
	if (rc)
		printf("# run: rc %d\n", rc);
	return ok;
}

/* ---- helpers ---- */

static struct rq_quantizer *open_q(const char *device, double idle_s, int *rc_out, char *err_msg,
                                   size_t len)
{
	struct rq_quantizer_opts o = {.device = device, .threads = 2, .gpu_idle_s = idle_s,
	                              .now = fake_now, .log = log_line};
	struct rq_quantizer *q = NULL;
	struct rq_err err;
	memset(&err, 0, sizeof err);
	int rc = rq_quantizer_open(&o, &q, &err);
	if (rc_out)
		*rc_out = rc;
	if (err_msg && len)
		snprintf(err_msg, len, "%s", rc ? err.msg : "");
	return rc ? NULL : q;
}

static void faults(const struct kq_emul_faults *f)
{
	struct kq_emul_faults none;
	memset(&none, 0, sizeof none);
	kq_emul_faults_set(f ? f : &none);
}

/* Waits (real time, up to 5 s) until the emulated context is gone. */
static int wait_released(void)
{
	for (int i = 0; i < 500; i++) {
		struct kq_emul_stats s;
		kq_emul_stats_get(&s);
		if (!s.context_active)
			return 1;
		usleep(10000);
	}
	return 0;
}

static int wait_state(struct rq_quantizer *q, const char *state)
{
	for (int i = 0; i < 500; i++) {
		if (!strcmp(rq_quantizer_state(q), state))
			return 1;
		usleep(10000);
	}
	return 0;
}

static const char *reason(struct rq_quantizer *q)
{
	static char buf[1024];
	return rq_quantizer_reason(q, buf, sizeof buf);
}

static struct rq_quantizer_stats stats(struct rq_quantizer *q)
{
	struct rq_quantizer_stats s;
	rq_quantizer_get_stats(q, &s);
	return s;
}

static int emul_contexts(void)
{
	struct kq_emul_stats s;
	kq_emul_stats_get(&s);
	return s.contexts_created;
}

/* ---- cases ---- */

static void test_healthy(const struct tjob *j, const struct tjob *big)
{
	struct rq_quantizer *q = open_q("auto", 0, NULL, NULL, 0);
	TAP_OK(q && !strcmp(rq_quantizer_state(q), "gpu") && !rq_quantizer_fallback_reason(q),
	       "healthy: auto opens the GPU: %s (%s)", q ? rq_quantizer_device(q) : "-",
	       q ? rq_quantizer_state(q) : "-");
	if (!q)
		return;
	TAP_OK(!strcmp(reason(q), ""), "healthy: no reason while on the GPU: '%s'", reason(q));
	TAP_OK(stats(q).context_bytes == (unsigned long long)KQ_EMUL_CONTEXT_BYTES,
	       "healthy: the context's own memory is measured at open: %llu bytes",
	       stats(q).context_bytes);
	int ok = run_same(q, j, 1, "t.staged");
	struct rq_quantizer_stats s = stats(q);
	TAP_OK(ok && s.gpu_jobs == 1 && s.cpu_jobs == 0 && s.staged_pinned == 2 &&
	       s.host_copied == 0, "healthy: staged (pinned) inputs: GPU job, same bytes, no host "
	       "memcpy (gpu %llu, pinned %llu, copied %llu)", s.gpu_jobs, s.staged_pinned,
	       s.host_copied);
	ok = run_same(q, big, 0, "t.plain");
	s = stats(q);
	unsigned long long in = big->rows[0] * big->cols[0] * 2ull * big->n;
	TAP_OK(ok && s.gpu_jobs == 2 && s.host_copied == in, "healthy: malloc'd inputs: same "
	       "bytes, memcpy'd into staging (%llu of %llu bytes)", s.host_copied, in);
	ok = run_same(q, j, 1, "t.again");
	s = stats(q);
	TAP_OK(ok && s.staged_pinned == 4 && s.host_copied == in, "healthy: returned pinned "
	       "buffers are reused (pinned %llu, copied %llu)", s.staged_pinned, s.host_copied);
	rq_quantizer_close(q);
	struct kq_emul_stats es;
	kq_emul_stats_get(&es);
	TAP_OK(!es.context_active && es.host_live == 0, "healthy: close releases the context "
	       "and every pinned buffer (active %d, pinned live %lld)", es.context_active,
	       es.host_live);
}

static void test_oom_job(const struct tjob *j, const struct tjob *big)
{
	struct rq_quantizer *q = open_q("auto", 0, NULL, NULL, 0);
	if (!q) {
		TAP_OK(0, "oom: open");
		return;
	}
	int ok = run_same(q, j, 1, "t.small");
	int ctx0 = emul_contexts();
	struct kq_emul_faults f = {.malloc_fail = 1};
	faults(&f);                 /* the big job's larger buffers will not fit */
	ok = ok && run_same(q, big, 1, "model.layers.40.mlp.experts.7.gate_proj");
	faults(NULL);
	struct rq_quantizer_stats s = stats(q);
	TAP_OK(ok && s.cpu_jobs == 1 && s.gpu_failures == 1, "oom during a job: done on the CPU, "
	       "same bytes (cpu %llu, failures %llu)", s.cpu_jobs, s.gpu_failures);
	const char *r = reason(q);
	TAP_OK(!strcmp(rq_quantizer_state(q), "backoff") && strstr(r, "out of memory") &&
	       strstr(r, "model.layers.40.mlp.experts.7.gate_proj") && strstr(r, "vLLM") &&
	       strstr(r, "retrying the GPU in 5 s (failure 1), CPU meanwhile") && strstr(r, " UTC"),
	       "oom: status says why: '%s'", r);
	TAP_OK(strstr(rq_quantizer_device(q), "cpu (2 threads; GPU backing off)") != NULL,
	       "oom: device '%s'", rq_quantizer_device(q));
	TAP_OK(wait_released(), "oom: the failed context is released (vLLM gets the memory)");
	clk_add(3);
	ok = run_same(q, j, 1, "t.during");
	s = stats(q);
	TAP_OK(ok && s.cpu_jobs == 2 && s.gpu_opens == 1 && s.staged_plain == 2 &&
	       strstr(reason(q), "retrying the GPU in 2 s"), "oom: during the back-off: CPU, "
	       "plain staging, same bytes, no reopen (opens %llu): '%s'", s.gpu_opens, reason(q));
	clk_add(2.5);
	ok = run_same(q, big, 1, "t.after");
	s = stats(q);
	TAP_OK(ok && s.gpu_jobs == 2 && s.gpu_opens == 2 && emul_contexts() == ctx0 + 1 &&
	       !strcmp(rq_quantizer_state(q), "gpu") && !strcmp(reason(q), ""),
	       "oom: after the back-off: the GPU again with a fresh context (gpu %llu, opens "
	       "%llu), same bytes", s.gpu_jobs, s.gpu_opens);
	TAP_OK(log_has("out of memory quantizing model.layers.40.mlp.experts.7.gate_proj") &&
	       log_has("is back after 1 failure"), "oom: the log names the tensor and the return");
	rq_quantizer_close(q);
}

static void test_card_held(const struct tjob *j, const struct tjob *big)
{
	struct rq_quantizer *q = open_q("auto", 0, NULL, NULL, 0);
	if (!q) {
		TAP_OK(0, "held: open");
		return;
	}
	/* vLLM starts: the mount goes idle, the context is released, and the
	 * card is full but for 256 MiB when the next job wants the GPU */
	struct kq_emul_faults f = {.malloc_fail = 1};
	faults(&f);
	run_same(q, big, 0, "t.first");  /* a larger arena: fails -> backoff, released */
	wait_released();
	f = (struct kq_emul_faults){.mem_others = (80ll << 30) - (256ll << 20)};
	faults(&f);
	static const int want[] = {10, 20, 40, 80, 160, 300, 300};
	int ok = 1;
	char last[1024] = "";
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		clk_add(301);
		ok = ok && run_same(q, j, 1, "t.held");
		char w[64];
		snprintf(w, sizeof w, "retrying the GPU in %d s (failure %zu)", want[i], i + 2);
		snprintf(last, sizeof last, "%s", reason(q));
		if (!strstr(last, w) || !strstr(last, "opening the context for t.held")) {
			ok = 0;
			printf("# step %zu wants '%s'\n", i, w);
			break;
		}
	}
	TAP_OK(ok, "held (all but 256 MiB taken): each retry fails, CPU bytes identical, back-off "
	       "doubles to the 300 s cap: '%s'", last);
	faults(NULL);               /* vLLM exits */
	clk_add(301);
	ok = run_same(q, j, 1, "t.free");
	TAP_OK(ok && !strcmp(rq_quantizer_state(q), "gpu") && stats(q).gpu_jobs == 1,
	       "held: memory back -> the GPU again, same bytes");
	rq_quantizer_close(q);
}

static void test_busy(const struct tjob *j)
{
	struct kq_emul_faults f = {.busy = 2};
	faults(&f);
	struct rq_quantizer *q = open_q("cuda", 0, NULL, NULL, 0);
	TAP_OK(q && !strcmp(rq_quantizer_state(q), "backoff") && rq_quantizer_fallback_reason(q) &&
	       strstr(reason(q), "exclusive-process"), "busy at open (--device cuda): mounts, CPU "
	       "meanwhile: '%s' / '%s'", q ? reason(q) : "-",
	       q && rq_quantizer_fallback_reason(q) ? rq_quantizer_fallback_reason(q) : "-");
	if (!q)
		return;
	clk_add(6);
	int ok = run_same(q, j, 1, "t.busy");     /* second busy: 10 s */
	TAP_OK(ok && strstr(reason(q), "retrying the GPU in 10 s (failure 2)"),
	       "busy again at the retry: CPU, same bytes: '%s'", reason(q));
	clk_add(11);
	ok = run_same(q, j, 1, "t.free");
	TAP_OK(ok && !strcmp(rq_quantizer_state(q), "gpu"), "busy: freed -> the GPU");
	rq_quantizer_close(q);
	faults(NULL);
}

static void test_sticky(const struct tjob *j)
{
	for (int which = 0; which < 2; which++) {
		struct rq_quantizer *q = open_q("auto", 0, NULL, NULL, 0);
		if (!q) {
			TAP_OK(0, "sticky: open");
			continue;
		}
		struct kq_emul_faults f = {.launch_fail = which == 0, .query_fail = which == 1};
		faults(&f);
		int ctx0 = emul_contexts();
		int ok = run_same(q, j, 1, "t.sticky");
		const char *what = which ? "illegal address (event query)" : "launch failure";
		TAP_OK(ok && !strcmp(rq_quantizer_state(q), "backoff") && strstr(reason(q), "failed") &&
		       strstr(reason(q), "context is reset"), "sticky %s: CPU, same bytes: '%s'", what,
		       reason(q));
		TAP_OK(wait_released(), "sticky %s: the context is reset", what);
		clk_add(6);
		ok = run_same(q, j, 1, "t.after");
		TAP_OK(ok && !strcmp(rq_quantizer_state(q), "gpu") && emul_contexts() == ctx0 + 1,
		       "sticky %s: a fresh context after the back-off", what);
		rq_quantizer_close(q);
		faults(NULL);
	}
}

static void test_watchdog(const struct tjob *j, const struct tjob *big)
{
	struct rq_quantizer *q = open_q("auto", 0, NULL, NULL, 0);
	if (!q) {
		TAP_OK(0, "watchdog: open");
		return;
	}
	int ok = run_same(q, j, 1, "t.warm");
	int ctx0 = emul_contexts();
	kq_emul_hang(1);
	clk_auto(0.25);             /* time passes while the job polls */
	ok = ok && run_same(q, big, 1, "model.layers.41.mlp.experts.3.down_proj");
	clk_auto(0);
	struct rq_quantizer_stats s = stats(q);
	const char *r = reason(q);
	TAP_OK(ok && s.watchdog == 1 && s.cpu_jobs == 1 && strstr(r, "watchdog") &&
	       strstr(r, "model.layers.41.mlp.experts.3.down_proj"), "hung kernel: the watchdog "
	       "fails the job over to the CPU, same bytes: '%s'", r);
	clk_add(10);
	ok = run_same(q, j, 1, "t.while-hung");
	r = reason(q);
	TAP_OK(ok && stats(q).gpu_opens == 1 && strstr(r, "once the old context is released"),
	       "hung kernel: no retry while its context cannot be released; CPU: '%s'", r);
	kq_emul_hang(0);            /* the kernel ends; the reaper can close it */
	TAP_OK(wait_released(), "hung kernel: released once the kernel ended");
	ok = run_same(q, big, 1, "t.fresh");
	s = stats(q);
	TAP_OK(ok && s.gpu_opens == 2 && emul_contexts() == ctx0 + 1 && s.gpu_jobs == 2,
	       "hung kernel: the next job runs on a fresh context, same bytes (opens %llu)",
	       s.gpu_opens);
	TAP_OK(log_has("watchdog timeout quantizing model.layers.41.mlp.experts.3.down_proj"),
	       "hung kernel: the log names the tensor");
	rq_quantizer_close(q);
}

static void test_permanent(const struct tjob *j)
{
	static const char *const what[] = {"no kernel image", "not bit-exact", "no device"};
	static const char *const want[] = {"cannot run these kernels", "self-check failed",
	                                   "no usable GPU"};
	for (int c = 0; c < 3; c++) {
		struct kq_emul_faults f = {.no_image = c == 0, .corrupt = c == 1, .no_device = c == 2};
		faults(&f);
		struct rq_quantizer *q = open_q("auto", 0, NULL, NULL, 0);
		if (!q) {
			TAP_OK(0, "permanent %s: auto opens anyway", what[c]);
			continue;
		}
		int ok = run_same(q, j, 1, "t.perm");
		clk_add(100000);
		ok = ok && run_same(q, j, 1, "t.later");
		const char *r = reason(q);
		TAP_OK(ok && !strcmp(rq_quantizer_state(q), "disabled") && strstr(r, want[c]) &&
		       (c == 2 || strstr(r, "off for this mount")) && stats(q).gpu_jobs == 0 &&
		       rq_quantizer_fallback_reason(q), "permanent %s: CPU for good, same bytes: '%s'",
		       what[c], r);
		rq_quantizer_close(q);
		int rc = 0;
		char msg[1100];
		q = open_q("cuda", 0, &rc, msg, sizeof msg);
		TAP_OK(!q && rc == -ENODEV && strstr(msg, c == 2 ? "no CUDA device 0" : want[c]) &&
		       strstr(msg, "--device cpu"),
		       "permanent %s: --device cuda refuses: %s", what[c], msg);
		rq_quantizer_close(q);
		faults(NULL);
	}
	struct rq_quantizer *q = open_q("cpu", 0, NULL, NULL, 0);
	TAP_OK(q && !strcmp(rq_quantizer_state(q), "cpu") && !strcmp(reason(q), "--device cpu") &&
	       run_same(q, j, 1, "t.cpu") && stats(q).staged_plain == 2, "--device cpu: '%s'",
	       q ? reason(q) : "-");
	rq_quantizer_close(q);
}

static void test_idle(const struct tjob *j)
{
	struct rq_quantizer *q = open_q("auto", 30, NULL, NULL, 0);
	if (!q) {
		TAP_OK(0, "idle: open");
		return;
	}
	int ok = run_same(q, j, 1, "t.one");
	clk_add(31);
	ok = ok && wait_state(q, "gpu-idle") && wait_released();
	TAP_OK(ok && strstr(reason(q), "released after 30 s idle"), "idle: context released after "
	       "30 s: '%s'", reason(q));
	TAP_OK(strstr(rq_quantizer_device(q), "cuda:0") != NULL, "idle: device still '%s'",
	       rq_quantizer_device(q));
	void *b = rq_quantizer_stage(q, 4096);
	TAP_OK(b && stats(q).staged_plain == 1, "idle: staging while released is plain memory");
	rq_quantizer_unstage(q, b);
	ok = run_same(q, j, 1, "t.two");
	TAP_OK(ok && stats(q).gpu_opens == 2 && !strcmp(rq_quantizer_state(q), "gpu"),
	       "idle: the next job reopens it");
	rq_quantizer_close(q);
}

struct thr {
	struct rq_quantizer *q;
	const struct tjob *j;
	int id, bad;
};

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	for (int i = 0; i < 24; i++) {
		if (!run_same(t->q, &t->j[(i + t->id) % 2], (i + t->id) % 3 != 0, "t.thread"))
			t->bad++;
	}
	return NULL;
}

static void test_threads(const struct tjob *j2)
{
	struct rq_quantizer *q = open_q("auto", 0, NULL, NULL, 0);
	if (!q) {
		TAP_OK(0, "threads: open");
		return;
	}
	pthread_t th[4];
	struct thr t[4];
	for (int i = 0; i < 4; i++) {
		t[i] = (struct thr){.q = q, .j = j2, .id = i};
		pthread_create(&th[i], NULL, thr_main, &t[i]);
	}
	for (int k = 0; k < 6; k++) {              /* faults come and go */
		usleep(20000);
		struct kq_emul_faults f = {.malloc_fail = k % 2, .launch_fail = k == 2};
		faults(&f);
		clk_add(400);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	faults(NULL);
	struct rq_quantizer_stats s = stats(q);
	TAP_OK(t[0].bad + t[1].bad + t[2].bad + t[3].bad == 0 && s.gpu_jobs + s.cpu_jobs == 96,
	       "4 threads x 24 jobs with faults coming and going: every job's bytes the CPU's "
	       "(gpu %llu, cpu %llu, failures %llu)", s.gpu_jobs, s.cpu_jobs, s.gpu_failures);
	rq_quantizer_close(q);
	struct kq_emul_stats es;
	kq_emul_stats_get(&es);
	TAP_OK(!es.context_active && es.host_live == 0, "threads: everything released at close "
	       "(pinned live %lld)", es.host_live);
}

/* ---- the MSE observers' search (issue 32) ---- */

struct sjob {               /* a data-free scheme's job with an MSE observer */
	enum rq_scheme s;
	enum rq_observer o;
	int n;
	size_t rows, cols;
	uint64_t size;          /* bytes of each module's output */
	uint16_t *w[3];
	uint8_t *ref[3];        /* rq_scheme_quantize_obs on the CPU */
};

static void sjob_make(struct sjob *j, enum rq_scheme s, enum rq_observer o, int n,
                      size_t rows, size_t cols)
{
	static const enum kq_dist d[3] = {KQ_DIST_NORMAL, KQ_DIST_FEWBITS, KQ_DIST_SPARSE};
	struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
	struct rq_smod m[3];
	int nt, bad = -1;
	*j = (struct sjob){.s = s, .o = o, .n = n, .rows = rows, .cols = cols};
	if (rq_scheme_layout(s, RQ_SRC_BF16, rows, cols, t, &nt, &j->size))
		abort();
	for (int i = 0; i < n; i++) {
		j->w[i] = malloc(rows * cols * 2);
		j->ref[i] = calloc(1, j->size);
		kq_fill(j->w[i], rows, cols, d[i], &seed);
		m[i] = (struct rq_smod){j->w[i], RQ_SRC_BF16, rows, cols, j->ref[i]};
	}
	if (rq_scheme_quantize_obs(s, RQ_RECIPE_BF16, o, m, n, &bad, NULL))
		abort();
}

static void sjob_free(struct sjob *j)
{
	for (int i = 0; i < j->n; i++) {
		free(j->w[i]);
		free(j->ref[i]);
	}
}

/* Runs j through q; 1 when every output byte is the CPU's. */
static int run_scheme_same(struct rq_quantizer *q, const struct sjob *j)
{
	struct rq_smod m[3];
	uint8_t *out[3] = {NULL, NULL, NULL};
	int bad = -1, ok = 1;
	for (int i = 0; i < j->n; i++) {
		out[i] = malloc(j->size);
		memset(out[i], 0xA5, j->size);
		m[i] = (struct rq_smod){j->w[i], RQ_SRC_BF16, j->rows, j->cols, out[i]};
	}
	int rc = rq_quantizer_run_scheme(q, j->s, RQ_RECIPE_BF16, j->o, m, j->n, &bad);
	for (int i = 0; i < j->n; i++) {
		ok = ok && rc == 0 && memcmp(out[i], j->ref[i], j->size) == 0;
		free(out[i]);
	}
	if (rc)
		printf("# run_scheme: rc %d\n", rc);
	return ok;
}

static long long emul_launches(void)
{
	struct kq_emul_stats s;
	kq_emul_stats_get(&s);
	return s.launches;
}

/* Every observer x scheme the search takes, on the GPU: the CPU's bytes. */
static void test_obs_gpu(void)
{
	static const enum rq_scheme sc[] = {RQ_SCHEME_NVFP4A16, RQ_SCHEME_NVFP4_W4A4,
	                                    RQ_SCHEME_FP8_DYNAMIC, RQ_SCHEME_W8A16,
	                                    RQ_SCHEME_W4A16};
	struct rq_quantizer *q = open_q("auto", 0, NULL, NULL, 0);
	if (!q) {
		TAP_OK(0, "mse: open");
		return;
	}
	for (int o = RQ_OBSERVER_MSE; o < RQ_OBSERVER_COUNT; o++) {
		for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
			struct sjob j;
			int n = rq_scheme_shares_scale(sc[i]) ? 3 : 1;   /* q/k/v share gs */
			sjob_make(&j, sc[i], (enum rq_observer)o, n, 8, 256);
			struct rq_quantizer_stats s0 = stats(q);
			long long l0 = emul_launches();
			int ok = run_scheme_same(q, &j);
			struct rq_quantizer_stats s = stats(q);
			TAP_OK(ok && s.gpu_jobs == s0.gpu_jobs + 1 && s.cpu_jobs == s0.cpu_jobs &&
			       emul_launches() == l0 + n, "mse on the GPU: %s, %s, %d module%s: the "
			       "search on the device (%lld launches), the CPU's bytes",
			       rq_scheme_name(sc[i]), rq_observer_name((enum rq_observer)o), n,
			       n == 1 ? "" : "s", emul_launches() - l0);
			sjob_free(&j);
		}
	}
	rq_quantizer_close(q);
	q = open_q("cpu", 0, NULL, NULL, 0);
	struct sjob j;
	sjob_make(&j, RQ_SCHEME_W4A16, RQ_OBSERVER_MSE, 1, 8, 256);
	long long l0 = emul_launches();
	int ok = q && run_scheme_same(q, &j);
	TAP_OK(ok && stats(q).cpu_jobs == 1 && stats(q).gpu_jobs == 0 && emul_launches() == l0,
	       "mse with --device cpu: the CPU's search, no launch");
	sjob_free(&j);
	rq_quantizer_close(q);
}

/* Device failures during the search: the module is searched on the CPU (same
 * bytes) and the GPU backs off as for a job; too small --gpu-mem: CPU, no failure. */
static void test_obs_fallback(void)
{
	struct sjob j, f8;
	sjob_make(&j, RQ_SCHEME_NVFP4A16, RQ_OBSERVER_EXPANDED_MSE, 2, 16, 256);
	sjob_make(&f8, RQ_SCHEME_FP8_DYNAMIC, RQ_OBSERVER_MSE, 1, 4, 512);
	struct rq_quantizer *q = open_q("auto", 0, NULL, NULL, 0);
	if (!q) {
		TAP_OK(0, "mse fallback: open");
		return;
	}
	struct kq_emul_faults f = {.launch_fail = 1};
	faults(&f);
	int ok = run_scheme_same(q, &j);
	faults(NULL);
	struct rq_quantizer_stats s = stats(q);
	const char *r = reason(q);
	TAP_OK(ok && s.cpu_jobs == 1 && s.gpu_jobs == 0 && s.gpu_failures == 1 &&
	       !strcmp(rq_quantizer_state(q), "backoff") &&
	       strstr(r, "searching the expanded-mse ranges of a module [16, 256]") &&
	       strstr(r, "retrying the GPU in 5 s"), "mse: a launch failure mid-job: both modules "
	       "searched on the CPU, same bytes, back-off: '%s'", r);
	clk_add(2);
	long long l0 = emul_launches();
	ok = run_scheme_same(q, &f8);
	TAP_OK(ok && stats(q).cpu_jobs == 2 && emul_launches() == l0, "mse: during the back-off "
	       "the search stays on the CPU, same bytes");
	wait_released();
	clk_add(3.5);
	ok = run_scheme_same(q, &j);
	s = stats(q);
	TAP_OK(ok && s.gpu_jobs == 1 && s.gpu_opens == 2 && !strcmp(rq_quantizer_state(q), "gpu"),
	       "mse: after the back-off the GPU searches again (opens %llu), same bytes",
	       s.gpu_opens);
	kq_emul_hang(1);
	clk_auto(0.25);             /* time passes while the search polls */
	ok = run_scheme_same(q, &f8);
	clk_auto(0);
	s = stats(q);
	r = reason(q);
	TAP_OK(ok && s.watchdog == 1 && s.cpu_jobs == 3 && strstr(r, "watchdog timeout "
	       "searching the mse ranges"), "mse: a hung search kernel: the watchdog fails it "
	       "over to the CPU, same bytes: '%s'", r);
	kq_emul_hang(0);
	TAP_OK(log_has("watchdog timeout searching the mse ranges of a module [4, 512]"),
	       "mse: the log names the search");
	rq_quantizer_close(q);

	/* 256 KiB of device buffers: 128 KiB of tables, then ~245 rows of 256 weights */
	struct rq_quantizer_opts o = {.device = "cuda", .threads = 2, .gpu_mem = 256 << 10,
	                              .now = fake_now, .log = log_line};
	struct rq_err err;
	struct sjob tall, wide;
	sjob_make(&tall, RQ_SCHEME_W4A16, RQ_OBSERVER_MSE, 1, 600, 256);
	sjob_make(&wide, RQ_SCHEME_FP8_DYNAMIC, RQ_OBSERVER_MSE, 1, 2, 65536);
	q = NULL;
	if (rq_quantizer_open(&o, &q, &err)) {
		TAP_OK(0, "mse: open with --gpu-mem 256 KiB: %s", err.msg);
	} else {
		l0 = emul_launches();
		ok = run_scheme_same(q, &tall);
		s = stats(q);
		TAP_OK(ok && s.gpu_jobs == 1 && emul_launches() == l0 + 3, "mse: a module larger "
		       "than --gpu-mem's buffers goes through in row chunks (%lld launches), same "
		       "bytes", emul_launches() - l0);
		l0 = emul_launches();
		ok = run_scheme_same(q, &wide);
		s = stats(q);
		TAP_OK(ok && s.cpu_jobs == 1 && s.gpu_failures == 0 && emul_launches() == l0 &&
		       !strcmp(rq_quantizer_state(q), "gpu"), "mse: a row too large for --gpu-mem's "
		       "buffers: searched on the CPU, no GPU failure (%s)", rq_quantizer_state(q));
		rq_quantizer_close(q);
	}
	sjob_free(&tall);
	sjob_free(&wide);

	/* a GPU whose search is not bit-exact (its quantize kernel is): the context's
	 * self-check catches it, the GPU is off, the search stays on the CPU */
	struct kq_emul_faults fo = {.corrupt_obs = 1};
	faults(&fo);
	q = open_q("auto", 0, NULL, NULL, 0);
	ok = q && run_scheme_same(q, &f8);
	r = q ? reason(q) : "-";
	TAP_OK(ok && !strcmp(rq_quantizer_state(q), "disabled") &&
	       strstr(r, "self-check failed (the mse search") && stats(q).gpu_jobs == 0,
	       "mse: a search that is not bit-exact: the self-check turns the GPU off, the CPU's "
	       "bytes: '%s'", r);
	rq_quantizer_close(q);
	faults(NULL);
	sjob_free(&j);
	sjob_free(&f8);
}

int main(void)
{
	struct tjob j, big, pair[2];
	tjob_make(&j, 2, 32, 256);          /* a fused pair, 32 KiB */
	tjob_make(&big, 2, 512, 1024);      /* 2 MiB: a larger arena */
	tjob_make(&pair[0], 2, 64, 512);
	tjob_make(&pair[1], 1, 300, 2048);
	test_healthy(&j, &big);
	test_oom_job(&j, &big);
	test_card_held(&j, &big);
	test_busy(&j);
	test_sticky(&j);
	test_watchdog(&j, &big);
	test_permanent(&j);
	test_idle(&j);
	test_threads(pair);
	test_obs_gpu();
	test_obs_fallback();
	tjob_free(&j);
	tjob_free(&big);
	tjob_free(&pair[0]);
	tjob_free(&pair[1]);
	return tap_done();
}
