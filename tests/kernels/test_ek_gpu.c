/* test_ek_gpu.c — every CUDA engine kernel against its CPU twin on the same
 * inputs (suite gpu). SKIP (exit 77, reason printed) when built without CUDA
 * or when ek_device_count() == 0.
 *
 * Tolerances (GPU − twin), stated per op:
 *   integer work (fills, NVFP4 repack, router picks, embedding, add): exact;
 *   GEMV / GEMM: 1e-5 · Σ|w·x| (summation order, FMA, tensor-core sums);
 *   RMSNorm, SwiGLU, RoPE: 2e-6 relative + 1e-6 · |x| (libm vs CUDA ulps);
 *   attention: 2e-5 · max|v| · gate (the twin cuts keys into the kernel's
 *   chunks, splits and merge; differences: fmaf vs multiply-add, exp ulps);
 *   MoE: 2^-10 · magnitude for NVFP4 experts (a token's fp16 exponent may
 *   land on the other side of a power of two), 1e-5 for BF16 experts.
 *   observer (ek_obs_*): maxima and counts exact; ek_moe_obs's down maxima
 *   2e-3 (GEMV) / 1e-2 (GEMM) relative, its output ek_moe's bit for bit.
 * Also: counters left at zero (each stateful op run twice), a decode step
 * captured in a CUDA graph and replayed at a new position, copy bandwidth. */
#include "tests/kernels/test_ek_dev.h"

#include <stdio.h>

/* When set, test_moe / test_attn use these work buffers as they are (sized
 * for the largest T, zeroed once): counters must survive calls of any T. */
static void *shared_moe_work, *shared_attn_work;

static int ok_rc(int rc, const char *what)
{
	if (rc)
		printf("# %s: rc %d: %s\n", what, rc, ek_error(D));
	return rc == 0;
}

/* ------------------------------------------------------ fills, repack */

static void test_fills_repack(void)
{
	size_t n = 3000001;
	uint16_t *h = tu_alloc(2 * n), *g = tu_alloc(2 * n), *dd = ek_alloc(D, 2 * n);
	ek_fill_bf16_cpu(h, n, 0.03f, 99);
	int ok = ok_rc(ek_fill_bf16(D, dd, n, 0.03f, 99), "fill");
	down(g, dd, 2 * n);
	TAP_OK(ok && !memcmp(g, h, 2 * n), "fill bf16: GPU == twin (%zu values)", n);
	ek_fill_bytes_cpu((uint8_t *)h, n, 3, 200, 5);
	ok = ok_rc(ek_fill_bytes(D, (uint8_t *)dd, n, 3, 200, 5), "fill bytes");
	down(g, dd, n);
	TAP_OK(ok && !memcmp(g, h, n), "fill bytes: GPU == twin");
	ek_free(D, dd);
	free(h);
	free(g);

	int shapes[][2] = {{16, 64}, {20, 48}, {3, 16}, {1024, 3072}, {3072, 1024}, {100, 1056}};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int rows = shapes[s][0], cols = shapes[s][1];
		struct tu_w t;
		tu_w_make(&t, EK_NVFP4, rows, cols, 1, 0.05f);
		size_t pk = (size_t)rows * cols / 2, sc = (size_t)rows * cols / 16, ob = t.w.stride;
		uint8_t *dp = up(t.packed, pk), *ds = up(t.scales, sc), *dout = ek_alloc(D, ob);
		uint8_t *got = tu_alloc(ob);
		ek_memset(D, dout, 0xAA, ob);
		ok = ok_rc(ek_nvfp4_repack(D, dp, ds, rows, cols, dout), "repack");
		down(got, dout, ob);
		TAP_OK(ok && !memcmp(got, t.data, ob), "nvfp4 repack %dx%d: GPU == twin byte for byte "
		       "(padding included)", rows, cols);
		ek_free(D, dp);
		ek_free(D, ds);
		ek_free(D, dout);
		free(got);
		tu_w_free(&t);
	}
}

/* ------------------------------------------------------- GEMV, GEMM */

static void test_matvec(int kind, int rows, int cols, int T, int gemm, int acc)
{
	struct tu_w t;
	tu_w_make(&t, kind, rows, cols, 1, 0.05f);
	int ldx = cols % 8 ? cols + 1 : cols + 4, ldy = rows + 3;
	float *x = tu_floats((size_t)T * ldx, -2, 2), *y = tu_floats((size_t)T * ldy, -1, 1);
	float *yg = tu_alloc(sizeof(float) * T * ldy);
	struct ek_w w = wdev(&t);
	float *dx = up(x, sizeof(float) * T * ldx), *dy = up(y, sizeof(float) * T * ldy);
	int rc = gemm ? ek_gemm(D, &w, dx, ldx, dy, ldy, T, acc) : ek_gemv(D, &w, dx, ldx, dy, ldy, T, acc);
	int ok = ok_rc(rc, "matvec");
	down(yg, dy, sizeof(float) * T * ldy);
	if (gemm)
		ek_gemm_cpu(&t.w, x, ldx, y, ldy, T, acc);
	else
		ek_gemv_cpu(&t.w, x, ldx, y, ldy, T, acc);
	float *mag = matvec_mag(&t.w, 0, x, ldx, T);
	float *g2 = tu_alloc(sizeof(float) * T * rows), *c2 = tu_alloc(sizeof(float) * T * rows);
	for (int tt = 0; tt < T; tt++) {
		memcpy(g2 + (size_t)tt * rows, yg + (size_t)tt * ldy, sizeof(float) * rows);
		memcpy(c2 + (size_t)tt * rows, y + (size_t)tt * ldy, sizeof(float) * rows);
	}
	char what[128];
	snprintf(what, sizeof what, "%s %s %dx%d T=%d%s: GPU vs twin", gemm ? "gemm" : "gemv",
	         kind == EK_BF16 ? "bf16" : "nvfp4", rows, cols, T, acc ? " acc" : "");
	if (ok)
		tu_close_f(what, g2, c2, mag, (size_t)T * rows, 1e-5, acc ? 3e-7 : 1e-30);
	else
		TAP_OK(0, "%s", what);
	free(x); free(y); free(yg); free(mag); free(g2); free(c2);
	ek_free(D, dx);
	ek_free(D, dy);
	wdev_free(&w);
	tu_w_free(&t);
}

/* --------------------------------------------------------- router, MoE */

