/* test_dequant.c — the CPU engine's row dequantization of FP8 and INT
 * (pack-quantized) Linears (engine/model/ops.c lg_linear_row).
 *
 * usage: test_dequant SCHEME_GOLDEN.safetensors
 *
 * 1. Hand-made tensors against formulas written here, independently of
 *    ops.c: literal int32 words whose nibble/byte order is spelled out
 *    (column 8j+k of a W4 row in bits 4k..4k+3 of word j, unsigned field =
 *    q + 8), negative ints, odd row counts, a 3-bit stream whose fields
 *    straddle words, zero points packed down the rows, BF16/F16/F32 scales
 *    (an F16 subnormal among them), per-tensor FP8 scales, E4M3 literals.
 * 2. Golden tensors written by the real compressed-tensors 0.19.0
 *    (tools/golden/gen_scheme_golden.py): the engine's rows equal compressed-
 *    tensors' decompress() in float32, bit for bit.
 *    Decode's dots (engine/model/qdot.c) over those bytes == lg_dot's order
 *    over the reference rows, bit for bit (meson runs this with AVX-512 and
 *    with RQ_ENGINE_NO_AVX512=1).
 * 3. F16/F32 Linear weights widened exactly, and a Linear's bias. */
#include "engine/model/model.h"
#include "engine/model/ops.h"
#include "base/err.h"
#include "st/st.h"
#include "tests/tap.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint16_t bf16_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);   /* the test only uses values exact in BF16 */
}

/* Writes value v (bits wide) at element i of a little-endian int32 bit
 * stream: a plain bit-by-bit writer, unlike ops.c's word reader. */
static void put_bits(uint32_t *words, size_t i, int bits, unsigned v)
{
	for (int b = 0; b < bits; b++) {
		size_t pos = i * bits + b;
		if (v >> b & 1)
			words[pos / 32] |= 1u << (pos % 32);
	}
}

static int rows_equal(const struct lg_linear *W, const float *want, const char *what)
{
	float *row = malloc(sizeof(float) * W->cols);
	int bad = 0;
	for (int r = 0; r < W->rows && !bad; r++) {
		lg_linear_row(W, r, row);
		for (int c = 0; c < W->cols; c++) {
			float e = want[(size_t)r * W->cols + c];
			if (memcmp(&row[c], &e, 4)) {
				printf("# %s: row %d col %d: got %.9g, want %.9g\n", what, r, c, row[c], e);
				bad = 1;
				break;
			}
		}
	}
	free(row);
	return !bad;
}

static void check_int4_literal(void)
{
	/* 3 rows (odd), 16 columns, 2 groups of 8; BF16 scales */
	uint32_t qw[3][2] = {
		{0x76543210u, 0xFEDCBA98u},   /* q = -8..-1, then 0..7 */
		{0x01234567u, 0x89ABCDEFu},   /* q = -1..-8 (reversed), then 7..0 */
		{0x88888888u, 0x0F0F0F0Fu},   /* q = 0 ×8, then 7,-8 alternating */
	};
	float sc[3][2] = {{0.5f, 2.0f}, {-0.25f, 1.0f}, {3.0f, 0.0078125f}};
	uint16_t scb[3][2];
	for (int r = 0; r < 3; r++)
		for (int g = 0; g < 2; g++)
			scb[r][g] = bf16_of(sc[r][g]);
	int q[3][16] = {
		{-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7},
		{-1, -2, -3, -4, -5, -6, -7, -8, 7, 6, 5, 4, 3, 2, 1, 0},
		{0, 0, 0, 0, 0, 0, 0, 0, 7, -8, 7, -8, 7, -8, 7, -8},
	};
	float want[3 * 16];
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 16; c++)
			want[r * 16 + c] = (float)((double)q[r][c] * sc[r][c / 8]);
	struct lg_linear W = {.kind = LG_W_INT, .rows = 3, .cols = 16, .qw = (const uint8_t *)qw,
	                      .bits = 4, .words = 2, .qscale = (const uint8_t *)scb,
	                      .sdtype = LG_S_BF16, .srows = 3, .groups = 2};
	TAP_OK(rows_equal(&W, want, "int4 literal"),
	       "W4: nibble k of word j is column 8j+k, field − 8 is q (negative ints), odd rows, 2 groups");
}

