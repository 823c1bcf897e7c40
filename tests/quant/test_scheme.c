/* test_scheme.c — quant/scheme.h without the peer: names, layouts, refusals, NaN/Inf,
 * hand-computed bytes, the vectorized kernels against the scalar oracles over every BF16
 * exponent, and the dequantization round trip. */
#include "quant/scheme.h"
#include "quant/scheme_int.h"
#include "quant/quant_int.h"
#include "tests/tap.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
	return tap_xorshift(&rng);
}

static void test_names(void)
{
	const char *want[RQ_SCHEME_COUNT] = {"nvfp4", "nvfp4a16", "fp8-dynamic", "w8a16", "w4a16",
	                                     "nvfp4"};
	const char *fmt[RQ_SCHEME_COUNT] = {"nvfp4-pack-quantized", "nvfp4-pack-quantized",
	                                    "float-quantized", "pack-quantized", "pack-quantized",
	                                    "nvfp4-pack-quantized"};
	const unsigned group[RQ_SCHEME_COUNT] = {16, 16, 0, 128, 128, 16};
	for (int i = 0; i < RQ_SCHEME_COUNT; i++) {
		enum rq_scheme s = RQ_SCHEME_COUNT;
		/* "nvfp4" names W4A4; the Laguna fix (0) is chosen by no --scheme */
		int want_i = i == RQ_SCHEME_NVFP4 ? RQ_SCHEME_NVFP4_W4A4 : i;
		TAP_OK(rq_scheme_parse(want[i], &s) == 0 && s == (enum rq_scheme)want_i &&
		       strcmp(rq_scheme_name(s), want[i]) == 0, "parse/name %s", want[i]);
		s = (enum rq_scheme)i;
		TAP_OK(strcmp(rq_scheme_format(s), fmt[i]) == 0 && rq_scheme_group(s) == group[i],
		       "%s: format %s group %u", want[i], rq_scheme_format(s), rq_scheme_group(s));
	}
	TAP_OK(rq_scheme_has_input_scale(RQ_SCHEME_NVFP4) &&
	       rq_scheme_has_input_scale(RQ_SCHEME_NVFP4_W4A4) &&
	       !rq_scheme_has_input_scale(RQ_SCHEME_NVFP4A16) &&
	       rq_scheme_shares_scale(RQ_SCHEME_NVFP4_W4A4), "W4A4 shares scales, has input scales");
	enum rq_scheme s = RQ_SCHEME_W4A16;
	TAP_OK(rq_scheme_parse("NVFP4", &s) == -EINVAL && rq_scheme_parse("", &s) == -EINVAL &&
	       rq_scheme_parse(NULL, &s) == -EINVAL && s == RQ_SCHEME_W4A16,
	       "unknown names are -EINVAL and leave *out alone");
	TAP_OK(strcmp(rq_scheme_preset(RQ_SCHEME_FP8_DYNAMIC), "FP8_DYNAMIC") == 0 &&
	       strcmp(rq_scheme_name((enum rq_scheme)99), "?") == 0, "presets; bad enum is \"?\"");
	TAP_OK(rq_scheme_shares_scale(RQ_SCHEME_NVFP4) && rq_scheme_shares_scale(RQ_SCHEME_NVFP4A16) &&
	       !rq_scheme_shares_scale(RQ_SCHEME_FP8_DYNAMIC) && !rq_scheme_shares_scale(RQ_SCHEME_W8A16)
	       && !rq_scheme_shares_scale(RQ_SCHEME_W4A16), "only the NVFP4 schemes share a scale");
	TAP_OK(rq_scheme_default_recipe(RQ_SCHEME_NVFP4) == RQ_RECIPE_FP32 &&
	       rq_scheme_default_recipe(RQ_SCHEME_NVFP4A16) == RQ_RECIPE_BF16 &&
	       rq_scheme_default_recipe(RQ_SCHEME_W4A16) == RQ_RECIPE_BF16,
	       "default recipes: nvfp4 fp32 (Laguna), the rest bf16 (llm-compressor on BF16)");
	TAP_OK(rq_scheme_recipe_ok(RQ_SCHEME_NVFP4A16, RQ_RECIPE_FP32DIV) &&
	       !rq_scheme_recipe_ok(RQ_SCHEME_FP8_DYNAMIC, RQ_RECIPE_FP32) &&
	       rq_scheme_recipe_ok(RQ_SCHEME_W8A16, RQ_RECIPE_BF16), "recipe_ok");
}