static void test_route(void)
{
	int E = 256, k = 10, T = 6;
	float *l = tu_floats((size_t)T * E, -4, 4), *bias = tu_floats(E, -0.05f, 0.05f);
	int *ids = tu_alloc(sizeof(int) * T * k), *gids = tu_alloc(sizeof(int) * T * k);
	float *wts = tu_alloc(sizeof(float) * T * k), *gw = tu_alloc(sizeof(float) * T * k);
	float *dl = up(l, sizeof(float) * T * E), *db = up(bias, sizeof(float) * E);
	int *did = ek_alloc(D, sizeof(int) * T * k);
	float *dw = ek_alloc(D, sizeof(float) * T * k);
	int ok = ok_rc(ek_route(D, dl, E, db, E, k, 1, 0.0f, did, dw, T), "route");
	down(gids, did, sizeof(int) * T * k);
	down(gw, dw, sizeof(float) * T * k);
	ek_route_cpu(l, E, bias, E, k, 1, 0.0f, ids, wts, T);
	TAP_OK(ok && !memcmp(ids, gids, sizeof(int) * T * k), "route E=256 k=10: GPU picks == twin");
	tu_close_f("route: GPU weights vs twin", gw, wts, NULL, (size_t)T * k, 1e-6, 1e-9);
	free(l); free(bias); free(ids); free(gids); free(wts); free(gw);
	ek_free(D, dl); ek_free(D, db); ek_free(D, did); ek_free(D, dw);
}

/* issue 18: the softmax router (Mixtral, Qwen MoE), a Linear's bias, the
 * shared-expert sigmoid gate: GPU vs twin. */
static void test_family_ops(int E, int k, int norm)
{
	int T = 7, ldl = E + 3, n = 1000;
	float *l = tu_floats((size_t)T * ldl, -4, 4);
	int *ids = tu_alloc(sizeof(int) * T * k), *gids = tu_alloc(sizeof(int) * T * k);
	float *wts = tu_alloc(sizeof(float) * T * k), *gw = tu_alloc(sizeof(float) * T * k);
	float *dl = up(l, sizeof(float) * T * ldl);
	int *did = ek_alloc(D, sizeof(int) * T * k);
	float *dw = ek_alloc(D, sizeof(float) * T * k);
	int ok = ok_rc(ek_route_softmax(D, dl, ldl, E, k, norm, did, dw, T), "route_softmax");
	down(gids, did, sizeof(int) * T * k);
	down(gw, dw, sizeof(float) * T * k);
	ek_route_softmax_cpu(l, ldl, E, k, norm, ids, wts, T);
	TAP_OK(ok && !memcmp(ids, gids, sizeof(int) * T * k), "route_softmax E=%d k=%d norm %d: GPU picks "
	       "== twin", E, k, norm);
	tu_close_f("route_softmax: GPU weights vs twin", gw, wts, NULL, (size_t)T * k, 1e-6, 1e-9);
	/* bias and sigmoid scale over strided rows */
	float *y = tu_floats((size_t)T * (n + 5), -2, 2), *b = tu_floats(n, -1, 1);
	float *yc = tu_alloc(sizeof(float) * T * (n + 5)), *yg = tu_alloc(sizeof(float) * T * (n + 5));
	memcpy(yc, y, sizeof(float) * T * (n + 5));
	float *dy = up(y, sizeof(float) * T * (n + 5)), *db = up(b, sizeof(float) * n);
	ok = ok_rc(ek_bias(D, dy, n + 5, db, T, n), "bias") &&
	     ok_rc(ek_sigmoid_scale(D, dy, n + 5, dl, ldl, T, n), "sigmoid_scale");
	down(yg, dy, sizeof(float) * T * (n + 5));
	ek_bias_cpu(yc, n + 5, b, T, n);
	ek_sigmoid_scale_cpu(yc, n + 5, l, ldl, T, n);
	if (ok)
		tu_close_f("bias + sigmoid_scale: GPU vs twin", yg, yc, NULL, (size_t)T * (n + 5), 1e-6, 1e-9);
	free(l); free(ids); free(gids); free(wts); free(gw); free(y); free(b); free(yc); free(yg);
	ek_free(D, dl); ek_free(D, did); ek_free(D, dw); ek_free(D, dy); ek_free(D, db);
}

/* issue 21: the input quantizers, GPU vs twin bit for bit (an integer-exact
 * rule on the same inputs): strided rows, magnitudes over 2^-30..2^10 and
 * zeros, out of place and in place. */
static void test_actq(int T, int cols, float gs)
{
	int ldx = cols + 16;
	float *x = tu_floats((size_t)T * ldx, -1, 1);
	for (size_t i = 0; i < (size_t)T * ldx; i++)
		x[i] = i % 11 == 0 ? 0.0f : ldexpf(x[i], (int)(tu_next() % 41) - 30);
	float *yc = tu_alloc(sizeof(float) * T * cols), *yg = tu_alloc(sizeof(float) * T * cols);
	float *dx = up(x, sizeof(float) * T * ldx), *dy = ek_alloc(D, sizeof(float) * T * cols);
	for (int f = 0; f < 2; f++) {
		const char *what = f ? "fp8 per token" : "nvfp4";
		int ok = ok_rc(f ? ek_actq_fp8(D, dx, ldx, dy, cols, T, cols)
		                 : ek_actq_nvfp4(D, dx, ldx, dy, cols, T, cols, gs), what);
		down(yg, dy, sizeof(float) * T * cols);
		if (f)
			ek_actq_fp8_cpu(x, ldx, yc, cols, T, cols);
		else
			ek_actq_nvfp4_cpu(x, ldx, yc, cols, T, cols, gs);
		TAP_OK(ok && !memcmp(yc, yg, sizeof(float) * T * cols),
		       "actq %s T=%d cols=%d gs=%g: GPU == twin bit for bit", what, T, cols, gs);
	}
	/* in place (the engine's MoE quantizes h in place) */
	float *dxi = up(x, sizeof(float) * T * ldx), *xi = tu_alloc(sizeof(float) * T * ldx);
	int ok = ok_rc(ek_actq_nvfp4(D, dxi, ldx, dxi, ldx, T, cols, gs), "actq in place");
	down(xi, dxi, sizeof(float) * T * ldx);
	ek_actq_nvfp4_cpu(x, ldx, x, ldx, T, cols, gs);
	TAP_OK(ok && !memcmp(xi, x, sizeof(float) * T * ldx), "actq nvfp4 in place T=%d cols=%d: GPU == "
	       "twin bit for bit, columns past cols untouched", T, cols);
	free(x); free(yc); free(yg); free(xi);
	ek_free(D, dx); ek_free(D, dy); ek_free(D, dxi);
}

