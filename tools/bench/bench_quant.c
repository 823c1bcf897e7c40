/* bench_quant.c — `requantfs bench quant`: BF16 -> NVFP4 throughput of the
 * CPU quantizer (the product's quant/ code), next to memcpy of the same
 * buffer measured in the same run, with a bit-exactness check of the fast
 * path against the scalar oracle on the same data. --device cuda hands the
 * same tensors to bench_quant_cuda() (the kernels' benchmark). */
#include "tools/bench/bench.h"
#include "kernels/kquant.h"
#include "cli/cli.h"
#include "quant/quant.h"
#include "quant/quant_int.h"
#include "quant/scheme.h"
#include "quant/scheme_int.h"
#include "quant/observer.h"
#include "quant/observer_int.h"
#include "base/pool.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: requantfs bench quant [--threads N] [--rows R --cols C] [--reps K]\n"
	        "                             [--recipe fp32|bf16|fp32div|all] [--isa sse2|avx2|avx512]\n"
	        "                             [--device cpu|cuda] [--scheme S [--src T]]\n"
	        "                             [--observer minmax|mse|expanded-mse]\n\n"
	        "Quantizes random BF16 weights of realistic magnitude (default: the Laguna\n"
	        "expert shapes 3072x1024 and 1024x3072) with the scalar oracle, the fast path\n"
	        "on one thread and on N threads, and the whole job (absmax + quantize).\n"
	        "Reports GB/s of BF16 input and the ratio to memcpy of the same buffer in the\n"
	        "same run, and checks that every fast result equals the oracle byte for byte\n"
	        "(exit 1 if not).\n\n"
	        "  --threads N    threads for the parallel rows (default: online CPUs)\n"
	        "  --rows R --cols C  one tensor of this shape instead (C %% 16 == 0)\n"
	        "  --reps K       timed repetitions, best kept (default 10)\n"
	        "  --recipe V     recipe variant (default fp32; all = each in turn)\n"
	        "  --isa NAME     force a fast-path variant (default: the best the CPU runs)\n"
	        "  --device D     cpu (default) or cuda (the GPU quantizer's benchmark)\n"
	        "  --scheme S     nvfp4 (default: the paths above), or nvfp4a16, fp8-dynamic,\n"
	        "                 w8a16, w4a16: the whole rq_scheme_quantize job on 1 and N\n"
	        "                 threads vs the scheme's scalar oracle (CPU only; recipe bf16)\n"
	        "  --observer O   mse or expanded-mse: that observer's whole job next to\n"
	        "                 minmax's on 1 and N threads, GB/s and the ratio (with --scheme;\n"
	        "                 default nvfp4a16; exactness vs the oracle on the first 16 rows);\n"
	        "                 with --device cuda: the job through the quantizer device (the\n"
	        "                 search on the GPU) vs the CPU job on N threads, bytes compared\n"
	        "  --src T        with --scheme: source dtype bf16 (default), f16 or f32 (the\n"
	        "                 same weights; not for nvfp4)\n");
}

static uint64_t rng_state = 0x8E3D2C1B0A998877ull;

static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 16);
}

/* Weights like a trained projection: per-row std log-uniform in [0.005, 0.05],
 * roughly Gaussian, one outlier (x12) in ~2000. */
static void fill_weights(uint16_t *w, size_t rows, size_t cols)
{
	for (size_t i = 0; i < rows; i++) {
		float sd = 0.005f * (float)(1.0 + 9.0 * (rnd() & 0xFFFF) / 65536.0);
		for (size_t c = 0; c < cols; c++) {
			float s = 0;
			for (int k = 0; k < 4; k++)
				s += (float)(rnd() & 0xFFFF) / 65536.0f;
			float x = (s - 2.0f) * 1.7320508f * sd;
			if (rnd() % 2000 == 0)
				x *= 12.0f;
			w[i * cols + c] = rq_f32_to_bf16(x);
		}
	}
}

