/* test_ek_wq_gpu.c — the FP8 / INT8 / INT4 CUDA kernels against their CPU
 * twins on the same inputs (suite gpu). SKIP (exit 77, reason printed) when
 * built without CUDA or when no device is usable. Written for when a GPU is
 * lent: no device has run it yet.
 *
 *   - ek_wq_repack: byte for byte the twin's (padding and scale table
 *     included), every kind, BF16 / F16 / F32 scales, per row, per group, per
 *     tensor and 128-row blocks, odd column counts;
 *   - every code through the device's decode: a matrix whose row r holds
 *     code r in column 0 (E4M3: all 256, the cc >= 8.9 cvt included; INT8 all
 *     256; INT4 all 16) times x = e_0 with scale 1: y[r] == the code's value
 *     bit for bit (NaN codes NaN);
 *   - ek_gemv (T = 1, 3, 16), ek_gemv_norm and ek_gemm (T = 70) against the
 *     twins within 1e-5 · Σ|w·x| (summation order, FMA);
 *   - ek_moe and ek_moe_a8 (GEMV and grouped-GEMM paths) against the twins
 *     within 1e-5 of the output's magnitude (FP8 inputs: 2e-2, as an E4M3
 *     rounding of an input may flip between two summation orders). */
#include "tests/kernels/test_ek_dev.h"

#include <stdio.h>

static const int kinds[] = {EK_FP8, EK_INT8, EK_INT4};

static const char *kname(int kind)
{
	return kind == EK_FP8 ? "fp8" : kind == EK_INT8 ? "int8" : "int4";
}

static size_t ldc_of(int kind, int cols)
{
	return kind == EK_FP8 ? (size_t)cols : ((size_t)cols * (kind == EK_INT4 ? 4 : 8) + 31) / 32 * 4;
}

/* A random weight set in host memory, repacked by the twin (BF16 scales). */
static struct ek_w wq_host(int kind, int rows, int cols, int n, int gshift, uint8_t **mem)
{
	size_t one = ek_w_bytes_g(kind, rows, cols, gshift), ldc = ldc_of(kind, cols);
	int G = ((cols - 1) >> gshift) + 1;
	*mem = tu_alloc(one * n);
	uint8_t *codes = tu_alloc(ldc * rows);
	uint16_t *sc = tu_alloc(2 * (size_t)rows * G);
	for (int e = 0; e < n; e++) {
		for (size_t i = 0; i < ldc * rows; i++) {
			codes[i] = (uint8_t)tu_next();
			if (kind == EK_FP8 && (codes[i] & 0x7F) == 0x7F)
				codes[i] ^= 1;
		}
		for (size_t i = 0; i < (size_t)rows * G; i++)
			sc[i] = rq_f32_to_bf16(tu_unif(0.002f, 0.02f));
		ek_wq_repack_cpu(kind, codes, ldc, sc, EK_S_BF16, 1, rows, cols, gshift, *mem + one * e);
	}
	free(codes);
	free(sc);
	return (struct ek_w){.kind = kind, .rows = rows, .cols = cols, .n = n, .stride = one,
	                     .data = *mem, .gshift = gshift};
}

static struct ek_w on_dev(const struct ek_w *h)
{
	struct ek_w w = *h;
	w.data = up(h->data, h->stride * h->n);
	return w;
}

static void test_repack(int kind, int rows, int cols, int sd, int srb, int gshift)
{
	size_t ldc = ldc_of(kind, cols), bytes = ek_w_bytes_g(kind, rows, cols, gshift);
	int G = ((cols - 1) >> gshift) + 1, srows = (rows + srb - 1) / srb;
	size_t sb = (size_t)srows * G * (sd == EK_S_F32 ? 4 : 2);
	uint8_t *codes = tu_alloc(ldc * rows), *sc = tu_alloc(sb), *want = tu_alloc(bytes);
	uint8_t *got = tu_alloc(bytes);
	for (size_t i = 0; i < ldc * rows; i++)
		codes[i] = (uint8_t)tu_next();
	for (size_t i = 0; i < sb / (sd == EK_S_F32 ? 4 : 2); i++) {
		float f = tu_unif(1e-4f, 0.05f);
		uint16_t b = sd == EK_S_BF16 ? rq_f32_to_bf16(f) : ek_f32_f16(f);
		if (sd == EK_S_F32)
			memcpy(sc + 4 * i, &f, 4);
		else
			memcpy(sc + 2 * i, &b, 2);
	}
	ek_wq_repack_cpu(kind, codes, ldc, sc, sd, srb, rows, cols, gshift, want);
	uint8_t *dc = up(codes, ldc * rows), *ds = up(sc, sb), *dout = ek_alloc(D, bytes);
	ek_memset(D, dout, 0xAA, bytes);
	int rc = ek_wq_repack(D, kind, dc, ldc, ds, sd, srb, rows, cols, gshift, dout);
	down(got, dout, bytes);
	TAP_OK(!rc && !memcmp(got, want, bytes), "ek_wq_repack %s %dx%d, scale dtype %d, srb %d, "
	       "groups 2^%d: GPU == twin byte for byte (rc %d)", kname(kind), rows, cols, sd, srb,
	       gshift, rc);
	ek_free(D, dc);
	ek_free(D, ds);
	ek_free(D, dout);
	free(codes);
	free(sc);
	free(want);
	free(got);
}

