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
 * cache drop.
 *
 * --scheme S|all: (a) only, for the data-free schemes on a --dense
 * checkpoint (bench_mount_scheme.c). The harness under all three forms
 * (mount, umount, eviction, the (a) measurement) is bench_mount_harness.c. */
#include "tools/bench/bench.h"
#include "tools/bench/bench_mount_int.h"
#include "cli/cli.h"

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
#include "plan/plan.h"
#include "qdev/qdev.h"
#include "st/st.h"

/* Every page cache (the mount's own included): drop_caches as root, else
 * each file of the work directory. */
static void drop_all(struct bm *b)
{
	sync();
	FILE *f = fopen("/proc/sys/vm/drop_caches", "we");
	b->can_drop = f && fputs("3\n", f) >= 0;
	if (f)
		fclose(f);
	if (!b->can_drop)
		bm_drop(b->work);
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

static int do_warm(struct bm *b)
{
	char *args[] = {"requantfs", "warm", b->mnt, NULL};
	return bm_run_self(b, args);
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
	"                             [--readahead KB] [--procs N] [--threads N] [--keep]\n"
	"       requantfs bench mount --scheme S|all [--dir WORK] [--experts N] [--device D]\n"
	"                             [--threads N] [--reps N] [--readahead KB] [--keep]\n\n"
	"Makes a --real-dims checkpoint with mkckpt in WORK (reused if WORK/src exists),\n"
	"then times reads through real mounts against export and native reads of the\n"
	"exported files (ratios: >= 1 means the mount is as fast as the baseline).\n"
	"  --dir WORK      work directory (default: a new one under $TMPDIR or /var/tmp,\n"
	"                  removed at the end unless --keep)\n"
	"  --experts N     routed experts per layer in the checkpoint (default 8; with\n"
	"                  --scheme 32, mkckpt's --real-dims default)\n"
	"  --device D      quantizer device for export and mount (default auto)\n"
	"  --reps N        repetitions of the cheap measurements, best kept (default 3)\n"
	"  --readahead KB  the mount's --readahead (default 8192)\n"
	"  --procs N       (d): loader processes at once (default 4)\n"
	"  --threads N     CPU quantizer threads of export and mount (default: all)\n"
	"  --scheme S      nvfp4a16, fp8-dynamic, w8a16, w4a16 or all: instead of the\n"
	"                  above, (a) only, on a `mkckpt --real-dims --dense` checkpoint\n"
	"                  (WORK/src-dense) mounted and exported with --scheme S, each\n"
	"                  scheme against its own export; a table with the >= 0.9 bar\n"
	"  --remote        instead: an hf:// mount of the checkpoint (default 2 experts)\n"
	"                  served by a local HTTP server with the hub's layout: cold\n"
	"                  reads vs curl of the SRC files from the same server into\n"
	"                  files in WORK (bar >= 0.9; curl to /dev/null shown too;\n"
	"                  mount and curl alternate which goes first), warm (after\n"
	"                  `warm`, one mount kept mounted and settled) vs native reads\n"
	"                  of the export in 4 x --reps pairs of alternating order,\n"
	"                  page caches dropped (bar >= 0.95) and warm; the first read\n"
	"                  after mounting (shards verified) and the FUSE reads that\n"
	"                  reach the daemon are printed too\n");
}

/* Figures, seconds (best of reps); [k]: 0 passthrough auto, 1 off. */
struct res {
	struct bm_cold a;
	double nat_cold, nat_warm, nat_rand, nat_mm, nat_lazy;
	uint64_t lazy_bytes;
	double first[2], cold[2], bw[2], pc[2], rand[2], mm[2], lazy[2];
};

static const char *const modes[2] = {"auto", "off"};
#define NRAND 256