static void test_layouts(void)
{
	struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
	int nt = -1;
	uint64_t sz = 0;
	TAP_OK(rq_scheme_layout(RQ_SCHEME_NVFP4, RQ_SRC_BF16, 32, 1024, t, &nt, &sz) == 0 && nt == 3
	       && !strcmp(t[0].suffix, "weight_packed") && t[0].off == 0 && t[0].len == 32 * 512 &&
	       !strcmp(t[1].suffix, "weight_scale") && !strcmp(t[1].dtype, "F8_E4M3") &&
	       t[1].off == 32 * 512 && t[1].len == 32 * 64 &&
	       !strcmp(t[2].suffix, "weight_global_scale") && t[2].off == 32 * 576 && t[2].len == 4 &&
	       t[2].ndim == 1 && t[2].shape[0] == 1 && sz == 32 * 576 + 4,
	       "nvfp4 layout = the Laguna job layout: packed | scales | gs");
	TAP_OK(rq_scheme_layout(RQ_SCHEME_FP8_DYNAMIC, RQ_SRC_BF16, 3, 33, t, &nt, &sz) == 0 &&
	       nt == 2 && !strcmp(t[0].suffix, "weight") && !strcmp(t[0].dtype, "F8_E4M3") &&
	       t[0].shape[0] == 3 && t[0].shape[1] == 33 && !strcmp(t[1].dtype, "BF16") &&
	       t[1].shape[0] == 3 && t[1].shape[1] == 1 && t[1].off == 99 && sz == 105,
	       "fp8-dynamic [3,33]: weight F8_E4M3 [3,33] | weight_scale BF16 [3,1]");
	TAP_OK(rq_scheme_layout(RQ_SCHEME_W4A16, RQ_SRC_BF16, 5, 256, t, &nt, &sz) == 0 && nt == 3 &&
	       !strcmp(t[0].dtype, "I32") && t[0].shape[1] == 32 && t[0].len == 5 * 128 &&
	       t[1].shape[1] == 2 && t[1].len == 20 && !strcmp(t[2].suffix, "weight_shape") &&
	       !strcmp(t[2].dtype, "I64") && t[2].shape[0] == 2 && t[2].len == 16 &&
	       sz == 640 + 20 + 16, "w4a16 [5,256]: packed I32 [5,32] | scale BF16 [5,2] | shape I64 [2]");
	TAP_OK(rq_scheme_layout(RQ_SCHEME_W8A16, RQ_SRC_BF16, 5, 256, t, &nt, &sz) == 0 &&
	       t[0].shape[1] == 64 && t[0].len == 5 * 256 && sz == 1280 + 20 + 16,
	       "w8a16 [5,256]: packed I32 [5,64]");
	for (int s = 0; s < RQ_SCHEME_COUNT; s++) {
		uint64_t c = s == RQ_SCHEME_FP8_DYNAMIC ? 7 : rq_scheme_group((enum rq_scheme)s) * 3;
		int ok = rq_scheme_layout((enum rq_scheme)s, RQ_SRC_BF16, 9, c, t, &nt, &sz) == 0;
		uint64_t off = 0;
		for (int j = 0; ok && j < nt; j++) {
			ok = t[j].off == off;
			off += t[j].len;
		}
		TAP_OK(ok && off == sz, "%s: offsets contiguous, size = sum",
		       rq_scheme_name((enum rq_scheme)s));
	}
	nt = 42;
	sz = 42;
	TAP_OK(rq_scheme_layout(RQ_SCHEME_NVFP4A16, RQ_SRC_BF16, 4, 24, t, &nt, &sz) == -EINVAL &&
	       rq_scheme_layout(RQ_SCHEME_W4A16, RQ_SRC_BF16, 4, 64, t, &nt, &sz) == -EINVAL &&
	       rq_scheme_layout(RQ_SCHEME_W8A16, RQ_SRC_BF16, 4, 192, t, &nt, &sz) == -EINVAL &&
	       rq_scheme_layout(RQ_SCHEME_FP8_DYNAMIC, RQ_SRC_BF16, 0, 16, t, &nt, &sz) == -EINVAL &&
	       rq_scheme_layout(RQ_SCHEME_FP8_DYNAMIC, RQ_SRC_BF16, 4, 0, t, &nt, &sz) == -EINVAL &&
	       rq_scheme_layout((enum rq_scheme)7, RQ_SRC_BF16, 4, 128, t, &nt, &sz) == -EINVAL &&
	       nt == 42 && sz == 42, "bad shapes -EINVAL (cols %% group, < group, zero), outputs kept");
	TAP_OK(rq_scheme_layout(RQ_SCHEME_NVFP4, RQ_SRC_F16, 4, 256, t, &nt, &sz) == -ENOTSUP &&
	       rq_scheme_layout(RQ_SCHEME_NVFP4, RQ_SRC_F32, 4, 256, t, &nt, &sz) == -ENOTSUP &&
	       rq_scheme_layout(RQ_SCHEME_W8A16, (enum rq_src_dtype)3, 4, 256, t, &nt, &sz) == -EINVAL,
	       "nvfp4 (the Laguna fix): F16 and F32 sources -ENOTSUP; unknown source dtype -EINVAL");
	TAP_OK(rq_scheme_layout(RQ_SCHEME_NVFP4A16, RQ_SRC_F16, 4, 256, t, &nt, &sz) == 0 && nt == 3 &&
	       !strcmp(t[1].dtype, "F8_E4M3") && sz == 4 * 128 + 4 * 16 + 4 &&
	       rq_scheme_layout(RQ_SCHEME_NVFP4A16, RQ_SRC_F32, 4, 256, t, &nt, &sz) == 0,
	       "nvfp4a16 takes F16 and F32 sources, same tensors");
	TAP_OK(rq_scheme_layout(RQ_SCHEME_FP8_DYNAMIC, RQ_SRC_F16, 3, 8, t, &nt, &sz) == 0 &&
	       !strcmp(t[1].dtype, "F16") && t[1].len == 6 && sz == 30 &&
	       rq_scheme_layout(RQ_SCHEME_W4A16, RQ_SRC_F32, 3, 256, t, &nt, &sz) == 0 &&
	       !strcmp(t[1].dtype, "F32") && t[1].len == 24 && t[2].off == 384 + 24 && sz == 424,
	       "F16/F32 sources: weight_scale in the source dtype (F16 [3,1], F32 [3,2])");
}