/* ek_moe_q (W4A4 experts) against its twin. The gate/up inputs are quantized
 * from the same x on both sides (the same bits); h comes out of the GEMV in
 * each's own summation order, and a difference at an E2M1 rounding boundary
 * moves one h element by a whole step, so one token's outputs by ~1 % of
 * their magnitude: the bound is on the 90th percentile and the max of the
 * relative error, a wrong scale or slot map gives O(1) everywhere. */
static void test_moe_q(int H, int I, int E, int k, int T)
{
	struct tu_w G, U, Dn;
	tu_w_make(&G, EK_NVFP4, I, H, E, 0.05f);
	tu_w_make(&U, EK_NVFP4, I, H, E, 0.05f);
	tu_w_make(&Dn, EK_NVFP4, H, I, E, 0.05f);
	struct ek_w g = wdev(&G), u = wdev(&U), dn = wdev(&Dn);
	int ldx = H + 16, ldo = H;
	float *x = tu_floats((size_t)T * ldx, -1, 1), *out = tu_alloc(sizeof(float) * T * ldo);
	float *og = tu_alloc(sizeof(float) * T * ldo), *oc = tu_alloc(sizeof(float) * T * ldo);
	int *ids = tu_alloc(sizeof(int) * T * k);
	float *wts = tu_alloc(sizeof(float) * T * k), *gsg = tu_alloc(sizeof(float) * E);
	float *gsd = tu_alloc(sizeof(float) * E);
	for (int i = 0; i < T * k; i++) {
		ids[i] = (int)(tu_next() % E);
		wts[i] = tu_unif(0.05f, 0.3f);
	}
	for (int e = 0; e < E; e++) {   /* calibration-like scales: 2688 / amax, amax ~ 1 and ~ 0.05 */
		gsg[e] = 2688.0f / tu_unif(0.8f, 1.2f);
		gsd[e] = 2688.0f / tu_unif(0.01f, 0.1f);
	}
	memset(out, 0, sizeof(float) * T * ldo);
	size_t wb = ek_moe_work_bytes(T, k, I, H);
	void *work = ek_alloc(D, wb);
	ek_memset(D, work, 0, wb);
	float *dx = up(x, sizeof(float) * T * ldx), *dout = up(out, sizeof(float) * T * ldo);
	int *dids = up(ids, sizeof(int) * T * k);
	float *dw = up(wts, sizeof(float) * T * k), *dgsg = up(gsg, sizeof(float) * E);
	float *dgsd = up(gsd, sizeof(float) * E);
	int ok = ok_rc(ek_moe_q(D, &g, &u, &dn, dids, dw, k, 2.5f, dx, ldx, dout, ldo, T, 1, work, dgsg,
	                        dgsd), "moe_q");
	down(og, dout, sizeof(float) * T * ldo);
	memset(oc, 0, sizeof(float) * T * ldo);
	ek_moe_q_cpu(&G.w, &U.w, &Dn.w, ids, wts, k, 2.5f, x, ldx, oc, ldo, T, 1, NULL, gsg, gsd);
	double mx = 0, *rel = tu_alloc(sizeof(double) * T * H);
	for (int i = 0; i < T * H; i++)
		mx = fmax(mx, fabs(oc[i]));
	int finite = 1;
	for (int i = 0; i < T * H; i++) {
		finite &= isfinite(og[i]);
		rel[i] = fabs((double)og[i] - oc[i]) / (mx > 0 ? mx : 1);
	}
	double worst = 0;
	for (int i = 0; i < T * H; i++)
		worst = fmax(worst, rel[i]);
	int below = 0;
	for (int i = 0; i < T * H; i++)
		below += rel[i] <= 2e-3;
	TAP_OK(ok && finite && below >= 0.9 * T * H && worst <= 0.05,
	       "moe_q W4A4 H=%d I=%d E=%d k=%d T=%d (%s path): GPU vs twin, %d of %d outputs within "
	       "2e-3 x max (>= 90 %%), worst %.2e (<= 5e-2)", H, I, E, k, T,
	       T <= EK_GEMV_MAX_T ? "gemv" : "grouped gemm", below, T * H, worst);
	free(x); free(out); free(og); free(oc); free(ids); free(wts); free(gsg); free(gsd); free(rel);
	ek_free(D, work); ek_free(D, dx); ek_free(D, dout); ek_free(D, dids); ek_free(D, dw);
	ek_free(D, dgsg); ek_free(D, dgsd);
	wdev_free(&g); wdev_free(&u); wdev_free(&dn);
	tu_w_free(&G); tu_w_free(&U); tu_w_free(&Dn);
}