/* Options into b; -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, struct bm *b, const char **dir, int *experts,
                      int *keep, const char **scheme, int *remote)
{
	static const struct option lo[] = {
		{"dir", required_argument, 0, 'd'}, {"experts", required_argument, 0, 'e'},
		{"device", required_argument, 0, 'D'}, {"reps", required_argument, 0, 'r'},
		{"readahead", required_argument, 0, 'a'}, {"keep", no_argument, 0, 'k'},
		{"procs", required_argument, 0, 'P'}, {"scheme", required_argument, 0, 'S'},
		{"threads", required_argument, 0, 't'}, {"remote", no_argument, 0, 'R'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'h': usage(stdout); return 0;
		case 'd': *dir = optarg; break;
		case 'e': *experts = atoi(optarg); break;
		case 'D': b->device = optarg; break;
		case 'r': b->reps = atoi(optarg); break;
		case 'a': b->readahead = (unsigned)atoi(optarg); break;
		case 'k': *keep = 1; break;
		case 'P': b->procs = atoi(optarg); break;
		case 'S': *scheme = optarg; break;
		case 't': b->threads = atoi(optarg); break;
		case 'R': *remote = 1; break;
		default:
			usage(stderr);
			return cli_fail(2, "bench", "mount: unknown option '%s'", argv[optind - 1]);
		}
	}
	if (*experts < 0 || b->reps < 1 || b->procs < 1 || b->procs > 64 || optind != argc) {
		usage(stderr);
		return 2;
	}
	return -1;
}

/* The work directory and every path in it; -1 to go on, else the exit code. */
static int set_paths(struct bm *b, const char *dir, int *keep)
{
	if (dir) {
		snprintf(b->work, sizeof b->work, "%s", dir);
		mkdir(b->work, 0755);
		*keep = 1;
	} else {
		const char *t = getenv("TMPDIR");
		snprintf(b->work, sizeof b->work, "%s/rq-bench-mount-XXXXXX", t && *t ? t : "/var/tmp");
		if (!mkdtemp(b->work))
			return cli_fail(1, "bench", "mount: mkdtemp %s: %s", b->work, strerror(errno));
	}
	snprintf(b->src, sizeof b->src, "%s/src", b->work);
	snprintf(b->cal, sizeof b->cal, "%s/cal", b->work);
	snprintf(b->exp, sizeof b->exp, "%s/export", b->work);
	snprintf(b->mnt, sizeof b->mnt, "%s/mnt", b->work);
	snprintf(b->cache, sizeof b->cache, "%s/cache", b->work);
	snprintf(b->cache_pt, sizeof b->cache_pt, "%s/cache-pt", b->work);
	snprintf(b->cache_off, sizeof b->cache_off, "%s/cache-off", b->work);
	snprintf(b->log, sizeof b->log, "%s/bench.log", b->work);
	return -1;
}

/* mkckpt --real-dims into WORK/src unless it is there; then its plan. */
static int make_plan(struct bm *b, int experts, struct rq_plan **p)
{
	struct stat st;
	if (stat(b->src, &st) || stat(b->cal, &st)) {
		char ex[16];
		snprintf(ex, sizeof ex, "%d", experts);
		char *args[] = {"requantfs", "mkckpt", b->src, "--calib-out", b->cal, "--real-dims",
		                "--experts", ex, NULL};
		fprintf(stderr, "bench mount: making a --real-dims checkpoint (%d experts) in %s\n",
		        experts, b->src);
		if (bm_run_self(b, args))
			return cli_fail(1, "bench", "mount: mkckpt failed (see %s)", b->log);
	}
	struct rq_plan_opts po = {.src = b->src, .calib = b->cal};
	struct rq_err err = {0};
	if (rq_plan_build(&po, p, &err))
		return cli_fail(1, "bench", "mount: %s", err.msg);
	return 0;
}

/* Two warm caches: one materialized by a passthrough mount's warm, one
 * filled by a --passthrough off mount's warm (job entries). */
static int warm_caches(struct bm *b)
{
	char *caches[2] = {b->cache_pt, b->cache_off};
	for (int k = 0; k < 2; k++) {
		snprintf(b->cache, sizeof b->cache, "%s", caches[k]);
		b->pt = modes[k];
		bm_rm_rf(b->cache);
		if (bm_mount(b) || do_warm(b)) {
			bm_umount(b);
			return cli_fail(1, "bench", "mount: warming the %s cache failed (see %s)",
			                modes[k], b->log);
		}
		bm_umount(b);
	}
	return 0;
}