/* rq_scheme_layout's output size, 0 when it refuses (its return value in *rc if rc). */
static uint64_t out_size(enum rq_scheme s, enum rq_src_dtype src, size_t rows, size_t cols,
                         int *rc)
{
	struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
	int nt;
	uint64_t sz = 0;
	int r = rq_scheme_layout(s, src, rows, cols, t, &nt, &sz);
	if (rc)
		*rc = r;
	return r < 0 ? 0 : sz;
}

static uint8_t *quant1(enum rq_scheme s, const uint16_t *w, size_t rows, size_t cols, int *rc)
{
	uint64_t sz = out_size(s, RQ_SRC_BF16, rows, cols, rc);
	if (*rc < 0)
		return NULL;
	uint8_t *out = malloc(sz);
	struct rq_smod m = {w, RQ_SRC_BF16, rows, cols, out};
	*rc = rq_scheme_quantize(s, rq_scheme_default_recipe(s), &m, 1, NULL, NULL);
	return out;
}

static void test_refusals(void)
{
	uint16_t w[2][256];
	uint8_t out[2][2048];
	for (int i = 0; i < 256; i++)
		w[0][i] = w[1][i] = (uint16_t)(0x3C00 + i);
	struct rq_smod m[4] = {{w[0], RQ_SRC_BF16, 2, 128, out[0]}, {w[1], RQ_SRC_BF16, 2, 128, out[1]}};
	for (int s = RQ_SCHEME_NVFP4A16; s < RQ_SCHEME_COUNT; s++) {
		enum rq_scheme e = (enum rq_scheme)s;
		int bad = -1;
		w[1][200] = 0x7FC0;   /* NaN in row 1 of module 1 */
		int rc = rq_scheme_quantize(e, RQ_RECIPE_BF16, m, 2, &bad, NULL);
		TAP_OK(rc == -EDOM && bad == 1, "%s: NaN in module 1 -> -EDOM, bad 1 (rc %d bad %d)",
		       rq_scheme_name(e), rc, bad);
		w[1][200] = 0x3C00;
		w[0][3] = 0xFF80;     /* -Inf */
		bad = -1;
		rc = rq_scheme_quantize(e, RQ_RECIPE_BF16, m, 2, &bad, NULL);
		TAP_OK(rc == -EDOM && bad == 0, "%s: -Inf in module 0 -> -EDOM, bad 0", rq_scheme_name(e));
		w[0][3] = 0x3C03;
		TAP_OK(rq_scheme_quantize(e, RQ_RECIPE_BF16, m, 2, &bad, NULL) == 0, "%s: clean job ok",
		       rq_scheme_name(e));
		TAP_OK(rq_scheme_quantize(e, RQ_RECIPE_BF16, m, 0, &bad, NULL) == -EINVAL &&
		       rq_scheme_quantize(e, RQ_RECIPE_BF16, m, 4, &bad, NULL) == -EINVAL,
		       "%s: n 0 or 4 -> -EINVAL", rq_scheme_name(e));
		struct rq_smod b[2] = {m[0], {w[1], RQ_SRC_BF16, 1, 136, out[1]}};
		struct rq_smod f[2] = {m[0], {w[1], RQ_SRC_F32, 1, 128, out[1]}};
		bad = -1;
		rc = rq_scheme_quantize(e, RQ_RECIPE_BF16, b, 2, &bad, NULL);
		TAP_OK(e == RQ_SCHEME_FP8_DYNAMIC ? rc == 0 : (rc == -EINVAL && bad == 1),
		       "%s: cols 136 in module 1 (rc %d bad %d)", rq_scheme_name(e), rc, bad);
		bad = -1;
		rc = rq_scheme_quantize(e, RQ_RECIPE_BF16, f, 2, &bad, NULL);
		TAP_OK(rq_scheme_shares_scale(e) ? rc == -ENOTSUP && bad == 1 : rc == 0,
		       "%s: module 1 F32 next to a BF16 one (rc %d)", rq_scheme_name(e), rc);
		f[0] = (struct rq_smod){w[0], RQ_SRC_F32, 1, 128, out[0]};
		for (int i = 0; i < 256; i++)
			w[0][i] = (uint16_t)(0x3C00 + i);
		TAP_OK(rq_scheme_quantize(e, RQ_RECIPE_BF16, f, 2, &bad, NULL) == 0,
		       "%s: two F32 modules", rq_scheme_name(e));
		{
			uint32_t inf = 0x7F800000u;
			uint16_t nanh = 0x7E00;
			memcpy(&w[1][2 * 37], &inf, 4);
			bad = -1;
			rc = rq_scheme_quantize(e, RQ_RECIPE_BF16, f, 2, &bad, NULL);
			TAP_OK(rc == -EDOM && bad == 1, "%s: F32 Inf -> -EDOM bad 1", rq_scheme_name(e));
			for (int i = 0; i < 256; i++)
				w[1][i] = (uint16_t)(0x3C00 + i);
			struct rq_smod h[1] = {{w[1], RQ_SRC_F16, 1, 256, out[1]}};
			TAP_OK(rq_scheme_quantize(e, RQ_RECIPE_BF16, h, 1, &bad, NULL) == 0,
			       "%s: F16 source ok", rq_scheme_name(e));
			w[1][255] = nanh;
			bad = -1;
			TAP_OK(rq_scheme_quantize(e, RQ_RECIPE_BF16, h, 1, &bad, NULL) == -EDOM && bad == 0,
			       "%s: F16 NaN -> -EDOM", rq_scheme_name(e));
			w[1][255] = 0x3C00 + 255;
		}
	}
	TAP_OK(rq_scheme_quantize(RQ_SCHEME_W4A16, RQ_RECIPE_FP32, m, 1, NULL, NULL) == -ENOTSUP,
	       "w4a16 with recipe fp32 -> -ENOTSUP");
}

