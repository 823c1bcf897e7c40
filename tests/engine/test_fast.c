/* test_fast.c — the fast mode (engine/model/fastmm.h) against the oracle.
 *
 * usage: test_fast REQUANTFS GOLDEN SMOLLM2_DIR
 *
 * 1. Kernels: lg_fast_matmul vs lg_matmul on random BF16, F32, NVFP4, FP8,
 *    INT8 and INT4 Linears (with and without a bias), batches of 1..64 tokens, widths that
 *    are and are not multiples of 16. Both compute Σ w·x in binary32 in some
 *    order, so each is within γ_K·Σ|w·x| of the exact sum (γ_K = K·2^-24,
 *    FMA or not); the test holds |fast − oracle| <= 2·γ_K·Σ|w·x| + 1e-30 for
 *    every output, and that the fast kernels did run (some output differs
 *    in its bits, on a CPU with AVX2 + FMA).
 * 2. The real SmolLM2-135M (BF16, then its `export --scheme nvfp4a16`): the
 *    512 tokens of GOLDEN's ppl.ids (GPL-3's first 512, the golden test's
 *    text), the first 496 as prefill batches of 64 and the last 16 decoded
 *    one at a time, by an oracle state and a fast one. The tolerance
 *    (docs/engine.md "The fast mode"): over all 512 positions
 *      max |Δlogit| <= 1e-4 · max |logit|   (the oracle's largest logit)
 *      top-1 agreement >= 99 %
 *      |ppl_fast / ppl_oracle − 1| <= 1e-5
 *    A missing model directory FAILS (tools/setup-model makes it). */
#include "engine/model/sampler.h"
#include "engine/model/fastmm.h"
#include "engine/model/fastdot.h"
#include "engine/model/fastattn.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/ops.h"
#include "base/err.h"
#include "base/pool.h"
#include "quant/quant.h"
#include "st/st.h"
#include "tests/tap.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOL_LOGIT 1e-4     /* max |Δlogit| / max |logit| */
#define TOL_TOP1 0.99      /* top-1 agreement */
#define TOL_PPL 1e-5       /* |ppl ratio − 1| */

