/* bench_export.c — `requantfs bench export`: export throughput of a
 * --real-dims checkpoint against `cp -r` of the same source in the same run
 * (both from a warm page cache, both writing to the same filesystem). */
#include "tools/bench/bench.h"
#include "cli/cli.h"
#include "base/err.h"
#include "offline/export.h"
#include "plan/plan.h"
#include "qdev/qdev.h"

#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs bench export [--dir WORK] [--experts N] [--threads N] [--device D] [--keep]\n\n"
	"Makes a --real-dims checkpoint (hidden 3072, expert width 1024) with mkckpt in WORK\n"
	"(default: a new directory under /var/tmp), then times, from a warm page cache:\n"
	"  cp -r SRC          the baseline: copying the same bytes\n"
	"  requantfs export   the same files with the BF16 experts requantized\n"
	"  export --link      only the files that differ written, the others linked to SRC\n"
	"and prints the throughputs, bytes written and ratios; then reads every file of the\n"
	"--link export and of the full export (warm page cache, best of 3, alternating) and\n"
	"prints their read throughputs and ratio (links must read at native speed).\n");
}

static int sh(const char *fmt, const char *a, const char *b)
{
	char cmd[16384];
	snprintf(cmd, sizeof cmd, fmt, a, b);
	return system(cmd);
}

/* Bytes/s of reading every file of dir (links followed) in 8 MiB reads. */
static double read_dir_bw(const char *dir, uint64_t *total)
{
	static char buf[8 << 20];
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	uint64_t bytes = 0;
	double t0 = bench_now();
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char path[2048];
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t r;
		while ((r = read(fd, buf, sizeof buf)) > 0)
			bytes += (uint64_t)r;
		close(fd);
	}
	double t = bench_now() - t0;
	closedir(d);
	*total = bytes;
	return t > 0 ? bytes / t : 0;
}

int bench_export(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, 0, 'd'}, {"experts", required_argument, 0, 'e'},
		{"threads", required_argument, 0, 't'}, {"device", required_argument, 0, 'D'},
		{"keep", no_argument, 0, 'k'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	char work[1024] = "", self[1024];
	const char *experts = "32";
	struct rq_quantizer_opts qo = {.device = "auto"};
	int keep = 0, c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': snprintf(work, sizeof work, "%s", optarg); break;
		case 'e': experts = optarg; break;
		case 't': qo.threads = atoi(optarg); break;
		case 'D': qo.device = optarg; break;
		case 'k': keep = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!work[0]) {
		snprintf(work, sizeof work, "/var/tmp/rq-bench-export-XXXXXX");
		if (!mkdtemp(work))
			return cli_fail(1, "bench export", "cannot create a work directory under /var/tmp");
	}
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return cli_fail(1, "bench export", "cannot find my own executable");
	self[n] = 0;
	char src[1100], cal[1100], cpdst[1100], dst[1100], lnk[1100], cmd[6000];
	snprintf(lnk, sizeof lnk, "%s/export-link", work);
	snprintf(src, sizeof src, "%s/src", work);
	snprintf(cal, sizeof cal, "%s/calib", work);
	snprintf(cpdst, sizeof cpdst, "%s/cp", work);
	snprintf(dst, sizeof dst, "%s/export", work);
	struct stat st;
	if (stat(src, &st) < 0) {
		fprintf(stderr, "bench export: making a --real-dims checkpoint with %s experts in %s\n",
		        experts, src);
		snprintf(cmd, sizeof cmd, "'%s' mkckpt '%s' --real-dims --experts %s --calib-out '%s' "
		         ">/dev/null", self, src, experts, cal);
		if (system(cmd))
			return cli_fail(1, "bench export", "mkckpt failed");
	}
	sh("rm -rf '%s' '%s'", cpdst, dst);
	sh("rm -rf '%s'%s", lnk, "");
	sh("cat '%s'/* > /dev/null%s", src, "");         /* warm page cache for both */

	struct rq_err err = {0};
	struct rq_plan_opts po = {.src = src, .calib = cal, .recipe = RQ_RECIPE_FP32};
	struct rq_plan *p;
	if (rq_plan_build(&po, &p, &err))
		return cli_fail(1, "bench export", "%s", err.msg);
	struct rq_quantizer *q;
	if (rq_quantizer_open(&qo, &q, &err)) {
		rq_plan_free(p);
		return cli_fail(1, "bench export", "%s", err.msg);
	}
	uint64_t src_bytes = 0, qin = 0;
	for (size_t i = 0; i < p->nsrcs; i++)
		src_bytes += p->srcs[i].size;
	for (size_t j = 0; j < p->njobs; j++)
		qin += p->jobs[j].in_size;

	double t0 = bench_now();
	int rc = sh("cp -r '%s' '%s' && sync", src, cpdst);
	double t_cp = bench_now() - t0;
	if (rc) {
		rq_quantizer_close(q);
		rq_plan_free(p);
		return cli_fail(1, "bench export", "cp failed");
	}
	t0 = bench_now();
	rc = rq_export(p, q, dst, NULL, NULL, &err);
	double t_ex = bench_now() - t0;
	struct rq_export_opts lo = {.link = RQ_LINK_SYMLINK};
	struct rq_export_stats ls = {0};
	double t_ln = 0;
	if (!rc) {
		sh("sync%s%s", "", "");
		t0 = bench_now();
		rc = rq_export(p, q, lnk, &lo, &ls, &err);
		sh("sync%s%s", "", "");
		t_ln = bench_now() - t0;
	}
	if (rc) {
		cli_fail(1, "bench export", "%s", err.msg);
	} else {
		printf("bench export: %s, %zu modules (%.2f GB BF16 requantized), device %s\n", src,
		       p->nmods, qin / 1e9, rq_quantizer_device(q));
		printf("  %-28s %8.2f s  %8.2f GB/s of SRC\n", "cp -r (baseline)", t_cp,
		       src_bytes / t_cp / 1e9);
		printf("  %-28s %8.2f s  %8.2f GB/s of SRC  (%.2f GB/s BF16 quantized)\n",
		       "requantfs export", t_ex, src_bytes / t_ex / 1e9, qin / t_ex / 1e9);
		printf("  %-28s %8.2f s  %8.2f GB written, %.2f GB linked (full export: %.2f GB)\n",
		       "requantfs export --link", t_ln, ls.bytes_written / 1e9, ls.bytes_linked / 1e9,
		       (ls.bytes_written + ls.bytes_linked) / 1e9);
		printf("  export / cp throughput ratio: %.2f; export --link / cp time ratio: %.2f\n",
		       t_cp / t_ex, t_ln / t_cp);
		double bl = 0, bf = 0;
		uint64_t nl = 0, nf = 0;
		for (int r = 0; r < 3; r++) {
			double a = read_dir_bw(lnk, &nl), b = read_dir_bw(dst, &nf);
			bl = a > bl ? a : bl;
			bf = b > bf ? b : bf;
		}
		printf("  reads, warm page cache: --link export %.2f GB/s, full export %.2f GB/s "
		       "(%.2f GB each): ratio %.3f%s\n", bl / 1e9, bf / 1e9, nf / 1e9, bf ? bl / bf : 0,
		       nl == nf ? "" : "  (BYTE COUNTS DIFFER)");
	}
	rq_quantizer_close(q);
	rq_plan_free(p);
	sh("rm -rf '%s' '%s'", cpdst, dst);
	sh("rm -rf '%s'%s", lnk, "");
	if (!keep)
		sh("rm -rf '%s'%s", work, "");
	return rc ? 1 : 0;
}
