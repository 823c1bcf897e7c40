/* bench_mount.c — `requantfs bench mount`: reads through a real mount of a
 * --real-dims mkckpt checkpoint against baselines measured in the same run:
 *
 *   (a) cold: every file read through a fresh mount with an empty cache
 *       (quantizing as it goes) vs `export` of the checkpoint (in-process,
 *       same library); and one requantized shard alone, in GB/s
 *   (b) warm cache: the shard read sequentially through a fresh mount vs the
 *       exported file read natively, with backing files evicted from the page
 *       cache, with them in the page cache, and with the mount's own page
 *       cache warm
 *   (c) random 1 MiB pread and mmap fault-in (random page order) through a
 *       fresh mount vs the exported file natively (page cache warm)
 *   (d) vLLM's lazy loader: several processes at once each mmap every shard
 *       and touch every tensor in name order (page by page), through a fresh
 *       mount vs the same on the export, backing files evicted first
 *   (b)-(d) twice: with passthrough (auto: the cache warmed and its shards
 *       materialized by `warm`) and with --passthrough off (the copy path,
 *       its own cache warmed by `warm`)
 *
 * The mount is the product itself (this executable's `mount`/`umount`);
 * "cold" means posix_fadvise(DONTNEED) on the files involved, not a global
 * cache drop. */
#include "tools/bench.h"
#include "tools/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/err.h"
#include "fs/export.h"
#include "fs/plan.h"
#include "fs/qrun.h"
#include "fs/st.h"

#define CHUNK (1u << 20)

struct bm {
	char work[4096], src[4200], cal[4200], exp[4200], mnt[4200], cache[4200], log[4200];
	char cache_pt[4200], cache_off[4200];
	const char *device;
	const char *pt;           /* --passthrough of the mounts made now */
	int procs;                /* (d): loader processes at once */
	int reps;
	unsigned readahead;
	uint8_t *buf;
};

