/* test_kquant.c — the CUDA quantizer against the CPU (suite gpu).
 *
 * Every result is compared byte for byte with rq_quantize_job (quant/, the
 * CPU reference): global scale bits, packed codes, group scales, and the
 * errors. SKIP (TAP "1..0 # SKIP reason") with the reason when CUDA is not compiled in or no
 * device is usable. Cases:
 *   - the golden vectors of shared/vectors/nvfp4-vectors.md (copied below)
 *   - every finite BF16 amax through the device's global scale, 3 recipes
 *   - random tensors of several shapes and distributions, 3 recipes
 *   - fused pairs (either partner larger) and a job of 3 modules
 *   - tensors streamed in chunks through a tiny mem_limit, and one larger
 *     than the staging slots with the default limit
 *   - NaN/Inf refusal (-EDOM with the module index), bad shapes (-EINVAL)
 *   - two threads with a context each
 *   - inputs in kq_host_alloc (pinned) memory: DMA'd straight, same bytes,
 *     no host memcpy
 *   - the watchdog: a deadline that passes fails the job with -ETIMEDOUT and
 *     poisons the context; it closes and a fresh one works (the emulated
 *     runtime hangs the kernel for it; on a GPU a 1 us deadline)
 *   - kq_open's errors by kind (-EINVAL, -ENODEV; emulated: -ENOMEM, -EBUSY)
 *   - kq_close releases the primary context; reopening works
 * RQ_TEST_QUICK=1 keeps the small shapes only (for compute-sanitizer runs). */
#include "kernels/kquant.h"
#include "quant/quant.h"
#include "base/pool.h"
#include "tests/kernels/kq_testdata.h"
#include "tests/tap.h"
#include "tests/kernels/test_cuda_ctx.h"
#ifdef KQ_EMULATE
#include "tests/kernels/emul/kq_emul.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static struct rq_pool *pool;
static const struct kq_job_opts *job_opts;   /* how job_same runs the GPU side */
static int quick;              /* RQ_TEST_QUICK: small shapes only */

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

/* ---- the golden vectors (shared/vectors/nvfp4-vectors.md) ---- */

struct golden {
	const char *name;
	int rows, cols;
	uint16_t partner_amax;       /* != 0: fused with a 1x16 gate of this amax */
	const char *w;               /* BF16 hex, row-major */
	uint32_t gs[3];              /* fp32, bf16, fp32div */
	const char *scales, *packed; /* hex bytes, the same for all three recipes */
};