struct shape_run {
	size_t rows, cols;
	uint16_t *w;                  /* [rows][cols] BF16 */
	uint8_t *packed, *scales;     /* fast outputs */
	uint8_t *ref_packed, *ref_scales;   /* oracle outputs */
	void *copy;                   /* memcpy destination, rows*cols*2 bytes */
};

static void row(const char *shape, const char *path, int threads, double sec, double bytes,
                double memcpy_bw, const char *exact, const char *extra)
{
	double gbs = sec > 0 ? bytes / sec / 1e9 : 0;
	printf("%-11s %-18s %7d %10.3f %8.2f %9.2fx  %-5s %s\n", shape, path, threads, sec * 1e3,
	       gbs, memcpy_bw > 0 ? bytes / sec / memcpy_bw : 0, exact, extra);
}

static int same(const struct shape_run *s)
{
	size_t n = s->rows * s->cols;
	return !memcmp(s->packed, s->ref_packed, n / 2) && !memcmp(s->scales, s->ref_scales, n / 16);
}

/* best-of-reps time of fast quantization (pool NULL = one thread) */
static double time_fast(struct shape_run *s, enum rq_recipe r, float gs, struct rq_pool *pool,
                        int reps)
{
	double best = 1e30;
	for (int i = 0; i < reps; i++) {
		double t = bench_now();
		rq_quantize_fast(r, s->w, s->rows, s->cols, gs, s->packed, s->scales, pool);
		t = bench_now() - t;
		if (t < best)
			best = t;
	}
	return best;
}

static int bench_shape(struct shape_run *s, enum rq_recipe r, struct rq_pool *pool, int reps)
{
	size_t n = s->rows * s->cols;
	double bytes = (double)n * 2;
	char shape[48];
	snprintf(shape, sizeof shape, "%zux%zu", s->rows, s->cols);
	int nt = rq_pool_size(pool), bad = 0;

	double mbw = bench_memcpy_bw(s->copy, s->w, (unsigned long long)n * 2, reps);
	row(shape, "memcpy", 1, bytes / mbw, bytes, mbw, "", "");

	uint16_t amax;
	if (rq_absmax_bf16(s->w, n, &amax, NULL) != 0)
		return cli_fail(1, "bench quant", "non-finite weight in generated data");
	float gs = rq_global_scale(r, rq_bf16_to_f32(amax));
	double t = bench_now();
	rq_quantize_ref(r, s->w, s->rows, s->cols, gs, s->ref_packed, s->ref_scales);
	t = bench_now() - t;
	row(shape, "ref (oracle)", 1, t, bytes, mbw, "-", "");

	double t1 = time_fast(s, r, gs, NULL, reps);
	int ok1 = same(s);
	bad |= !ok1;
	row(shape, "fast", 1, t1, bytes, mbw, ok1 ? "yes" : "NO", "");

	if (nt > 1) {
		memset(s->packed, 0, n / 2);
		double tn = time_fast(s, r, gs, pool, reps);
		int okn = same(s);
		bad |= !okn;
		char extra[64];
		snprintf(extra, sizeof extra, "scaling %.2f of %dx", t1 / tn / nt, nt);
		row(shape, "fast", nt, tn, bytes, mbw, okn ? "yes" : "NO", extra);
	}

	double tj = 1e30;
	float jgs = 0;
	for (int i = 0; i < reps; i++) {
		struct rq_qmod m = {s->w, s->rows, s->cols, s->packed, s->scales};
		double t0 = bench_now();
		if (rq_quantize_job(r, &m, 1, &jgs, NULL, pool) != 0)
			return cli_fail(1, "bench quant", "rq_quantize_job failed");
		t0 = bench_now() - t0;
		if (t0 < tj)
			tj = t0;
	}
	int okj = same(s) && jgs == gs;
	bad |= !okj;
	row(shape, "job (absmax+quant)", nt, tj, bytes, mbw, okj ? "yes" : "NO", "");
	return bad;
}