static void test_moe(int kind, int H, int I, int E, int k, int T)
{
	struct tu_w G, U, Dn;
	tu_w_make(&G, kind, I, H, E, 0.05f);
	tu_w_make(&U, kind, I, H, E, 0.05f);
	tu_w_make(&Dn, kind, H, I, E, 0.05f);
	struct ek_w g = wdev(&G), u = wdev(&U), dn = wdev(&Dn);
	int ldx = H + 4, ldo = H;
	float *x = tu_floats((size_t)T * ldx, -1, 1), *out = tu_floats((size_t)T * ldo, -1, 1);
	float *og = tu_alloc(sizeof(float) * T * ldo), *oc = tu_alloc(sizeof(float) * T * ldo);
	int *ids = tu_alloc(sizeof(int) * T * k);
	float *wts = tu_alloc(sizeof(float) * T * k);
	for (int i = 0; i < T * k; i++) {
		ids[i] = (int)(tu_next() % E);
		wts[i] = tu_unif(0.05f, 0.3f);
	}
	size_t wb = ek_moe_work_bytes(T, k, I, H);
	void *work = shared_moe_work;
	if (!work) {
		work = ek_alloc(D, wb);
		ek_memset(D, work, 0, wb);
	}
	float *dx = up(x, sizeof(float) * T * ldx), *dout = up(out, sizeof(float) * T * ldo);
	int *dids = up(ids, sizeof(int) * T * k);
	float *dw = up(wts, sizeof(float) * T * k);
	int ok = 1;
	for (int rep = 0; rep < 2; rep++)      /* twice: the counters must be back at zero */
		ok &= ok_rc(ek_moe(D, &g, &u, &dn, dids, dw, k, 2.5f, dx, ldx, dout, ldo, T, 1, work), "moe");
	down(og, dout, sizeof(float) * T * ldo);
	memcpy(oc, out, sizeof(float) * T * ldo);
	ek_moe_cpu(&G.w, &U.w, &Dn.w, ids, wts, k, 2.5f, x, ldx, oc, ldo, T, 1, NULL);
	ek_moe_cpu(&G.w, &U.w, &Dn.w, ids, wts, k, 2.5f, x, ldx, oc, ldo, T, 1, NULL);
	float *mag = tu_alloc(sizeof(float) * T * H);
	for (int i = 0; i < T * H; i++)
		mag[i] = 0;
	/* magnitude: scale · Σ_j w_j · Σ|D_e|·|h|, h from the twin's pieces, plus |out| */
	float *gg = tu_alloc(sizeof(float) * I), *uu = tu_alloc(sizeof(float) * I);
	for (int t = 0; t < T; t++) {
		for (int j = 0; j < k; j++) {
			struct ek_w ge = G.w, ue = U.w, de = Dn.w;
			int e = ids[t * k + j];
			ge.data = G.data + e * G.w.stride; ge.gs = G.gs ? G.gs + e : NULL; ge.n = 1;
			ue.data = U.data + e * U.w.stride; ue.gs = U.gs ? U.gs + e : NULL; ue.n = 1;
			de.data = Dn.data + e * Dn.w.stride; de.gs = Dn.gs ? Dn.gs + e : NULL; de.n = 1;
			ek_gemv_cpu(&ge, x + (size_t)t * ldx, ldx, gg, I, 1, 0);
			ek_gemv_cpu(&ue, x + (size_t)t * ldx, ldx, uu, I, 1, 0);
			ek_swiglu_cpu(gg, I, gg, I, uu, I, 1, I);
			float *m = matvec_mag(&de, 0, gg, I, 1);
			for (int r = 0; r < H; r++)
				mag[(size_t)t * H + r] += 2 * 2.5f * wts[t * k + j] * m[r];
			free(m);
		}
		for (int r = 0; r < H; r++)
			mag[(size_t)t * H + r] += fabsf(oc[(size_t)t * ldo + r]) * 1e-2f;
	}
	char what[128];
	snprintf(what, sizeof what, "moe %s H=%d I=%d E=%d k=%d T=%d (%s path, run twice): GPU vs twin",
	         kind == EK_BF16 ? "bf16" : "nvfp4", H, I, E, k, T, T <= EK_GEMV_MAX_T ? "gemv" : "grouped gemm");
	if (ok)
		tu_close_f(what, og, oc, mag, (size_t)T * H, kind == EK_NVFP4 ? ldexp(1, -10) : 1e-5, 1e-6);
	else
		TAP_OK(0, "%s", what);
	free(x); free(out); free(og); free(oc); free(ids); free(wts); free(mag); free(gg); free(uu);
	if (work != shared_moe_work)
		ek_free(D, work);
	ek_free(D, dx); ek_free(D, dout); ek_free(D, dids); ek_free(D, dw);
	wdev_free(&g); wdev_free(&u); wdev_free(&dn);
	tu_w_free(&G); tu_w_free(&U); tu_w_free(&Dn);
}

/* ------------------------------------------------ calibration observer */

/* ek_obs_amax / ek_obs_rows against their twins, bit for bit (maxima are
 * exact in any order; NaN skipped, negative rows, a skipped expert id -1,
 * a row map), and ek_moe_obs: the same output as ek_moe / ek_moe_q bit for
 * bit, and the down inputs' maxima within 2e-3 (GEMV) / 1e-2 (GEMM) of the
 * twin's (h from each side's own activation roundings and summation order). */
