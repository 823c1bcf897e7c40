/* test_ek_cpu.c — the CPU twins of the engine kernels (kernels/ek_*_cpu.c)
 * against straightforward scalar references written here (suite unit).
 *
 *   - scalar conversions: fp16 against the compiler's _Float16 (BF16, E4M3
 *     and E2M1 are quant/'s, tested there), E4M3 saturation for the KV cache;
 *   - the NVFP4 repack: rows read back equal rq_dequant_row bit for bit, the
 *     padding is zero, and an emulation of the GPU decode (fp16x2 registers
 *     built with the kernel's shifts and masks, times the E4M3 scale in fp16)
 *     lands every weight in the mma fragment position ek.h documents;
 *   - GEMV / GEMM twins against double-precision sums, with the stated
 *     rounding points (fp16·2^e activations for NVFP4 GEMV, BF16 for GEMM)
 *     reproduced independently, and against exact activations within the
 *     rounding bound;
 *   - routers (sigmoid, softmax) against a sort-based top-k; MoE against a double
 *     composition; bias and shared-expert gate against formulas. */
#include "tests/kernels/test_ek_util.h"
#include "quant/quant.h"

#include <errno.h>
#include <stdio.h>

/* ------------------------------------------------------------ scalars */

static float ufloat(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static void test_scalars(void)
{
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		uint16_t hb = (uint16_t)h;
		_Float16 ref;
		memcpy(&ref, &hb, 2);
		float a = ek_f16_f32(hb), b = (float)ref;
		if (!(a == b && signbit(a) == signbit(b)) && !(a != a && b != b))
			bad++;
	}
	TAP_OK(bad == 0, "fp16 -> f32: all 65536 patterns equal _Float16 (%d differ)", bad);

	bad = 0;
	for (int i = 0; i < 400000; i++) {
		float f;
		if (i < 200000)         /* random bit patterns over the fp16 range and beyond */
			f = ufloat((uint32_t)tu_next() & 0xC7FFFFFFu);
		else if (i < 300000)    /* exact midpoints between fp16 neighbours */
			f = ldexpf((float)(2 * (tu_next() % 2048) + 1), -25 + (int)(tu_next() % 40));
		else
			f = tu_unif(-70000.0f, 70000.0f);
		_Float16 r = (_Float16)f;
		uint16_t rb;
		memcpy(&rb, &r, 2);
		uint16_t g = ek_f32_f16(f);
		if (g != rb && !(f != f))
			bad++;
	}
	TAP_OK(bad == 0, "f32 -> fp16 RNE: 400000 values (ties, subnormals, overflow) equal "
	       "_Float16 (%d differ)", bad);

	/* BF16, E4M3 and E2M1 are quant/'s conversions (tests/quant checks
	 * them); what the FP8 KV cache relies on beyond that: */
	TAP_OK(rq_f32_to_e4m3(1000.0f) == 0x7E && rq_f32_to_e4m3(-1e30f) == 0xFE &&
	       rq_f32_to_e4m3(INFINITY) == 0x7E && rq_f32_to_e4m3(NAN) == 0x7F,
	       "f32 -> e4m3 (FP8 KV cache) saturates to +-448, NaN -> 0x7F");
}

/* ------------------------------------------------------------- repack */

/* The GPU decode of one code word (ek_gemv.cu fp4_tile), emulated: register
 * q (0..3) as two fp16 halves, times the fp16 scale; returns the 8 values
 * in nibble order p = q + 4·half. */
static void emulate_word(uint32_t w, uint8_t s_lo, uint8_t s_hi, float out[8])
{
	uint32_t reg[4] = {((w << 9) & 0x0E000E00u) | ((w << 12) & 0x80008000u),
	                   ((w << 5) & 0x0E000E00u) | ((w << 8) & 0x80008000u),
	                   ((w << 1) & 0x0E000E00u) | ((w << 4) & 0x80008000u),
	                   ((w >> 3) & 0x0E000E00u) | (w & 0x80008000u)};
	for (int q = 0; q < 4; q++)
		for (int hf = 0; hf < 2; hf++) {
			float v = ek_f16_f32((uint16_t)(reg[q] >> (16 * hf)));
			float s = rq_e4m3_to_f32((q & 1) ? s_hi : s_lo);
			_Float16 prod = (_Float16)v * (_Float16)s;  /* the kernel's __hmul2 */
			out[q + 4 * hf] = (float)prod;
		}
}