static int alloc_run(struct shape_run *s, size_t rows, size_t cols)
{
	size_t n = rows * cols;
	memset(s, 0, sizeof *s);
	s->rows = rows;
	s->cols = cols;
	s->w = malloc(n * 2);
	s->copy = malloc(n * 2);
	s->packed = malloc(n / 2);
	s->ref_packed = malloc(n / 2);
	s->scales = malloc(n / 16);
	s->ref_scales = malloc(n / 16);
	if (!s->w || !s->copy || !s->packed || !s->ref_packed || !s->scales || !s->ref_scales)
		return -1;
	fill_weights(s->w, rows, cols);
	memset(s->copy, 0, n * 2);   /* fault the pages in before timing */
	return 0;
}

static void free_run(struct shape_run *s)
{
	free(s->w);
	free(s->copy);
	free(s->packed);
	free(s->ref_packed);
	free(s->scales);
	free(s->ref_scales);
}

/* --scheme S (not nvfp4): the oracle once, then the whole job (absmax, scales, codes, all
 * tensors of the module output) on one thread and on the pool, each checked byte for byte. */
static int bench_scheme(struct shape_run *s, enum rq_scheme sc, enum rq_src_dtype src,
                        struct rq_pool *pool, int reps)
{
	size_t n = s->rows * s->cols, es = rq_src_size(src);
	double bytes = (double)n * es;
	char shape[48];
	snprintf(shape, sizeof shape, "%zux%zu", s->rows, s->cols);
	struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
	int nt, bad = 0;
	uint64_t sz;
	if (rq_scheme_layout(sc, src, s->rows, s->cols, t, &nt, &sz) != 0)
		return cli_fail(2, "bench quant", "--scheme %s cannot take %s from %s (columns per "
		                "group: %u; nvfp4 takes bf16 only)", rq_scheme_name(sc),
		                shape, src == RQ_SRC_BF16 ? "bf16" : src == RQ_SRC_F16 ? "f16" : "f32",
		                rq_scheme_group(sc));
	uint8_t *out = malloc(sz), *ref = malloc(sz), *w = malloc(n * es), *copy = malloc(n * es);
	if (!out || !ref || !w || !copy) {
		free(out);
		free(ref);
		free(w);
		free(copy);
		return cli_fail(1, "bench quant", "out of memory");
	}
	for (size_t i = 0; i < n; i++) {   /* the same weights, widened or rounded to src */
		float v = rq_bf16_to_f32(s->w[i]);
		if (src == RQ_SRC_F32) {
			memcpy(w + 4 * i, &v, 4);
		} else {
			uint16_t h = src == RQ_SRC_F16 ? rq_f32_to_f16(v) : s->w[i];
			memcpy(w + 2 * i, &h, 2);
		}
	}
	memset(copy, 0, n * es);
	memset(out, 0, sz);
	enum rq_recipe r = rq_scheme_default_recipe(sc);
	double mbw = bench_memcpy_bw(copy, w, (unsigned long long)n * es, reps);
	row(shape, "memcpy", 1, bytes / mbw, bytes, mbw, "", "");
	double t0 = bench_now();
	int rc = rq_scheme_quantize_ref(sc, r, src, w, s->rows, s->cols, ref);
	t0 = bench_now() - t0;
	if (rc != 0) {
		free(out);
		free(ref);
		free(w);
		free(copy);
		return cli_fail(1, "bench quant", "the %s oracle failed (%d)", rq_scheme_name(sc), rc);
	}
	row(shape, "ref (oracle)", 1, t0, bytes, mbw, "-", "");
	int nthr = rq_pool_size(pool);
	double t1 = 0;
	for (int p = 0; p < (nthr > 1 ? 2 : 1); p++) {
		struct rq_smod m = {w, src, s->rows, s->cols, out};
		double best = 1e30;
		memset(out, 0, sz);
		for (int i = 0; i < reps; i++) {
			double ts = bench_now();
			if (rq_scheme_quantize(sc, r, &m, 1, NULL, p ? pool : NULL) != 0) {
				free(out);
				free(ref);
				free(w);
				free(copy);
				return cli_fail(1, "bench quant", "rq_scheme_quantize failed");
			}
			ts = bench_now() - ts;
			best = ts < best ? ts : best;
		}
		int ok = memcmp(out, ref, sz) == 0;
		bad |= !ok;
		char extra[64] = "";
		if (p)
			snprintf(extra, sizeof extra, "scaling %.2f of %dx", t1 / best / nthr, nthr);
		else
			t1 = best;
		row(shape, "job (whole module)", p ? nthr : 1, best, bytes, mbw, ok ? "yes" : "NO", extra);
	}
	free(out);
	free(ref);
	free(w);
	free(copy);
	return bad;
}