/* Every code of a kind through the device's GEMV: y[r] = value(code r) · 1 · 1. */
static void test_every_code(int kind)
{
	int n = kind == EK_INT4 ? 16 : 256, cols = 16;
	size_t ldc = ldc_of(kind, cols), bytes = ek_w_bytes(kind, n, cols);
	uint8_t *codes = tu_alloc(ldc * n), *w = tu_alloc(bytes);
	uint16_t *sc = tu_alloc(2 * n);
	for (int r = 0; r < n; r++) {
		uint8_t z = kind == EK_FP8 ? 0 : kind == EK_INT8 ? 0x80 : 0x88;
		memset(codes + ldc * r, z, ldc);
		codes[ldc * r] = kind == EK_INT4 ? (uint8_t)(0x80 | r) : (uint8_t)r;
		sc[r] = rq_f32_to_bf16(1.0f);
	}
	ek_wq_repack_cpu(kind, codes, ldc, sc, EK_S_BF16, 1, n, cols, EK_GSHIFT_ROW, w);
	struct ek_w h = {.kind = kind, .rows = n, .cols = cols, .n = 1, .stride = bytes, .data = w,
	                 .gshift = EK_GSHIFT_ROW};
	struct ek_w dw = on_dev(&h);
	float x[16] = {1}, y[256];
	float *dx = up(x, sizeof x), *dy = ek_alloc(D, sizeof y);
	int rc = ek_gemv(D, &dw, dx, 16, dy, n, 1, 0), bad = 0;
	down(y, dy, sizeof(float) * n);
	for (int r = 0; r < n; r++) {
		float want = kind == EK_FP8 ? rq_e4m3_to_f32((uint8_t)r) : (float)(r - (n == 16 ? 8 : 128));
		bad += !(memcmp(&y[r], &want, 4) == 0 || (y[r] != y[r] && want != want));
	}
	TAP_OK(!rc && !bad, "%s: all %d codes through the device's decode == their values bit for bit "
	       "(%d wrong, rc %d)", kname(kind), n, bad, rc);
	ek_free(D, (void *)dw.data);
	ek_free(D, dx);
	ek_free(D, dy);
	free(codes);
	free(w);
	free(sc);
}

static void test_matvec(int kind, int rows, int cols, int T, int gshift, int op)
{
	uint8_t *mem;
	struct ek_w h = wq_host(kind, rows, cols, 1, gshift, &mem), dw = on_dev(&h);
	int ldx = cols + 4, ldy = rows + 1;
	float *x = tu_floats((size_t)T * ldx, -2, 2), *y0 = tu_floats((size_t)T * ldy, -1, 1);
	float *nw = tu_floats(cols, 0.5f, 1.5f), *yc = tu_alloc(sizeof(float) * T * ldy);
	float *yg = tu_alloc(sizeof(float) * T * ldy), *xn = tu_alloc(sizeof(float) * T * ldx);
	memcpy(yc, y0, sizeof(float) * T * ldy);
	float *dx = up(x, sizeof(float) * T * ldx), *dy = up(y0, sizeof(float) * T * ldy);
	float *dnw = up(nw, sizeof(float) * cols), *dxn = ek_alloc(D, sizeof(float) * T * ldx);
	int acc = T != 3, rc;
	const char *opn = op == 0 ? "ek_gemv" : op == 1 ? "ek_gemv_norm" : "ek_gemm";
	if (op == 1) {
		rc = ek_gemv_norm(D, &dw, dx, ldx, dnw, 1e-6f, dxn, ldx, dy, ldy, T, acc);
		ek_gemv_norm_cpu(&h, x, ldx, nw, 1e-6f, xn, ldx, yc, ldy, T, acc);
	} else {
		rc = op ? ek_gemm(D, &dw, dx, ldx, dy, ldy, T, acc) : ek_gemv(D, &dw, dx, ldx, dy, ldy, T, acc);
		(op ? ek_gemm_cpu : ek_gemv_cpu)(&h, x, ldx, yc, ldy, T, acc);
	}
	down(yg, dy, sizeof(float) * T * ldy);
	float *m = matvec_mag(&h, 0, op == 1 ? xn : x, ldx, T);
	float *gc = tu_alloc(sizeof(float) * T * rows), *cc = tu_alloc(sizeof(float) * T * rows);
	for (int t = 0; t < T; t++) {
		memcpy(gc + (size_t)t * rows, yg + (size_t)t * ldy, sizeof(float) * rows);
		memcpy(cc + (size_t)t * rows, yc + (size_t)t * ldy, sizeof(float) * rows);
	}
	char what[160];
	snprintf(what, sizeof what, "%s %s %dx%d T=%d groups 2^%d%s (rc %d)", opn, kname(kind), rows,
	         cols, T, gshift, acc ? " acc" : "", rc);
	tu_close_f(what, gc, cc, m, (size_t)T * rows, 1e-5, acc ? 1e-6 : 1e-30);
	ek_free(D, (void *)dw.data);
	ek_free(D, dx);
	ek_free(D, dy);
	ek_free(D, dnw);
	ek_free(D, dxn);
	free(mem);
	free(x);
	free(y0);
	free(nw);
	free(yc);
	free(yg);
	free(xn);
	free(m);
	free(gc);
	free(cc);
}

