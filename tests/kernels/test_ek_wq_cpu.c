/* test_ek_wq_cpu.c — the FP8 / INT8 / INT4 weights of the CUDA engine on
 * the CPU (suite unit): the repack twin (kernels/ek_wq_cpu.c) and the
 * GEMV/GEMM twins on it, against references written here and against the
 * CPU engine itself.
 *
 *   - layout: codes at row r·LDB, padding bytes the code of 0, the binary32
 *     scale table [rows][G] at its documented offset, for per-row scales,
 *     groups of 16 / 32 / 128 columns, per-tensor (srb = rows) and 128-row
 *     block scales (srb = 128), BF16 / F16 / F32 scales, odd column counts;
 *   - every weight read back (ek_w_row_cpu) == fl(v · s) computed here from the
 *     checkpoint's bytes, bit for bit;
 *   - the CPU engine's oracle: a struct lg_linear over the same bytes (FP8
 *     weight + weight_scale, pack-quantized int32 stream + weight_scale)
 *     dequantized by engine/model/ops.c lg_linear_row gives the same binary32
 *     values, bit for bit, for every scale dtype and grouping the engine
 *     accepts (its per-channel, per-group and per-tensor forms);
 *   - ek_gemv_cpu / ek_gemm_cpu against double sums of those values: within
 *     the binary32 summation bound 2·K·2^-24·Σ|w·x|;
 *   - ek_wq_repack_cpu refuses gshift < 4, srb < 1, an unknown kind. */
#include "tests/kernels/test_ek_util.h"
#include "engine/model/model.h"
#include "engine/model/ops.h"
#include "quant/quant.h"

#include <errno.h>
#include <stdio.h>

static const char *kname(int kind)
{
	return kind == EK_FP8 ? "fp8" : kind == EK_INT8 ? "int8" : "int4";
}

static const char *sname(int sd)
{
	return sd == EK_S_BF16 ? "bf16" : sd == EK_S_F16 ? "f16" : "f32";
}

/* A random checkpoint Linear: codes [rows][ldc] as the checkpoint stores them,
 * scales [srows][G] of sdtype (positive, finite). */
struct raw {
	int kind, rows, cols, sd, srb, gshift, G, srows;
	size_t ldc;
	uint8_t *codes;
	uint8_t *scales;
};

static void raw_make(struct raw *w, int kind, int rows, int cols, int sd, int srb, int gshift)
{
	*w = (struct raw){.kind = kind, .rows = rows, .cols = cols, .sd = sd, .srb = srb,
	                  .gshift = gshift};
	w->G = ((cols - 1) >> gshift) + 1;
	w->srows = (rows + srb - 1) / srb;
	/* pack-quantized rows are whole int32 words: ceil(cols · bits / 32) of them */
	w->ldc = kind == EK_FP8 ? (size_t)cols : ((size_t)cols * (kind == EK_INT4 ? 4 : 8) + 31) / 32 * 4;
	w->codes = tu_alloc(w->ldc * rows);
	for (size_t i = 0; i < w->ldc * rows; i++)
		w->codes[i] = (uint8_t)tu_next();          /* FP8 NaN codes included */
	size_t ns = (size_t)w->srows * w->G, sb = sd == EK_S_F32 ? 4 : 2;
	w->scales = tu_alloc(ns * sb);
	for (size_t i = 0; i < ns; i++) {
		float f = tu_unif(1e-4f, 0.05f);
		if (sd == EK_S_F32) {
			memcpy(w->scales + 4 * i, &f, 4);
		} else {
			uint16_t b = sd == EK_S_BF16 ? rq_f32_to_bf16(f) : ek_f32_f16(f);
			memcpy(w->scales + 2 * i, &b, 2);
		}
	}
}