static void test_obs(int H, int I, int E, int k, int T, int q)
{
	int ldx = H + 8, S = T * k;
	float *x = tu_floats((size_t)T * ldx, -1, 1);
	for (int t = 0; t < T; t++)
		x[(size_t)t * ldx + (t * 7) % H] = ldexpf(1.0f + t, t % 5);   /* one large value a row */
	x[3] = NAN;
	float a0 = 0.25f, ac = a0, ag = 0;
	float *dx = up(x, sizeof(float) * T * ldx), *da = up(&a0, sizeof a0);
	int ok = ok_rc(ek_obs_amax(D, dx, ldx, T, H, da), "obs_amax") &&
	         ok_rc(ek_obs_amax(D, dx, ldx, 0, H, da), "obs_amax T=0");
	down(&ag, da, sizeof ag);
	ek_obs_amax_cpu(x, ldx, T, H, &ac);
	TAP_OK(ok && !memcmp(&ag, &ac, 4) && ac > a0, "obs_amax T=%d cols=%d: GPU == twin bit for bit "
	       "(%.9g; a NaN skipped)", T, H, ac);
	int *ids = tu_alloc(sizeof(int) * S), *map = tu_alloc(sizeof(int) * S);
	for (int i = 0; i < S; i++) {
		ids[i] = i == 1 ? -1 : (int)(tu_next() % E);
		map[i] = (i * 5 + 3) % T;   /* slot i < T reads row map[i] (m 1) */
	}
	int *dids = up(ids, sizeof(int) * S), *dmap = up(map, sizeof(int) * S);
	for (int m = 0; m < 2; m++) {
		float *amc = tu_alloc(sizeof(float) * E * 3), *amg = tu_alloc(sizeof(float) * E * 3);
		unsigned *cc = tu_alloc(sizeof(unsigned) * E * 3), *cg = tu_alloc(sizeof(unsigned) * E * 3);
		memset(amc, 0, sizeof(float) * E * 3);
		memset(cc, 0, sizeof(unsigned) * E * 3);
		float *dam = up(amc, sizeof(float) * E * 3);
		unsigned *dc = up(cc, sizeof(unsigned) * E * 3);
		/* m 0: the routed gate/up input (row = slot / k, x of the token); m 1: a row map */
		ok = ok_rc(ek_obs_rows(D, dx, ldx, m ? dmap : NULL, m ? 1 : k, m ? T : S, H, dids, E,
		                       dam + 1, dc + 1, 3), "obs_rows");
		down(amg, dam, sizeof(float) * E * 3);
		down(cg, dc, sizeof(unsigned) * E * 3);
		ek_obs_rows_cpu(x, ldx, m ? map : NULL, m ? 1 : k, m ? T : S, H, ids, E, amc + 1, cc + 1, 3);
		TAP_OK(ok && !memcmp(amg, amc, sizeof(float) * E * 3) &&
		       !memcmp(cg, cc, sizeof(unsigned) * E * 3),
		       "obs_rows E=%d k=%d T=%d (%s): maxima and counts GPU == twin bit for bit, other slots "
		       "untouched", E, k, T, m ? "row map" : "rows slot / k");
		free(amc); free(amg); free(cc); free(cg);
		ek_free(D, dam); ek_free(D, dc);
	}
	for (int i = 0; i < S; i++)
		ids[i] = (int)(tu_next() % E);
	ek_h2d(D, dids, ids, sizeof(int) * S);
	/* ek_moe_obs: the MoE's output unchanged, the down inputs' maxima */
	struct tu_w G, U, Dn;
	int kind = EK_NVFP4;
	tu_w_make(&G, kind, I, H, E, 0.05f);
	tu_w_make(&U, kind, I, H, E, 0.05f);
	tu_w_make(&Dn, kind, H, I, E, 0.05f);
	struct ek_w g = wdev(&G), u = wdev(&U), dn = wdev(&Dn);
	float *wts = tu_floats((size_t)S, 0.05f, 0.3f), *gs = tu_alloc(sizeof(float) * 2 * E);
	for (int e = 0; e < 2 * E; e++)
		gs[e] = 2688.0f / tu_unif(0.05f, 2.0f);
	x[3] = 0.5f;
	ek_h2d(D, dx, x, sizeof(float) * T * ldx);
	float *dw = up(wts, sizeof(float) * S), *dgs = up(gs, sizeof(float) * 2 * E);
	size_t wb = ek_moe_work_bytes(T, k, I, H), ob = sizeof(float) * T * H;
	void *work = ek_alloc(D, wb);
	float *o1 = ek_alloc(D, ob), *o2 = ek_alloc(D, ob), *dob = ek_alloc(D, sizeof(float) * E * 3);
	ek_memset(D, work, 0, wb);
	ek_memset(D, dob, 0, sizeof(float) * E * 3);
	const float *gsg = q ? dgs : NULL, *gsd = q ? dgs + E : NULL;
	ok = ok_rc(q ? ek_moe_q(D, &g, &u, &dn, dids, dw, k, 1.5f, dx, ldx, o1, H, T, 0, work, gsg, gsd)
	             : ek_moe(D, &g, &u, &dn, dids, dw, k, 1.5f, dx, ldx, o1, H, T, 0, work), "moe") &&
	     ok_rc(ek_moe_obs(D, &g, &u, &dn, dids, dw, k, 1.5f, dx, ldx, o2, H, T, 0, work, gsg, gsd,
	                      dob + 2, 3), "moe_obs");
	float *h1 = tu_alloc(ob), *h2 = tu_alloc(ob), *obg = tu_alloc(sizeof(float) * E * 3);
	float *obc = tu_alloc(sizeof(float) * E * 3), *oc = tu_alloc(ob);
	down(h1, o1, ob);
	down(h2, o2, ob);
	down(obg, dob, sizeof(float) * E * 3);
	memset(obc, 0, sizeof(float) * E * 3);
	ek_moe_obs_cpu(&G.w, &U.w, &Dn.w, ids, wts, k, 1.5f, x, ldx, oc, H, T, 0, NULL,
	               q ? gs : NULL, q ? gs + E : NULL, obc + 2, 3);
	double worst = 0;
	int seen = 0, others = 1;
	for (int e = 0; e < E; e++) {
		others &= obg[3 * e] == 0 && obg[3 * e + 1] == 0;
		seen += obc[3 * e + 2] > 0;
		worst = fmax(worst, fabs((double)obg[3 * e + 2] - obc[3 * e + 2]) /
		                    fmax(obc[3 * e + 2], 1e-30));
	}
	double tol = T <= EK_GEMV_MAX_T ? 2e-3 : 1e-2;   /* fp16 / BF16 activations (ek.h) */
	TAP_OK(ok && !memcmp(h1, h2, ob) && others && seen > 0 && worst <= tol,
	       "moe_obs %s H=%d I=%d E=%d k=%d T=%d (%s path): output == ek_moe%s bit for bit; down "
	       "inputs' maxima of %d experts within %.0e of the twin (worst %.2e)", q ? "W4A4" : "nvfp4",
	       H, I, E, k, T, T <= EK_GEMV_MAX_T ? "gemv" : "grouped gemm", q ? "_q" : "", seen, tol,
	       worst);
	free(x); free(ids); free(map); free(wts); free(gs); free(h1); free(h2); free(obg); free(obc);
	free(oc);
	ek_free(D, dx); ek_free(D, da); ek_free(D, dids); ek_free(D, dmap); ek_free(D, dw);
	ek_free(D, dgs); ek_free(D, work); ek_free(D, o1); ek_free(D, o2); ek_free(D, dob);
	wdev_free(&g); wdev_free(&u); wdev_free(&dn);
	tu_w_free(&G); tu_w_free(&U); tu_w_free(&Dn);
}

/* ------------------------------------------------ small ops, rope, kv */

static void test_small_ops(void)
{
	int T = 5, n = 3072;
	float *x = tu_floats((size_t)T * n, -3, 3), *w = tu_floats(n, 0.5f, 1.5f);
	float *o = tu_alloc(sizeof(float) * T * n), *og = tu_alloc(sizeof(float) * T * n);
	float *dx = up(x, sizeof(float) * T * n), *dw = up(w, sizeof(float) * n);
	float *dout = ek_alloc(D, sizeof(float) * T * n);
	int ok = ok_rc(ek_rmsnorm(D, dout, n, dx, n, dw, T, n, 1e-6f), "rmsnorm");
	down(og, dout, sizeof(float) * T * n);
	ek_rmsnorm_cpu(o, n, x, n, w, T, n, 1e-6f);
	if (ok)
		tu_close_f("rmsnorm 5x3072: GPU vs twin", og, o, NULL, (size_t)T * n, 2e-6, 1e-7);
	ok = ok_rc(ek_swiglu(D, dout, n, dx, n, dout, n, T, n), "swiglu");
	down(og, dout, sizeof(float) * T * n);
	ek_swiglu_cpu(o, n, x, n, o, n, T, n);
	if (ok)
		tu_close_f("swiglu 5x3072 (in place on u): GPU vs twin", og, o, NULL, (size_t)T * n, 2e-6, 1e-30);
	ok = ok_rc(ek_add(D, dout, dx, (size_t)T * n), "add");
	down(og, dout, sizeof(float) * T * n);
	ek_add_cpu(o, x, (size_t)T * n);
	TAP_OK(ok, "add ran");
	uint16_t *tab = tu_alloc(2 * 50 * 64);
	ek_fill_bf16_cpu(tab, 50 * 64, 1.0f, 3);
	int toks[4] = {49, 0, 17, 17};
	uint16_t *dtab = up(tab, 2 * 50 * 64);
	int *dtok = up(toks, sizeof toks);
	ok = ok_rc(ek_embed(D, dout, dtab, dtok, 4, 64), "embed");
	down(og, dout, sizeof(float) * 4 * 64);
	ek_embed_cpu(o, tab, toks, 4, 64);
	TAP_OK(ok && !memcmp(og, o, sizeof(float) * 4 * 64), "embed: GPU == twin");
	free(x); free(w); free(o); free(og); free(tab);
	ek_free(D, dx); ek_free(D, dw); ek_free(D, dout); ek_free(D, dtab); ek_free(D, dtok);
}