static const struct golden goldens[] = {
	{"1 ties", 1, 16, 0,
	 "3F60 4028 408C 40C4 410C 4144 418C 41A8 BF60 C028 C08C C0C4 C10C C144 C18C C1A8",
	 {0x43000000, 0x43000000, 0x43000000}, "7E",
	 "20 42 64 76 A8 CA EC FE"},
	{"2 ulp around ties", 1, 16, 0,
	 "3F61 3F5F 4029 4027 408D 408B 40C5 40C3 410D 410B 4145 4143 418D 418B 41A8 C1A8",
	 {0x43000000, 0x43000000, 0x43000000}, "7E",
	 "01 12 23 34 45 56 67 F7"},
	{"3 nibble order, signed zeros", 1, 16, 0,
	 "3FE0 C1A8 0000 8000 BF00 3F00 BF60 3F60 0000 0000 0000 0000 0000 0000 0000 0000",
	 {0x43000000, 0x43000000, 0x43000000}, "7E",
	 "F1 00 08 08 00 00 00 00"},
	{"4 all-zero tensor", 1, 16, 0,
	 "0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000",
	 {0x3F800000, 0x3F800000, 0x3F800000}, "20",
	 "00 00 00 00 00 00 00 00"},
	{"5 zero group beside non-zero", 2, 16, 0,
	 "41A8 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000",
	 {0x43000000, 0x43000000, 0x43000000}, "7E 20",
	 "07 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"},
	{"6 global-scale rounding", 1, 16, 0,
	 "3C25 3A83 3A83 3A83 3A83 3A83 3A83 3A83 3A83 3A83 3A83 3A83 3A83 3A83 3A83 3A83",
	 {0x488253C8, 0x48830000, 0x488253C8}, "7E",
	 "17 11 11 11 11 11 11 11"},
	{"7a tiny amax", 1, 16, 0,
	 "0528 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000",
	 {0x3F800000, 0x3F800000, 0x3F800000}, "20",
	 "00 00 00 00 00 00 00 00"},
	{"7b tiny amax", 1, 16, 0,
	 "0529 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000",
	 {0x7F7E7C37, 0x7F7F0000, 0x7F7E7C37}, "7E",
	 "07 00 00 00 00 00 00 00"},
	{"8 fp8 subnormal/underflow", 3, 16, 0,
	 "41A8 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 3980 B900 3880 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 3580 B500 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000",
	 {0x43000000, 0x43000000, 0x43000000}, "7E 03 20",
	 "07 00 00 00 00 00 00 00 D7 03 00 00 00 00 00 00 80 00 00 00 00 00 00 00"},
	{"9 scale clamp 448", 1, 16, 0,
	 "3F80 BF80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80",
	 {0x45280000, 0x45280000, 0x45280000}, "7E",
	 "F7 77 77 77 77 77 77 77"},
	{"10 fused up (partner gate amax 21.0)", 1, 16, 0x41A8,
	 "4128 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80 3F80",
	 {0x43000000, 0x43000000, 0x43000000}, "76",
	 "17 11 11 11 11 11 11 11"},
	{"11 realistic 1x32", 1, 32, 0,
	 "3C1A BCC3 3CEB BBCD BC6C 3C91 3C8D BC51 39A5 BD38 3CBC 3CA3 3C9C BD26 BBDB 3832 3C05 3BBD 3CD8 BCFD BB85 BC57 3B7E 3C35 3CD8 BC1A 3C5D BD15 BB70 3CAE BC02 3BDD",
	 {0x4769BD38, 0x476A0000, 0x4769BD38}, "7E 7B",
	 "D3 A6 4C B4 F0 55 F5 0A 23 F6 C9 41 B6 F4 69 2B"},
};

static size_t hex_parse(const char *s, uint32_t *out, size_t max)
{
	size_t n = 0;
	while (*s && n < max) {
		char *end;
		unsigned long v = strtoul(s, &end, 16);
		if (end == s)
			break;
		out[n++] = (uint32_t)v;
		s = end;
	}
	return n;
}

/* ---- one job on both sides ---- */

struct job {
	int n;
	struct rq_qmod cpu[4], gpu[4];
	uint16_t *w[4];
};

static void job_alloc(struct job *j, int n, const size_t *rows, const size_t *cols)
{
	memset(j, 0, sizeof *j);
	j->n = n;
	for (int i = 0; i < n; i++) {
		size_t e = rows[i] * cols[i];
		j->w[i] = malloc(e * 2 + 2);
		for (int s = 0; s < 2; s++) {
			struct rq_qmod *m = s ? &j->gpu[i] : &j->cpu[i];
			m->w = j->w[i];
			m->rows = rows[i];
			m->cols = cols[i];
			m->packed = malloc(e / 2 + 1);
			m->scales = malloc(e / 16 + 1);
			memset(m->packed, s ? 0xA5 : 0x5A, e / 2);
			memset(m->scales, s ? 0xA5 : 0x5A, e / 16);
		}
	}
}

static void job_free(struct job *j)
{
	for (int i = 0; i < j->n; i++) {
		free(j->w[i]);
		for (int s = 0; s < 2; s++) {
			struct rq_qmod *m = s ? &j->gpu[i] : &j->cpu[i];
			free(m->packed);
			free(m->scales);
		}
	}
}