static float raw_scale(const struct raw *w, int r, int c)
{
	size_t k = (size_t)(r / w->srb) * w->G + (c >> w->gshift);
	if (w->sd == EK_S_F32) {
		float f;
		memcpy(&f, w->scales + 4 * k, 4);
		return f;
	}
	uint16_t b;
	memcpy(&b, w->scales + 2 * k, 2);
	return w->sd == EK_S_BF16 ? rq_bf16_to_f32(b) : ek_f16_f32(b);
}

/* fl(v · s) of W[r][c] straight from the checkpoint's bytes */
static float raw_value(const struct raw *w, int r, int c)
{
	const uint8_t *row = w->codes + (size_t)r * w->ldc;
	float v;
	if (w->kind == EK_FP8)
		v = rq_e4m3_to_f32(row[c]);
	else if (w->kind == EK_INT8)
		v = (float)((int)row[c] - 128);
	else
		v = (float)((int)((c & 1) ? row[c / 2] >> 4 : row[c / 2] & 15) - 8);
	return v * raw_scale(w, r, c);
}

static int same_f(float a, float b)
{
	return !memcmp(&a, &b, 4) || (a != a && b != b);
}

static void test_layout(int kind, int rows, int cols, int sd, int srb, int gshift)
{
	struct raw w;
	raw_make(&w, kind, rows, cols, sd, srb, gshift);
	size_t bytes = ek_w_bytes_g(kind, rows, cols, gshift);
	uint8_t *out = tu_alloc(bytes + 64);
	memset(out, 0xEE, bytes + 64);
	int rc = ek_wq_repack_cpu(kind, w.codes, w.ldc, w.scales, sd, srb, rows, cols, gshift, out);
	struct ek_w W = {.kind = kind, .rows = rows, .cols = cols, .n = 1, .stride = bytes,
	                 .data = out, .gshift = gshift};
	float *row = tu_alloc(sizeof(float) * cols);
	int bad = 0, pad_bad = 0, sc_bad = 0;
	size_t ldb = kind == EK_INT4 ? ((size_t)cols + 31) / 32 * 16 : ((size_t)cols + 15) / 16 * 16;
	size_t soff = ((size_t)rows * ldb + 15) & ~(size_t)15;
	for (int r = 0; r < rows && !rc; r++) {
		ek_w_row_cpu(&W, 0, r, row);
		for (int c = 0; c < cols; c++)
			bad += !same_f(row[c], raw_value(&w, r, c));
		const uint8_t *o = out + (size_t)r * ldb;
		for (size_t b = 0; b < ldb; b++) {     /* padding: the code of 0 */
			int col0 = kind == EK_INT4 ? 2 * (int)b : (int)b;
			uint8_t want = kind == EK_FP8 ? 0 : kind == EK_INT8 ? 0x80 : 0x88;
			if (kind == EK_INT4 && col0 < cols)
				want = col0 + 1 < cols ? o[b] : (uint8_t)((o[b] & 0x0F) | 0x80);
			else if (col0 < cols)
				continue;
			pad_bad += o[b] != want;
		}
		const float *S = (const float *)(out + soff) + (size_t)r * w.G;
		for (int g = 0; g < w.G; g++)
			sc_bad += !same_f(S[g], raw_scale(&w, r, g << gshift));
	}
	TAP_OK(rc == 0 && bad == 0 && pad_bad == 0 && sc_bad == 0 && out[bytes] == 0xEE,
	       "repack %s %dx%d, %s scales, rows per scale row %d, groups 2^%d: every weight == "
	       "fl(v*s) from the checkpoint's bytes (%d wrong), padding the code of 0 (%d wrong), "
	       "scale table at its offset (%d wrong), nothing past ek_w_bytes_g", kname(kind), rows,
	       cols, sname(sd), srb, gshift, bad, pad_bad, sc_bad);
	free(row);
	free(out);
	free(w.codes);
	free(w.scales);
}