/* Hand-computed bytes: scale 1 exactly (absmax = Q), so x = w. */
static void test_known_bytes(void)
{
	uint16_t w[128];
	int rc;
	w[0] = 0x40F0;                               /* 7.5 -> scale bf16(7.5 / 7.5) = 1 */
	for (int j = 1; j < 128; j++)
		w[j] = rq_f32_to_bf16((float)((j % 15) - 7));   /* -7 .. 7: field (j % 15) + 1 */
	uint8_t *o = quant1(RQ_SCHEME_W4A16, w, 1, 128, &rc);
	int ok = rc == 0 && o[64] == 0x80 && o[65] == 0x3F;   /* scale 1.0 = BF16 0x3F80 */
	ok = ok && o[0] == (0xF | (2 << 4));                  /* 7.5 clamps to 7: field 15 */
	for (int k = 1; ok && k < 64; k++)
		ok = o[k] == (uint8_t)(((2 * k) % 15 + 1) | (((2 * k + 1) % 15 + 1) << 4));
	uint64_t shp[2];
	memcpy(shp, o + 66, 16);
	TAP_OK(ok && shp[0] == 1 && shp[1] == 128, "w4a16: nibbles q+8, element 2k low, shape {1,128}");
	free(o);

	w[0] = 0x42FF;                               /* 127.5 -> scale 1 */
	for (int j = 1; j < 128; j++)
		w[j] = rq_f32_to_bf16((float)(j - 64) + 0.5f);   /* ties: -62.5 .. 63.5 */
	o = quant1(RQ_SCHEME_W8A16, w, 1, 128, &rc);
	ok = rc == 0 && o[0] == 255;
	for (int j = 1; ok && j < 128; j++) {
		int q = (j - 64) + ((j - 64) % 2 != 0 ? 1 : 0);   /* x.5 to the even neighbour */
		ok = o[j] == (uint8_t)(q + 128);
	}
	TAP_OK(ok, "w8a16: q + 128 per byte, .5 ties to even");
	free(o);

	uint16_t f[4] = {0x43E0, 0x3F88, 0xBF98, 0x8000};   /* 448, 1.0625, -1.1875, -0.0 */
	o = quant1(RQ_SCHEME_FP8_DYNAMIC, f, 1, 4, &rc);
	/* 1.0625 ties between 1.0 (0x38) and 1.125 (0x39): even 0x38; -1.1875 -> -1.25 (0xBA) */
	TAP_OK(rc == 0 && o[0] == 0x7E && o[1] == 0x38 && o[2] == 0xBA && o[3] == 0x80 &&
	       o[4] == 0x80 && o[5] == 0x3F, "fp8: 448 -> 0x7E, ties to even, -0.0 -> 0x80, scale 1.0");
	free(o);

	uint16_t z[16] = {0};
	o = quant1(RQ_SCHEME_FP8_DYNAMIC, z, 2, 8, &rc);
	TAP_OK(rc == 0 && o[16] == 0x00 && o[17] == 0x3C && o[18] == 0x00 && o[19] == 0x3C,
	       "a zero row's scale is eps 2^-7 (BF16 0x3C00)");
	free(o);
}