/* Runs the job on both sides; 1 when codes, bytes and gs all agree. */
static int job_same(struct kq_ctx *k, enum rq_recipe r, struct job *j, int *rc_out,
                    char *why, size_t whylen)
{
	float gc = -1, gg = -2;
	int bc = -1, bg = -2;
	char msg[256] = "";
	int rc = rq_quantize_job(r, j->cpu, j->n, &gc, &bc, pool);
	int rg = kq_quantize_job_opt(k, r, j->gpu, j->n, job_opts, &gg, &bg, msg, sizeof msg);
	if (rc_out)
		*rc_out = rg;
	if (rc != rg) {
		snprintf(why, whylen, "rc cpu %d gpu %d (%s)", rc, rg, msg);
		return 0;
	}
	if (rc < 0) {
		if (bc != bg) {
			snprintf(why, whylen, "bad module cpu %d gpu %d", bc, bg);
			return 0;
		}
		snprintf(why, whylen, "both %d (bad module %d): %s", rc, bg, msg);
		return 1;
	}
	if (f2u(gc) != f2u(gg)) {
		snprintf(why, whylen, "gs cpu %08X gpu %08X", f2u(gc), f2u(gg));
		return 0;
	}
	for (int i = 0; i < j->n; i++) {
		size_t e = j->cpu[i].rows * j->cpu[i].cols;
		for (size_t b = 0; b < e / 2; b++) {
			if (j->cpu[i].packed[b] != j->gpu[i].packed[b]) {
				snprintf(why, whylen, "module %d packed byte %zu: cpu %02X gpu %02X", i, b,
				         j->cpu[i].packed[b], j->gpu[i].packed[b]);
				return 0;
			}
		}
		for (size_t b = 0; b < e / 16; b++) {
			if (j->cpu[i].scales[b] != j->gpu[i].scales[b]) {
				snprintf(why, whylen, "module %d scale %zu: cpu %02X gpu %02X", i, b,
				         j->cpu[i].scales[b], j->gpu[i].scales[b]);
				return 0;
			}
		}
	}
	snprintf(why, whylen, "gs %08X", f2u(gg));
	return 1;
}

/* ---- cases ---- */

static void test_golden(struct kq_ctx *k)
{
	for (size_t t = 0; t < sizeof goldens / sizeof goldens[0]; t++) {
		const struct golden *g = &goldens[t];
		uint32_t in[64], sc[8], pk[32];
		size_t rows[2] = {(size_t)g->rows, 1}, cols[2] = {(size_t)g->cols, 16};
		size_t nin = hex_parse(g->w, in, 64), nsc = hex_parse(g->scales, sc, 8);
		size_t npk = hex_parse(g->packed, pk, 32);
		int fused = g->partner_amax != 0;
		for (int r = 0; r < RQ_RECIPE_COUNT; r++) {
			struct job j;
			char why[256];
			int ok;
			/* the partner (gate) goes first, as a fused job is gate then up */
			if (fused) {
				size_t rr[2] = {1, rows[0]}, cc[2] = {16, cols[0]};
				job_alloc(&j, 2, rr, cc);
				memset(j.w[0], 0, 32);
				j.w[0][0] = g->partner_amax;
			} else {
				job_alloc(&j, 1, rows, cols);
			}
			struct rq_qmod *m = &j.gpu[fused];
			for (size_t i = 0; i < nin; i++)
				j.w[fused][i] = (uint16_t)in[i];
			ok = job_same(k, (enum rq_recipe)r, &j, NULL, why, sizeof why);
			if (ok) {
				float gs = -1;
				kq_quantize_job(k, (enum rq_recipe)r, j.gpu, j.n, &gs, NULL, NULL, 0);
				ok = f2u(gs) == g->gs[r] && nsc == nin / 16 && npk == nin / 2;
				for (size_t i = 0; ok && i < nsc; i++)
					ok = m->scales[i] == sc[i];
				for (size_t i = 0; ok && i < npk; i++)
					ok = m->packed[i] == pk[i];
				if (!ok)
					snprintf(why, sizeof why, "differs from the golden bytes (gs %08X)",
					         f2u(gs));
			}
			TAP_OK(ok, "golden '%s' %s: %s", g->name, rq_recipe_name(r), why);
			job_free(&j);
		}
	}
}

static void test_global_scales(struct kq_ctx *k)
{
	size_t n = 0x7F80;
	uint16_t *a = malloc(n * 2);
	float *gs = malloc(n * 4);
	for (size_t i = 0; i < n; i++)
		a[i] = (uint16_t)i;
	for (int r = 0; r < RQ_RECIPE_COUNT; r++) {
		char msg[256] = "";
		long bad = 0;
		size_t first = 0;
		int rc = kq_global_scales(k, (enum rq_recipe)r, a, n, gs, msg, sizeof msg);
		for (size_t i = 0; rc == 0 && i < n; i++) {
			if (f2u(gs[i]) != f2u(rq_global_scale((enum rq_recipe)r, rq_bf16_to_f32(a[i]))) &&
			    !bad++)
				first = i;
		}
		TAP_OK(rc == 0 && bad == 0, "device global scale %s, every finite BF16 amax: "
		       "rc %d %s, %ld differ (first %04zX)", rq_recipe_name(r), rc, msg, bad, first);
	}
	free(a);
	free(gs);
}

