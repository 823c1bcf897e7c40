/* bench_engine.c — `requantfs bench engine`: CPU prefill and decode speed of
 * the engine on synthetic Laguna checkpoints (mkckpt), with the weight bytes
 * a decoded token reads turned into GB/s and set against memcpy bandwidth
 * measured in the same run. */
#include "tools/bench/bench.h"
#include "tools/bench/bench_engine_fmt.h"
#include "cli/cli.h"
#include "base/err.h"
#include "base/pool.h"
#include "engine/model/backend.h"
#include "engine/model/model.h"
#include "engine/model/sampler.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs bench engine [--real-dims] [--threads N] [--prompt-tokens N]\n"
	"                              [--decode-tokens N] [--model DIR [--formats LIST]] [--fast]\n\n"
	"Builds the tiny synthetic Laguna (requantfs mkckpt) in a temporary directory and\n"
	"measures CPU prefill and decode tokens/s; with --real-dims also a 4-layer stack at\n"
	"Laguna S 2.1's real widths. Decode reads every active weight once per token: that\n"
	"byte count times tokens/s is printed as GB/s next to memcpy's bandwidth and the\n"
	"all-threads read bandwidth, measured again before each of the 3 runs (best of all).\n"
	"  --threads N        CPU threads (default: all)\n"
	"  --prompt-tokens N  prompt length for prefill (default 128)\n"
	"  --decode-tokens N  greedy tokens to decode (default 32; 8 for --real-dims)\n"
	"  --model DIR        measure this checkpoint directory instead of synthetic ones\n"
	"  --formats LIST     with --model (BF16): also its Linears converted in memory to\n"
	"                     each format of LIST: bf16, nvfp4, fp8-channel, fp8-group,\n"
	"                     int8-group, int4-group, all (default) or none; a row each\n"
	"                     with weight GB/s and its ratio to the all-threads read\n"
	"  --fast             also time the fast mode (FMA kernels, not the oracle) on the\n"
	"                     same model, oracle and fast alternating in each round; a\n"
	"                     table of both with the fast/oracle ratios and the fast\n"
	"                     decode's weight GB/s and its ratio to the all-threads read\n"
	"  --device cuda[:N]  the CUDA engine instead (see `bench engine --device cuda --help`)\n");
}

static int make_ckpt(const char *dir, int real)
{
	char *args[] = {"mkckpt", (char *)dir, real ? "--real-dims" : NULL, NULL};
	return cli_run_self(args);
}