/* The kernels against the scalar oracles: for every BF16 exponent of the absmax, rows of
 * random weights below it (both signs, subnormals included). */
static void test_oracles(void)
{
	enum { COLS = 256, ROWS = 254 * 2 };
	uint16_t *w = malloc(sizeof(uint16_t) * ROWS * COLS);
	for (int r = 0; r < ROWS; r++) {
		uint32_t e = (uint32_t)(r / 2);              /* biased exponent 0..253 */
		uint16_t amax = (uint16_t)((e << 7) | (rnd() & 0x7F));
		for (int j = 0; j < COLS; j++) {
			uint16_t v = (uint16_t)(rnd() % ((uint32_t)amax + 1));
			uint16_t d = (uint16_t)(rnd() % 2048);
			if (r % 2)                                 /* odd rows: near the max */
				v = d <= amax ? (uint16_t)(amax - d) : amax;
			w[r * COLS + j] = (uint16_t)(v | (rnd() & 0x8000));
		}
		w[r * COLS + (r % COLS)] = amax;                /* every group of 128 holds it too */
		w[r * COLS + 128 + (r % 128)] = (uint16_t)(amax | 0x8000);
	}
	for (int isa = 0; isa <= rq_quant_isa_max(); isa++) {
		rq_quant_isa_force(isa);
		int rc;
		long bad = 0;
		uint8_t *o = quant1(RQ_SCHEME_FP8_DYNAMIC, w, ROWS, COLS, &rc);
		for (int r = 0; rc == 0 && r < ROWS; r++) {
			uint16_t s = (uint16_t)(o[ROWS * COLS + 2 * r] | o[ROWS * COLS + 2 * r + 1] << 8);
			uint16_t am = 0;
			for (int j = 0; j < COLS; j++)
				am = (w[r * COLS + j] & 0x7FFF) > am ? w[r * COLS + j] & 0x7FFF : am;
			bad += s != rq_scheme_scale_ref(am, 448.0f);
			for (int j = 0; j < COLS; j++)
				bad += o[r * COLS + j] != rq_fp8_code_ref(w[r * COLS + j], s);
		}
		TAP_OK(rc == 0 && bad == 0, "fp8 kernel == oracle, all exponents, %s (%ld differ)",
		       rq_quant_isa_name(isa), bad);
		free(o);
		for (int bits = 4; bits <= 8; bits += 4) {
			enum rq_scheme sc = bits == 8 ? RQ_SCHEME_W8A16 : RQ_SCHEME_W4A16;
			o = quant1(sc, w, ROWS, COLS, &rc);
			bad = 0;
			size_t prow = COLS * (size_t)bits / 8;
			const uint8_t *sp = o + ROWS * prow;
			for (int r = 0; rc == 0 && r < ROWS; r++) {
				for (int g = 0; g < 2; g++) {
					uint16_t s = (uint16_t)(sp[4 * r + 2 * g] | sp[4 * r + 2 * g + 1] << 8);
					uint16_t am = 0;
					for (int j = 128 * g; j < 128 * g + 128; j++)
						am = (w[r * COLS + j] & 0x7FFF) > am ? w[r * COLS + j] & 0x7FFF : am;
					bad += s != rq_scheme_scale_ref(am, bits == 8 ? 127.5f : 7.5f);
					for (int j = 128 * g; j < 128 * g + 128; j++) {
						int q = rq_int_code_ref(bits, w[r * COLS + j], s);
						int v = bits == 8 ? o[r * prow + j] - 128
						                  : ((o[r * prow + j / 2] >> (4 * (j % 2))) & 15) - 8;
						bad += q != v;
					}
				}
			}
			TAP_OK(rc == 0 && bad == 0, "int%d kernel == oracle, all exponents, %s (%ld differ)",
			       bits, rq_quant_isa_name(isa), bad);
			free(o);
		}
	}
	rq_quant_isa_force(-1);
	free(w);
}