static void check_int8_literal(void)
{
	/* bytes 01 7F FF 80 (little-endian) → q = −127, −1, 127, 0; one row, F32 per-tensor */
	uint32_t qw[2] = {0x80FF7F01u, 0x00000080u};
	float s = 0.1f;
	int q[8] = {-127, -1, 127, 0, 0, -128, -128, -128};
	float want[8];
	for (int c = 0; c < 8; c++)
		want[c] = (float)((double)q[c] * s);   /* one rounding, like a binary32 product */
	struct lg_linear W = {.kind = LG_W_INT, .rows = 1, .cols = 8, .qw = (const uint8_t *)qw,
	                      .bits = 8, .words = 2, .qscale = (const uint8_t *)&s,
	                      .sdtype = LG_S_F32, .srows = 1, .groups = 1};
	TAP_OK(rows_equal(&W, want, "int8 literal"), "W8: byte k of a word is column 4j+k, field − 128");
}

/* 3-bit values straddle words; zero points packed down the rows (dim 0) */
static void check_int3_asym(void)
{
	enum { R = 5, C = 64, G = 2, BITS = 3, WORDS = (C * BITS + 31) / 32 };
	uint32_t qw[R][WORDS] = {{0}}, zp[(R * BITS + 31) / 32][G] = {{0}};
	int q[R][C], z[R][G];
	uint16_t h[R][G];   /* F16 scales */
	float sv[R][G];
	static const uint16_t f16[] = {0x3C00, 0xC000, 0x0001, 0x3555, 0x7BFF};   /* 1, −2, 2^-24, ~1/3, 65504 */
	static const double f16v[] = {1.0, -2.0, 0x1p-24, 0x1.554p-2, 65504.0};
	for (int r = 0; r < R; r++) {
		for (int c = 0; c < C; c++) {
			q[r][c] = (r * 5 + c * 3) % 8 - 4;
			put_bits(qw[r], c, BITS, (unsigned)(q[r][c] + 4));
		}
		for (int g = 0; g < G; g++) {
			z[r][g] = (r + 2 * g) % 8 - 4;
			h[r][g] = f16[(r + g) % 5];
			sv[r][g] = (float)f16v[(r + g) % 5];
		}
	}
	/* zero point column g as a stream over rows: element r at bits 3r.. of
	 * the column, word w of the column is zp[w][g] */
	for (int g = 0; g < G; g++) {
		uint32_t col[(R * BITS + 31) / 32] = {0};
		for (int r = 0; r < R; r++)
			put_bits(col, r, BITS, (unsigned)(z[r][g] + 4));
		for (int w = 0; w < (R * BITS + 31) / 32; w++)
			zp[w][g] = col[w];
	}
	float want[R * C];
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			want[r * C + c] = (float)((double)(q[r][c] - z[r][c / 32]) * sv[r][c / 32]);
	struct lg_linear W = {.kind = LG_W_INT, .rows = R, .cols = C, .qw = (const uint8_t *)qw,
	                      .qzero = (const uint8_t *)zp, .bits = BITS, .words = WORDS,
	                      .qscale = (const uint8_t *)h, .sdtype = LG_S_F16, .srows = R, .groups = G};
	TAP_OK(rows_equal(&W, want, "int3 asym"),
	       "W3: fields straddling int32 words, zero points packed along rows, F16 scales (subnormal too)");
	/* the same with a 4-bit stream and odd rows: zero points of rows 8.. in word 1 */
	enum { R4 = 9, C4 = 16 };
	uint32_t qw4[R4][2] = {{0}}, zp4[2][1] = {{0}};
	uint16_t s4[R4];
	float want4[R4 * C4];
	for (int r = 0; r < R4; r++) {
		int zr = r % 2 ? -3 : 5;
		put_bits(&zp4[0][0], r, 4, (unsigned)(zr + 8));   /* [2][1]: one column, contiguous */
		s4[r] = bf16_of(r % 3 ? 0.125f : -1.5f);
		for (int c = 0; c < C4; c++) {
			int qq = (c * 7 + r) % 16 - 8;
			put_bits(qw4[r], c, 4, (unsigned)(qq + 8));
			want4[r * C4 + c] = (float)((double)(qq - zr) * (r % 3 ? 0.125 : -1.5));
		}
	}
	struct lg_linear W4 = {.kind = LG_W_INT, .rows = R4, .cols = C4, .qw = (const uint8_t *)qw4,
	                       .qzero = (const uint8_t *)zp4, .bits = 4, .words = 2,
	                       .qscale = (const uint8_t *)s4, .sdtype = LG_S_BF16, .srows = R4,
	                       .groups = 1};
	TAP_OK(rows_equal(&W4, want4, "int4 asym odd rows"),
	       "W4 asymmetric per channel, 9 rows: the 9th zero point in the second word");
}