/* The CPU engine's own dequantization of the same bytes (ops.c lg_linear_row)
 * against the repacked weights: per channel (srows = rows, one group), per
 * group (groups = cols >> gshift) and per tensor (srows = groups = 1). */
static void test_oracle(int kind, int rows, int cols, int sd, int per_tensor, int gshift)
{
	struct raw w;
	raw_make(&w, kind, rows, cols, sd, per_tensor ? rows : 1, gshift);
	size_t bytes = ek_w_bytes_g(kind, rows, cols, gshift);
	uint8_t *out = tu_alloc(bytes);
	ek_wq_repack_cpu(kind, w.codes, w.ldc, w.scales, sd, w.srb, rows, cols, gshift, out);
	struct ek_w W = {.kind = kind, .rows = rows, .cols = cols, .n = 1, .stride = bytes,
	                 .data = out, .gshift = gshift};
	struct lg_linear L = {.kind = kind == EK_FP8 ? LG_W_FP8 : LG_W_INT, .rows = rows,
	                      .cols = cols, .qscale = w.scales, .srows = w.srows, .groups = w.G,
	                      .sdtype = sd == EK_S_BF16 ? LG_S_BF16 : sd == EK_S_F16 ? LG_S_F16
	                                                                             : LG_S_F32};
	if (kind == EK_FP8) {
		L.w8 = w.codes;
	} else {
		L.qw = w.codes;
		L.bits = kind == EK_INT4 ? 4 : 8;
		L.words = (int)(w.ldc / 4);
	}
	float *a = tu_alloc(sizeof(float) * cols), *b = tu_alloc(sizeof(float) * cols);
	int bad = 0;
	for (int r = 0; r < rows; r++) {
		ek_w_row_cpu(&W, 0, r, a);
		lg_linear_row(&L, r, b);
		for (int c = 0; c < cols; c++)
			bad += !same_f(a[c], b[c]);
	}
	TAP_OK(bad == 0, "%s %dx%d, %s scales %s: every weight == the CPU engine's (lg_linear_row) "
	       "bit for bit (%d differ)", kname(kind), rows, cols, sname(sd),
	       per_tensor ? "per tensor" : gshift == EK_GSHIFT_ROW ? "per channel" : "per group", bad);
	free(a);
	free(b);
	free(out);
	free(w.codes);
	free(w.scales);
}

/* ek_gemv_cpu (mode 0) and ek_gemm_cpu (mode 1): both fp32 x for these kinds */
static void test_products(int kind, int rows, int cols, int T, int gshift)
{
	struct raw w;
	raw_make(&w, kind, rows, cols, EK_S_BF16, 1, gshift);
	for (size_t i = 0; kind == EK_FP8 && i < w.ldc * rows; i++)
		if ((w.codes[i] & 0x7F) == 0x7F)
			w.codes[i] ^= 1;                   /* no NaN in a product test */
	size_t bytes = ek_w_bytes_g(kind, rows, cols, gshift);
	uint8_t *out = tu_alloc(bytes);
	ek_wq_repack_cpu(kind, w.codes, w.ldc, w.scales, EK_S_BF16, 1, rows, cols, gshift, out);
	struct ek_w W = {.kind = kind, .rows = rows, .cols = cols, .n = 1, .stride = bytes,
	                 .data = out, .gshift = gshift};
	int ldx = cols + 2, ldy = rows + 1;
	float *x = tu_floats((size_t)T * ldx, -2, 2), *y = tu_alloc(sizeof(float) * T * ldy);
	double *want = tu_alloc(sizeof(double) * T * rows), *mag = tu_alloc(sizeof(double) * T * rows);
	for (int t = 0; t < T; t++)
		for (int r = 0; r < rows; r++) {
			double s = 0, m = 0;
			for (int c = 0; c < cols; c++) {
				double p = (double)raw_value(&w, r, c) * x[(size_t)t * ldx + c];
				s += p;
				m += fabs(p);
			}
			want[(size_t)t * rows + r] = s;
			mag[(size_t)t * rows + r] = 2.0 * cols * ldexp(1, -24) * m;
		}
	for (int gemm = 0; gemm < 2; gemm++) {
		int rc = gemm ? ek_gemm_cpu(&W, x, ldx, y, ldy, T, 0) : ek_gemv_cpu(&W, x, ldx, y, ldy, T, 0);
		float *yc = tu_alloc(sizeof(float) * T * rows);
		for (int t = 0; t < T; t++)
			memcpy(yc + (size_t)t * rows, y + (size_t)t * ldy, sizeof(float) * rows);
		char what[128];
		snprintf(what, sizeof what, "%s %s %dx%d T=%d groups 2^%d vs double sums (rc %d)",
		         gemm ? "ek_gemm_cpu" : "ek_gemv_cpu", kname(kind), rows, cols, T, gshift, rc);
		tu_close(what, yc, want, mag, (size_t)T * rows, 1.0, 1e-30);
		free(yc);
	}
	free(x);
	free(y);
	free(want);
	free(mag);
	free(out);
	free(w.codes);
	free(w.scales);
}