/* Dequantize(quantize(w)) is within half a step of w, relative to the scale. */
static void test_round_trip(void)
{
	enum { ROWS = 16, COLS = 256 };
	uint16_t w[ROWS * COLS];
	float d[COLS];
	for (int i = 0; i < ROWS * COLS; i++)
		w[i] = rq_f32_to_bf16(((float)(rnd() % 20001) - 10000.0f) * 1e-5f * (1 + i / COLS));
	for (int s = 0; s < RQ_SCHEME_COUNT; s++) {
		enum rq_scheme e = (enum rq_scheme)s;
		int rc;
		uint8_t *o = quant1(e, w, ROWS, COLS, &rc);
		double worst = 0;
		for (int r = 0; rc == 0 && r < ROWS; r++) {
			rc = rq_scheme_dequant_row(e, RQ_SRC_BF16, o, ROWS, COLS, (size_t)r, d);
			float am = 0;
			for (int j = 0; j < COLS; j++)
				am = fmaxf(am, fabsf(rq_bf16_to_f32(w[r * COLS + j])));
			for (int j = 0; rc == 0 && j < COLS; j++) {
				double err = fabs(d[j] - rq_bf16_to_f32(w[r * COLS + j])) / am;
				worst = err > worst ? err : worst;
			}
		}
		/* half a step of the largest magnitude: NVFP4 1/6 (2 -> 3 -> 4 steps) with group
		 * scale rounding; FP8 2^-4 relative; INT 0.5/127.5, 0.5/7.5, plus up to 0.25 more from the BF16 rounding of w / s, and
		 * a whole step where bf16(amax / 127.5) rounds down and x = 128 clamps to 127 */
		double lim = rq_scheme_shares_scale(e) ? 0.2 : s == RQ_SCHEME_FP8_DYNAMIC ? 0.045
		           : s == RQ_SCHEME_W8A16 ? 0.0082 : 0.075;
		TAP_OK(rc == 0 && worst <= lim, "%s: dequant round trip, worst |err|/absmax %.4f <= %.4f",
		       rq_scheme_name(e), worst, lim);
		free(o);
	}
	/* F16 and F32 sources of the same values */
	float *wf = malloc(sizeof(float) * ROWS * COLS);
	_Float16 *wh = malloc(sizeof(_Float16) * ROWS * COLS);
	for (int i = 0; i < ROWS * COLS; i++) {
		wf[i] = ((float)(rnd() % 20001) - 10000.0f) * 1e-5f * (float)(1 + i / COLS);
		wh[i] = (_Float16)wf[i];
	}
	for (int s = RQ_SCHEME_NVFP4A16; s < RQ_SCHEME_COUNT; s++) {
		for (int tt = RQ_SRC_F16; tt <= RQ_SRC_F32; tt++) {
			enum rq_scheme e = (enum rq_scheme)s;
			int rc;
			uint8_t *o = malloc(out_size(e, (enum rq_src_dtype)tt, ROWS, COLS, &rc));
			struct rq_smod m = {tt == RQ_SRC_F16 ? (void *)wh : (void *)wf,
			                    (enum rq_src_dtype)tt, ROWS, COLS, o};
			if (rc == 0)
				rc = rq_scheme_quantize(e, RQ_RECIPE_BF16, &m, 1, NULL, NULL);
			double worst = 0;
			for (int r = 0; rc == 0 && r < ROWS; r++) {
				rc = rq_scheme_dequant_row(e, (enum rq_src_dtype)tt, o, ROWS, COLS, (size_t)r, d);
				float am = 0;
				for (int j = 0; j < COLS; j++)
					am = fmaxf(am, fabsf(tt == RQ_SRC_F16 ? (float)wh[r * COLS + j]
					                                     : wf[r * COLS + j]));
				for (int j = 0; rc == 0 && j < COLS; j++) {
					float v = tt == RQ_SRC_F16 ? (float)wh[r * COLS + j] : wf[r * COLS + j];
					double err = fabs(d[j] - v) / am;
					worst = err > worst ? err : worst;
				}
			}
			double lim = rq_scheme_shares_scale(e) ? 0.2 : s == RQ_SCHEME_FP8_DYNAMIC ? 0.045
			           : s == RQ_SCHEME_W8A16 ? 0.0082 : 0.075;
			TAP_OK(rc == 0 && worst <= lim, "%s from %s: dequant round trip, worst %.4f <= %.4f",
			       rq_scheme_name(e), tt == RQ_SRC_F16 ? "f16" : "f32", worst, lim);
			free(o);
		}
	}
	free(wf);
	free(wh);
	float dd[8];
	uint8_t junk[64] = {0};
	TAP_OK(rq_scheme_dequant_row(RQ_SCHEME_FP8_DYNAMIC, RQ_SRC_BF16, junk, 2, 8, 2, dd) == -EINVAL &&
	       rq_scheme_dequant_row(RQ_SCHEME_W4A16, RQ_SRC_BF16, junk, 2, 8, 0, dd) == -EINVAL,
	       "dequant_row refuses a bad row or shape");
}