static void check_fp8_literal(void)
{
	/* E4M3FN (s eeee mmm, bias 7): 0x38 = 1, 0xB8 = −1, 0x7E = 448, 0x01 = 2^-9
	 * (subnormal), 0x00 = 0, 0x80 = −0, 0x3C = 1.5, 0x4A = 2^2 · 1.25 = 5; 0xFE = −448,
	 * 0x08 = 2^-6, 0x30 = 0.5, 0x40 = 2, 0x48 = 4, 0x50 = 8, 0x77 = 2^7 · 1.875 = 240,
	 * 0x87 = −7 · 2^-9 (subnormal) */
	uint8_t w[2][8] = {{0x38, 0xB8, 0x7E, 0x01, 0x00, 0x80, 0x3C, 0x4A},
	                   {0xFE, 0x08, 0x30, 0x40, 0x48, 0x50, 0x77, 0x87}};
	static const double v[2][8] = {{1, -1, 448, 0x1p-9, 0, -0.0, 1.5, 5},
	                               {-448, 0x1p-6, 0.5, 2, 4, 8, 240, -0x1.cp-7}};
	uint16_t sb[2] = {bf16_of(0.5f), bf16_of(-3.0f)};
	float want[16];
	for (int r = 0; r < 2; r++)
		for (int c = 0; c < 8; c++)
			want[r * 8 + c] = (float)(v[r][c] * (r ? -3.0 : 0.5));
	struct lg_linear W = {.kind = LG_W_FP8, .rows = 2, .cols = 8, .w8 = &w[0][0],
	                      .qscale = (const uint8_t *)sb, .sdtype = LG_S_BF16, .srows = 2, .groups = 1};
	TAP_OK(rows_equal(&W, want, "fp8 literal"), "FP8: E4M3FN literals (normal, subnormal, ±0, ±448) × per-channel BF16 scale");
	float st = 0.0625f;
	struct lg_linear T = W;
	T.qscale = (const uint8_t *)&st;
	T.sdtype = LG_S_F32;
	T.srows = T.groups = 1;
	for (int r = 0; r < 2; r++)
		for (int c = 0; c < 8; c++)
			want[r * 8 + c] = (float)(v[r][c] * 0.0625);
	TAP_OK(rows_equal(&T, want, "fp8 per tensor"), "FP8: one F32 per-tensor scale");
	TAP_OK(lg_linear_bytes(&W) == 16 + 4 && lg_linear_bytes(&T) == 16 + 4,
	       "FP8 weight bytes: codes + scales (%zu, %zu)", lg_linear_bytes(&W), lg_linear_bytes(&T));
}