static void test_repack_shape(int rows, int cols)
{
	struct tu_w t;
	tu_w_make(&t, EK_NVFP4, rows, cols, 1, 0.05f);
	float *a = tu_alloc(sizeof(float) * cols), *b = tu_alloc(sizeof(float) * cols);
	int bad = 0;
	for (int r = 0; r < rows; r++) {
		ek_w_row_cpu(&t.w, 0, r, a);
		rq_dequant_row(t.packed + (size_t)r * cols / 2, t.scales + (size_t)r * cols / 16, t.gs[0],
		               cols, b);
		if (memcmp(a, b, sizeof(float) * cols))
			bad++;
	}
	TAP_OK(bad == 0, "repack %dx%d: every row reads back bit-equal to rq_dequant_row", rows, cols);

	/* fragment emulation over every tile, lane and word */
	int nrt = (rows + 15) / 16, nkc = (cols + 63) / 64, frag_bad = 0, pad_bad = 0;
	for (int rt = 0; rt < nrt; rt++)
		for (int kc = 0; kc < nkc; kc++) {
			const uint8_t *tile = t.data + ((size_t)rt * nkc + kc) * 576;
			for (int lane = 0; lane < 32; lane++) {
				int g = lane / 4, i = lane % 4;
				for (int j = 0; j < 4; j++) {
					uint32_t w;
					memcpy(&w, tile + 16 * lane + 4 * j, 4);
					float v[8];
					emulate_word(w, tile[512 + 8 * g + j], tile[512 + 8 * g + 4 + j], v);
					for (int p = 0; p < 8; p++) {
						/* a0..a7 of mma.m16n8k16: register q = p % 4, element p / 4 */
						int q = p % 4, el = p / 4;
						int r = rt * 16 + g + 8 * (q & 1);
						int c = kc * 64 + 16 * j + 2 * i + 8 * (q >> 1) + el;
						if (r >= rows || c >= cols) {
							if (v[p] != 0)
								pad_bad++;
							continue;
						}
						uint8_t byte = t.packed[(size_t)r * cols / 2 + c / 2];
						float want = rq_e2m1_to_f32((c & 1) ? byte >> 4 : byte & 15) *
						             rq_e4m3_to_f32(t.scales[(size_t)r * cols / 16 + c / 16]);
						if (ldexpf(v[p], 14) != want)
							frag_bad++;
					}
				}
			}
		}
	TAP_OK(frag_bad == 0, "repack %dx%d: emulated GPU decode puts e2m1*e4m3*2^-14 (exact in fp16) "
	       "at each documented mma A position (%d wrong)", rows, cols, frag_bad);
	TAP_OK(pad_bad == 0, "repack %dx%d: padding decodes to zero", rows, cols);
	free(a);
	free(b);
	tu_w_free(&t);
}

/* --------------------------------------------------------- GEMV, GEMM */

enum { REF_EXACT, REF_F16, REF_BF16 };

/* y_ref[t][r] = Σ w·xr in double, with x as the op sees it; mag = Σ|w·x|. */
static void ref_matvec(const struct tu_w *t, int e, const float *x, int ldx, int T, int mode,
                       double *y, double *mag)
{
	int K = t->w.cols;
	float *row = tu_alloc(sizeof(float) * K);
	double *xr = tu_alloc(sizeof(double) * K);
	for (int tt = 0; tt < T; tt++) {
		const float *xt = x + (size_t)tt * ldx;
		float amax = 0;
		for (int c = 0; c < K; c++)
			amax = fabsf(xt[c]) > amax ? fabsf(xt[c]) : amax;
		int ex = amax > 0 ? 14 - ilogbf(amax) : 0;
		for (int c = 0; c < K; c++)
			xr[c] = mode == REF_F16 ? ldexp((double)(float)(_Float16)ldexpf(xt[c], ex), -ex)
			      : mode == REF_BF16 ? (double)rq_bf16_to_f32(rq_f32_to_bf16(xt[c]))
			      : (double)xt[c];
		for (int r = 0; r < t->w.rows; r++) {
			if (t->w.kind == EK_BF16) {
				const uint16_t *w = (const uint16_t *)(t->data + (size_t)e * t->w.stride) + (size_t)r * K;
				for (int c = 0; c < K; c++)
					row[c] = rq_bf16_to_f32(w[c]);
			} else {
				size_t pk = (size_t)t->w.rows * K / 2, sc = (size_t)t->w.rows * K / 16;
				rq_dequant_row(t->packed + e * pk + (size_t)r * K / 2, t->scales + e * sc + (size_t)r * K / 16,
				               t->gs[e], K, row);
			}
			double s = 0, m = 0;
			for (int c = 0; c < K; c++) {
				s += (double)row[c] * xr[c];
				m += fabs((double)row[c] * xt[c]);
			}
			y[(size_t)tt * t->w.rows + r] = s;
			mag[(size_t)tt * t->w.rows + r] = m;
		}
	}
	free(row);
	free(xr);
}