static double thread_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* best-of-reps seconds of one whole job with observer o (pool NULL = one thread), and in
 * *cpu the best CPU time of the calling thread (the one-thread figure a shared machine
 * does not skew) */
static double time_obs(enum rq_scheme sc, enum rq_observer o, struct rq_smod *m,
                       struct rq_pool *pool, int reps, int *rc, double *cpu)
{
	double best = 1e30;
	*cpu = 1e30;
	for (int i = 0; i < reps; i++) {
		double c = thread_cpu(), t = bench_now();
		*rc = rq_scheme_quantize_obs(sc, RQ_RECIPE_BF16, o, m, 1, NULL, pool);
		t = bench_now() - t;
		c = thread_cpu() - c;
		best = t < best ? t : best;
		*cpu = c < *cpu ? c : *cpu;
		if (*rc)
			break;
	}
	return best;
}

/* --observer O: minmax's job and O's job on the same BF16 weights, on 1 and N threads, and
 * O's fast search against its oracle on the first rows (the oracle is ~1000x slower). */
static int bench_observer(struct shape_run *s, enum rq_scheme sc, enum rq_observer o,
                          struct rq_pool *pool, int reps)
{
	size_t n = s->rows * s->cols, sub = s->rows < 16 ? s->rows : 16;
	double bytes = (double)n * 2;
	char shape[48], extra[80];
	snprintf(shape, sizeof shape, "%zux%zu", s->rows, s->cols);
	struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
	int nt, bad = 0, rc = 0;
	uint64_t sz, subsz;
	if (rq_scheme_layout(sc, RQ_SRC_BF16, s->rows, s->cols, t, &nt, &sz) != 0 ||
	    rq_scheme_layout(sc, RQ_SRC_BF16, sub, s->cols, t, &nt, &subsz) != 0)
		return cli_fail(2, "bench quant", "--scheme %s cannot take %s (columns per group: %u)",
		                rq_scheme_name(sc), shape, rq_scheme_group(sc));
	uint8_t *out = malloc(sz), *ref = malloc(subsz);
	if (!out || !ref) {
		free(out);
		free(ref);
		return cli_fail(1, "bench quant", "out of memory");
	}
	struct rq_smod m = {s->w, RQ_SRC_BF16, s->rows, s->cols, out};
	int nthr = rq_pool_size(pool);
	double mm[2] = {0, 0}, mcpu = 0;
	for (int k = 0; k < 2 && !rc; k++) {
		enum rq_observer ob = k ? o : RQ_OBSERVER_MINMAX;
		int oreps = k ? (reps < 3 ? reps : 3) : reps;
		for (int p = 0; p < (nthr > 1 ? 2 : 1) && !rc; p++) {
			double cpu, best = time_obs(sc, ob, &m, p ? pool : NULL, oreps, &rc, &cpu);
			if (!k) {
				mm[p] = best;
				mcpu = p ? mcpu : cpu;
			}
			if (k && !p)
				snprintf(extra, sizeof extra, "%.2f MB/s, 1/%.1f of minmax's GB/s (CPU "
				         "time: 1/%.1f)", bytes / best / 1e6, best / mm[p], cpu / mcpu);
			else if (k)
				snprintf(extra, sizeof extra, "%.2f MB/s, 1/%.1f of minmax's GB/s",
				         bytes / best / 1e6, best / mm[p]);
			else
				extra[0] = 0;
			char path[40];
			snprintf(path, sizeof path, "job %s", rq_observer_name(ob));
			row(shape, path, p ? nthr : 1, best, bytes, 0, k ? "" : "", extra);
		}
	}
	if (!rc) {   /* exactness: the fast job vs the oracle on the first `sub` rows */
		struct rq_smod ms = {s->w, RQ_SRC_BF16, sub, s->cols, out};
		struct rq_smod mr = {s->w, RQ_SRC_BF16, sub, s->cols, ref};
		rc = rq_scheme_quantize_obs(sc, RQ_RECIPE_BF16, o, &ms, 1, NULL, pool);
		if (!rc)
			rc = rq_observer_quantize_ref(sc, o, &mr, 1, NULL);
		bad = rc == 0 && memcmp(out, ref, subsz) != 0;
		printf("%-11s %-18s first %zu rows: fast == oracle: %s\n", shape, "exact", sub,
		       rc ? "-" : bad ? "NO" : "yes");
	}
	free(out);
	free(ref);
	if (rc)
		return cli_fail(1, "bench quant", "--observer %s: the job failed (%d)",
		                rq_observer_name(o), rc);
	return bad;
}