static void measure_native(struct bm *b, const struct rq_plan *p, const struct shard *sh,
                           struct res *r)
{
	r->nat_cold = r->nat_warm = r->nat_rand = r->nat_mm = r->nat_lazy = 1e30;
	for (int k = 0; k < b->reps; k++) {
		drop_all(b);
		bm_keep_min(&r->nat_cold, bm_read_seq(b, sh->epath, NULL));
		bm_keep_min(&r->nat_warm, bm_read_seq(b, sh->epath, NULL));
		bm_keep_min(&r->nat_rand, read_rand(b, sh->epath, sh->size, NRAND));
		bm_keep_min(&r->nat_mm, mmap_fault(sh->epath, sh->size));
		drop_all(b);
		bm_keep_min(&r->nat_lazy, lazy_many(b, b->exp, p, &r->lazy_bytes));
	}
}

/* (b)-(d) through a mount that stays mounted (as a served model's does:
 * vLLM restarts, the mount does not), warmed first so that its shards are
 * materialized and verified; "dropped" drops every page cache, the mount's
 * included. Then fresh mounts with the backing files cached. */
static void measure_mode(struct bm *b, int k, const struct rq_plan *p, const struct shard *sh,
                         struct res *r)
{
	snprintf(b->cache, sizeof b->cache, "%s", k ? b->cache_off : b->cache_pt);
	b->pt = modes[k];
	r->first[k] = r->cold[k] = r->bw[k] = r->pc[k] = r->rand[k] = r->mm[k] = r->lazy[k] = 1e30;
	for (int n = 0; n < b->reps; n++) {
		/* the first read after mounting: with passthrough it waits for the
		 * materialized shard's verification (hashed whole) */
		drop_all(b);
		bm_mount(b);
		bm_keep_min(&r->first[k], bm_read_seq(b, sh->mpath, NULL));
		do_warm(b);
		drop_all(b);
		bm_keep_min(&r->cold[k], bm_read_seq(b, sh->mpath, NULL));
		bm_keep_min(&r->pc[k], bm_read_seq(b, sh->mpath, NULL));
		bm_keep_min(&r->rand[k], read_rand(b, sh->mpath, sh->size, NRAND));
		drop_all(b);
		bm_keep_min(&r->lazy[k], lazy_many(b, b->mnt, p, NULL));
		bm_umount(b);
		for (int what = 0; what < 2; what++) {   /* the mount's own page cache empty */
			bm_mount(b);
			do_warm(b);
			warm(sh->srcpath);
			warm(b->cache);
			if (what == 0)
				bm_keep_min(&r->bw[k], bm_read_seq(b, sh->mpath, NULL));
			else
				bm_keep_min(&r->mm[k], mmap_fault(sh->mpath, sh->size));
			bm_umount(b);
		}
	}
}