static void test_matvec(int kind, int rows, int cols, int T, int gemm)
{
	struct tu_w t;
	tu_w_make(&t, kind, rows, cols, 1, 0.05f);
	int ldx = cols + 3, ldy = rows + 5;
	float *x = tu_floats((size_t)T * ldx, -2.0f, 2.0f);
	for (int c = 0; c < cols; c += 7)
		x[c] *= 1e-3f;                               /* a spread of magnitudes */
	float *y = tu_floats((size_t)T * ldy, -1.0f, 1.0f), *y0 = tu_alloc(sizeof(float) * T * ldy);
	memcpy(y0, y, sizeof(float) * T * ldy);
	size_t n = (size_t)T * rows;
	double *ref = tu_alloc(sizeof(double) * n), *mag = tu_alloc(sizeof(double) * n);
	double *ex = tu_alloc(sizeof(double) * n), *exm = tu_alloc(sizeof(double) * n);
	float *got = tu_alloc(sizeof(float) * n);
	int mode = gemm ? REF_BF16 : kind == EK_NVFP4 ? REF_F16 : REF_EXACT;
	ref_matvec(&t, 0, x, ldx, T, mode, ref, mag);
	ref_matvec(&t, 0, x, ldx, T, REF_EXACT, ex, exm);
	for (int acc = 0; acc < 2; acc++) {
		if (gemm)
			ek_gemm_cpu(&t.w, x, ldx, y, ldy, T, acc);
		else
			ek_gemv_cpu(&t.w, x, ldx, y, ldy, T, acc);
		for (int tt = 0; tt < T; tt++)
			for (int r = 0; r < rows; r++) {
				float v = y[(size_t)tt * ldy + r];
				got[(size_t)tt * rows + r] = acc ? v - y0[(size_t)tt * ldy + r] : v;
			}
		char what[160];
		snprintf(what, sizeof what, "%s %s %dx%d T=%d%s: same rounding points", gemm ? "gemm" : "gemv",
		         kind == EK_BF16 ? "bf16" : "nvfp4", rows, cols, T, acc ? " (accumulate)" : "");
		/* accumulate: the subtraction of y0 costs one ulp of |y0| <= 1 */
		tu_close(what, got, ref, mag, n, 2e-6 * sqrt((double)cols), acc ? 2.5e-7 : 0);
		memcpy(y0, y, sizeof(float) * T * ldy);
	}
	/* against exact activations: within the activation rounding bound */
	if (gemm)
		ek_gemm_cpu(&t.w, x, ldx, y, ldy, T, 0);
	else
		ek_gemv_cpu(&t.w, x, ldx, y, ldy, T, 0);
	for (int tt = 0; tt < T; tt++)
		memcpy(got + (size_t)tt * rows, y + (size_t)tt * ldy, sizeof(float) * rows);
	double u = mode == REF_BF16 ? ldexp(1, -8) : mode == REF_F16 ? ldexp(1, -11) : 0;
	char what[160];
	snprintf(what, sizeof what, "%s %s %dx%d T=%d: within %.3g of exact activations",
	         gemm ? "gemm" : "gemv", kind == EK_BF16 ? "bf16" : "nvfp4", rows, cols, T, u);
	tu_close(what, got, ex, exm, n, u + 2e-6 * sqrt((double)cols), 0);
	free(x);
	free(y);
	free(y0);
	free(ref);
	free(mag);
	free(ex);
	free(exm);
	free(got);
	tu_w_free(&t);
}

/* ------------------------------------------------ RMSNorm fused into GEMV */