static void test_args(void)
{
	uint8_t c[64] = {0}, o[4096];
	uint16_t s[8] = {0};
	TAP_OK(ek_wq_repack_cpu(EK_FP8, c, 16, s, EK_S_BF16, 1, 2, 16, 3, o) == -EINVAL &&
	       ek_wq_repack_cpu(EK_FP8, c, 16, s, EK_S_BF16, 0, 2, 16, 4, o) == -EINVAL &&
	       ek_wq_repack_cpu(EK_NVFP4, c, 16, s, EK_S_BF16, 1, 2, 16, 4, o) == -EINVAL &&
	       ek_wq_repack_cpu(EK_INT8, c, 16, s, 7, 1, 2, 16, 4, o) == -EINVAL &&
	       ek_wq_repack_cpu(EK_INT4, c, 16, s, EK_S_F16, 1, 2, 16, 4, o) == 0,
	       "ek_wq_repack_cpu: -EINVAL for groups under 16 columns, srb 0, a kind or scale dtype "
	       "it does not take");
	TAP_OK(ek_w_bytes(EK_FP8, 3, 20) == 96 + 16 && ek_w_bytes_g(EK_INT4, 3, 33, 4) == 96 + 48 &&
	       ek_w_bytes_g(EK_INT8, 2, 16, 7) == 32 + 16,
	       "ek_w_bytes_g: rows of 16-byte multiples, then the binary32 scale table rounded to 16");
}

int main(void)
{
	static const int kinds[] = {EK_FP8, EK_INT8, EK_INT4};
	for (int k = 0; k < 3; k++) {
		int kind = kinds[k];
		test_layout(kind, 5, 64, EK_S_BF16, 1, EK_GSHIFT_ROW);
		test_layout(kind, 7, 300, EK_S_F16, 1, 7);
		test_layout(kind, 9, 33, EK_S_F32, 9, EK_GSHIFT_ROW);    /* per tensor */
		test_layout(kind, 200, 272, EK_S_BF16, 128, 7);           /* 128 x 128 blocks */
		test_layout(kind, 3, 47, EK_S_BF16, 1, 4);
		for (int sd = EK_S_BF16; sd <= EK_S_F32; sd++) {
			test_oracle(kind, 6, 256, sd, 0, EK_GSHIFT_ROW);
			test_oracle(kind, 6, 256, sd, 0, 7);
			test_oracle(kind, 4, 96, sd, 1, EK_GSHIFT_ROW);
		}
		test_oracle(kind, 5, 80, EK_S_BF16, 0, 4);
		test_products(kind, 33, 512, 1, EK_GSHIFT_ROW);
		test_products(kind, 20, 384, 5, 7);
		test_products(kind, 9, 100, 20, 4);
	}
	test_args();
	return tap_done();
}
