/* bench_mount_scheme.c — `requantfs bench mount --scheme S|all`: issue 12's
 * bar "cold mount vs export >= 0.9 for each scheme".
 *
 * SRC is `mkckpt --real-dims --dense` (every tensor BF16, Laguna widths).
 * For each scheme, in the same run and with the same --device/--threads:
 * `export --scheme S` of the whole checkpoint (in-process rq_export, fresh
 * DST) against a cold read of every file of a fresh `mount --scheme S`
 * with an empty cache (quantizing as it goes); then the same for the shard
 * with the most quantized bytes alone. SRC is evicted from the page cache
 * before each; best of --reps (bench_mount_harness.c's bm_measure_cold, the
 * measurement the Laguna-fix bench makes). */
#include "tools/bench/bench.h"
#include "tools/bench/bench_mount_int.h"
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "plan/plan.h"
#include "qdev/qdev.h"
#include "quant/scheme.h"

#define BAR 0.9

static const enum rq_scheme all_schemes[] = {
	RQ_SCHEME_NVFP4A16, RQ_SCHEME_FP8_DYNAMIC, RQ_SCHEME_W8A16, RQ_SCHEME_W4A16,
};
#define NSCHEMES (sizeof all_schemes / sizeof all_schemes[0])

/* One scheme's figures. */
struct srow {
	enum rq_scheme s;
	struct bm_cold c;
	uint64_t total, shard_size, qin;
	size_t nfiles, njobs;
	char shard[256];
	double load0, load1;      /* 1-minute load average before and after */
};

static double loadavg1(void)
{
	double l = -1;
	FILE *f = fopen("/proc/loadavg", "re");
	if (f) {
		if (fscanf(f, "%lf", &l) != 1)
			l = -1;
		fclose(f);
	}
	return l;
}

/* S or "all" into list; the count, or 0 with the message printed. */
static size_t parse_schemes(const char *arg, enum rq_scheme *list)
{
	if (!strcmp(arg, "all")) {
		memcpy(list, all_schemes, sizeof all_schemes);
		return NSCHEMES;
	}
	if (rq_scheme_parse(arg, &list[0]) || list[0] == RQ_SCHEME_NVFP4 ||
	    list[0] == RQ_SCHEME_NVFP4_W4A4) {   /* W4A4 needs a calibration: not benched here */
		cli_fail(2, "bench", "mount: --scheme %s: expected nvfp4a16, fp8-dynamic, w8a16, "
		         "w4a16 or all (leave --scheme out for the Laguna fix)", arg);
		return 0;
	}
	return 1;
}

/* mkckpt --real-dims --dense into WORK/src-dense unless it is there. */
static int make_dense(struct bm *b, int experts)
{
	snprintf(b->src, sizeof b->src, "%s/src-dense", b->work);
	struct stat st;
	if (!stat(b->src, &st))
		return 0;
	char ex[16];
	snprintf(ex, sizeof ex, "%d", experts);
	char *args[] = {"requantfs", "mkckpt", b->src, "--real-dims", "--dense", "--experts", ex,
	                NULL};
	fprintf(stderr, "bench mount: making a --real-dims --dense checkpoint (%d experts) in %s\n",
	        experts, b->src);
	if (bm_run_self(b, args)) {
		bm_rm_rf(b->src);
		return cli_fail(1, "bench", "mount: mkckpt failed (see %s)", b->log);
	}
	return 0;
}

/* (a) for scheme r->s; 0, else the exit code with the message printed. */
static int one_scheme(struct bm *b, struct rq_quantizer *q, struct srow *r)
{
	struct rq_plan_opts po = {.src = b->src, .scheme = r->s,
	                          .recipe = rq_scheme_default_recipe(r->s)};
	struct rq_plan *p = NULL;
	struct rq_err err = {0};
	struct shard sh;
	if (rq_plan_build(&po, &p, &err))
		return cli_fail(1, "bench", "mount: --scheme %s: %s", rq_scheme_name(r->s), err.msg);
	int rc = bm_pick_shard(b, p, &sh);
	if (rc)
		goto out;
	r->total = p->total_size;
	r->nfiles = p->nfiles;
	r->njobs = p->njobs;
	r->qin = sh.qin;
	r->shard_size = sh.size;
	snprintf(r->shard, sizeof r->shard, "%s", sh.name);
	b->scheme = rq_scheme_name(r->s);
	r->load0 = loadavg1();
	printf("  %s: %zu files, %.2f GB; %zu modules (%.2f GB in) in %zu jobs; shard %s "
	       "%.1f MB (%.1f MB quantized); load %.2f\n", b->scheme, p->nfiles,
	       p->total_size / 1e9, p->nmods, sh.qin / 1e9, p->njobs, sh.name, sh.size / 1e6,
	       sh.qbytes / 1e6, r->load0);
	fflush(stdout);
	rc = bm_measure_cold(b, p, q, &sh, &r->c);
	r->load1 = loadavg1();
	bm_rm_rf(b->exp);
	bm_rm_rf(b->cache);
out:
	rq_plan_free(p);
	return rc;
}