/* rq_scheme_quantize_ref (the benchmark's oracle) == rq_scheme_quantize, every scheme. */
static void test_whole_ref(void)
{
	enum { ROWS = 40, COLS = 384 };
	uint16_t *w = malloc(sizeof(uint16_t) * ROWS * COLS);
	for (int i = 0; i < ROWS * COLS; i++)
		w[i] = (uint16_t)((rnd() % 0x7F80) | (rnd() & 0x8000));
	for (int i = 0; i < COLS; i++)
		w[5 * COLS + i] = 0;
	for (int s = 0; s < RQ_SCHEME_COUNT; s++) {
		enum rq_scheme e = (enum rq_scheme)s;
		int rc;
		uint64_t sz = out_size(e, RQ_SRC_BF16, ROWS, COLS, NULL);
		uint8_t *ref = calloc(1, sz);
		uint8_t *o = quant1(e, w, ROWS, COLS, &rc);
		int rr = rq_scheme_quantize_ref(e, rq_scheme_default_recipe(e), RQ_SRC_BF16, w, ROWS,
		                                COLS, ref);
		TAP_OK(rc == 0 && rr == 0 && memcmp(o, ref, sz) == 0, "%s: fast == quantize_ref",
		       rq_scheme_name(e));
		free(o);
		free(ref);
	}
	/* --scheme nvfp4 (W4A4) writes NVFP4A16's weight bytes (oneshot and model_free_ptq
	 * share the weight observer and compressor), for a fused pair too */
	{
		uint64_t sz = out_size(RQ_SCHEME_NVFP4A16, RQ_SRC_BF16, ROWS / 2, COLS, NULL);
		uint8_t *a = calloc(2, sz), *b = calloc(2, sz);
		struct rq_smod ma[2] = {{w, RQ_SRC_BF16, ROWS / 2, COLS, a},
		                        {w + ROWS / 2 * COLS, RQ_SRC_BF16, ROWS / 2, COLS, a + sz}};
		struct rq_smod mb[2] = {{w, RQ_SRC_BF16, ROWS / 2, COLS, b},
		                        {w + ROWS / 2 * COLS, RQ_SRC_BF16, ROWS / 2, COLS, b + sz}};
		int ra = rq_scheme_quantize(RQ_SCHEME_NVFP4A16, RQ_RECIPE_BF16, ma, 2, NULL, NULL);
		int rb = rq_scheme_quantize(RQ_SCHEME_NVFP4_W4A4, RQ_RECIPE_BF16, mb, 2, NULL, NULL);
		TAP_OK(ra == 0 && rb == 0 && memcmp(a, b, 2 * sz) == 0 &&
		       memcmp(a + sz - 4, a + 2 * sz - 4, 4) == 0,
		       "nvfp4 (W4A4) == nvfp4a16 bytes for a fused pair, one global scale");
		free(a);
		free(b);
	}
	/* F16 and F32 sources: random bit patterns (finite), zero rows, every ISA variant */
	uint32_t *wf = malloc(4 * ROWS * COLS);
	uint16_t *wh = malloc(2 * ROWS * COLS);
	for (int i = 0; i < ROWS * COLS; i++) {
		wf[i] = (rnd() << 16 ^ rnd()) % 0x7F800000u | (rnd() & 1u) << 31;
		wh[i] = (uint16_t)((rnd() % 0x7C00) | (rnd() & 0x8000));
	}
	for (int i = 0; i < COLS; i++)
		wf[7 * COLS + i] = wh[7 * COLS + i] = 0;
	for (int isa = 0; isa <= rq_quant_isa_max(); isa++) {
		rq_quant_isa_force(isa);
		for (int s = RQ_SCHEME_NVFP4A16; s < RQ_SCHEME_COUNT; s++) {
			for (int tt = RQ_SRC_F16; tt <= RQ_SRC_F32; tt++) {
				enum rq_scheme e = (enum rq_scheme)s;
				uint64_t sz = out_size(e, (enum rq_src_dtype)tt, ROWS, COLS, NULL);
				uint8_t *ref = calloc(1, sz), *o = calloc(1, sz);
				const void *src = tt == RQ_SRC_F16 ? (const void *)wh : (const void *)wf;
				struct rq_smod m = {src, (enum rq_src_dtype)tt, ROWS, COLS, o};
				int rc = rq_scheme_quantize(e, RQ_RECIPE_BF16, &m, 1, NULL, NULL);
				int rr = rq_scheme_quantize_ref(e, RQ_RECIPE_BF16, (enum rq_src_dtype)tt, src,
				                                ROWS, COLS, ref);
				TAP_OK(rc == 0 && rr == 0 && memcmp(o, ref, sz) == 0,
				       "%s from %s, %s: fast == quantize_ref", rq_scheme_name(e),
				       tt == RQ_SRC_F16 ? "f16" : "f32", rq_quant_isa_name(isa));
				free(o);
				free(ref);
			}
		}
	}
	rq_quant_isa_force(-1);
	free(wf);
	free(wh);
	free(w);
}