/* ek_gemv_norm_cpu against its unfused pair (ek_rmsnorm_cpu, ek_gemv_cpu):
 * y and xn bit for bit, with and without xn, accumulating or not; and y
 * against a double-precision product of the normalized x (the GEMV's
 * tolerance). zero: x all zeros (1/rms = 1/sqrt(eps), y = 0). */
static void test_gemv_norm(int kind, int rows, int cols, int T, int zero)
{
	struct tu_w t;
	tu_w_make(&t, kind, rows, cols, 1, 0.05f);
	int ldx = cols + 5, ldxn = cols + 2, ldy = rows + 3;
	float eps = 1e-6f;
	float *x = tu_floats((size_t)T * ldx, -3.0f, 3.0f), *nw = tu_floats(cols, 0.5f, 1.5f);
	for (size_t i = 0; zero && i < (size_t)T * ldx; i++)
		x[i] = 0;
	float *xn_ref = tu_alloc(sizeof(float) * T * ldxn), *xn = tu_alloc(sizeof(float) * T * ldxn);
	float *y_ref = tu_floats((size_t)T * ldy, -1.0f, 1.0f), *y = tu_alloc(sizeof(float) * T * ldy);
	float *y2 = tu_alloc(sizeof(float) * T * ldy), *y0 = tu_alloc(sizeof(float) * T * ldy);
	memcpy(y0, y_ref, sizeof(float) * T * ldy);
	int bad = 0, rc = 0;
	for (int acc = 0; acc < 2; acc++) {
		memcpy(y_ref, y0, sizeof(float) * T * ldy);
		memcpy(y, y0, sizeof(float) * T * ldy);
		memcpy(y2, y0, sizeof(float) * T * ldy);
		ek_rmsnorm_cpu(xn_ref, ldxn, x, ldx, nw, T, cols, eps);
		rc |= ek_gemv_cpu(&t.w, xn_ref, ldxn, y_ref, ldy, T, acc);
		rc |= ek_gemv_norm_cpu(&t.w, x, ldx, nw, eps, xn, ldxn, y, ldy, T, acc);
		rc |= ek_gemv_norm_cpu(&t.w, x, ldx, nw, eps, NULL, 0, y2, ldy, T, acc);
		for (int tt = 0; tt < T; tt++) {
			bad += memcmp(y + (size_t)tt * ldy, y_ref + (size_t)tt * ldy, sizeof(float) * rows) != 0;
			bad += memcmp(y2 + (size_t)tt * ldy, y_ref + (size_t)tt * ldy, sizeof(float) * rows) != 0;
			bad += memcmp(xn + (size_t)tt * ldxn, xn_ref + (size_t)tt * ldxn, sizeof(float) * cols) != 0;
		}
	}
	const char *k = kind == EK_BF16 ? "bf16" : "nvfp4";
	TAP_OK(!rc && !bad, "gemv+norm %s %dx%d T=%d%s: y and xn bit-identical to rmsnorm + gemv "
	       "twins (with and without xn, acc 0/1; %d rows differ)", k, rows, cols, T,
	       zero ? " (x = 0)" : "", bad);
	size_t n = (size_t)T * rows;
	double *ref = tu_alloc(sizeof(double) * n), *mag = tu_alloc(sizeof(double) * n);
	float *got = tu_alloc(sizeof(float) * n);
	ref_matvec(&t, 0, xn_ref, ldxn, T, kind == EK_NVFP4 ? REF_F16 : REF_EXACT, ref, mag);
	rc = ek_gemv_norm_cpu(&t.w, x, ldx, nw, eps, NULL, 0, y, ldy, T, 0);
	for (int tt = 0; tt < T; tt++)
		memcpy(got + (size_t)tt * rows, y + (size_t)tt * ldy, sizeof(float) * rows);
	char what[160];
	snprintf(what, sizeof what, "gemv+norm %s %dx%d T=%d%s: against a double product of the "
	         "normalized x", k, rows, cols, T, zero ? " (x = 0)" : "");
	tu_close(what, got, ref, mag, n, 2e-6 * sqrt((double)cols), 0);
	if (zero) {
		int nz = 0;
		for (size_t i = 0; i < n; i++)
			nz += got[i] != 0;
		TAP_OK(!rc && nz == 0, "gemv+norm %s x = 0: y = 0 (%d nonzero)", k, nz);
	}
	free(ref);
	free(mag);
	free(got);
	free(x);
	free(nw);
	free(xn_ref);
	free(xn);
	free(y_ref);
	free(y);
	free(y2);
	free(y0);
	tu_w_free(&t);
}