static float frand(uint64_t *s)
{
	return (float)(tap_xorshift(s) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
}

/* Runs one Linear W (rows x cols) on T random tokens both ways and checks the
 * bound; *differs += outputs whose bits differ. Returns how many of this
 * call's outputs differ in their bits. */
static long check_linear(const struct lg_linear *W, int T, struct rq_pool *pool, uint64_t *s,
                         const char *what, long *differs)
{
	long before = *differs;
	int R = W->rows, K = W->cols;
	size_t stride = (size_t)K + 16;
	float *x = malloc(sizeof(float) * T * K), *yo = malloc(sizeof(float) * T * R);
	float *yf = malloc(sizeof(float) * T * R), *row = malloc(sizeof(float) * K);
	float *scr = malloc(sizeof(float) * 4 * stride * rq_pool_size(pool));
	for (int i = 0; i < T * K; i++)
		x[i] = frand(s);
	struct lg_mm mm = {.W = W, .x = x, .y = yo, .ldx = K, .ldy = R, .T = T};
	lg_matmul(pool, scr, stride, &mm, 1);
	mm.y = yf;
	lg_fast_matmul(pool, scr, stride, &mm, 1);
	int bad = 0;
	double worst = 0;
	for (int r = 0; r < R && !bad; r++) {
		lg_linear_row(W, r, row);
		for (int t = 0; t < T; t++) {
			double abs_sum = 0;
			for (int k = 0; k < K; k++)
				abs_sum += fabs((double)row[k] * x[(size_t)t * K + k]);
			double bound = 2.0 * K * 0x1p-24 * abs_sum + 1e-30;
			double d = fabs((double)yf[(size_t)t * R + r] - yo[(size_t)t * R + r]);
			if (d / bound > worst)
				worst = d / bound;
			if (!(d <= bound)) {
				bad = 1;
				TAP_OK(0, "%s T=%d: row %d token %d: fast %.9g oracle %.9g, |Δ| %.3g > %.3g", what,
				       T, r, t, yf[(size_t)t * R + r], yo[(size_t)t * R + r], d, bound);
				break;
			}
			uint32_t a, b;
			memcpy(&a, &yf[(size_t)t * R + r], 4);
			memcpy(&b, &yo[(size_t)t * R + r], 4);
			*differs += a != b;
		}
	}
	if (!bad)
		TAP_OK(1, "%s T=%d: within 2·K·2^-24·Σ|w·x| of the oracle (worst %.2f of it)", what, T,
		       worst);
	free(x), free(yo), free(yf), free(row), free(scr);
	return *differs - before;
}

/* An FP8 row holding a NaN code, and one whose scale is +inf: the fast
 * decode gives those rows what the oracle gives (NaN, ±inf or NaN), the other
 * rows within the bound. */
static void fp8_nan(struct rq_pool *pool)
{
	enum { R = 9, K = 64 };
	uint64_t s = 0xfeed;
	uint8_t w8[R * K];
	uint16_t qs[R];
	float x[K], yo[R], yf[R], scr[4 * (K + 16)];
	for (int i = 0; i < R * K; i++)
		w8[i] = (uint8_t)(tap_xorshift(&s) & 0x7E);
	for (int i = 0; i < R; i++)
		qs[i] = rq_f32_to_bf16(0.01f * (i + 1));
	for (int i = 0; i < K; i++)
		x[i] = frand(&s);
	w8[5 * K + 7] = 0xFF;
	qs[2] = 0x7F80;   /* +inf */
	struct lg_linear W = {.kind = LG_W_FP8, .rows = R, .cols = K, .w8 = w8,
	                      .qscale = (const uint8_t *)qs, .sdtype = LG_S_BF16, .srows = R, .groups = 1};
	struct lg_mm mm = {.W = &W, .x = x, .y = yo, .ldx = K, .ldy = R, .T = 1};
	lg_matmul(pool, scr, K + 16, &mm, 1);
	mm.y = yf;
	lg_fast_matmul(pool, scr, K + 16, &mm, 1);
	int ok = isnan(yo[5]) && isnan(yf[5]) && !isfinite(yo[2]) &&
	         (isnan(yo[2]) ? isnan(yf[2]) : yf[2] == yo[2]);
	for (int r = 0; r < R; r++)
		if (r != 5 && r != 2 && !(fabsf(yf[r] - yo[r]) <= 1e-5f * (fabsf(yo[r]) + 1.0f)))
			ok = 0;
	TAP_OK(ok, "fp8 decode with a NaN code in row 5 and an infinite scale in row 2: rows 5 and 2 "
	       "as the oracle's (%g %g, fast %g %g), the others within 1e-5", yo[5], yo[2], yf[5],
	       yf[2]);
}

/* lg_fast_attn against a binary64 softmax attention: head dims 16..256, 1..8
 * query heads per KV head (passes of 4 and a short one), 1..100 keys from a
 * slot past the start of a ring that wraps; every output within 1e-5 of the
 * largest |value| (the weights sum to 1). */
static void fast_attention(void)
{
	if (!lg_fast_attn_takes(64)) {
		TAP_OK(1, "fast attention: not taken here (no AVX-512), the oracle's runs # SKIP");
		return;
	}
	static const int hds[] = {16, 64, 128, 256}, reps[] = {1, 3, 5, 8}, ns[] = {1, 3, 17, 100};
	uint64_t s = 0xa77;
	int bad = 0, cases = 0;
	double worst = 0;
	for (int a = 0; a < 4; a++)
		for (int b = 0; b < 4; b++)
			for (int c = 0; c < 4; c++) {
				int hd = hds[a], rep = reps[b], n = ns[c], cap = n + 7, kvd = 2 * hd, lo = 9;
				float *q = malloc(sizeof(float) * rep * hd), *o = malloc(sizeof(float) * rep * hd);
				float *kc = malloc(sizeof(float) * cap * kvd), *vc = malloc(sizeof(float) * cap * kvd);
				float *sc = malloc(sizeof(float) * LG_FATTN_HEADS * n);
				double *p = malloc(sizeof(double) * n);
				for (int i = 0; i < rep * hd; i++)
					q[i] = frand(&s) * 2.0f;
				for (int i = 0; i < cap * kvd; i++) {
					kc[i] = frand(&s) * 2.0f;
					vc[i] = frand(&s);
				}
				float scale = 1.0f / sqrtf((float)hd);
				struct lg_fattn f = {.q = q, .o = o, .kc = kc, .vc = vc, .kvd = kvd, .kvh = 1, .hd = hd,
				                     .rep = rep, .cap = cap, .lo = lo, .n = n, .scale = scale, .sc = sc};
				lg_fast_attn(&f);
				for (int h = 0; h < rep; h++) {
					double mx = -INFINITY, z = 0;
					for (int j = 0; j < n; j++) {
						const float *k = kc + (size_t)((lo + j) % cap) * kvd + hd;
						double d = 0;
						for (int i = 0; i < hd; i++)
							d += (double)q[h * hd + i] * k[i];
						p[j] = d * scale;
						mx = fmax(mx, p[j]);
					}
					for (int j = 0; j < n; j++)
						z += p[j] = exp(p[j] - mx);
					for (int i = 0; i < hd; i++) {
						double r = 0;
						for (int j = 0; j < n; j++)
							r += p[j] / z * vc[(size_t)((lo + j) % cap) * kvd + hd + i];
						double e = fabs(r - o[h * hd + i]);
						worst = fmax(worst, e);
						if (!(e <= 1e-5))
							bad++;
					}
				}
				cases++;
				free(q), free(o), free(kc), free(vc), free(sc), free(p);
			}
	TAP_OK(!bad, "fast attention, %d cases (head dim 16..256, 1..8 heads per KV head, 1..100 keys "
	       "over a wrapping ring): every output within 1e-5 of binary64's (worst %.2g; %d off)",
	       cases, worst, bad);
}

static void kernels(struct rq_pool *pool)
{
	uint64_t s = 0x5eed;
	static const int Ts[] = {1, 2, 3, 5, 7, 64};
	/* gw: FP8/INT scale group width (0: one per row); 16 and 48 end groups in
	 * a 16-column step of the 4-bit dots, which otherwise take 32 a step */
	static const struct { int rows, cols, gw; } shapes[] = {
		{37, 576, 32}, {9, 336, 0}, {8, 200, 0}, {6, 40, 0}, {5, 240, 16}, {7, 144, 48}};
	long differs = 0;
	float *bias = malloc(sizeof(float) * 64);
	for (int i = 0; i < 64; i++)
		bias[i] = frand(&s);
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		int R = shapes[k].rows, K = shapes[k].cols;
		uint16_t *wb = malloc(2 * (size_t)R * K);
		float *wf = malloc(4 * (size_t)R * K);
		uint8_t *pk = malloc((size_t)R * K / 2), *sc = malloc((size_t)R * K / 16 + 1);
		for (int i = 0; i < R * K; i++) {
			wf[i] = frand(&s) * 0.1f;
			wb[i] = rq_f32_to_bf16(wf[i]);
		}
		for (int i = 0; i < R * K / 2; i++)
			pk[i] = (uint8_t)tap_xorshift(&s);
		for (int i = 0; i < R * K / 16; i++)
			sc[i] = (uint8_t)(0x20 + tap_xorshift(&s) % 0x40);   /* finite E4M3 scales */
		float div[512];
		lg_nvfp4_div_table(448.0f, div);
		/* FP8 / INT: BF16 scales per (row, group of gw columns or the whole row) */
		int G = shapes[k].gw ? K / shapes[k].gw : 1;
		uint16_t *qs = malloc(2 * (size_t)R * G);
		uint8_t *w8 = malloc((size_t)R * K), *q8 = malloc((size_t)R * K), *q4 = malloc((size_t)R * K / 2 + 4);
		for (int i = 0; i < R * G; i++)
			qs[i] = rq_f32_to_bf16(ldexpf(1.0f + frand(&s) * 0.5f, -6));
		for (int i = 0; i < R * K; i++) {
			w8[i] = (uint8_t)tap_xorshift(&s);
			if ((w8[i] & 0x7F) == 0x7F)
				w8[i] ^= 1;   /* no NaN codes */
			q8[i] = (uint8_t)tap_xorshift(&s);
		}
		for (int i = 0; i < R * K / 2; i++)
			q4[i] = (uint8_t)tap_xorshift(&s);
		struct lg_linear Ws[6] = {
			{.kind = LG_W_BF16, .rows = R, .cols = K, .w = wb},
			{.kind = LG_W_F32, .rows = R, .cols = K, .w8 = (const uint8_t *)wf, .bias = bias},
			{.kind = LG_W_NVFP4, .rows = R, .cols = K, .packed = pk, .scales = sc,
			 .global_scale = 448.0f, .gs_div = div, .bias = bias},
			{.kind = LG_W_FP8, .rows = R, .cols = K, .w8 = w8, .qscale = (const uint8_t *)qs,
			 .sdtype = LG_S_BF16, .srows = R, .groups = G},
			{.kind = LG_W_INT, .rows = R, .cols = K, .qw = q8, .bits = 8, .words = K / 4,
			 .qscale = (const uint8_t *)qs, .sdtype = LG_S_BF16, .srows = R, .groups = G},
			{.kind = LG_W_INT, .rows = R, .cols = K, .qw = q4, .bits = 4, .words = K / 8,
			 .qscale = (const uint8_t *)qs, .sdtype = LG_S_BF16, .srows = R, .groups = G, .bias = bias},
		};
		static const char *names[] = {"bf16", "f32 + bias", "nvfp4 + bias", "fp8", "int8",
		                              "int4 + bias"};
		for (int w = 0; w < 6; w++) {
			if ((Ws[w].kind == LG_W_NVFP4 && K % 16) || (Ws[w].kind == LG_W_INT && K % 8))
				continue;
			char what[96];
			snprintf(what, sizeof what, "kernels %s [%d, %d]", names[w], R, K);
			for (size_t t = 0; t < sizeof Ts / sizeof Ts[0]; t++) {
				long d = check_linear(&Ws[w], Ts[t], pool, &s, what, &differs);
				/* decode of a quantized Linear: fastdot.c's dots, where they take it */
				if (Ts[t] == 1 && w >= 2 && lg_fast_level() == 2 && lg_fast_dot_takes(&Ws[w]))
					TAP_OK(d > 0, "%s T=1: the fast decode dot ran (%ld of %d outputs "
					       "differ from the oracle in their bits)", what, d, R);
			}
		}
		free(wb), free(wf), free(pk), free(sc), free(qs), free(w8), free(q8), free(q4);
	}
	free(bias);
	if (lg_fast_level())
		TAP_OK(differs > 0, "the fast kernels ran (level %d): %ld outputs differ from the oracle "
		       "in their bits", lg_fast_level(), differs);
	else
		TAP_OK(differs == 0, "no AVX2 + FMA here: the fast mode is the oracle (%ld differ)", differs);
}