static void rm_rf(const char *dir)
{
	pid_t pid = fork();
	if (pid == 0) {
		execlp("rm", "rm", "-rf", "--", dir, (char *)NULL);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

/* The all-threads memory read baseline: every thread sums its slices of a
 * buffer far larger than the caches, as a decode step streams the weights. */
struct rd_ctx {
	const uint64_t *buf;
	size_t words_per_chunk;
	uint64_t sink[64];
};

static void read_chunks(void *ctx, size_t begin, size_t end, int worker)
{
	struct rd_ctx *c = ctx;
	uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
	for (size_t k = begin; k < end; k++) {
		const uint64_t *p = c->buf + k * c->words_per_chunk;
		for (size_t i = 0; i < c->words_per_chunk; i += 4) {
			a0 += p[i];
			a1 += p[i + 1];
			a2 += p[i + 2];
			a3 += p[i + 3];
		}
	}
	c->sink[worker & 63] += a0 + a1 + a2 + a3;
}

/* The read baseline's buffer, kept for the whole run: the baseline is
 * measured again next to each decode run (a shared machine's load drifts;
 * a ratio of figures taken minutes apart measures the drift), and the best
 * of all its measurements is the one reported. */
struct rd_buf {
	uint64_t *buf;
	size_t n, chunk;            /* n chunks of `chunk` bytes */
	double best;                /* bytes/s, best so far */
};

static int rd_open(struct rd_buf *r, size_t bytes)
{
	r->chunk = 1u << 20;
	r->n = bytes / r->chunk;
	r->best = 0;
	r->buf = malloc(r->n * r->chunk);
	if (!r->buf)
		return -ENOMEM;
	memset(r->buf, 1, r->n * r->chunk);
	return 0;
}

/* Reads the buffer with every thread of pool `reps` times; returns the best
 * so far (bytes/s). */
static double rd_measure(struct rd_buf *r, struct rq_pool *pool, int reps)
{
	struct rd_ctx c = {.buf = r->buf, .words_per_chunk = r->chunk / 8};
	for (int k = 0; k < reps; k++) {
		double t = bench_now();
		rq_pool_for(pool, r->n, 1, read_chunks, &c);
		t = bench_now() - t;
		if (t > 0 && r->n * r->chunk / t > r->best)
			r->best = r->n * r->chunk / t;
	}
	return r->best;
}

/* The largest CPU cache's size in bytes (sysfs), 0 when unknown: a model whose
 * weights/token fit in part stays in part cached from one token to the next,
 * and then decodes faster than the 512 MiB read baseline (x read > 1). */
static double llc_bytes(void)
{
	double best = 0;
	for (int i = 0; i < 8; i++) {
		char path[96], buf[32];
		snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		char unit = 0;
		double v = 0;
		if (fgets(buf, sizeof buf, f) && sscanf(buf, "%lf%c", &v, &unit) >= 1) {
			v *= unit == 'K' ? 1024.0 : unit == 'M' ? 1048576.0 : 1.0;
			best = v > best ? v : best;
		}
		fclose(f);
	}
	return best;
}

/* One prefill of np tokens then nd greedy decode steps; keeps the best tok/s. */
static int run_once(struct lg_backend *s, int *tok, int np, int nd, float *logits, int vocab,
                    double *pre, double *dec, struct rq_err *err)
{
	s->reset(s);
	double t0 = bench_now();
	if (s->forward(s, tok, np, logits, 1, err))
		return -1;
	double t1 = bench_now();
	for (int i = 0; i < nd; i++) {
		tok[np + i] = lg_argmax(logits, vocab);
		if (s->forward(s, &tok[np + i], 1, logits, 1, err))
			return -1;
	}
	double t2 = bench_now();
	*pre = np / (t1 - t0) > *pre ? np / (t1 - t0) : *pre;
	*dec = nd / (t2 - t1) > *dec ? nd / (t2 - t1) : *dec;
	return 0;
}

#define RUNS 3
#define FMT_OPTIONAL (1u << 31)

/* The model as loaded, then (fmts, --model only) its Linears in each weight
 * format of the set, all in one loop: RUNS rounds, each a read baseline then
 * every format once, so that drift of a shared machine's load hits all
 * formats alike; best of the rounds for each. */
static int bench_one(const char *label, const char *dir, struct rq_pool *pool, int np, int nd,
                     double memcpy_bw, struct rd_buf *rd, unsigned fmts, int fast)
{
	struct rq_err err = {0};
	struct lg_model *m = NULL;
	struct lg_backend *s = NULL;
	struct bef *fm = NULL;
	float *logits = NULL;
	int *tok = NULL, rc = 1;
	if (lg_model_open(dir, &m, &err)) {
		cli_fail(1, "bench", "%s", err.msg);
		goto out;
	}
	const struct lg_config *c = &m->cfg;
	struct lg_backend_opts bo = {.device = LG_DEVICE_CPU, .max_ctx = np + nd + 1, .pool = pool};
	if (lg_backend_open(m, &bo, &s, &err)) {
		cli_fail(1, "bench", "%s", err.msg);
		goto out;
	}
	/* the model as loaded is always the first row; FMT_OPTIONAL: the default set,
	 * skipped with a note when the model is not BF16 */
	int optional = !!(fmts & FMT_OPTIONAL);
	fmts &= ((1u << BEF_N) - 1) & ~(1u << BEF_BF16);
	if (fmts && bef_open(m, fmts, &fm, &err)) {
		if (!optional) {
			cli_fail(1, "bench", "%s", err.msg);
			goto out;
		}
		printf("%-10s no per-format rows: %s\n", label, err.msg);
		fmts = 0;
	}
	logits = malloc(sizeof(float) * c->vocab);
	tok = malloc(sizeof(int) * (np + nd + 1));
	if (!logits || !tok) {
		cli_fail(1, "bench", "out of memory");
		goto out;
	}
	uint64_t rng = 12345;
	for (int i = 0; i < np; i++)
		tok[i] = (int)(lg_rand(&rng) * (c->vocab - 3)) + 3;
	double pre[BEF_N] = {0}, dec[BEF_N] = {0}, tb[BEF_N] = {0};
	double fpre[BEF_N] = {0}, fdec[BEF_N] = {0};   /* --fast: the fast mode's */
	for (int rep = 0; rep < RUNS; rep++) {
		rd_measure(rd, pool, 1);
		for (int f = 0; f < BEF_N; f++) {
			if (f != BEF_BF16 && !(fmts & (1u << f)))
				continue;
			if (fm)
				bef_use(fm, (enum bef_fmt)f);
			tb[f] = lg_model_token_bytes(m);
			/* the oracle, then (--fast) the fast mode, back to back */
			for (int mode = 0; mode <= fast; mode++) {
				lg_backend_fast(s, mode);
				if (run_once(s, tok, np, nd, logits, c->vocab, mode ? &fpre[f] : &pre[f],
				             mode ? &fdec[f] : &dec[f], &err)) {
					cli_fail(1, "bench", "%s%s%s", fm ? bef_name((enum bef_fmt)f) : "",
					         fm ? ": " : "", err.msg);
					goto out;
				}
			}
			lg_backend_fast(s, 0);
		}
	}
	if (fm)
		bef_use(fm, BEF_BF16);
	double gbs = tb[0] * dec[0], read_bw = rd->best;
	printf("%-10s %d layers, hidden %d, %d experts (top %d), %d NVFP4 + %d BF16 + %d FP8 + %d INT "
	       "linears\n", label, c->n_layers, c->hidden, c->n_experts, c->top_k, m->n_nvfp4,
	       m->n_bf16, m->n_fp8, m->n_int);
	printf("%-10s prefill %4d tokens: %9.1f tok/s (best of %d)\n", "", np, pre[0], RUNS);
	printf("%-10s decode  %4d tokens: %9.2f tok/s (best of %d), %.1f MB of weights/token = %.2f GB/s "
	       "(%.2f x memcpy, %.2f x all-threads read)\n", "", nd, dec[0], RUNS, tb[0] / 1e6,
	       gbs / 1e9, gbs / memcpy_bw, gbs / read_bw);
	if (fm) {
		printf("%-10s the Linears in each weight format (made in memory from these BF16 weights; "
		       "groups of %d columns or fewer where the width asks), best of %d rounds:\n", "",
		       bef_group(fm), RUNS);
		printf("%-10s %-12s %9s %9s %8s %7s %8s %9s\n", "", "format", "MB/token", "decode/s",
		       "GB/s", "x read", "x bf16", "prefill/s");
		for (int f = 0; f < BEF_N; f++) {
			if (f != BEF_BF16 && !(fmts & (1u << f)))
				continue;
			double g = tb[f] * dec[f];
			printf("%-10s %-12s %9.1f %9.2f %8.2f %7.2f %8.2f %9.1f\n", "",
			       bef_name((enum bef_fmt)f), tb[f] / 1e6, dec[f], g / 1e9, g / read_bw,
			       dec[f] / dec[0], pre[f]);
		}
	}
	if (fast) {
		printf("%-10s oracle vs fast mode (FMA kernels), alternating in each round, best of %d:\n",
		       "", RUNS);
		printf("%-10s %-12s %10s %10s %7s %10s %10s %7s %9s %7s\n", "", "format", "prefill/s",
		       "fast", "x", "decode/s", "fast", "x", "fast GB/s", "x read");
		for (int f = 0; f < BEF_N; f++) {
			if (f != BEF_BF16 && !(fmts & (1u << f)))
				continue;
			double g = tb[f] * fdec[f];   /* the fast decode's weight stream */
			printf("%-10s %-12s %10.1f %10.1f %7.2f %10.2f %10.2f %7.2f %9.2f %7.2f\n", "",
			       fm ? bef_name((enum bef_fmt)f) : "as loaded", pre[f], fpre[f], fpre[f] / pre[f],
			       dec[f], fdec[f], fdec[f] / dec[f], g / 1e9, g / read_bw);
		}
	}
	printf("%-10s all-threads read, best of the run's %s: %.2f GB/s\n", "",
	       "3 + 1 per round", read_bw / 1e9);
	rc = 0;
out:
	bef_close(fm);
	free(tok);
	free(logits);
	lg_backend_close(s);
	lg_model_close(m);
	return rc;
}

int bench_engine(int argc, char **argv)
{
	/* --device cuda[:N] is the GPU benchmark (tools/bench/bench_engine_cuda.c) */
	for (int i = 1; i < argc; i++)
		if ((!strcmp(argv[i], "--device") && i + 1 < argc && strncmp(argv[i + 1], "cpu", 3)) ||
		    (!strncmp(argv[i], "--device=", 9) && strncmp(argv[i] + 9, "cpu", 3)))
			return bench_engine_cuda(argc, argv);
	static const struct option opts[] = {
		{"real-dims", no_argument, 0, 'r'}, {"threads", required_argument, 0, 't'},
		{"prompt-tokens", required_argument, 0, 'p'}, {"decode-tokens", required_argument, 0, 'd'},
		{"model", required_argument, 0, 'm'}, {"device", required_argument, 0, 'D'},
		{"formats", required_argument, 0, 'f'}, {"fast", no_argument, 0, 'F'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	int real = 0, threads = 0, np = 128, nd = -1, fast = 0, c;
	const char *model = NULL, *formats = NULL;
	unsigned fmts = (1u << BEF_N) - 1;
	struct rq_err ferr = {0};
	char *end;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		long v = 0;
		if (c == 't' || c == 'p' || c == 'd') {
			v = strtol(optarg, &end, 10);
			if (*end || end == optarg || v < 1 || v > 1 << 20)
				return cli_fail(2, "bench", "engine: expected a positive count, got '%s'", optarg);
		}
		switch (c) {
		case 'r': real = 1; break;
		case 'F': fast = 1; break;
		case 't': threads = (int)v; break;
		case 'p': np = (int)v; break;
		case 'd': nd = (int)v; break;
		case 'm': model = optarg; break;
		case 'f':
			formats = optarg;
			if (bef_parse(optarg, &fmts, &ferr))
				return cli_fail(2, "bench", "engine: %s", ferr.msg);
			break;
		case 'D': break;   /* cpu: this benchmark; cuda went to bench_engine_cuda */
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (formats && !model)
		return cli_fail(2, "bench", "engine: --formats converts the Linears of --model DIR; "
		                "give --model too");
	struct rq_pool *pool = NULL;
	if (rq_pool_create(threads, &pool))
		return cli_fail(1, "bench", "cannot start threads");
	/* baseline: memcpy of 256 MiB, best of 3 */
	size_t mb = 256u << 20;
	char *src = malloc(mb), *dst = malloc(mb);
	if (!src || !dst) {
		free(src);
		free(dst);
		rq_pool_destroy(pool);
		return cli_fail(1, "bench", "out of memory");
	}
	memset(src, 1, mb);
	memset(dst, 0, mb);
	double bw = bench_memcpy_bw(dst, src, mb, 3);
	free(src);
	free(dst);
	struct rd_buf rd;
	if (rd_open(&rd, 512u << 20)) {
		rq_pool_destroy(pool);
		return cli_fail(1, "bench", "out of memory for the 512 MiB read baseline");
	}
	double rbw = rd_measure(&rd, pool, 3);
	printf("engine (CPU, %d threads); baselines: memcpy %.2f GB/s (one thread, 256 MiB), "
	       "read %.2f GB/s (all threads, 512 MiB; again before each decode run)\n",
	       rq_pool_size(pool), bw / 1e9, rbw / 1e9);
	double llc = llc_bytes();
	if (llc > 0)
		printf("engine (CPU) largest cache %.0f MiB: weights/token below that stay in part "
		       "cached between tokens, and decode can pass the read baseline\n", llc / 1048576.0);
	int rc = 0;
	if (model) {
		rc = bench_one("model", model, pool, np, nd > 0 ? nd : 32, bw, &rd,
		               formats ? fmts : fmts | FMT_OPTIONAL, fast);
		free(rd.buf);
		rq_pool_destroy(pool);
		return rc;
	}
	for (int pass = 0; pass < 1 + real && !rc; pass++) {
		char dir[] = "/tmp/requantfs-bench-engine-XXXXXX";
		if (!mkdtemp(dir)) {
			rc = cli_fail(1, "bench", "mkdtemp: %s", strerror(errno));
			break;
		}
		char ck[64];
		snprintf(ck, sizeof ck, "%s/m", dir);
		double t = bench_now();
		if (make_ckpt(ck, pass)) {
			rc = cli_fail(1, "bench", "requantfs mkckpt %s%s failed", ck, pass ? " --real-dims" : "");
		} else {
			printf("%-10s checkpoint made in %.1f s\n", pass ? "real-dims" : "tiny", bench_now() - t);
			rc = bench_one(pass ? "real-dims" : "tiny", ck, pool, np,
			               nd > 0 ? nd : pass ? 8 : 32, bw, &rd, 0, fast);
		}
		rm_rf(dir);
	}
	free(rd.buf);
	rq_pool_destroy(pool);
	return rc;
}