static void test_gemv_norm_args(void)
{
	struct tu_w t;
	tu_w_make(&t, EK_BF16, 8, 32, 1, 0.05f);
	float x[5 * 32] = {0}, nw[32], y[5 * 8], xn[5 * 32];
	for (int i = 0; i < 32; i++)
		nw[i] = 1;
	int r1 = ek_gemv_norm_cpu(&t.w, x, 32, nw, 1e-6f, xn, 32, y, 8, EK_GEMV_NORM_MAX_T + 1, 0);
	int r2 = ek_gemv_norm_cpu(&t.w, x, 32, NULL, 1e-6f, xn, 32, y, 8, 1, 0);
	int r3 = ek_gemv_norm_cpu(&t.w, x, 31, nw, 1e-6f, xn, 32, y, 8, 1, 0);
	int r4 = ek_gemv_norm_cpu(&t.w, x, 32, nw, 1e-6f, xn, 31, y, 8, 1, 0);
	TAP_OK(r1 == -EINVAL && r2 == -EINVAL && r3 == -EINVAL && r4 == -EINVAL,
	       "gemv+norm twin: T > %d, no norm weights, ldx or ldxn < cols: -EINVAL (%d %d %d %d)",
	       EK_GEMV_NORM_MAX_T, r1, r2, r3, r4);
	tu_w_free(&t);
}

/* ------------------------------------------------------------- router */

static const float *sort_key;

static int by_key(const void *a, const void *b)
{
	int i = *(const int *)a, j = *(const int *)b;
	if (sort_key[i] != sort_key[j])
		return sort_key[i] > sort_key[j] ? -1 : 1;
	return i - j;
}

static void test_route(int E, int k, int norm, float softcap)
{
	int T = 5, ldl = E + 2;
	float *l = tu_floats((size_t)T * ldl, -4.0f, 4.0f), *bias = tu_floats(E, -0.05f, 0.05f);
	for (int e = 0; e < E; e += 9)
		bias[e] = 0;
	l[3] = l[4] = l[5];                               /* a tie, broken to the lower index */
	bias[3] = bias[4] = bias[5] = 0.5f;
	int *ids = tu_alloc(sizeof(int) * T * k), *order = tu_alloc(sizeof(int) * E);
	float *wts = tu_alloc(sizeof(float) * T * k), *key = tu_alloc(sizeof(float) * E);
	float *s = tu_alloc(sizeof(float) * E);
	ek_route_cpu(l, ldl, bias, E, k, norm, softcap, ids, wts, T);
	int bad_ids = 0, bad_w = 0;
	for (int t = 0; t < T; t++) {
		double sum = 0;
		for (int e = 0; e < E; e++) {
			double v = l[(size_t)t * ldl + e];
			if (softcap > 0)
				v = tanh(v / softcap) * softcap;
			s[e] = (float)(1.0 / (1.0 + exp(-v)));
			key[e] = s[e] + bias[e];
			order[e] = e;
		}
		sort_key = key;
		qsort(order, E, sizeof(int), by_key);
		for (int j = 0; j < k; j++)
			sum += s[order[j]];
		for (int j = 0; j < k; j++) {
			if (ids[t * k + j] != order[j])
				bad_ids++;
			double want = norm ? s[order[j]] / sum : s[order[j]];
			if (fabs(wts[t * k + j] - want) > 2e-6 * fabs(want))
				bad_w++;
		}
	}
	TAP_OK(bad_ids == 0, "route E=%d k=%d norm=%d cap=%g: picks equal a sorted top-k (ties low)",
	       E, k, norm, softcap);
	TAP_OK(bad_w == 0, "route E=%d k=%d: weights within 2e-6 of sigmoid%s", E, k,
	       norm ? " / sum" : "");
	free(l);
	free(bias);
	free(ids);
	free(order);
	free(wts);
	free(key);
	free(s);
}

/* ---------------------------------------------------------------- MoE */