/* Runs this executable with args; output goes to the bench log. */
static int run_self(struct bm *b, char *const args[])
{
	pid_t p = fork();
	if (p < 0)
		return -errno;
	if (p == 0) {
		int fd = open(b->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv("/proc/self/exe", args);
		_exit(127);
	}
	int st;
	if (waitpid(p, &st, 0) < 0)
		return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int drop_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	if (flag != FTW_F)
		return 0;
	int fd = open(path, O_RDONLY);
	if (fd >= 0) {
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	return 0;
}

/* Evicts every file under path from the page cache. */
static void drop(const char *path)
{
	nftw(path, drop_one, 16, FTW_PHYS);
}

static int warm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	if (flag != FTW_F)
		return 0;
	static uint8_t buf[1 << 16];
	int fd = open(path, O_RDONLY);
	if (fd >= 0) {
		while (read(fd, buf, sizeof buf) > 0)
			;
		close(fd);
	}
	return 0;
}

/* Reads every file under path into the page cache. */
static void warm(const char *path)
{
	nftw(path, warm_one, 16, FTW_PHYS);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	remove(path);
	return 0;
}

static void rm_rf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int do_mount(struct bm *b)
{
	char ra[16];
	snprintf(ra, sizeof ra, "%u", b->readahead);
	mkdir(b->mnt, 0755);
	char *args[] = {"requantfs", "mount", b->src, b->mnt, "--calib", b->cal, "--cache", b->cache,
	                "--device", (char *)b->device, "--readahead", ra, "--log", b->log,
	                "--passthrough", (char *)(b->pt ? b->pt : "auto"), NULL};
	return run_self(b, args);
}

static void do_umount(struct bm *b)
{
	char *args[] = {"requantfs", "umount", b->mnt, NULL};
	run_self(b, args);
}

static int do_warm(struct bm *b)
{
	char *args[] = {"requantfs", "warm", b->mnt, NULL};
	return run_self(b, args);
}

/* (d) one loader: every *.safetensors of dir in name order, mmap'd, each
 * tensor touched page by page in tensor-name order (what vLLM's lazy
 * safetensors loading does to the page cache). Bytes touched, or -1. */
static int cmp_tname(const void *a, const void *b)
{
	return strcmp((*(const struct st_tensor *const *)a)->name,
	              (*(const struct st_tensor *const *)b)->name);
}

static int64_t lazy_load(const char *dir, const struct rq_plan *p)
{
	int64_t total = 0;
	volatile uint8_t sink = 0;
	for (size_t i = 0; i < p->nfiles; i++) {
		const char *name = p->files[i].name;
		size_t l = strlen(name);
		if (l < 12 || strcmp(name + l - 12, ".safetensors"))
			continue;
		char path[8400];
		snprintf(path, sizeof path, "%s/%s", dir, name);
		struct st_header *h = NULL;
		struct rq_err e = {0};
		int fd = open(path, O_RDONLY);
		if (fd < 0 || st_parse_fd(fd, path, &h, &e)) {
			if (fd >= 0)
				close(fd);
			return -1;
		}
		const uint8_t *m = mmap(NULL, h->file_size, PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		const struct st_tensor **ord = malloc(h->n * sizeof *ord);
		if (m == MAP_FAILED || !ord) {
			free(ord);
			st_header_free(h);
			return -1;
		}
		for (size_t t = 0; t < h->n; t++)
			ord[t] = &h->t[t];
		qsort(ord, h->n, sizeof *ord, cmp_tname);
		for (size_t t = 0; t < h->n; t++) {
			const uint8_t *a = m + h->data_start + ord[t]->begin;
			uint64_t len = ord[t]->end - ord[t]->begin;
			for (uint64_t o = 0; o < len; o += 4096)
				sink ^= a[o];
			total += (int64_t)len;
		}
		munmap((void *)m, h->file_size);
		free(ord);
		st_header_free(h);
	}
	(void)sink;
	return total;
}

/* (d): b->procs loaders at once over dir: seconds for all, -1 on error. */
static double lazy_many(struct bm *b, const char *dir, const struct rq_plan *p, uint64_t *bytes)
{
	pid_t kids[64];
	int n = b->procs < 64 ? b->procs : 64;
	double t = bench_now();
	for (int k = 0; k < n; k++) {
		kids[k] = fork();
		if (kids[k] == 0)
			_exit(lazy_load(dir, p) < 0 ? 1 : 0);
	}
	int bad = 0;
	for (int k = 0; k < n; k++) {
		int st;
		if (kids[k] < 0 || waitpid(kids[k], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			bad = 1;
	}
	t = bench_now() - t;
	if (bytes)
		*bytes = 0;
	for (size_t i = 0; bytes && i < p->nfiles; i++)
		if (strstr(p->files[i].name, ".safetensors"))
			*bytes += p->files[i].size * (uint64_t)n;
	return bad ? -1 : t;
}

/* Sequential read of a file with CHUNK reads: seconds, -1 on error. */
static double read_seq(struct bm *b, const char *path, uint64_t *bytes)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	double t = bench_now();
	ssize_t r;
	uint64_t n = 0;
	while ((r = read(fd, b->buf, CHUNK)) > 0)
		n += (uint64_t)r;
	t = bench_now() - t;
	close(fd);
	if (bytes)
		*bytes = n;
	return r < 0 ? -1 : t;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* count random CHUNK preads: seconds. */
static double read_rand(struct bm *b, const char *path, uint64_t size, int count)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0 || size <= CHUNK)
		return -1;
	uint64_t s = 88172645463325252ull;
	double t = bench_now();
	for (int i = 0; i < count; i++)
		if (pread(fd, b->buf, CHUNK, (off_t)(rnd(&s) % (size - CHUNK))) != CHUNK) {
			close(fd);
			return -1;
		}
	t = bench_now() - t;
	close(fd);
	return t;
}

/* mmap the file and touch every page once, in random order: seconds. */
static double mmap_fault(const char *path, uint64_t size)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	const uint8_t *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return -1;
	size_t np = (size + 4095) / 4096;
	uint32_t *ord = malloc(np * sizeof *ord);
	if (!ord) {
		munmap((void *)p, size);
		return -1;
	}
	uint64_t s = 2463534242ull;
	for (size_t i = 0; i < np; i++)
		ord[i] = (uint32_t)i;
	for (size_t i = np - 1; i > 0; i--) {
		size_t j = rnd(&s) % (i + 1);
		uint32_t t = ord[i];
		ord[i] = ord[j];
		ord[j] = t;
	}
	volatile uint8_t sink = 0;
	double t = bench_now();
	for (size_t i = 0; i < np; i++)
		sink ^= p[(size_t)ord[i] * 4096];
	t = bench_now() - t;
	(void)sink;
	munmap((void *)p, size);
	free(ord);
	return t;
}

static void row(const char *what, double mount, double base, const char *unit, int higher_better,
                const char *target)
{
	double ratio = mount > 0 && base > 0 ? (higher_better ? mount / base : base / mount) : 0;
	printf("  %-46s %9.3f %-4s %9.3f %-4s %6.2f   %s\n", what, mount, unit, base, unit, ratio,
	       target);
}

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs bench mount [--dir WORK] [--experts N] [--device D] [--reps N]\n"
	"                             [--readahead KB] [--procs N] [--keep]\n\n"
	"Makes a --real-dims checkpoint with mkckpt in WORK (reused if WORK/src exists),\n"
	"then times reads through real mounts against export and native reads of the\n"
	"exported files (ratios: >= 1 means the mount is as fast as the baseline).\n"
	"  --dir WORK      work directory (default: a new one under $TMPDIR or /var/tmp,\n"
	"                  removed at the end unless --keep)\n"
	"  --experts N     routed experts per layer in the checkpoint (default 8)\n"
	"  --device D      quantizer device for export and mount (default auto)\n"
	"  --reps N        repetitions of the cheap measurements, best kept (default 3)\n"
	"  --readahead KB  the mount's --readahead (default 8192)\n"
	"  --procs N       (d): loader processes at once (default 4)\n");
}