/* norm 0: no q/k norm weights (NULL: llama, mistral), RoPE only */
static void test_rope(int kvtype, int pos, int norm)
{
	int T = 3, nh = 72, nkv = 8, hd = 128, rot = 64, cap = 600, ldq = nh * hd, ldk = nkv * hd;
	float *q = tu_floats((size_t)T * ldq, -2, 2), *k = tu_floats((size_t)T * ldk, -2, 2);
	float *v = tu_floats((size_t)T * ldk, -2, 2), *qn = tu_floats(hd, 0.5f, 1.5f);
	float *kn = tu_floats(hd, 0.5f, 1.5f), inv[64];
	for (int i = 0; i < rot / 2; i++)
		inv[i] = powf(500000.0f, -2.0f * i / rot);
	size_t cb = ek_kv_bytes(kvtype, cap, nkv, hd);
	void *kc = tu_alloc(cb), *vc = tu_alloc(cb), *kg = tu_alloc(cb), *vg = tu_alloc(cb);
	float *dq = up(q, sizeof(float) * T * ldq), *dk = up(k, sizeof(float) * T * ldk);
	float *dv = up(v, sizeof(float) * T * ldk), *dqn = up(qn, 4 * hd), *dkn = up(kn, 4 * hd);
	float *dinv = up(inv, sizeof inv);
	int *dpos = up(&pos, sizeof pos);
	void *dkc = ek_alloc(D, cb), *dvc = ek_alloc(D, cb);
	ek_memset(D, dkc, 0, cb);
	ek_memset(D, dvc, 0, cb);
	int ok = ok_rc(ek_qk_rope_kv(D, dq, ldq, dk, ldk, dv, ldk, T, nh, nkv, hd, norm ? dqn : NULL,
	                             norm ? dkn : NULL, 1e-6f, dinv,
	                             rot, 1.4852f, dpos, dkc, dvc, kvtype, cap), "qk_rope_kv");
	float *qg = tu_alloc(sizeof(float) * T * ldq), *kgf = tu_alloc(sizeof(float) * T * ldk);
	down(qg, dq, sizeof(float) * T * ldq);
	down(kgf, dk, sizeof(float) * T * ldk);
	down(kg, dkc, cb);
	down(vg, dvc, cb);
	ek_qk_rope_kv_cpu(q, ldq, k, ldk, v, ldk, T, nh, nkv, hd, norm ? qn : NULL, norm ? kn : NULL,
	                  1e-6f, inv, rot, 1.4852f, &pos,
	                  kc, vc, kvtype, cap);
	char what[128];
	snprintf(what, sizeof what, "%s at %d (q): GPU vs twin", norm ? "qk-norm + rope" : "rope (no norm)", pos);
	float *mq = tu_alloc(sizeof(float) * T * ldq);
	for (int i = 0; i < T * ldq; i++)
		mq[i] = 2.0f;                  /* |x| after the norm is O(1): absolute tolerance */
	if (ok) {
		tu_close_f(what, qg, q, mq, (size_t)T * ldq, 2e-6, 0);
		tu_close_f("qk-norm + rope (k): GPU vs twin", kgf, k, mq, (size_t)T * ldk, 2e-6, 0);
	}
	size_t ne = (size_t)cap * nkv * hd, diff = 0;
	double ulp = kvtype == EK_KV_F32 ? 1e-5 : kvtype == EK_KV_BF16 ? 1.0 / 128 : 1.0 / 4;
	for (size_t i = 0; i < ne; i++) {
		float a, b, c, e;
		if (kvtype == EK_KV_F32) {
			a = ((float *)kg)[i]; b = ((float *)kc)[i]; c = ((float *)vg)[i]; e = ((float *)vc)[i];
		} else if (kvtype == EK_KV_BF16) {
			a = rq_bf16_to_f32(((uint16_t *)kg)[i]); b = rq_bf16_to_f32(((uint16_t *)kc)[i]);
			c = rq_bf16_to_f32(((uint16_t *)vg)[i]); e = rq_bf16_to_f32(((uint16_t *)vc)[i]);
		} else {
			a = rq_e4m3_to_f32(((uint8_t *)kg)[i]); b = rq_e4m3_to_f32(((uint8_t *)kc)[i]);
			c = rq_e4m3_to_f32(((uint8_t *)vg)[i]); e = rq_e4m3_to_f32(((uint8_t *)vc)[i]);
		}
		if (fabsf(a - b) > ulp * (fabsf(b) + 1e-3) || c != e)
			diff++;
	}
	TAP_OK(ok && diff == 0, "kv cache (%s) after rope: GPU vs twin (k within one step of the "
	       "stored type, v exact)", kvtype == EK_KV_F32 ? "f32" : kvtype == EK_KV_BF16 ? "bf16" : "fp8");
	free(q); free(k); free(v); free(qn); free(kn); free(kc); free(vc); free(kg); free(vg);
	free(qg); free(kgf); free(mq);
	ek_free(D, dq); ek_free(D, dk); ek_free(D, dv); ek_free(D, dqn); ek_free(D, dkn);
	ek_free(D, dinv); ek_free(D, dpos); ek_free(D, dkc); ek_free(D, dvc);
}

/* ------------------------------------------------------------ attention */