/* quantization_config: the schemes the engine reads pass, the rest is refused */
/* F16 and F32 Linear weights (issue 18: checkpoints in either dtype): rows
 * widened exactly (F16 subnormal, negative zero, infinity kept), and a bias
 * added after the product by lg_matmul. */
static void check_wide_dtypes(void)
{
	/* F16: 1.0, -2.5, 2^-24 (smallest subnormal), -0, 65504 (max), +inf */
	uint16_t h[2][3] = {{0x3C00, 0xC100, 0x0001}, {0x8000, 0x7BFF, 0x7C00}};
	float want_h[2][3] = {{1.0f, -2.5f, 0x1p-24f}, {-0.0f, 65504.0f, INFINITY}};
	struct lg_linear W = {.kind = LG_W_F16, .rows = 2, .cols = 3, .w8 = (const uint8_t *)h};
	TAP_OK(rows_equal(&W, &want_h[0][0], "F16"), "F16 weights: rows widened exactly (subnormal, -0, "
	       "max, inf)");
	float f[2][3] = {{0.1f, -3e-39f, 7.0f}, {1e30f, -0.0f, 2.5f}};
	struct lg_linear F = {.kind = LG_W_F32, .rows = 2, .cols = 3, .w8 = (const uint8_t *)f};
	TAP_OK(rows_equal(&F, &f[0][0], "F32"), "F32 weights: rows read as stored");
	/* y = W·x + b through lg_matmul (one thread) */
	float g[2][16], x[16], y[2], b[2] = {0.5f, -4.0f};
	for (int c = 0; c < 16; c++) {
		g[0][c] = (float)c;
		g[1][c] = c % 2 ? -1.0f : 2.0f;
		x[c] = 0.25f * (float)(c + 1);
	}
	struct lg_linear G = {.kind = LG_W_F32, .rows = 2, .cols = 16, .w8 = (const uint8_t *)g,
	                      .bias = b};
	float scratch[4 * 16];
	struct lg_mm mm = {.W = &G, .x = x, .ldx = 16, .y = y, .ldy = 2, .T = 1};
	lg_matmul(NULL, scratch, 16, &mm, 1);
	double w0 = 0.5, w1 = -4.0;
	for (int c = 0; c < 16; c++) {
		w0 += (double)g[0][c] * x[c];
		w1 += (double)g[1][c] * x[c];
	}
	TAP_OK(y[0] == (float)w0 && y[1] == (float)w1, "F32 Linear with bias: %g %g == %g %g", y[0], y[1],
	       w0, w1);
}