static void print_table(const struct bm *b, const struct srow *r, size_t n, const char *dev)
{
	printf("\n  %-12s %-28s %9s %9s %6s  %-10s %s\n", "scheme", "what", "mount s", "export s",
	       "ratio", "bar >= 0.9", "CPU s: mount, export");
	int fails = 0;
	for (size_t i = 0; i < n; i++) {
		double ra = r[i].c.t_exp / r[i].c.t_all, rs = r[i].c.t_exp1 / r[i].c.t_shard;
		char what[300];
		snprintf(what, sizeof what, "all %zu files, %.2f GB", r[i].nfiles, r[i].total / 1e9);
		printf("  %-12s %-28s %9.3f %9.3f %6.3f  %-10s %6.2f %6.2f\n", rq_scheme_name(r[i].s),
		       what, r[i].c.t_all, r[i].c.t_exp, ra, ra >= BAR ? "PASS" : "FAIL",
		       r[i].c.c_all < 1e29 ? r[i].c.c_all : -1.0, r[i].c.c_exp);
		snprintf(what, sizeof what, "shard alone, %.1f MB", r[i].shard_size / 1e6);
		printf("  %-12s %-28s %9.3f %9.3f %6.3f  %s\n", "", what, r[i].c.t_shard,
		       r[i].c.t_exp1, rs, rs >= BAR ? "PASS" : "FAIL");
		fails += (ra < BAR) + (rs < BAR);
	}
	printf("\n  ratio = export s / mount s (>= 1: the mount's cold read is as fast as export).\n"
	       "  export = in-process rq_export --scheme S, fresh DST; mount = a fresh `mount\n"
	       "  --scheme S`, empty cache, every file read once in 1 MiB reads. SRC evicted from\n"
	       "  the page cache before each (posix_fadvise). CPU s: user + system of every\n"
	       "  thread, the mount's = the reader's + its daemon's (-1: not found), least of\n"
	       "  reps. Best of %d; quantizer %s, --threads %d (0 = all).\n"
	       "  1-min load average before-after:", b->reps, dev, b->threads);
	for (size_t i = 0; i < n; i++)
		printf(" %s %.2f-%.2f", rq_scheme_name(r[i].s), r[i].load0, r[i].load1);
	printf("\n  %s; log in %s\n", fails ? "some figures are under the bar" : "all pass",
	       b->log);
}

int bench_mount_scheme(struct bm *b, const char *scheme, int experts)
{
	enum rq_scheme list[NSCHEMES];
	size_t n = parse_schemes(scheme, list);
	if (!n)
		return 2;
	if (!experts)
		experts = 32;
	int rc = make_dense(b, experts);
	if (rc)
		return rc;
	struct rq_quantizer_opts qo = {.device = b->device, .threads = b->threads};
	struct rq_quantizer *q = NULL;
	struct rq_err err = {0};
	if (rq_quantizer_open(&qo, &q, &err))
		return cli_fail(1, "bench", "mount: %s", err.msg);
	printf("bench mount --scheme %s: %s (mkckpt --real-dims --dense, %d experts); quantizer "
	       "%s\n", scheme, b->src, experts, rq_quantizer_device(q));
	struct srow rows[NSCHEMES];
	memset(rows, 0, sizeof rows);
	size_t done = 0;
	for (; done < n; done++) {
		rows[done].s = list[done];
		if ((rc = one_scheme(b, q, &rows[done])))
			break;
	}
	if (done)
		print_table(b, rows, done, rq_quantizer_device(q));
	rq_quantizer_close(q);
	return rc;
}