static void test_attn_run(int kvtype, int nh, int nkv, int hd, int T, int pos, int window, int cap,
                          int gate, int capture, int max_keys)
{
	int ldq = nh * hd, ldo = nh * hd, ldg = gate == 2 ? nh * hd : nh;
	size_t ne = (size_t)cap * nkv * hd, cb = ek_kv_bytes(kvtype, cap, nkv, hd);
	uint8_t *kc = tu_alloc(cb), *vc = tu_alloc(cb);
	ek_fill_bytes_cpu(kc, cb, 0, 255, 11);
	ek_fill_bytes_cpu(vc, cb, 0, 255, 12);
	if (kvtype == EK_KV_F32)
		for (size_t i = 0; i < ne; i++) {
			((float *)kc)[i] = tu_unif(-1.5f, 1.5f);
			((float *)vc)[i] = tu_unif(-2, 2);
		}
	else if (kvtype == EK_KV_BF16) {
		ek_fill_bf16_cpu((uint16_t *)kc, ne, 1.5f, 11);
		ek_fill_bf16_cpu((uint16_t *)vc, ne, 2.0f, 12);
	} else
		for (size_t i = 0; i < ne; i++) {       /* E4M3 bytes without NaN and huge values */
			kc[i] = (uint8_t)(kc[i] & 0xBF);
			vc[i] = (uint8_t)(vc[i] & 0xBF);
		}
	float *q = tu_floats((size_t)T * ldq, -1.5f, 1.5f), *g = tu_floats((size_t)T * ldg, -3, 3);
	float *out = tu_alloc(sizeof(float) * T * ldo), *og = tu_alloc(sizeof(float) * T * ldo);
	void *dk = up(kc, cb), *dv = up(vc, cb);
	float *dq = up(q, sizeof(float) * T * ldq), *dg = up(g, sizeof(float) * T * ldg);
	float *dout = ek_alloc(D, sizeof(float) * T * ldo);
	int *dpos = up(&pos, sizeof pos);
	size_t wb = ek_attn_work_bytes(T, nh, hd, max_keys);
	void *work = shared_attn_work;
	if (!work) {
		work = ek_alloc(D, wb);
		ek_memset(D, work, 0, wb);
	}
	int ok = 1, p2 = pos;
	struct ek_graph *gr = NULL;
	if (capture) {       /* capture at one position, replay at another */
		ok &= ok_rc(ek_capture_begin(D), "capture begin");
		ok &= ok_rc(ek_attn(D, dout, ldo, dq, ldq, dg, ldg, gate, T, nh, nkv, hd, dk, dv, kvtype, cap,
		                    dpos, window, max_keys, work), "attention (captured)");
		ok &= ok_rc(ek_capture_end(D, &gr), "capture end");
		p2 = pos - 37;
		ek_h2d(D, dpos, &p2, sizeof p2);
		ok &= ok && ok_rc(ek_graph_run(D, gr), "graph run");
		ok &= ok && ok_rc(ek_graph_run(D, gr), "graph run");
	} else {
		for (int r = 0; r < 2; r++)
			ok &= ok_rc(ek_attn(D, dout, ldo, dq, ldq, dg, ldg, gate, T, nh, nkv, hd, dk, dv, kvtype,
			                    cap, dpos, window, max_keys, work), "attention");
	}
	down(og, dout, sizeof(float) * T * ldo);
	ek_attn_cpu(out, ldo, q, ldq, g, ldg, gate, T, nh, nkv, hd, kc, vc, kvtype, cap, &p2, window,
	            max_keys, NULL);
	float *mag = tu_alloc(sizeof(float) * T * ldo);
	for (int i = 0; i < T * ldo; i++)
		mag[i] = 2.0f * (gate ? 3.1f : 1.0f);   /* Σ p·|v| <= max|v|, times the gate */
	char what[160];
	snprintf(what, sizeof what, "attention %s %d/%d heads hd %d T=%d pos %d %s, cap %d, max_keys "
	         "%d%s: GPU vs twin", kvtype == EK_KV_F32 ? "f32" : kvtype == EK_KV_BF16 ? "bf16" : "fp8",
	         nh, nkv, hd, T, p2, window ? "sliding" : "full", cap, max_keys,
	         capture ? " (graph replay)" : " (run twice)");
	if (ok)
		tu_close_f(what, og, out, mag, (size_t)T * ldo, 2e-5, 0);
	else
		TAP_OK(0, "%s", what);
	ek_graph_free(gr);
	free(kc); free(vc); free(q); free(g); free(out); free(og); free(mag);
	ek_free(D, dk); ek_free(D, dv); ek_free(D, dq); ek_free(D, dg); ek_free(D, dout);
	ek_free(D, dpos);
	if (work != shared_attn_work)
		ek_free(D, work);
}

static void test_attn(int kvtype, int nh, int nkv, int hd, int T, int pos, int window, int cap,
                      int gate, int capture)
{
	test_attn_run(kvtype, nh, nkv, hd, T, pos, window, cap, gate, capture, window ? window : cap);
}

static void test_attn_mk(int kvtype, int nh, int nkv, int hd, int T, int pos, int window, int cap,
                         int gate, int max_keys)
{
	test_attn_run(kvtype, nh, nkv, hd, T, pos, window, cap, gate, 0, max_keys);
}

/* One work buffer each for MoE and attention through a sequence of batch
 * sizes, as the engine uses them (decode after prefill after decode). */
static void test_shared_work(void)
{
	size_t mb = ek_moe_work_bytes(40, 4, 128, 256), ab = ek_attn_work_bytes(16, 72, 128, 4096);
	shared_moe_work = ek_alloc(D, mb);
	shared_attn_work = ek_alloc(D, ab);
	ek_memset(D, shared_moe_work, 0, mb);
	ek_memset(D, shared_attn_work, 0, ab);
	int ts[] = {16, 1, 40, 3, 1};
	for (int i = 0; i < 5; i++) {
		printf("# shared work buffers: T = %d\n", ts[i]);
		test_moe(EK_NVFP4, 256, 128, 16, 4, ts[i]);
		if (ts[i] <= 16)
			test_attn(EK_KV_BF16, 72, 8, 128, ts[i], 3000, 0, 4096, 1, 0);
	}
	ek_free(D, shared_moe_work);
	ek_free(D, shared_attn_work);
	shared_moe_work = shared_attn_work = NULL;
}