static void check_config(void)
{
	static const struct { const char *q, *what; int code; } cases[] = {
		{"{\"format\": \"float-quantized\", \"config_groups\": {\"FP8_DYNAMIC\": {\"format\": "
		 "\"float-quantized\", \"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "
		 "\"channel\", \"group_size\": null}, \"input_activations\": {\"num_bits\": 8, \"dynamic\": "
		 "true, \"strategy\": \"token\"}}}}", "fp8-dynamic", 0},
		{"{\"format\": \"pack-quantized\", \"config_groups\": {\"W4A16\": {\"weights\": {\"num_bits\": "
		 "4, \"type\": \"int\", \"strategy\": \"group\", \"group_size\": 128}}}}", "w4a16", 0},
		{"{\"format\": \"pack-quantized\", \"config_groups\": {\"W8A16\": {\"weights\": {\"num_bits\": "
		 "8, \"type\": \"int\", \"strategy\": \"group\", \"group_size\": 128}}}}", "w8a16", 0},
		{"{\"format\": \"nvfp4-pack-quantized\", \"config_groups\": {\"NVFP4A16\": {\"weights\": "
		 "{\"num_bits\": 4, \"type\": \"float\", \"strategy\": \"tensor_group\", \"group_size\": 16}}}}",
		 "nvfp4a16", 0},
		{"{\"format\": \"mixed-precision\", \"config_groups\": {\"a\": {\"format\": \"float-quantized\", "
		 "\"weights\": {\"num_bits\": 8, \"type\": \"float\"}}, \"b\": {\"format\": \"pack-quantized\", "
		 "\"weights\": {\"num_bits\": 4, \"type\": \"int\"}}}}", "mixed-precision fp8 + w4", 0},
		{"{\"format\": \"mxfp4-pack-quantized\", \"config_groups\": {\"g\": {}}}", "mxfp4", -ENOTSUP},
		{"{\"format\": \"float-quantized\", \"config_groups\": {\"FP8_BLOCK\": {\"weights\": {\"num_bits\": "
		 "8, \"type\": \"float\", \"strategy\": \"block\"}}}}", "fp8 block", -ENOTSUP},
		{"{\"format\": \"pack-quantized\", \"config_groups\": {\"g\": {\"weights\": {\"num_bits\": 4, "
		 "\"type\": \"float\"}}}}", "pack-quantized float", -ENOTSUP},
		{"{\"quant_method\": \"gptq\"}", "another quant_method", -ENOTSUP},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char js[2048];
		snprintf(js, sizeof js, "{\"hidden_size\": 64, \"num_hidden_layers\": 2, \"vocab_size\": 100, "
		         "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 32, "
		         "\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16, "
		         "\"quantization_config\": %s}", cases[i].q);
		struct lg_config c;
		enum lg_attn_type *t = NULL;
		int *h = NULL, *mo = NULL;
		struct rq_err err = {0};
		int rc = lg_config_parse(js, "config.json", &c, &t, &h, &mo, &err);
		TAP_OK(rc == cases[i].code, "quantization_config %s -> %d (%s)", cases[i].what, rc,
		       rc ? err.msg : "accepted");
		if (!rc) {
			free(t);
			free(h);
			free(mo);
		}
	}
}

/* Decode's dot (lg_matmul at one token: engine/model/qdot.c where the CPU
 * has it) over W == lg_dot's order summed here over the reference rows,
 * bit for bit: the fast paths on the real quantizer's bytes. */
static int decode_dots_equal(const struct lg_linear *W, const float *want)
{
	int R = W->rows, K = W->cols, bad = 0;
	float *x = malloc(sizeof(float) * K), *y = malloc(sizeof(float) * R);
	float *scratch = malloc(sizeof(float) * 4 * K);
	uint64_t s = 0x9E3779B97F4A7C15ull;
	for (int c = 0; c < K; c++)
		x[c] = ldexpf((float)(tap_xorshift(&s) & 0xFFFFFF) / 16777216.0f - 0.5f,
		              (int)(tap_xorshift(&s) % 16) - 8);
	struct lg_mm mm = {.W = W, .x = x, .ldx = K, .y = y, .ldy = R, .T = 1};
	lg_matmul(NULL, scratch, K, &mm, 1);
	for (int r = 0; r < R; r++) {
		float acc[16] = {0};
		for (int c = 0; c < K; c++) {
			float p = want[(size_t)r * K + c] * x[c];
			acc[c % 16] += p;
		}
		for (int w = 8; w >= 1; w /= 2)
			for (int j = 0; j < w; j++)
				acc[j] += acc[j + w];
		if (memcmp(&y[r], &acc[0], 4) && !bad++)
			printf("# row %d: decode %.9g, the order's sum %.9g\n", r, y[r], acc[0]);
	}
	free(x);
	free(y);
	free(scratch);
	return !bad;
}

/* ---- golden data from compressed-tensors ---- */

static const struct st_tensor *get(const struct st_header *h, const char *cs, const char *suf)
{
	char name[128];
	snprintf(name, sizeof name, "%s.%s", cs, suf);
	long i = st_find(h, name);
	return i < 0 ? NULL : &h->t[i];
}