int bench_mount(int argc, char **argv)
{
	static const struct option lo[] = {
		{"dir", required_argument, 0, 'd'}, {"experts", required_argument, 0, 'e'},
		{"device", required_argument, 0, 'D'}, {"reps", required_argument, 0, 'r'},
		{"readahead", required_argument, 0, 'a'}, {"keep", no_argument, 0, 'k'},
		{"procs", required_argument, 0, 'P'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	struct bm b = {.device = "auto", .reps = 3, .readahead = 8192, .procs = 4};
	const char *dir = NULL;
	int experts = 8, keep = 0, c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'h': usage(stdout); return 0;
		case 'd': dir = optarg; break;
		case 'e': experts = atoi(optarg); break;
		case 'D': b.device = optarg; break;
		case 'r': b.reps = atoi(optarg); break;
		case 'a': b.readahead = (unsigned)atoi(optarg); break;
		case 'k': keep = 1; break;
		case 'P': b.procs = atoi(optarg); break;
		default:
			usage(stderr);
			return cli_fail(2, "bench", "mount: unknown option '%s'", argv[optind - 1]);
		}
	}
	if (experts < 1 || b.reps < 1 || b.procs < 1 || b.procs > 64 || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (dir) {
		snprintf(b.work, sizeof b.work, "%s", dir);
		mkdir(b.work, 0755);
		keep = 1;
	} else {
		const char *t = getenv("TMPDIR");
		snprintf(b.work, sizeof b.work, "%s/rq-bench-mount-XXXXXX", t && *t ? t : "/var/tmp");
		if (!mkdtemp(b.work))
			return cli_fail(1, "bench", "mount: mkdtemp %s: %s", b.work, strerror(errno));
	}
	snprintf(b.src, sizeof b.src, "%s/src", b.work);
	snprintf(b.cal, sizeof b.cal, "%s/cal", b.work);
	snprintf(b.exp, sizeof b.exp, "%s/export", b.work);
	snprintf(b.mnt, sizeof b.mnt, "%s/mnt", b.work);
	snprintf(b.cache, sizeof b.cache, "%s/cache", b.work);
	snprintf(b.cache_pt, sizeof b.cache_pt, "%s/cache-pt", b.work);
	snprintf(b.cache_off, sizeof b.cache_off, "%s/cache-off", b.work);
	snprintf(b.log, sizeof b.log, "%s/bench.log", b.work);
	b.buf = malloc(CHUNK);
	if (!b.buf)
		return cli_fail(1, "bench", "out of memory");

	int rc = 1;
	struct rq_plan *p = NULL;
	struct rq_quantizer *q = NULL;
	struct rq_err err = {0};
	struct stat st;
	if (stat(b.src, &st) || stat(b.cal, &st)) {
		char ex[16];
		snprintf(ex, sizeof ex, "%d", experts);
		char *args[] = {"requantfs", "mkckpt", b.src, "--calib-out", b.cal, "--real-dims",
		                "--experts", ex, NULL};
		fprintf(stderr, "bench mount: making a --real-dims checkpoint (%d experts) in %s\n",
		        experts, b.src);
		if (run_self(&b, args)) {
			cli_fail(1, "bench", "mount: mkckpt failed (see %s)", b.log);
			goto out;
		}
	}
	struct rq_plan_opts po = {.src = b.src, .calib = b.cal};
	if (rq_plan_build(&po, &p, &err)) {
		cli_fail(1, "bench", "mount: %s", err.msg);
		goto out;
	}
	/* the requantized shard with the most quantized bytes */
	long shard = -1;
	uint64_t best = 0, qin = 0;
	for (size_t j = 0; j < p->njobs; j++)
		qin += p->jobs[j].in_size;
	for (size_t i = 0; i < p->nfiles; i++) {
		uint64_t jb = 0;
		for (size_t k = 0; k < p->files[i].nseg; k++)
			if (p->files[i].seg[k].kind == RQ_SEG_JOB)
				jb += p->files[i].seg[k].len;
		if (jb > best) {
			best = jb;
			shard = (long)i;
		}
	}
	if (shard < 0) {
		cli_fail(1, "bench", "mount: the checkpoint has no requantized shard");
		goto out;
	}
	const char *sname = p->files[shard].name;
	uint64_t ssize = p->files[shard].size;
	const char *sfile = p->srcs[p->files[shard].src].path;   /* its SRC file */
	char mpath[8400], epath[8400];
	snprintf(mpath, sizeof mpath, "%s/%s", b.mnt, sname);
	snprintf(epath, sizeof epath, "%s/%s", b.exp, sname);

	/* (a) export, cold SRC */
	struct rq_quantizer_opts qo = {.device = b.device};
	if (rq_quantizer_open(&qo, &q, &err)) {
		cli_fail(1, "bench", "mount: %s", err.msg);
		goto out;
	}
	printf("bench mount: %s: %zu files, %.2f GB; %zu modules requantized (%.2f GB BF16) in %zu "
	       "jobs; quantizer %s\n", b.src, p->nfiles, p->total_size / 1e9, p->nmods, qin / 1e9,
	       p->njobs, rq_quantizer_device(q));
	printf("  shard %s: %.1f MB, %.1f MB of it quantized\n\n", sname, ssize / 1e6, best / 1e6);
	rm_rf(b.exp);
	drop(b.src);
	double t_exp = bench_now();
	if (rq_export(p, q, b.exp, NULL, NULL, &err)) {
		cli_fail(1, "bench", "mount: export: %s", err.msg);
		goto out;
	}
	t_exp = bench_now() - t_exp;

	/* (a) export of the shard alone: the same plan restricted to that file */
	char eshard[4300];
	snprintf(eshard, sizeof eshard, "%s/export-shard", b.work);
	struct rq_plan one = *p;
	one.files = &p->files[shard];
	one.nfiles = 1;
	double t_exp1 = 1e30, t;
	for (int r = 0; r < b.reps; r++) {
		rm_rf(eshard);
		drop(b.src);
		t = bench_now();
		if (rq_export(&one, q, eshard, NULL, NULL, &err)) {
			cli_fail(1, "bench", "mount: export of %s: %s", sname, err.msg);
			goto out;
		}
		t = bench_now() - t;
		if (t < t_exp1)
			t_exp1 = t;
	}
	rm_rf(eshard);

	/* (a) cold read of everything through a fresh mount, empty cache */
	rm_rf(b.cache);
	drop(b.src);
	if (do_mount(&b)) {
		cli_fail(1, "bench", "mount: mount failed (see %s)", b.log);
		goto out;
	}
	double t_all = bench_now();
	for (size_t i = 0; i < p->nfiles; i++) {
		char fp[8400];
		snprintf(fp, sizeof fp, "%s/%s", b.mnt, p->files[i].name);
		if (read_seq(&b, fp, NULL) < 0) {
			cli_fail(1, "bench", "mount: reading %s failed", fp);
			do_umount(&b);
			goto out;
		}
	}
	t_all = bench_now() - t_all;
	do_umount(&b);
	/* cold read of the shard alone */
	double t_shard = 1e30;
	for (int r = 0; r < b.reps; r++) {
		rm_rf(b.cache);
		drop(b.src);
		do_mount(&b);
		if ((t = read_seq(&b, mpath, NULL)) > 0 && t < t_shard)
			t_shard = t;
		do_umount(&b);
	}
	/* Two warm caches: one materialized by a passthrough mount's warm, one
	 * filled by a --passthrough off mount's warm (job entries). */
	const char *modes[2] = {"auto", "off"};
	char *caches[2] = {b.cache_pt, b.cache_off};
	for (int k = 0; k < 2; k++) {
		snprintf(b.cache, sizeof b.cache, "%s", caches[k]);
		b.pt = modes[k];
		rm_rf(b.cache);
		if (do_mount(&b) || do_warm(&b)) {
			do_umount(&b);
			cli_fail(1, "bench", "mount: warming the %s cache failed (see %s)", modes[k], b.log);
			goto out;
		}
		do_umount(&b);
	}

	/* native baselines */
	double nat_cold = 1e30, nat_warm = 1e30, nat_rand = 1e30, nat_mm = 1e30, nat_lazy = 1e30;
	int nr = 256;
	uint64_t lazy_bytes = 0;
	for (int r = 0; r < b.reps; r++) {
		drop(epath);
		if ((t = read_seq(&b, epath, NULL)) > 0 && t < nat_cold)
			nat_cold = t;
		if ((t = read_seq(&b, epath, NULL)) > 0 && t < nat_warm)
			nat_warm = t;
		if ((t = read_rand(&b, epath, ssize, nr)) > 0 && t < nat_rand)
			nat_rand = t;
		if ((t = mmap_fault(epath, ssize)) > 0 && t < nat_mm)
			nat_mm = t;
		drop(b.exp);
		if ((t = lazy_many(&b, b.exp, p, &lazy_bytes)) > 0 && t < nat_lazy)
			nat_lazy = t;
	}

	/* (b)-(d) through the mount, with passthrough and without */
	double m_cold[2], m_bw[2], m_pc[2], m_rand[2], m_mm[2], m_lazy[2];
	for (int k = 0; k < 2; k++) {
		snprintf(b.cache, sizeof b.cache, "%s", caches[k]);
		b.pt = modes[k];
		m_cold[k] = m_bw[k] = m_pc[k] = m_rand[k] = m_mm[k] = m_lazy[k] = 1e30;
		for (int r = 0; r < b.reps; r++) {
			drop(b.src);
			drop(b.cache);
			do_mount(&b);
			if ((t = read_seq(&b, mpath, NULL)) > 0 && t < m_cold[k])
				m_cold[k] = t;
			if ((t = read_seq(&b, mpath, NULL)) > 0 && t < m_pc[k])
				m_pc[k] = t;
			do_umount(&b);
			/* the daemon evicts what it served: bring the backing files back */
			warm(sfile);
			warm(b.cache);
			do_mount(&b);
			if ((t = read_seq(&b, mpath, NULL)) > 0 && t < m_bw[k])
				m_bw[k] = t;
			do_umount(&b);
			warm(sfile);
			warm(b.cache);
			do_mount(&b);
			if ((t = read_rand(&b, mpath, ssize, nr)) > 0 && t < m_rand[k])
				m_rand[k] = t;
			do_umount(&b);
			warm(sfile);
			warm(b.cache);
			do_mount(&b);
			if ((t = mmap_fault(mpath, ssize)) > 0 && t < m_mm[k])
				m_mm[k] = t;
			do_umount(&b);
			drop(b.src);
			drop(b.cache);
			do_mount(&b);
			if ((t = lazy_many(&b, b.mnt, p, NULL)) > 0 && t < m_lazy[k])
				m_lazy[k] = t;
			do_umount(&b);
		}
	}

	double gb = ssize / 1e9, rgb = (double)nr * CHUNK / 1e9, lgb = lazy_bytes / 1e9;
	printf("  %-46s %14s %14s %6s   %s\n", "what", "mount", "baseline", "ratio", "target");
	row("(a) cold: all files via mount vs export", t_all, t_exp, "s", 0, ">= 0.9");
	row("(a) cold: the shard via mount vs its export", t_shard, t_exp1, "s", 0, ">= 0.9");
	for (int k = 0; k < 2; k++) {
		printf("  -- warm cache, --passthrough %s%s\n", modes[k],
		       k ? " (the copy path)" : " (shards materialized by warm)");
		row("(b) backing evicted, vs native", gb / m_cold[k], gb / nat_cold, "GB/s", 1,
		    k ? "" : ">= 0.95");
		row("(b) backing in page cache", gb / m_bw[k], gb / nat_warm, "GB/s", 1, "");
		row("(b') second read (page cache warm) vs native warm", gb / m_pc[k], gb / nat_warm,
		    "GB/s", 1, k ? "" : ">= 0.95");
		row("(c) random 1 MiB pread vs native, warm", rgb / m_rand[k], rgb / nat_rand, "GB/s",
		    1, k ? "" : ">= 0.9");
		row("(c) mmap fault-in, random pages, warm", gb / m_mm[k], gb / nat_mm, "GB/s", 1, "");
		char what[64];
		snprintf(what, sizeof what, "(d) vLLM lazy: %d procs mmap, name order", b.procs);
		row(what, lgb / m_lazy[k], lgb / nat_lazy, "GB/s", 1, k ? "" : ">= 0.9");
	}
	printf("\n  baselines: export = in-process rq_export of the checkpoint / of the shard alone,\n"
	       "  SRC evicted from the page cache first;\n"
	       "  native = reads of the exported files; warm = backing files in the page cache,\n"
	       "  the mount's own page cache empty (fresh mount); (d) evicts SRC, cache and export\n"
	       "  first; best of %d; log in %s\n", b.reps, b.log);
	rc = 0;
out:
	rq_quantizer_close(q);
	rq_plan_free(p);
	free(b.buf);
	if (!keep)
		rm_rf(b.work);
	return rc;
}