int main(void)
{
	struct ek_info inf;
	dev_open_or_skip(&inf);
	printf("# %s, cc %d, %d SMs, %.1f GiB, cuBLAS %s\n", inf.name, inf.cc, inf.sms,
	       inf.mem_total / 1073741824.0, inf.cublas ? "loaded" : "absent");
	test_fills_repack();
	test_matvec(EK_BF16, 1000, 3072, 1, 0, 0);
	test_matvec(EK_BF16, 3072, 1024, 2, 0, 1);
	test_matvec(EK_BF16, 333, 1024, 7, 0, 0);
	test_matvec(EK_BF16, 130, 3072, 16, 0, 1);
	test_matvec(EK_BF16, 37, 100, 3, 0, 0);           /* cols % 8 != 0: scalar path */
	test_matvec(EK_NVFP4, 1024, 3072, 1, 0, 0);
	test_matvec(EK_NVFP4, 3072, 1024, 1, 0, 1);
	test_matvec(EK_NVFP4, 1000, 3072, 8, 0, 0);
	test_matvec(EK_NVFP4, 256, 3072, 16, 0, 1);
	test_matvec(EK_NVFP4, 20, 48, 3, 0, 0);           /* padded tiles */
	test_matvec(EK_NVFP4, 64, 12288, 1, 0, 0);        /* staged x in several chunks */
	test_matvec(EK_BF16, 1000, 3072, 100, 1, 0);
	test_matvec(EK_BF16, 96, 256, 20, 1, 1);
	test_matvec(EK_NVFP4, 1000, 3072, 70, 1, 0);
	test_matvec(EK_NVFP4, 20, 48, 33, 1, 1);
	test_route();
	test_moe(EK_NVFP4, 512, 256, 16, 4, 1);
	test_moe(EK_NVFP4, 512, 256, 16, 4, 3);
	test_moe(EK_BF16, 256, 128, 8, 2, 2);
	test_moe(EK_NVFP4, 256, 128, 16, 4, 40);
	test_moe(EK_BF16, 256, 128, 8, 2, 33);
	test_actq(1, 64, 2688.0f);
	test_actq(7, 3072, 1e6f);
	test_actq(40, 272, 0.5f);
	test_moe_q(512, 256, 16, 4, 3);
	test_moe_q(256, 128, 16, 4, 40);
	test_obs(256, 128, 16, 4, 3, 0);
	test_obs(256, 128, 16, 4, 3, 1);
	test_obs(256, 128, 16, 4, 41, 0);
	test_obs(256, 128, 16, 4, 41, 1);
	test_small_ops();
	test_family_ops(8, 2, 1);      /* mixtral */
	test_family_ops(60, 4, 0);     /* qwen2_moe */
	test_family_ops(128, 8, 1);    /* qwen3_moe */
	test_family_ops(1000, 32, 1);  /* the bounds: E <= 1024, k <= 32 */
	test_rope(EK_KV_F32, 5, 1);
	test_rope(EK_KV_BF16, 30000, 1);
	test_rope(EK_KV_FP8, 1000, 1);
	test_rope(EK_KV_F32, 77, 0);   /* llama, mistral: no q/k norm */
	/* RQ_TEST_QUICK=1 (compute-sanitizer runs): no 16K-key cases */
	const char *qe = getenv("RQ_TEST_QUICK");
	int quick = qe && qe[0] == '1';
	if (quick)
		printf("# RQ_TEST_QUICK=1: attention at 16K positions not run\n");
	test_attn(EK_KV_BF16, 72, 8, 128, 1, 4999, 0, 5000, 1, 0);     /* 64 splits, uneven */
	test_attn(EK_KV_F32, 48, 8, 128, 1, 700, 0, 2048, 0, 0);
	test_attn(EK_KV_BF16, 72, 8, 128, 1, 9000, 512, 512, 1, 0);   /* ring */
	test_attn(EK_KV_FP8, 6, 2, 16, 3, 40, 16, 18, 2, 0);
	/* the decode kernels (splits + merge) at Laguna S 2.1's shapes, each KV
	 * type: sliding rings (window 512; 72 heads = 3 groups of 3 per kv head)
	 * at positions 128 (3 chunks), 600 (8, wrapped) and 1024 (T = 1 and a
	 * T = 3 batch), full layers (48 heads = 2 groups of 3, max_keys 16K as
	 * the engine passes it) at 2K (33 splits) and 16K (64 splits x 4 chunks) */
	for (int kv = EK_KV_F32; kv <= EK_KV_FP8; kv++) {
		test_attn(kv, 72, 8, 128, 1, 128, 512, 512, 1, 0);
		test_attn(kv, 72, 8, 128, 1, 600, 512, 512, 1, 0);
		test_attn(kv, 72, 8, 128, 1, 1024, 512, 512, 1, 0);
		test_attn(kv, 72, 8, 128, 3, 1024, 512, 514, 1, 0);
		test_attn_mk(kv, 48, 8, 128, 1, 2048, 0, 16384, 1, 16384);
		if (!quick)
			test_attn_mk(kv, 48, 8, 128, 1, 16383, 0, 16384, 1, 16384);
	}
	test_attn_mk(EK_KV_BF16, 48, 8, 128, 16, 2000, 0, 16384, 2, 16384); /* T = 16, split path */
	test_attn(EK_KV_FP8, 40, 8, 128, 5, 3000, 0, 4096, 0, 0);    /* rep 5: groups of 3 and 2 */
	test_attn(EK_KV_FP8, 4, 1, 8, 1, 300, 100, 100, 1, 0);      /* hd 8: 8-byte FP8 vectors */
	test_attn(EK_KV_F32, 8, 2, 256, 2, 700, 0, 1024, 2, 0);     /* hd 256 */
	test_attn(EK_KV_BF16, 32, 4, 64, 7, 63, 0, 70, 1, 0);       /* hd 64, chunk boundary */
	test_attn_mk(EK_KV_F32, 12, 2, 32, 2, 1000, 0, 1100, 1, 100); /* keys > max_keys */
	test_attn(EK_KV_BF16, 72, 8, 128, 40, 100, 0, 1024, 1, 0);    /* prefill kernel */
	test_attn(EK_KV_BF16, 72, 8, 128, 64, 600, 512, 575, 1, 0);   /* prefill on a ring */
	test_attn(EK_KV_F32, 6, 2, 16, 33, 0, 16, 48, 2, 0);
	test_attn(EK_KV_BF16, 72, 8, 128, 1, 3000, 0, 4096, 1, 1);    /* graph replay */
	test_shared_work();
	double d2d = 0, h2d = 0;
	int ok = ok_rc(ek_copy_bw(D, (size_t)1 << 30, 3, &d2d, &h2d), "copy bw");
	printf("# copy bandwidth: device %.0f GB/s (read + write), host->device %.1f GB/s\n",
	       d2d / 1e9, h2d / 1e9);
	TAP_OK(ok && d2d > 0 && h2d > 0, "copy bandwidth measured");
	ek_close(D);
	return tap_done();
}
