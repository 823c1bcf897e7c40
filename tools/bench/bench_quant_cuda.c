/* bench_quant_cuda.c — `requantfs bench quant --device cuda`: the GPU
 * quantizer (kernels/kquant) on one BF16 tensor, next to copies of the same
 * bytes measured in the same run:
 *   - device-resident kernels (absmax + scale + quantize) on the tensor alone
 *     (an expert fits in L2) and on one tensor made of many copies of it
 *     (512 MiB, well past L2: HBM bound), against a device-to-device
 *     cudaMemcpy of the same input;
 *   - host to host through kq_quantize_job (pinned staging, two streams), for
 *     one module and a fused pair, against plain cudaMemcpy of the input to
 *     the device and the outputs back;
 *   - the CPU job on all cores, for reference.
 * GB/s counts bytes read + written (BF16 in, codes and scales out); the D2D
 * baseline counts its read and its write. Every GPU result is checked against
 * rq_quantize_job byte for byte (exit 1 if one differs). Built in every
 * configuration: without CUDA, kq_open says so and this returns 1.
 *
 * With RQ_BENCH_QUANT_LIFECYCLE=IDLE_S in the environment it runs the
 * quantizer device's life cycle instead (tools/gpu-check step lifecycle):
 * the product's qdev quantizer (device RQ_BENCH_QUANT_DEVICE, default auto)
 * with gpu_idle_s = IDLE_S: a job, nvidia-smi's process list, an idle wait
 * past IDLE_S (the context must be released), nvidia-smi again, a second job
 * (the context reacquired), nvidia-smi again; both jobs byte for byte against
 * the CPU. One line "lifecycle-check NAME ok|FAIL ...|not run: why" per check;
 * exit 1 on a FAIL. Under tools/gpu-hold (all but 256 MiB of the card taken)
 * the same command shows the CPU fallback's bytes. */
#include "tools/bench/bench.h"
#include "cli/cli.h"
#include "kernels/kquant.h"
#include "qdev/qdev.h"
#include "quant/quant.h"
#include "base/err.h"
#include "base/pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_BIG_BYTES (512ull << 20)    /* device-resident input well past L2 */

struct outbuf {
	uint8_t *packed;     /* [rows][cols/2] */
	uint8_t *scales;     /* [rows][cols/16] */
};

static double gbs(double bytes, double sec)
{
	return sec > 0 ? bytes / sec / 1e9 : 0;
}

static void line(const char *what, double sec, double bytes, const char *base, double bsec,
                 double bbytes, const char *exact)
{
	double g = gbs(bytes, sec), b = gbs(bbytes, bsec);
	printf("%-34s %9.3f %9.1f  %-24s", what, sec * 1e3, g, base);
	if (bsec > 0)
		printf(" %9.1f %6.2f", b, b > 0 ? g / b : 0);
	else
		printf(" %9s %6s", "", "");
	printf("  %s\n", exact);
}

static int same(const struct rq_qmod *a, const struct outbuf *ref, float gs, float gs_ref)
{
	size_t e = a->rows * a->cols;
	return memcmp(&gs, &gs_ref, 4) == 0 && memcmp(a->packed, ref->packed, e / 2) == 0 &&
	       memcmp(a->scales, ref->scales, e / 16) == 0;
}

/* What nvidia-smi says of this process: 1 listed (*mib its memory), 0 not
 * listed while others are, -1 it lists no process at all (a PID namespace
 * hides them, or none runs), -2 no nvidia-smi. */