/* The logits of every position of ids[0..n): prefill batches of 64 up to
 * n − 16, then 16 decode steps. */
static int run(const struct lg_model *m, struct rq_pool *pool, int fast, const int *ids, int n,
               float *lg, struct rq_err *err)
{
	struct lg_state *st = NULL;
	int rc = lg_state_create(m, n, 64, pool, &st, err), V = m->cfg.vocab, pre = n - 16;
	if (rc)
		return rc;
	lg_state_fast(st, fast);
	for (int b = 0, T = 0; b < n && !rc; b += T) {
		T = b < pre ? (pre - b < 64 ? pre - b : 64) : 1;
		rc = lg_forward(st, ids + b, T, lg + (size_t)b * V, T, err);
	}
	if (!rc && lg_state_pos(st) != n)
		rc = rq_errf(err, -EIO, "fed %d tokens of %d", lg_state_pos(st), n);
	lg_state_free(st);
	return rc;
}

static double ppl(const float *lg, const int *ids, int n, int V)
{
	double nll = 0;
	for (int t = 0; t + 1 < n; t++) {
		const float *l = lg + (size_t)t * V;
		double mx = l[lg_argmax(l, V)], z = 0;
		for (int v = 0; v < V; v++)
			z += exp((double)l[v] - mx);
		nll += mx + log(z) - l[ids[t + 1]];
	}
	return exp(nll / (n - 1));
}