static void test_moe(int kind, int H, int I, int E, int k, int T)
{
	struct tu_w G, U, D;
	tu_w_make(&G, kind, I, H, E, 0.05f);
	tu_w_make(&U, kind, I, H, E, 0.05f);
	tu_w_make(&D, kind, H, I, E, 0.05f);
	int ldx = H + 4, ldo = H + 1;
	float *x = tu_floats((size_t)T * ldx, -1.0f, 1.0f), *out = tu_floats((size_t)T * ldo, -1, 1);
	float *out0 = tu_alloc(sizeof(float) * T * ldo), *got = tu_alloc(sizeof(float) * T * H);
	memcpy(out0, out, sizeof(float) * T * ldo);
	int *ids = tu_alloc(sizeof(int) * T * k);
	float *wts = tu_alloc(sizeof(float) * T * k);
	for (int t = 0; t < T; t++)
		for (int j = 0; j < k; j++) {
			ids[t * k + j] = (t * 7 + j * 3) % E;
			wts[t * k + j] = tu_unif(0.05f, 0.5f);
		}
	float scale = 2.5f;
	ek_moe_cpu(&G.w, &U.w, &D.w, ids, wts, k, scale, x, ldx, out, ldo, T, 1, NULL);
	double *ref = tu_alloc(sizeof(double) * T * H), *mag = tu_alloc(sizeof(double) * T * H);
	double *g = tu_alloc(sizeof(double) * I), *gm = tu_alloc(sizeof(double) * I);
	double *u = tu_alloc(sizeof(double) * I), *um = tu_alloc(sizeof(double) * I);
	double *dv = tu_alloc(sizeof(double) * H), *dm = tu_alloc(sizeof(double) * H);
	double *hv = tu_alloc(sizeof(double) * H), *hmg = tu_alloc(sizeof(double) * H);
	float *h = tu_alloc(sizeof(float) * I), *hb = tu_alloc(sizeof(float) * I);
	for (int t = 0; t < T; t++) {
		for (int j = 0; j < k; j++) {
			int e = ids[t * k + j];
			ref_matvec(&G, e, x + (size_t)t * ldx, ldx, 1, REF_EXACT, g, gm);
			ref_matvec(&U, e, x + (size_t)t * ldx, ldx, 1, REF_EXACT, u, um);
			for (int i = 0; i < I; i++) {
				double sg = g[i] / (1 + exp(-g[i]));
				h[i] = (float)(sg * u[i]);
				/* first-order bound of h's error per unit of activation rounding */
				hb[i] = (float)(1.1 * gm[i] * fabs(u[i]) + fabs(sg) * um[i]);
			}
			ref_matvec(&D, e, h, I, 1, REF_EXACT, dv, dm);
			ref_matvec(&D, e, hb, I, 1, REF_EXACT, hv, hmg);
			for (int r = 0; r < H; r++) {
				ref[(size_t)t * H + r] += wts[t * k + j] * dv[r];
				mag[(size_t)t * H + r] += wts[t * k + j] * (dm[r] + hmg[r]);
			}
		}
		for (int r = 0; r < H; r++) {
			got[(size_t)t * H + r] = out[(size_t)t * ldo + r] - out0[(size_t)t * ldo + r];
			ref[(size_t)t * H + r] *= scale;
			mag[(size_t)t * H + r] *= scale;
		}
	}
	double u16 = T <= EK_GEMV_MAX_T ? (kind == EK_NVFP4 ? ldexp(1, -11) : 0) : ldexp(1, -8);
	char what[128];
	snprintf(what, sizeof what, "moe %s H=%d I=%d E=%d k=%d T=%d: against a double composition",
	         kind == EK_BF16 ? "bf16" : "nvfp4", H, I, E, k, T);
	tu_close(what, got, ref, mag, (size_t)T * H, 2 * u16 + 2e-5, 5e-7);
	free(x); free(out); free(out0); free(got); free(ids); free(wts); free(ref); free(mag);
	free(g); free(gm); free(u); free(um); free(dv); free(dm); free(h); free(hb); free(hv);
	free(hmg);
	tu_w_free(&G);
	tu_w_free(&U);
	tu_w_free(&D);
}

/* The softmax router (Mixtral, Qwen MoE) against a double softmax and a
 * sorted top-k; the bias and shared-expert gate twins against formulas. */