static void check_golden(const char *path)
{
	size_t len;
	uint8_t *buf = (uint8_t *)tap_slurp(path, &len);
	struct st_header *h = NULL;
	struct rq_err err = {0};
	if (!buf || st_parse_mem(buf, len, len, path, &h, &err)) {
		TAP_OK(0, "read %s: %s", path, buf ? err.msg : "cannot open");
		free(buf);
		return;
	}
	cJSON *meta = cJSON_Parse(h->metadata ? h->metadata : "{}"), *e;
	int ncases = 0;
	cJSON_ArrayForEach(e, meta) {
		const char *cs = e->string;
		int bits = 0, group = 0, sym = 0;
		char kind[8] = "";
		if (!cJSON_IsString(e) || sscanf(e->valuestring, "%d,%d,%d,%7s", &bits, &group, &sym, kind) != 4)
			continue;
		const uint8_t *d = buf + h->data_start;
		const struct st_tensor *ref = get(h, cs, "ref"), *sc = get(h, cs, "weight_scale");
		if (!ref || !sc || ref->dtype != ST_F32 || ref->ndim != 2) {
			TAP_OK(0, "%s: golden tensors present", cs);
			continue;
		}
		struct lg_linear W = {.rows = (int)ref->shape[0], .cols = (int)ref->shape[1],
		                      .qscale = d + sc->begin};
		W.sdtype = sc->dtype == ST_F32 ? LG_S_F32 : sc->dtype == ST_F16 ? LG_S_F16 : LG_S_BF16;
		W.srows = sc->ndim == 2 ? (int)sc->shape[0] : 1;
		W.groups = sc->ndim == 2 ? (int)sc->shape[1] : 1;
		int shape_ok = W.srows == 1 || W.srows == W.rows;
		if (!strcmp(kind, "fp8")) {
			const struct st_tensor *w = get(h, cs, "weight");
			shape_ok &= w && w->dtype == ST_F8_E4M3;
			W.kind = LG_W_FP8;
			W.w8 = w ? d + w->begin : NULL;
		} else {
			const struct st_tensor *p = get(h, cs, "weight_packed"), *z = get(h, cs, "weight_zero_point");
			W.kind = LG_W_INT;
			W.bits = bits;
			W.words = (W.cols * bits + 31) / 32;
			shape_ok &= p && p->dtype == ST_I32 && p->shape[1] == (uint64_t)W.words;
			shape_ok &= sym ? !z : z && z->shape[0] == (uint64_t)(W.rows * bits + 31) / 32;
			W.qw = p ? d + p->begin : NULL;
			W.qzero = z ? d + z->begin : NULL;
		}
		char what[160];
		snprintf(what, sizeof what, "%s (%s, %d bits, group %d, %s, %s scales, %d×%d)", cs, kind,
		         bits, group, sym ? "symmetric" : "asymmetric", st_dtype_name(sc->dtype), W.rows,
		         W.cols);
		if (!shape_ok) {
			TAP_OK(0, "%s: tensor shapes as compressed-tensors writes them", what);
			continue;
		}
		float *want = malloc(sizeof(float) * W.rows * W.cols);
		memcpy(want, d + ref->begin, sizeof(float) * W.rows * W.cols);
		TAP_OK(rows_equal(&W, want, cs), "%s == compressed-tensors decompress, bit for bit", what);
		TAP_OK(decode_dots_equal(&W, want), "%s: decode's dot == lg_dot's order over those rows, "
		       "bit for bit", cs);
		free(want);
		ncases++;
	}
	TAP_OK(ncases >= 10, "%d golden cases from compressed-tensors", ncases);
	cJSON_Delete(meta);
	st_header_free(h);
	free(buf);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_dequant SCHEME_GOLDEN.safetensors\n");
		return 2;
	}
	check_int4_literal();
	check_int8_literal();
	check_int3_asym();
	check_fp8_literal();
	check_wide_dtypes();
	check_config();
	check_golden(argv[1]);
	return tap_done();
}