static uint64_t seed = 0x6A09E667F3BCC909ull;
#define KQ_TEST_NO_DEV 63          /* a device index no test machine has */

/* Random single modules of several shapes and every distribution. */
static void test_random(struct kq_ctx *k, const char *what)
{
	static const size_t shapes[][2] = {{1, 16}, {3, 48}, {37, 160}, {256, 2048}, {1, 16016},
	                                   {1024, 768}};
	size_t nshapes = quick ? 3 : sizeof shapes / sizeof shapes[0];
	for (int r = 0; r < RQ_RECIPE_COUNT; r++) {
		for (size_t s = 0; s < nshapes; s++) {
			int bad = 0;
			char why[256] = "", first[300] = "";
			for (int d = 0; d < KQ_DIST_COUNT; d++) {
				struct job j;
				job_alloc(&j, 1, &shapes[s][0], &shapes[s][1]);
				kq_fill(j.w[0], shapes[s][0], shapes[s][1], (enum kq_dist)d, &seed);
				if (!job_same(k, (enum rq_recipe)r, &j, NULL, why, sizeof why) && !bad++)
					snprintf(first, sizeof first, "%s: %s", kq_dist_name(d), why);
				job_free(&j);
			}
			TAP_OK(bad == 0, "%s %s [%zu, %zu], %d distributions: %s", what,
			       rq_recipe_name(r), shapes[s][0], shapes[s][1], KQ_DIST_COUNT,
			       bad ? first : "same bytes");
		}
	}
}

/* Fused pairs (gate, up): the shared scale comes from the larger amax. */
static void test_fused(struct kq_ctx *k, const char *what)
{
	size_t rows[3] = {512, 512, 64}, cols[3] = {1024, 1024, 512};
	if (quick)
		rows[0] = rows[1] = 40;
	for (int r = 0; r < RQ_RECIPE_COUNT; r++) {
		for (int big = 0; big < 3; big++) {
			struct job j;
			char why[256];
			int n = big == 2 ? 3 : 2;
			job_alloc(&j, n, rows, cols);
			for (int i = 0; i < n; i++)
				kq_fill(j.w[i], rows[i], cols[i], KQ_DIST_NORMAL, &seed);
			if (big < 2)
				j.w[big][777] = 0x4120;                 /* 10.0: this one sets gs */
			else
				j.w[2][5] = 0xC2F0;                     /* -120.0 in the third */
			int ok = job_same(k, (enum rq_recipe)r, &j, NULL, why, sizeof why);
			TAP_OK(ok, "%s %s: %s, %s", what, rq_recipe_name(r),
			       big == 0 ? "pair, gate larger" : big == 1 ? "pair, up larger"
			                                         : "3 modules, last larger", why);
			job_free(&j);
		}
	}
}

/* NaN/Inf anywhere refuse the job with the first bad module; shapes too. */
static void test_refusals(struct kq_ctx *k, const char *what)
{
	static const uint16_t poison[3] = {0x7FC0, 0x7F80, 0xFF80};  /* NaN, +Inf, -Inf */
	size_t rows[2] = {300, 300}, cols[2] = {1024, 1024};
	for (int p = 0; p < 3; p++) {
		for (int where = 0; where < 2; where++) {
			struct job j;
			char why[256];
			int rc = 0;
			job_alloc(&j, 2, rows, cols);
			kq_fill(j.w[0], rows[0], cols[0], KQ_DIST_NORMAL, &seed);
			kq_fill(j.w[1], rows[1], cols[1], KQ_DIST_NORMAL, &seed);
			size_t at = where ? rows[1] * cols[1] - 1 : 12345;
			j.w[where][at] = poison[p];
			int ok = job_same(k, RQ_RECIPE_FP32, &j, &rc, why, sizeof why) && rc == -EDOM;
			TAP_OK(ok, "%s: %s in module %d at %zu -> -EDOM: %s", what,
			       p == 0 ? "NaN" : p == 1 ? "+Inf" : "-Inf", where, at, why);
			job_free(&j);
		}
	}
	{
		struct job j;
		char why[256];
		int rc = 0;
		size_t rows[2] = {4, 4}, cols[2] = {32, 40};
		job_alloc(&j, 2, rows, cols);
		memset(j.w[0], 0, 4 * 32 * 2);
		memset(j.w[1], 0, 4 * 40 * 2);
		int ok = job_same(k, RQ_RECIPE_FP32, &j, &rc, why, sizeof why) && rc == -EINVAL;
		TAP_OK(ok, "%s: 40 columns -> -EINVAL: %s", what, why);
		job_free(&j);
	}
	{       /* a module without rows: nothing to quantize, gs from its partner */
		struct job j;
		char why[256];
		int rc = -1;
		size_t rows[2] = {0, 3}, cols[2] = {64, 64};
		job_alloc(&j, 2, rows, cols);
		kq_fill(j.w[1], rows[1], cols[1], KQ_DIST_NORMAL, &seed);
		int ok = job_same(k, RQ_RECIPE_BF16, &j, &rc, why, sizeof why) && rc == 0;
		TAP_OK(ok, "%s: [0, 64] beside [3, 64]: %s", what, why);
		job_free(&j);
	}
}