static void test_route_softmax(int E, int k, int norm)
{
	int T = 5, ldl = E + 2;
	float *l = tu_floats((size_t)T * ldl, -4.0f, 4.0f);
	l[3] = l[4] = l[5] = 6.0f;                        /* a tie at the top, broken low */
	int *ids = tu_alloc(sizeof(int) * T * k), *order = tu_alloc(sizeof(int) * E);
	float *wts = tu_alloc(sizeof(float) * T * k), *p = tu_alloc(sizeof(float) * E);
	ek_route_softmax_cpu(l, ldl, E, k, norm, ids, wts, T);
	int bad_ids = 0, bad_w = 0;
	for (int t = 0; t < T; t++) {
		double mx = -1e30, z = 0, sum = 0;
		for (int e = 0; e < E; e++)
			mx = fmax(mx, l[(size_t)t * ldl + e]);
		for (int e = 0; e < E; e++)
			z += exp(l[(size_t)t * ldl + e] - mx);
		for (int e = 0; e < E; e++) {
			p[e] = (float)(exp(l[(size_t)t * ldl + e] - mx) / z);
			order[e] = e;
		}
		sort_key = p;
		qsort(order, E, sizeof(int), by_key);
		for (int j = 0; j < k; j++)
			sum += p[order[j]];
		for (int j = 0; j < k; j++) {
			bad_ids += ids[t * k + j] != order[j];
			double want = norm ? p[order[j]] / sum : p[order[j]];
			bad_w += fabs(wts[t * k + j] - want) > 2e-6 * fabs(want);
		}
	}
	TAP_OK(bad_ids == 0, "route_softmax E=%d k=%d: picks equal a sorted top-k of the softmax (ties "
	       "low)", E, k);
	TAP_OK(bad_w == 0, "route_softmax E=%d k=%d: weights within 2e-6 of softmax%s", E, k,
	       norm ? " / sum of the top-k" : "");
	float y[2][3] = {{1, 2, 3}, {-1, 0.5f, 4}}, b[3] = {0.25f, -2, 8}, g[2][2] = {{0, 9}, {-1, 9}};
	ek_bias_cpu(&y[0][0], 3, b, 2, 3);
	ek_sigmoid_scale_cpu(&y[0][0], 3, &g[0][0], 2, 2, 3);
	double s1 = 1 / (1 + exp(1.0));
	TAP_OK(y[0][0] == 0.625f && y[0][1] == 0 && y[0][2] == 5.5f &&
	       fabs(y[1][0] - (-0.75 * s1)) < 1e-7 && fabs(y[1][2] - 12 * s1) < 1e-6,
	       "bias then sigmoid gate per row: [%g %g %g] [%g %g %g]", y[0][0], y[0][1], y[0][2],
	       y[1][0], y[1][1], y[1][2]);
	free(l);
	free(ids);
	free(order);
	free(wts);
	free(p);
}

int main(void)
{
	test_scalars();
	test_repack_shape(16, 64);
	test_repack_shape(48, 192);
	test_repack_shape(20, 48);
	test_repack_shape(3, 16);
	test_repack_shape(40, 1056);
	test_matvec(EK_BF16, 37, 96, 1, 0);
	test_matvec(EK_BF16, 64, 3072, 3, 0);
	test_matvec(EK_BF16, 33, 100, 16, 0);
	test_matvec(EK_NVFP4, 48, 3072, 1, 0);
	test_matvec(EK_NVFP4, 20, 48, 5, 0);
	test_matvec(EK_NVFP4, 32, 1024, 16, 0);
	test_matvec(EK_BF16, 40, 256, 20, 1);
	test_matvec(EK_NVFP4, 40, 320, 20, 1);
	test_gemv_norm(EK_BF16, 37, 96, 1, 0);
	test_gemv_norm(EK_BF16, 64, 3072, 3, 0);
	test_gemv_norm(EK_NVFP4, 48, 3072, 1, 0);
	test_gemv_norm(EK_NVFP4, 20, 48, 4, 0);
	test_gemv_norm(EK_BF16, 16, 64, 2, 1);
	test_gemv_norm_args();
	test_route(256, 10, 1, 0.0f);
	test_route(64, 8, 0, 30.0f);
	test_route(8, 2, 1, 0.0f);
	test_route_softmax(8, 2, 1);
	test_route_softmax(60, 4, 0);
	test_route_softmax(128, 8, 1);
	test_moe(EK_NVFP4, 64, 32, 8, 2, 1);
	test_moe(EK_BF16, 64, 32, 8, 2, 3);
	test_moe(EK_NVFP4, 128, 64, 16, 4, 20);
	return tap_done();
}