/* The kernels' binary16 conversions against the compiler's _Float16 (IEEE, round to
 * nearest even): every finite half, every rounding midpoint between halves and its
 * neighbours, and a sweep of binary32 bit patterns. */
static void test_f16(void)
{
	long bad = 0;
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7C00) == 0x7C00)
			continue;
		_Float16 v;
		uint16_t hb = (uint16_t)h;
		memcpy(&v, &hb, 2);
		bad += rq_f16_to_f32(hb) != (float)v || rq_f32_to_f16((float)v) != hb;
	}
	TAP_OK(bad == 0, "f16 -> f32 exact and back, every finite half (%ld differ)", bad);
	bad = 0;
	for (uint32_t h = 0; h < 0x7C00; h++) {
		uint16_t a = (uint16_t)h, b = (uint16_t)(h + 1);
		float mid = (rq_f16_to_f32(a) + rq_f16_to_f32(b)) * 0.5f;   /* exact: few bits */
		uint32_t mu;
		memcpy(&mu, &mid, 4);
		for (int d = -1; d <= 1; d++) {
			uint32_t u = mu + (uint32_t)d;
			for (int sg = 0; sg < 2; sg++) {
				float x;
				uint32_t us = u | (sg ? 0x80000000u : 0);
				memcpy(&x, &us, 4);
				_Float16 r = (_Float16)x;
				uint16_t rb;
				memcpy(&rb, &r, 2);
				bad += rq_f32_to_f16(x) != rb;
			}
		}
	}
	for (uint64_t u = 0; u < 0x7F800000u; u += 997) {
		float x;
		uint32_t u32 = (uint32_t)u;
		memcpy(&x, &u32, 4);
		_Float16 r = (_Float16)x;
		uint16_t rb;
		memcpy(&rb, &r, 2);
		bad += rq_f32_to_f16(x) != rb;
	}
	TAP_OK(bad == 0, "f32 -> f16 nearest even: midpoints, neighbours, a sweep (%ld differ)", bad);
}

int main(void)
{
	test_f16();
	test_whole_ref();
	test_names();
	test_layouts();
	test_refusals();
	test_known_bytes();
	test_oracles();
	test_round_trip();
	return tap_done();
}