static void model(const char *dir, const char *tag, struct rq_pool *pool, const int *ids, int n)
{
	struct lg_model *m = NULL;
	struct rq_err err = {0};
	if (lg_model_open(dir, &m, &err)) {
		TAP_OK(0, "%s: %s", tag, err.msg);
		return;
	}
	int V = m->cfg.vocab;
	float *lo = malloc(sizeof(float) * n * V), *lf = malloc(sizeof(float) * n * V);
	if (!lo || !lf || run(m, pool, 0, ids, n, lo, &err) || run(m, pool, 1, ids, n, lf, &err)) {
		TAP_OK(0, "%s: forward: %s", tag, lo && lf ? err.msg : "out of memory");
		goto out;
	}
	double dmax = 0, lmax = 0;
	int agree = 0;
	for (size_t i = 0; i < (size_t)n * V; i++) {
		dmax = fmax(dmax, fabs((double)lf[i] - lo[i]));
		lmax = fmax(lmax, fabs((double)lo[i]));
	}
	for (int t = 0; t < n; t++)
		agree += lg_argmax(lo + (size_t)t * V, V) == lg_argmax(lf + (size_t)t * V, V);
	double po = ppl(lo, ids, n, V), pf = ppl(lf, ids, n, V);
	TAP_OK(dmax <= TOL_LOGIT * lmax, "%s: max |Δlogit| %.3g = %.2e · max |logit| (%.3g), <= %.0e ·",
	       tag, dmax, dmax / lmax, lmax, TOL_LOGIT);
	TAP_OK(agree >= TOL_TOP1 * n, "%s: top-1 agrees at %d of %d positions (>= %.0f %%)", tag, agree,
	       n, TOL_TOP1 * 100);
	TAP_OK(fabs(pf / po - 1) <= TOL_PPL, "%s: ppl fast %.6f oracle %.6f, |ratio − 1| %.2e <= %.0e",
	       tag, pf, po, fabs(pf / po - 1), TOL_PPL);
	TAP_OK(!lg_fast_level() || dmax > 0, "%s: the fast mode ran (its logits differ)", tag);
out:
	free(lo), free(lf);
	lg_model_close(m);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: test_fast REQUANTFS GOLDEN SMOLLM2_DIR\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct rq_pool *pool = NULL;
	if (rq_pool_create(2, &pool))
		return 1;
	kernels(pool);
	fp8_nan(pool);
	fast_attention();

	size_t len = 0;
	char *buf = tap_slurp(argv[2], &len);
	struct st_header *h = NULL;
	struct rq_err err = {0};
	long i = -1;
	if (!buf || st_parse_mem((uint8_t *)buf, len, len, argv[2], &h, &err) ||
	    (i = st_find(h, "ppl.ids")) < 0 || h->t[i].dtype != ST_I32) {
		TAP_OK(0, "%s: no I32 ppl.ids (%s)", argv[2], buf ? err.msg : "cannot read");
		goto out;
	}
	int n = (int)st_numel(&h->t[i]);
	int *ids = malloc(sizeof(int) * n);
	memcpy(ids, buf + h->data_start + h->t[i].begin, sizeof(int) * n);
	model(argv[3], "SmolLM2 bf16", pool, ids, n);

	char tmp[] = "/tmp/rq-test-fast-XXXXXX", out[64], cmd[4200];
	if (mkdtemp(tmp)) {
		snprintf(out, sizeof out, "%s/nvfp4a16", tmp);
		snprintf(cmd, sizeof cmd, "'%s' export '%s' '%s' --scheme nvfp4a16 >%s/log 2>&1", argv[1],
		         argv[3], out, tmp);
		if (system(cmd) == 0)
			model(out, "SmolLM2 nvfp4a16", pool, ids, n);
		else
			TAP_OK(0, "requantfs export --scheme nvfp4a16 failed (%s/log)", tmp);
		tap_rmtree(tmp);
	}
	free(ids);
out:
	st_header_free(h);
	free(buf);
	rq_pool_destroy(pool);
	return tap_done();
}