/* ---- threads ---- */

struct thr {
	int id, ok;
	char why[300];
};

static void *thread_main(void *arg)
{
	struct thr *t = arg;
	struct kq_ctx *k = NULL;
	char msg[256] = "";
	uint64_t s = 0x1234567ull + (uint64_t)t->id * 0x9E3779B9ull;
	t->ok = kq_open(0, t->id ? 64 << 10 : 0, &k, msg, sizeof msg) == 0;
	if (!t->ok) {
		snprintf(t->why, sizeof t->why, "kq_open: %s", msg);
		return NULL;
	}
	for (int it = 0; it < 12 && t->ok; it++) {
		struct job j;
		size_t rows[2] = {64 + (size_t)it * 16, 64 + (size_t)it * 16}, cols[2] = {512, 512};
		job_alloc(&j, 2, rows, cols);
		kq_fill(j.w[0], rows[0], cols[0], (enum kq_dist)(it % KQ_DIST_COUNT), &s);
		kq_fill(j.w[1], rows[1], cols[1], KQ_DIST_NORMAL, &s);
		char why[256];
		t->ok = job_same(k, (enum rq_recipe)(it % RQ_RECIPE_COUNT), &j, NULL, why, sizeof why);
		if (!t->ok)
			snprintf(t->why, sizeof t->why, "job %d: %s", it, why);
		job_free(&j);
	}
	kq_close(k);
	return NULL;
}