static void test_moe(int kind, int H, int I, int E, int k, int T, int a8)
{
	uint8_t *mg, *mu, *md;
	struct ek_w G = wq_host(kind, I, H, E, 7, &mg), U = wq_host(kind, I, H, E, 7, &mu);
	struct ek_w Dn = wq_host(kind, H, I, E, 7, &md);
	struct ek_w dG = on_dev(&G), dU = on_dev(&U), dD = on_dev(&Dn);
	int S = T * k, *ids = tu_alloc(sizeof(int) * S);
	float *wts = tu_alloc(sizeof(float) * S), *x = tu_floats((size_t)T * H, -2, 2);
	for (int s = 0; s < S; s++) {
		ids[s] = (s * 7 + 1) % E;
		wts[s] = tu_unif(0.1f, 1.0f);
	}
	float *oc = tu_alloc(sizeof(float) * T * H), *og = tu_alloc(sizeof(float) * T * H);
	size_t wb = ek_moe_work_bytes(T, k, I, H);
	void *work = ek_alloc(D, wb);
	int *dids = up(ids, sizeof(int) * S);
	float *dw = up(wts, sizeof(float) * S), *dx = up(x, sizeof(float) * T * H);
	float *dout = ek_alloc(D, sizeof(float) * T * H);
	ek_memset(D, work, 0, wb);
	int rc = a8 ? ek_moe_a8(D, &dG, &dU, &dD, dids, dw, k, 1.5f, dx, H, dout, H, T, 0, work, NULL, 0)
	            : ek_moe(D, &dG, &dU, &dD, dids, dw, k, 1.5f, dx, H, dout, H, T, 0, work);
	(a8 ? ek_moe_a8_cpu(&G, &U, &Dn, ids, wts, k, 1.5f, x, H, oc, H, T, 0, NULL, NULL, 0)
	    : ek_moe_cpu(&G, &U, &Dn, ids, wts, k, 1.5f, x, H, oc, H, T, 0, NULL));
	down(og, dout, sizeof(float) * T * H);
	double mx = 0;
	for (int i = 0; i < T * H; i++)
		mx = fmax(mx, fabs(oc[i]));
	char what[160];
	snprintf(what, sizeof what, "%s %s experts E=%d k=%d T=%d [%d -> %d] (rc %d)",
	         a8 ? "ek_moe_a8" : "ek_moe", kname(kind), E, k, T, H, I, rc);
	tu_close_f(what, og, oc, NULL, (size_t)T * H, 0, (a8 ? 2e-2 : 1e-5) * mx);
	ek_free(D, (void *)dG.data);
	ek_free(D, (void *)dU.data);
	ek_free(D, (void *)dD.data);
	ek_free(D, work);
	ek_free(D, dids);
	ek_free(D, dw);
	ek_free(D, dx);
	ek_free(D, dout);
	free(mg);
	free(mu);
	free(md);
	free(ids);
	free(wts);
	free(x);
	free(oc);
	free(og);
}

int main(void)
{
	struct ek_info inf;
	dev_open_or_skip(&inf);
	printf("# %s, cc %d (E4M3 decode: %s)\n", inf.name, inf.cc,
	       inf.cc >= 89 ? "the GPU's cvt" : "ek_e4m3_f32's bits");
	for (int i = 0; i < 3; i++) {
		int kind = kinds[i];
		test_repack(kind, 64, 3072, EK_S_BF16, 1, EK_GSHIFT_ROW);
		test_repack(kind, 37, 1000, EK_S_F16, 1, 7);
		test_repack(kind, 300, 333, EK_S_F32, 128, 7);
		test_repack(kind, 9, 47, EK_S_BF16, 9, EK_GSHIFT_ROW);
		test_every_code(kind);
		test_matvec(kind, 1000, 3072, 1, EK_GSHIFT_ROW, 0);
		test_matvec(kind, 3072, 1024, 3, 7, 0);
		test_matvec(kind, 333, 1056, 16, 4, 0);
		test_matvec(kind, 37, 100, 2, EK_GSHIFT_ROW, 0);
		test_matvec(kind, 1000, 3072, 1, 7, 1);
		test_matvec(kind, 512, 2048, 4, EK_GSHIFT_ROW, 1);
		test_matvec(kind, 1000, 3072, 70, 7, 2);
		test_matvec(kind, 70, 200, 33, EK_GSHIFT_ROW, 2);
		test_moe(kind, 512, 256, 16, 4, 2, 0);
		test_moe(kind, 256, 128, 16, 4, 40, 0);
		test_moe(kind, 512, 256, 16, 4, 3, 1);
		test_moe(kind, 256, 128, 16, 4, 40, 1);
	}
	ek_close(D);
	return tap_done();
}