int bench_quant(int argc, char **argv)
{
	static const struct option opts[] = {
		{"threads", required_argument, NULL, 't'}, {"rows", required_argument, NULL, 'r'},
		{"cols", required_argument, NULL, 'c'},    {"reps", required_argument, NULL, 'k'},
		{"recipe", required_argument, NULL, 'v'},  {"isa", required_argument, NULL, 'i'},
		{"device", required_argument, NULL, 'd'},  {"help", no_argument, NULL, 'h'},
		{"scheme", required_argument, NULL, 's'},  {"src", required_argument, NULL, 'S'},
		{"observer", required_argument, NULL, 'o'},
		{NULL, 0, NULL, 0},
	};
	long threads = rq_cpu_count(), rows = 0, cols = 0, reps = 10;
	int all = 0, cuda = 0, isa = -1;
	enum rq_recipe recipe = RQ_RECIPE_FP32;
	enum rq_scheme scheme = RQ_SCHEME_NVFP4;
	enum rq_src_dtype src = RQ_SRC_BF16;
	enum rq_observer observer = RQ_OBSERVER_MINMAX;
	char *end;
	int o;
	optind = 1;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 't': case 'r': case 'c': case 'k': {
			long v = strtol(optarg, &end, 10);
			if (*end || v <= 0 || v > (o == 't' ? 1024 : o == 'k' ? 100000 : 1L << 24))
				return cli_fail(2, "bench quant", "bad --%s '%s'",
				                o == 't' ? "threads" : o == 'r' ? "rows" : o == 'c' ? "cols"
				                                                            : "reps", optarg);
			*(o == 't' ? &threads : o == 'r' ? &rows : o == 'c' ? &cols : &reps) = v;
			break;
		}
		case 'v':
			if (!strcmp(optarg, "all"))
				all = 1;
			else if (rq_recipe_parse(optarg, &recipe) != 0)
				return cli_fail(2, "bench quant", "unknown --recipe '%s' (fp32, bf16, fp32div, all)",
				                optarg);
			break;
		case 'i':
			for (int k = 0; k < RQ_ISA_COUNT; k++)
				if (!strcmp(optarg, rq_quant_isa_name(k)))
					isa = k;
			if (isa < 0)
				return cli_fail(2, "bench quant", "unknown --isa '%s' (sse2, avx2, avx512)", optarg);
			if (isa > rq_quant_isa_max())
				return cli_fail(2, "bench quant", "this CPU cannot run --isa %s", optarg);
			break;
		case 'd':
			if (!strcmp(optarg, "cuda") || !strncmp(optarg, "cuda:", 5))
				cuda = 1;
			else if (strcmp(optarg, "cpu"))
				return cli_fail(2, "bench quant", "unknown --device '%s' (cpu, cuda)", optarg);
			break;
		case 's':
			if (rq_scheme_parse(optarg, &scheme) != 0)
				return cli_fail(2, "bench quant", "unknown --scheme '%s' (nvfp4, nvfp4a16, "
				                "fp8-dynamic, w8a16, w4a16)", optarg);
			break;
		case 'S':
			if (!strcmp(optarg, "bf16"))
				src = RQ_SRC_BF16;
			else if (!strcmp(optarg, "f16"))
				src = RQ_SRC_F16;
			else if (!strcmp(optarg, "f32"))
				src = RQ_SRC_F32;
			else
				return cli_fail(2, "bench quant", "unknown --src '%s' (bf16, f16, f32)", optarg);
			break;
		case 'o':
			if (rq_observer_parse(optarg, &observer) != 0)
				return cli_fail(2, "bench quant", "unknown --observer '%s' (minmax, mse, "
				                "expanded-mse)", optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc)
		return cli_fail(2, "bench quant", "unexpected argument '%s'", argv[optind]);
	if (src != RQ_SRC_BF16 && scheme == RQ_SCHEME_NVFP4)
		return cli_fail(2, "bench quant", "--src goes with --scheme nvfp4a16, fp8-dynamic, w8a16 "
		                "or w4a16");
	if ((rows > 0) != (cols > 0))
		return cli_fail(2, "bench quant", "--rows and --cols go together");
	if (cols % 16)
		return cli_fail(2, "bench quant", "--cols must be a multiple of 16");

	size_t shapes[2][2] = {{3072, 1024}, {1024, 3072}};
	int nshapes = 2;
	if (rows > 0) {
		shapes[0][0] = (size_t)rows;
		shapes[0][1] = (size_t)cols;
		nshapes = 1;
	}
	if (cuda && !kq_compiled())
		return cli_fail(1, "bench quant", "--device cuda: this binary was built without CUDA "
		                "(meson setup -Dcuda=enabled)");
	if (cuda && kq_device_count() == 0)
		return cli_fail(1, "bench quant", "--device cuda: no usable CUDA device here; run it "
		                "on a GPU machine (tools/gpu-check does)");
	if (isa >= 0)
		rq_quant_isa_force(isa);

	struct rq_pool *pool = NULL;
	if (!cuda && threads > 1 && rq_pool_create((int)threads, &pool) != 0)
		return cli_fail(1, "bench quant", "cannot start %ld threads", threads);

	int bad = 0;
	if (observer != RQ_OBSERVER_MINMAX) {
		if (scheme == RQ_SCHEME_NVFP4)
			scheme = RQ_SCHEME_NVFP4A16;
		if (src != RQ_SRC_BF16) {
			rq_pool_destroy(pool);
			return cli_fail(2, "bench quant", "--observer %s takes bf16 weights only (no "
			                "--src)", rq_observer_name(observer));
		}
		if (cuda) {
			for (int k = 0; k < nshapes && !bad; k++) {
				struct shape_run s;
				if (alloc_run(&s, shapes[k][0], shapes[k][1]) != 0) {
					free_run(&s);
					return cli_fail(1, "bench quant", "out of memory");
				}
				bad = bench_quant_obs_cuda(s.w, s.rows, s.cols, scheme, observer,
				                           (int)threads, reps < 3 ? (int)reps : 3);
				free_run(&s);
			}
			return bad;
		}
		printf("requantfs bench quant: scheme %s, observer %s vs minmax, fast path %s, %ld "
		       "thread%s (%d CPUs online)\nGB/s = BF16 bytes in per second\n\n"
		       "%-11s %-18s %7s %10s %8s\n", rq_scheme_name(scheme),
		       rq_observer_name(observer), rq_quant_isa_name(rq_quant_isa()), threads,
		       threads > 1 ? "s" : "", rq_cpu_count(), "shape", "path", "threads", "ms", "GB/s");
		for (int k = 0; k < nshapes && !bad; k++) {
			struct shape_run s;
			if (alloc_run(&s, shapes[k][0], shapes[k][1]) != 0) {
				free_run(&s);
				rq_pool_destroy(pool);
				return cli_fail(1, "bench quant", "out of memory");
			}
			bad = bench_observer(&s, scheme, observer, pool, (int)reps);
			free_run(&s);
		}
		rq_pool_destroy(pool);
		if (bad == 1)
			fprintf(stderr, "requantfs bench quant: OBSERVER JOB DIFFERS FROM THE ORACLE\n");
		return bad;
	}
	if (scheme != RQ_SCHEME_NVFP4) {
		if (cuda) {
			rq_pool_destroy(pool);
			return cli_fail(2, "bench quant", "--scheme %s runs on the CPU only (no --device "
			                "cuda)", rq_scheme_name(scheme));
		}
		printf("requantfs bench quant: scheme %s (recipe %s), fast path %s, %ld thread%s (%d "
		       "CPUs online), best of %ld\n"
		       "GB/s = %s bytes in per second; memcpy copies the same buffer\n\n"
		       "%-11s %-18s %7s %10s %8s %10s  %-5s\n",
		       rq_scheme_name(scheme), rq_recipe_name(rq_scheme_default_recipe(scheme)),
		       rq_quant_isa_name(rq_quant_isa()), threads, threads > 1 ? "s" : "",
		       rq_cpu_count(), reps,
		       src == RQ_SRC_BF16 ? "BF16" : src == RQ_SRC_F16 ? "F16" : "F32", "shape", "path", "threads", "ms", "GB/s", "vs memcpy",
		       "exact");
		for (int k = 0; k < nshapes && bad < 2; k++) {
			struct shape_run s;
			if (alloc_run(&s, shapes[k][0], shapes[k][1]) != 0) {
				free_run(&s);
				rq_pool_destroy(pool);
				return cli_fail(1, "bench quant", "out of memory");
			}
			int rc = bench_scheme(&s, scheme, src, pool, (int)reps);
			bad = rc > bad ? rc : bad;
			free_run(&s);
		}
		rq_pool_destroy(pool);
		if (bad == 1)
			fprintf(stderr, "requantfs bench quant: SCHEME JOB DIFFERS FROM THE ORACLE\n");
		return bad;
	}
	for (int v = 0; v < RQ_RECIPE_COUNT; v++) {
		enum rq_recipe r = all ? (enum rq_recipe)v : recipe;
		if (!cuda)
			printf("requantfs bench quant: recipe %s, fast path %s, %ld thread%s (%d CPUs "
			       "online), best of %ld\n"
			       "GB/s = BF16 bytes in per second; memcpy copies the same buffer\n\n"
			       "%-11s %-18s %7s %10s %8s %10s  %-5s\n",
			       rq_recipe_name(r), rq_quant_isa_name(rq_quant_isa()), threads,
			       threads > 1 ? "s" : "", rq_cpu_count(), reps, "shape", "path", "threads",
			       "ms", "GB/s", "vs memcpy", "exact");
		for (int k = 0; k < nshapes; k++) {
			struct shape_run s;
			if (alloc_run(&s, shapes[k][0], shapes[k][1]) != 0) {
				free_run(&s);
				rq_pool_destroy(pool);
				return cli_fail(1, "bench quant", "out of memory");
			}
			if (cuda)
				bad |= bench_quant_cuda(s.w, s.rows, s.cols, r, (int)reps) != 0;
			else
				bad |= bench_shape(&s, r, pool, (int)reps) != 0;
			free_run(&s);
		}
		if (!all)
			break;
		printf("\n");
	}
	rq_pool_destroy(pool);
	if (bad && !cuda)
		fprintf(stderr, "requantfs bench quant: FAST PATH DIFFERS FROM THE ORACLE\n");
	return bad ? 1 : 0;
}