static void print_results(const struct bm *b, const struct shard *sh, const struct res *r)
{
	double gb = sh->size / 1e9, rgb = (double)NRAND * CHUNK / 1e9, lgb = r->lazy_bytes / 1e9;
	printf("  %-46s %14s %14s %6s   %s\n", "what", "mount", "baseline", "ratio", "target");
	row("(a) cold: all files via mount vs export", r->a.t_all, r->a.t_exp, "s", 0, ">= 0.9");
	row("(a) cold: the shard via mount vs its export", r->a.t_shard, r->a.t_exp1, "s", 0, ">= 0.9");
	for (int k = 0; k < 2; k++) {
		printf("  -- warm cache, --passthrough %s%s\n", modes[k],
		       k ? " (the copy path)" : " (shards materialized by warm)");
		row("(b) first read after mounting, vs native cold", gb / r->first[k], gb / r->nat_cold,
		    "GB/s", 1, "");
		row("(b) page caches dropped, vs native", gb / r->cold[k], gb / r->nat_cold, "GB/s", 1,
		    k ? "" : ">= 0.95");
		row("(b) fresh mount, backing in page cache", gb / r->bw[k], gb / r->nat_warm, "GB/s",
		    1, "");
		row("(b') second read (page cache warm) vs native warm", gb / r->pc[k],
		    gb / r->nat_warm, "GB/s", 1, k ? "" : ">= 0.95");
		row("(c) random 1 MiB pread vs native, warm", rgb / r->rand[k], rgb / r->nat_rand,
		    "GB/s", 1, k ? "" : ">= 0.9");
		row("(c) mmap fault-in, random pages, fresh mount", gb / r->mm[k], gb / r->nat_mm,
		    "GB/s", 1, "");
		char what[64];
		snprintf(what, sizeof what, "(d) vLLM lazy: %d procs mmap, name order", b->procs);
		row(what, lgb / r->lazy[k], lgb / r->nat_lazy, "GB/s", 1, k ? "" : ">= 0.9");
	}
	printf("\n  baselines: export = in-process rq_export of the checkpoint / of the shard alone,\n"
	       "  SRC evicted from the page cache first; native = reads of the exported files.\n"
	       "  (b)-(d) on a warmed mount that stays mounted; \"dropped\" = every page cache\n"
	       "  dropped (%s); \"fresh mount\" = remounted, backing files in the page cache,\n"
	       "  the mount's own page cache empty. Best of %d; log in %s\n",
	       b->can_drop ? "drop_caches" : "posix_fadvise only: not root", b->reps, b->log);
}

int bench_mount(int argc, char **argv)
{
	struct bm b = {.device = "auto", .reps = 3, .readahead = 8192, .procs = 4};
	const char *dir = NULL, *scheme = NULL;
	int experts = 0, keep = 0, remote = 0;
	int rc = parse_args(argc, argv, &b, &dir, &experts, &keep, &scheme, &remote);
	if (rc >= 0)
		return rc;
	if ((rc = set_paths(&b, dir, &keep)) >= 0)
		return rc;
	if (!(b.buf = malloc(CHUNK)))
		return cli_fail(1, "bench", "out of memory");
	if (scheme || remote) {
		rc = remote ? bench_mount_remote(&b, experts) : bench_mount_scheme(&b, scheme, experts);
		free(b.buf);
		if (!keep)
			bm_rm_rf(b.work);
		return rc;
	}
	if (!experts)
		experts = 8;
	struct rq_plan *p = NULL;
	struct rq_quantizer *q = NULL;
	struct rq_err err = {0};
	struct shard sh;
	struct res r;
	memset(&r, 0, sizeof r);
	struct rq_quantizer_opts qo = {.device = b.device, .threads = b.threads};
	rc = 1;
	if (make_plan(&b, experts, &p) || bm_pick_shard(&b, p, &sh))
		goto out;
	if (rq_quantizer_open(&qo, &q, &err)) {
		cli_fail(1, "bench", "mount: %s", err.msg);
		goto out;
	}
	printf("bench mount: %s: %zu files, %.2f GB; %zu modules requantized (%.2f GB BF16) in %zu "
	       "jobs; quantizer %s\n", b.src, p->nfiles, p->total_size / 1e9, p->nmods,
	       sh.qin / 1e9, p->njobs, rq_quantizer_device(q));
	printf("  shard %s: %.1f MB, %.1f MB of it quantized\n\n", sh.name, sh.size / 1e6,
	       sh.qbytes / 1e6);
	if (bm_measure_cold(&b, p, q, &sh, &r.a) || warm_caches(&b))
		goto out;
	measure_native(&b, p, &sh, &r);
	measure_mode(&b, 0, p, &sh, &r);
	measure_mode(&b, 1, p, &sh, &r);
	print_results(&b, &sh, &r);
	rc = 0;
out:
	rq_quantizer_close(q);
	rq_plan_free(p);
	free(b.buf);
	if (!keep)
		bm_rm_rf(b.work);
	return rc;
}