static int smi_lists_me(long *mib)
{
	FILE *p = popen("nvidia-smi --query-compute-apps=pid,used_memory "
	                "--format=csv,noheader,nounits 2>/dev/null", "r");
	char buf[256];
	int any = 0, me = 0;
	*mib = 0;
	if (!p)
		return -2;
	while (fgets(buf, sizeof buf, p)) {
		long pid, m;
		if (sscanf(buf, "%ld , %ld", &pid, &m) == 2) {
			any = 1;
			if (pid == (long)getpid()) {
				me = 1;
				*mib = m;
			}
		}
	}
	int st = pclose(p);
	if (st != 0 && !any)
		return -2;
	return me ? 1 : any ? 0 : -1;
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* One nvidia-smi check: want_listed 1 = the context must show, 0 = must not.
 * An empty process list proves nothing until this process was once seen in
 * it (*seen). Returns 1 on a FAIL. */
static int smi_check(const char *name, int want_listed, int on_gpu, int *seen)
{
	long mib;
	int s = smi_lists_me(&mib);
	if (!on_gpu) {
		printf("lifecycle-check %s not run: the job ran on the CPU\n", name);
		return 0;
	}
	if (s == -2) {
		printf("lifecycle-check %s not run: nvidia-smi not available\n", name);
		return 0;
	}
	if (s == -1 && !*seen) {
		printf("lifecycle-check %s not run: nvidia-smi lists no process at all (PID namespace?)\n",
		       name);
		return 0;
	}
	if (s == -1)
		s = 0;
	if (s == 1)
		*seen = 1;
	int ok = s == want_listed;
	printf("lifecycle-check %s %s: nvidia-smi %s pid %ld (%ld MiB)\n", name, ok ? "ok" : "FAIL",
	       s ? "lists" : "does not list", (long)getpid(), mib);
	return !ok;
}

static int lifecycle(const uint16_t *w, size_t rows, size_t cols, enum rq_recipe r, double idle_s)
{
	const char *dev = getenv("RQ_BENCH_QUANT_DEVICE");
	struct rq_quantizer_opts o = {.device = dev && *dev ? dev : "auto", .gpu_idle_s = idle_s};
	struct rq_quantizer *q = NULL;
	struct rq_pool *pool = NULL;
	struct rq_err err = {0};
	size_t e = rows * cols;
	uint8_t *rp = malloc(e / 2), *rs = malloc(e / 16), *p = malloc(e / 2), *sc = malloc(e / 16);
	float gs_ref = 0, gs = 0;
	int bad = 0, badm = -1, seen = 0, gpu1 = 0, rc;

	if (!rp || !rs || !p || !sc || idle_s <= 0) {
		rc = cli_fail(1, "bench quant", idle_s <= 0 ? "RQ_BENCH_QUANT_LIFECYCLE: idle seconds > 0"
		                                            : "out of memory");
		goto out;
	}
	rq_pool_create(0, &pool);
	struct rq_qmod ref = {w, rows, cols, rp, rs}, m = {w, rows, cols, p, sc};
	if (rq_quantize_job(r, &ref, 1, &gs_ref, NULL, pool) < 0) {
		rc = cli_fail(1, "bench quant", "the CPU refuses this tensor (NaN/Inf?)");
		goto out;
	}
	rc = rq_quantizer_open(&o, &q, &err);
	if (rc) {
		rc = cli_fail(1, "bench quant", "lifecycle: %s", err.msg);
		goto out;
	}
	const char *fb = rq_quantizer_fallback_reason(q);
	printf("lifecycle: [%zu x %zu] recipe %s, --device %s, idle release after %.1f s\n"
	       "lifecycle: opened on %s%s%s\n", rows, cols, rq_recipe_name(r), o.device, idle_s,
	       rq_quantizer_device(q), fb ? "; fallback: " : "", fb ? fb : "");
	for (int job = 1; job <= 2; job++) {
		memset(p, 0, e / 2);
		memset(sc, 0, e / 16);
		double t = bench_now();
		rc = rq_quantizer_run(q, r, &m, 1, &gs, &badm);
		t = bench_now() - t;
		const char *on = rq_quantizer_device(q);
		int gpu = !strncmp(on, "cuda", 4);
		int same = !rc && !memcmp(&gs, &gs_ref, 4) && !memcmp(p, rp, e / 2) &&
		           !memcmp(sc, rs, e / 16);
		printf("lifecycle-check job%d-bytes %s: job %d on %s in %.1f ms, %s the CPU's\n", job,
		       same ? "ok" : "FAIL", job, on, t * 1e3, same ? "identical to" : "DIFFERENT from");
		bad |= !same;
		const char *fb2 = rq_quantizer_fallback_reason(q);
		if (fb2 && (!fb || strcmp(fb, fb2)))
			printf("lifecycle: fallback: %s\n", fb2);
		fb = fb2;
		if (job == 2 && gpu1 && !gpu) {
			printf("lifecycle-check reacquired-after-job2 FAIL: job 1 ran on the GPU, job 2 on %s\n",
			       on);
			bad = 1;
		} else {
			bad |= smi_check(job == 1 ? "held-after-job1" : "reacquired-after-job2", 1, gpu, &seen);
		}
		if (job == 1)
			gpu1 = gpu;
		if (job == 1 && !gpu) {
			printf("lifecycle-check released-when-idle not run: the job ran on the CPU\n");
		} else if (job == 1) {
			double wait = idle_s + 2.5;    /* the reaper looks once a second */
			printf("lifecycle: idle for %.1f s\n", wait);
			fflush(stdout);
			sleep_s(wait);
			bad |= smi_check("released-when-idle", 0, gpu, &seen);
		}
		fflush(stdout);
	}
	rc = 0;
out:
	rq_quantizer_close(q);
	rq_pool_destroy(pool);
	free(rp);
	free(rs);
	free(p);
	free(sc);
	return rc ? rc : bad;
}

int bench_quant_cuda(const uint16_t *w, size_t rows, size_t cols, enum rq_recipe r, int reps)
{
	const char *lc = getenv("RQ_BENCH_QUANT_LIFECYCLE");
	if (lc && *lc)
		return lifecycle(w, rows, cols, r, atof(lc));
	char msg[512] = "";
	struct kq_ctx *k = NULL;
	struct rq_pool *pool = NULL;
	struct rq_qmod mods[2], big = {0};
	struct outbuf ref = {0}, ref2[2] = {{0}};
	struct kq_timing t1, tn;
	size_t e = rows * cols, in = e * 2, out = e / 2 + e / 16;
	int many, bad = 0, rc;
	uint16_t *bigw = NULL;
	float gs_ref = 0, gs_pair = 0, g;
	double t, best;

	if (cols == 0 || cols % 16 || rows == 0)
		return cli_fail(1, "bench quant", "--device cuda: shape [%zu, %zu] is not quantizable",
		                rows, cols);
	rc = kq_open(0, 0, &k, msg, sizeof msg);
	if (rc < 0)
		return cli_fail(1, "bench quant", "--device cuda: %s", msg);
	if (reps < 1)
		reps = 1;
	many = (int)(BENCH_BIG_BYTES / in);
	if (many < 2)
		many = 2;
	memset(mods, 0, sizeof mods);
	ref.packed = malloc(e / 2);
	ref.scales = malloc(e / 16);
	for (int p = 0; p < 2; p++) {
		ref2[p].packed = malloc(e / 2);
		ref2[p].scales = malloc(e / 16);
	}
	for (int i = 0; i < 2; i++) {
		mods[i].w = w;
		mods[i].rows = rows;
		mods[i].cols = cols;
		mods[i].packed = malloc(e / 2);
		mods[i].scales = malloc(e / 16);
	}
	bigw = malloc(in * many);
	big.w = bigw;
	big.rows = rows * many;
	big.cols = cols;
	big.packed = malloc(e / 2 * many);
	big.scales = malloc(e / 16 * many);
	if (!ref.packed || !ref.scales || !ref2[0].packed || !ref2[0].scales || !ref2[1].packed ||
	    !ref2[1].scales || !mods[0].packed || !mods[0].scales || !mods[1].packed ||
	    !mods[1].scales || !bigw || !big.packed || !big.scales) {
		rc = cli_fail(1, "bench quant", "out of memory");
		goto out;
	}
	for (int i = 0; i < many; i++)
		memcpy(bigw + e * i, w, in);

	/* the CPU reference: one module, and a fused pair of two copies */
	rq_pool_create(0, &pool);
	{
		struct rq_qmod m = {w, rows, cols, ref.packed, ref.scales};
		struct rq_qmod pr[2] = {{w, rows, cols, ref2[0].packed, ref2[0].scales},
		                        {w, rows, cols, ref2[1].packed, ref2[1].scales}};
		if (rq_quantize_job(r, &m, 1, &gs_ref, NULL, pool) < 0 ||
		    rq_quantize_job(r, pr, 2, &gs_pair, NULL, pool) < 0) {
			rc = cli_fail(1, "bench quant", "the CPU refuses this tensor (NaN/Inf?)");
			goto out;
		}
	}

	printf("requantfs bench quant --device cuda: %s, [%zu x %zu] BF16 = %.1f MiB, recipe %s, "
	       "best of %d\n"
	       "GB/s = bytes read + written (BF16 in, codes + scales out); each baseline moves "
	       "the same bytes in the same run\n\n"
	       "%-34s %9s %9s  %-24s %9s %6s  %s\n", kq_name(k), rows, cols, in / 1048576.0,
	       rq_recipe_name(r), reps, "path", "ms", "GB/s", "baseline", "GB/s", "ratio", "exact");

	/* device-resident: the module, then `many` copies of it as one tensor */
	rc = kq_bench(k, r, mods, 1, reps, &t1, &g, msg, sizeof msg);
	if (rc < 0) {
		rc = cli_fail(1, "bench quant", "--device cuda: %s", msg);
		goto out;
	}
	int ok = same(&mods[0], &ref, g, gs_ref);
	bad |= !ok;
	line("device, 1 module: whole job", t1.job_s, (double)(in + out), "D2D memcpy of the input",
	     t1.d2d_s, 2.0 * in, ok ? "yes" : "NO");
	line("  absmax pass", t1.absmax_s, (double)in, "", 0, 0, "");
	line("  scale + quantize pass", t1.quant_s, (double)(in + out), "", 0, 0, "");
	rc = kq_bench(k, r, &big, 1, reps, &tn, &g, msg, sizeof msg);
	if (rc < 0) {
		rc = cli_fail(1, "bench quant", "--device cuda: %s", msg);
		goto out;
	}
	ok = 1;
	for (int i = 0; i < many; i++) {
		struct rq_qmod part = {w, rows, cols, big.packed + e / 2 * i, big.scales + e / 16 * i};
		ok = ok && same(&part, &ref, g, gs_ref);
	}
	bad |= !ok;
	{
		char what[64];
		snprintf(what, sizeof what, "device, %d copies (%.0f MiB)", many,
		         (double)in * many / 1048576.0);
		line(what, tn.job_s, (double)(in + out) * many, "D2D memcpy of the input", tn.d2d_s,
		     2.0 * in * many, ok ? "yes" : "NO");
	}
	line("  absmax pass", tn.absmax_s, (double)in * many, "", 0, 0, "");
	line("  scale + quantize pass", tn.quant_s, (double)(in + out) * many, "", 0, 0, "");

	/* host to host through the product's path */
	for (int pair = 0; pair < 2; pair++) {
		int n = pair ? 2 : 1;
		best = 0;
		ok = 1;
		for (int rep = 0; rep <= reps; rep++) {       /* the first run warms up */
			for (int i = 0; i < n; i++)
				memset(mods[i].packed, 0, e / 2);
			t = bench_now();
			rc = kq_quantize_job(k, r, mods, n, &g, NULL, msg, sizeof msg);
			t = bench_now() - t;
			if (rc < 0) {
				rc = cli_fail(1, "bench quant", "--device cuda: %s", msg);
				goto out;
			}
			for (int i = 0; i < n; i++)
				ok = ok && same(&mods[i], pair ? &ref2[i] : &ref, g, pair ? gs_pair : gs_ref);
			if (rep && (best == 0 || t < best))
				best = t;
		}
		bad |= !ok;
		line(pair ? "host->host, fused pair" : "host->host, 1 module", best,
		     (double)(in + out) * n, "cudaMemcpy H2D + D2H", (t1.h2d_s + t1.d2h_s) * n,
		     (double)(in + out) * n, ok ? "yes" : "NO");
	}

	/* the CPU, same job */
	best = 0;
	for (int rep = 0; rep < reps; rep++) {
		struct rq_qmod m = {w, rows, cols, mods[0].packed, mods[0].scales};
		t = bench_now();
		rq_quantize_job(r, &m, 1, &g, NULL, pool);
		t = bench_now() - t;
		if (best == 0 || t < best)
			best = t;
	}
	{
		char what[64];
		snprintf(what, sizeof what, "CPU rq_quantize_job, %d threads", rq_pool_size(pool));
		line(what, best, (double)(in + out), "(reference)", 0, 0, "");
	}
	printf("\n");
	rc = 0;
	if (bad)
		fprintf(stderr, "requantfs bench quant: GPU BYTES DIFFER FROM THE CPU\n");
out:
	for (int i = 0; i < 2; i++) {
		free(mods[i].packed);
		free(mods[i].scales);
	}
	free(bigw);
	free(big.packed);
	free(big.scales);
	free(ref.packed);
	free(ref.scales);
	for (int p = 0; p < 2; p++) {
		free(ref2[p].packed);
		free(ref2[p].scales);
	}
	rq_pool_destroy(pool);
	kq_close(k);
	return rc ? rc : bad;
}

/* --observer O --device cuda (issue 32): O's whole job through the product's quantizer
 * device (qdev: the search on the GPU, the ranges, scales and codes on the CPU pool)
 * against the same job on the CPU pool alone, interleaved, best of reps each, and the
 * bytes compared. One line per tensor:
 *   "RxC  observer O on GPU+CPU  T ms  G GB/s, CPU job T ms (N threads): x R; the search
 *    on the GPU: yes|no (why); same bytes: yes|NO"
 * Exit 1 when the bytes differ, 2 when the search did not run on the GPU. */
int bench_quant_obs_cuda(const uint16_t *w, size_t rows, size_t cols, enum rq_scheme sc,
                         enum rq_observer o, int threads, int reps)
{
	struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
	int nt, bad = -1, rc;
	uint64_t sz;
	if (rq_scheme_layout(sc, RQ_SRC_BF16, rows, cols, t, &nt, &sz) != 0)
		return cli_fail(2, "bench quant", "--scheme %s cannot take %zux%zu", rq_scheme_name(sc),
		                rows, cols);
	struct rq_quantizer_opts qo = {.device = "cuda", .threads = threads};
	struct rq_quantizer *q = NULL;
	struct rq_pool *pool = NULL;
	struct rq_err err;
	memset(&err, 0, sizeof err);
	if ((rc = rq_quantizer_open(&qo, &q, &err)) != 0)
		return cli_fail(1, "bench quant", "--device cuda: %s", err.msg);
	uint8_t *og = malloc(sz), *oc = malloc(sz);
	if (!og || !oc || rq_pool_create(threads, &pool) != 0) {
		rc = cli_fail(1, "bench quant", "out of memory");
		goto out;
	}
	struct rq_smod mg = {w, RQ_SRC_BF16, rows, cols, og}, mc = {w, RQ_SRC_BF16, rows, cols, oc};
	struct rq_quantizer_stats s0, s1;
	double tg = 1e30, tc = 1e30;
	rq_quantizer_get_stats(q, &s0);
	for (int i = 0; i < reps; i++) {
		double t0 = bench_now();
		rc = rq_scheme_quantize_obs(sc, RQ_RECIPE_BF16, o, &mc, 1, &bad, pool);
		double t1 = bench_now();
		if (!rc)
			rc = rq_quantizer_run_scheme(q, sc, RQ_RECIPE_BF16, o, &mg, 1, &bad);
		double t2 = bench_now();
		if (rc) {
			rc = cli_fail(1, "bench quant", "--observer %s: the job failed (%d)",
			              rq_observer_name(o), rc);
			goto out;
		}
		tc = t1 - t0 < tc ? t1 - t0 : tc;
		tg = t2 - t1 < tg ? t2 - t1 : tg;
	}
	rq_quantizer_get_stats(q, &s1);
	int on_gpu = s1.gpu_jobs - s0.gpu_jobs == (unsigned long long)reps;
	int same_b = !memcmp(og, oc, sz);
	char why[512];
	rq_quantizer_reason(q, why, sizeof why);
	printf("%zux%zu %s observer %s on GPU+CPU %9.3f ms %8.3f GB/s, CPU job %9.3f ms (%d threads): "
	       "x%.2f; the search on the GPU: %s%s%s; same bytes: %s\n", rows, cols,
	       rq_scheme_name(sc), rq_observer_name(o), tg * 1e3, rows * cols * 2.0 / tg / 1e9,
	       tc * 1e3, rq_pool_size(pool), tc / tg, on_gpu ? "yes" : "no", why[0] ? " " : "",
	       why, same_b ? "yes" : "NO");
	rc = !same_b ? 1 : !on_gpu ? 2 : 0;
	if (!same_b)
		fprintf(stderr, "requantfs bench quant: GPU BYTES DIFFER FROM THE CPU\n");
out:
	free(og);
	free(oc);
	rq_pool_destroy(pool);
	rq_quantizer_close(q);
	return rc;
}