static void test_threads(void)
{
	pthread_t th[2];
	struct thr t[2];
	for (int i = 0; i < 2; i++) {
		memset(&t[i], 0, sizeof t[i]);
		t[i].id = i;
		pthread_create(&th[i], NULL, thread_main, &t[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	TAP_OK(t[0].ok && t[1].ok, "two threads, a context each (1 GiB, 64 KiB): %s %s",
	       t[0].ok ? "ok" : t[0].why, t[1].ok ? "ok" : t[1].why);
}

/* ---- pinned inputs, the watchdog, open errors ---- */

/* uploads: 1 resident, 2 streamed (uploaded again for step 3) */
static void test_pinned(struct kq_ctx *k, const char *what, unsigned uploads)
{
	size_t rows[2] = {300, 777}, cols[2] = {1024, 512};
	struct job j;
	char why[256], msg[256] = "";
	void *p[2] = {NULL, NULL};
	job_alloc(&j, 2, rows, cols);
	int ok = 1;
	for (int i = 0; i < 2 && ok; i++) {
		kq_fill(j.w[i], rows[i], cols[i], (enum kq_dist)i, &seed);
		ok = kq_host_alloc(k, rows[i] * cols[i] * 2, &p[i], msg, sizeof msg) == 0;
		if (ok) {
			memcpy(p[i], j.w[i], rows[i] * cols[i] * 2);
			j.gpu[i].w = p[i];
		}
	}
	unsigned long long c0 = kq_host_copied(k);
	struct kq_job_opts o = {.pinned = 3u, .timeout_s = 60};
	job_opts = &o;
	ok = ok && job_same(k, RQ_RECIPE_FP32, &j, NULL, why, sizeof why);
	job_opts = NULL;
	unsigned long long c1 = kq_host_copied(k);
	TAP_OK(ok && c1 == c0, "%s: pinned inputs (kq_host_alloc), DMA'd straight: %s, %llu "
	       "bytes memcpy'd %s", what, ok ? why : msg, c1 - c0, msg);
	job_opts = NULL;
	ok = job_same(k, RQ_RECIPE_FP32, &j, NULL, why, sizeof why);
	TAP_OK(ok && kq_host_copied(k) - c1 == uploads * (rows[0] * cols[0] + rows[1] * cols[1]) * 2,
	       "%s: the same buffers not marked pinned are memcpy'd: %s", what, why);
	for (int i = 0; i < 2; i++)
		kq_host_free(k, p[i]);
	j.gpu[0].w = j.w[0];
	j.gpu[1].w = j.w[1];
	job_free(&j);
}

static double far_clock_calls;
static double far_clock(void)        /* the deadline is taken at 0, then time flies */
{
	return far_clock_calls++ ? 1e9 : 0;
}

static void test_watchdog(void)
{
	struct kq_ctx *k = NULL;
	char msg[256] = "", why[256] = "";
	int rc = kq_open(0, 0, &k, msg, sizeof msg);
	if (rc) {
		TAP_OK(0, "watchdog: kq_open: %s", msg);
		return;
	}
	size_t rows[1] = {2048}, cols[1] = {8192};
	struct job j;
	job_alloc(&j, 1, rows, cols);
	kq_fill(j.w[0], rows[0], cols[0], KQ_DIST_NORMAL, &seed);
	struct kq_job_opts o = {.timeout_s = 1, .now = far_clock};
	float gs = 0;
	int bad = -1;
	far_clock_calls = 0;
#ifdef KQ_EMULATE
	kq_emul_hang(1);
#endif
	rc = kq_quantize_job_opt(k, RQ_RECIPE_FP32, j.gpu, 1, &o, &gs, &bad, msg, sizeof msg);
	int poisoned = kq_poisoned(k);
	char msg2[256] = "";
	int rc2 = kq_quantize_job(k, RQ_RECIPE_FP32, j.gpu, 1, &gs, &bad, msg2, sizeof msg2);
#ifdef KQ_EMULATE
	kq_emul_hang(0);
#endif
	if (rc == 0) {
		printf("# the GPU finished before its first event query: watchdog not exercised\n");
		TAP_OK(!poisoned, "watchdog: not fired, context healthy");
	} else {
		TAP_OK(rc == -ETIMEDOUT && poisoned && strstr(msg, "watchdog"), "watchdog: a passed "
		       "deadline fails the job: %d %s", rc, msg);
		TAP_OK(rc2 == -EIO && strstr(msg2, "poisoned"), "watchdog: the poisoned context "
		       "refuses the next job: %d %s", rc2, msg2);
	}
	kq_close(k);                    /* waits for the (no longer) hung work */
	k = NULL;
	rc = kq_open(0, 0, &k, msg, sizeof msg);
	TAP_OK(rc == 0 && job_same(k, RQ_RECIPE_FP32, &j, NULL, why, sizeof why),
	       "watchdog: a fresh context after close: %s", rc ? msg : why);
	kq_close(k);
	job_free(&j);
}

static void test_open_errors(void)
{
	struct kq_ctx *k = NULL;
	char msg[256] = "";
	int rc = kq_open(0, 100, &k, msg, sizeof msg);
	TAP_OK(rc == -EINVAL && !k, "kq_open with a 100-byte limit: -EINVAL: %s", msg);
	rc = kq_open(KQ_TEST_NO_DEV, 0, &k, msg, sizeof msg);
	TAP_OK(rc == -ENODEV && !k, "kq_open of a device that is not there: -ENODEV: %s", msg);
#ifdef KQ_EMULATE
	struct kq_emul_faults f = {.mem_others = (80ll << 30) - (100ll << 20)};
	kq_emul_faults_set(&f);
	rc = kq_open(0, 0, &k, msg, sizeof msg);
	TAP_OK(rc == -ENOMEM && !k, "emulated: the card full but 100 MiB: -ENOMEM: %s", msg);
	f = (struct kq_emul_faults){.busy = 1};
	kq_emul_faults_set(&f);
	rc = kq_open(0, 0, &k, msg, sizeof msg);
	TAP_OK(rc == -EBUSY && !k, "emulated: exclusive-process, taken: -EBUSY: %s", msg);
	f = (struct kq_emul_faults){.no_image = 1};
	kq_emul_faults_set(&f);
	rc = kq_open(0, 0, &k, msg, sizeof msg);
	TAP_OK(rc == -ENODEV && !k && strstr(msg, "gpu_arch"), "emulated: no kernel image: "
	       "-ENODEV: %s", msg);
	f = (struct kq_emul_faults){0};
	kq_emul_faults_set(&f);
	rc = kq_open(0, 0, &k, msg, sizeof msg);
	TAP_OK(rc == 0 && kq_context_bytes(k) == (size_t)KQ_EMUL_CONTEXT_BYTES,
	       "emulated: the context's own memory measured (%zu bytes)", kq_context_bytes(k));
	kq_close(k);
#endif
}

/* ---- the primary context ---- */

int main(void)
{
	char msg[256] = "";
	struct kq_ctx *k = NULL, *ks = NULL;
	quick = getenv("RQ_TEST_QUICK") && atoi(getenv("RQ_TEST_QUICK")) > 0;
	if (!kq_compiled())
		TAP_SKIP_ALL("built without CUDA");
	if (kq_device_count() == 0) {
		kq_open(0, 0, &k, msg, sizeof msg);   /* for the reason ("no CUDA device: ...") */
		if (strncmp(msg, "no CUDA device", 14) != 0) {
			char why[300];
			snprintf(why, sizeof why, "no CUDA device: %s", msg[0] ? msg : "none found");
			memcpy(msg, why, sizeof msg - 1);
			msg[sizeof msg - 1] = 0;
		}
		TAP_SKIP_ALL("%s", msg);
	}
	rq_pool_create(0, &pool);
	int before = primary_active();
	int rc = kq_open(0, 0, &k, msg, sizeof msg);
	TAP_OK(rc == 0, "kq_open(0, default 1 GiB): %s", rc ? msg : kq_name(k));
	if (rc)
		return tap_done();
	printf("# device: %s\n", kq_name(k));
	rc = kq_open(0, 64 << 10, &ks, msg, sizeof msg);
	TAP_OK(rc == 0, "kq_open(0, 64 KiB): streams in chunks of ~800 groups %s", msg);
	if (rc)
		return tap_done();

	test_golden(k);
	test_global_scales(k);
	test_random(k, "resident");
	test_random(ks, "streamed");
	test_fused(k, "resident");
	test_fused(ks, "streamed");
	test_refusals(k, "resident");
	test_refusals(ks, "streamed");
	if (!quick) {       /* many staging slots (2^16 groups each) with the default limit */
		struct job j;
		char why[256];
		size_t rows[2] = {2048, 2048}, cols[2] = {4096, 4096};
		job_alloc(&j, 2, rows, cols);
		kq_fill(j.w[0], rows[0], cols[0], KQ_DIST_NORMAL, &seed);
		kq_fill(j.w[1], rows[1], cols[1], KQ_DIST_WIDE, &seed);
		TAP_OK(job_same(k, RQ_RECIPE_FP32, &j, NULL, why, sizeof why),
		       "resident pair of [2048, 4096] (2 x 16 MiB, 8 staging chunks each): %s", why);
		job_free(&j);
	}
	test_pinned(k, "resident", 1);
	test_pinned(ks, "streamed", 2);
	kq_close(ks);
	kq_close(k);
	test_threads();
	test_watchdog();
	test_open_errors();

	int after = primary_active();
	if (before < 0) {
		printf("# primary context checks skipped: libcuda not loadable\n");
	} else {
		/* kq_device_count() ran already: it must not have created a context,
		 * or kq_open would take the context for someone else's and keep it */
		TAP_OK(before == 0, "no primary context before the first kq_open (%d)", before);
		TAP_OK(after == 0, "primary context released after the last kq_close (%d)", after);
	}
	rc = kq_open(0, 0, &k, msg, sizeof msg);
	TAP_OK(rc == 0, "reopen after release: %s", rc ? msg : "ok");
	if (rc == 0) {
		if (!quick)
			test_random(k, "reopened");
		kq_close(k);
	}
	rq_pool_destroy(pool);
	return tap_done();
}
