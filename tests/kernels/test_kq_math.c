/* test_kq_math.c — the recipe's arithmetic (quant/recipe.h, which the CUDA
 * quantizer compiles for the device), compiled for the CPU, against literal
 * oracles: this file's own transcription of SPEC.md §3 and quant/'s table
 * searches. Runs everywhere (suite kernels): the device build compiles the
 * very same functions with the _rn intrinsics, and test_kquant then checks
 * the device bytes themselves.
 *   - global scale: every finite non-negative BF16 amax, all three recipes,
 *     against the spec's formulas written out here
 *   - group scale rule: every finite BF16 group max (a stride of 7 for most
 *     gs) under 160 gs, against S6, multiply, clamp, E4M3 table search and
 *     0 -> 0x20 written out here
 *   - E4M3 encoding: a stride over every binary32 in [0, 448], plus the few
 *     ulps around every representable value and every midpoint
 *   - E4M3 values, E2M1 codes (ulps around each threshold, a wide sweep)
 *   - the division-free codes (rq_code_thr) against RN(w / seff) for every
 *     finite BF16 w and a few thousand seff, real ones and arbitrary floats
 *   - whole tensors of each test distribution vs rq_quantize_ref */
#include "quant/recipe.h"
#include "quant/quant.h"
#include "tests/kernels/kq_testdata.h"
#include "tests/tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Independent E2M1 oracle: nearest grid value by exact distances, ties to
 * the even index, input clamped to ±6. */
static uint32_t e2m1_oracle(float q)
{
	static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
	float a = fabsf(q > 6.0f ? 6.0f : q < -6.0f ? -6.0f : q);
	int best = 0;
	for (int k = 1; k < 8; k++) {
		float dk = fabsf(a - mag[k]), db = fabsf(a - mag[best]);
		if (dk < db || (dk == db && (k % 2 == 0)))
			best = k;
	}
	return (uint32_t)best | (q < 0.0f ? 8u : 0u);
}

/* bf16(x) through convert.c's literal rounding. */
static float bf16r(float x)
{
	return rq_bf16_to_f32(rq_f32_to_bf16(x));
}

/* SPEC.md §3, GS(a) of each variant, as the table reads. */
static float gs_oracle(int r, float amax)
{
	float a = amax < 0x1p-126f ? 0x1p-126f : amax, gs;
	if (r == RQ_RECIPE_BF16)
		gs = bf16r(bf16r(1.0f / a) * 2688.0f);
	else if (r == RQ_RECIPE_FP32DIV)
		gs = 2688.0f / a;
	else
		gs = (1.0f / a) * 2688.0f;
	return isfinite(gs) ? gs : 1.0f;
}

/* SPEC.md §3, the group scale byte: s = gs * S6(g), min(s, 448), E4M3 RNE,
 * 0 -> 0x20. */
static uint32_t scale_oracle(int r, float g, float gs)
{
	float s6 = g / 6.0f;
	if (r == RQ_RECIPE_BF16)
		s6 = bf16r(s6);
	float s = gs * s6;
	if (s > 448.0f)
		s = 448.0f;
	uint8_t c = rq_f32_to_e4m3(s);
	return c ? c : 0x20;
}

static void test_global_scale(void)
{
	for (int r = 0; r < RQ_RECIPE_COUNT; r++) {
		long bad = 0;
		unsigned first = 0;
		for (uint32_t b = 0; b <= 0x7F7F; b++) {
			float a = rq_bf16_to_f32((uint16_t)b);
			float want = gs_oracle(r, a);
			if (rq_f2u(rq_recipe_gs(r, rq_bf16f(b))) != rq_f2u(want) ||
			    rq_f2u(rq_global_scale(r, a)) != rq_f2u(want)) {
				if (!bad++)
					first = b;
			}
		}
		TAP_OK(bad == 0, "global scale %s: every finite BF16 amax (%ld differ, first %04X)",
		       rq_recipe_name(r), bad, first);
	}
	TAP_OK(rq_f2u(rq_recipe_gs(RQ_RECIPE_FP32, rq_bf16f(0x3C03))) == 0x48A42716 &&
	       rq_f2u(rq_recipe_gs(RQ_RECIPE_FP32DIV, rq_bf16f(0x3C03))) == 0x48A42715,
	       "amax 0x3C03 separates fp32 (48A42716) from fp32div (48A42715)");
}

static void test_scale_rule(void)
{
	for (int r = 0; r < RQ_RECIPE_COUNT; r++) {
		long bad = 0, n = 0;
		uint32_t first = 0;
		uint64_t s = 0x2545F4914F6CDD1Dull;
		for (int i = 0; i < 160; i++) {
			/* gs of a random amax, plus the extremes of the floor and 1.0 */
			uint32_t ab = i == 0 ? 0 : i == 1 ? 0x0529 : (uint32_t)(kq_rng(&s) % 0x7F7F);
			float gs = i == 2 ? 1.0f : gs_oracle(r, rq_bf16f(ab));
			for (uint32_t g = 0; g <= 0x7F7F; g += 1 + (i > 8) * 6, n++) {
				if (rq_scale_code(r, rq_bf16f(g), gs) != scale_oracle(r, rq_bf16f(g), gs) &&
				    !bad++)
					first = g;
			}
		}
		TAP_OK(bad == 0, "group scale %s: %ld (group max, gs) pairs (%ld differ, first g %04X)",
		       rq_recipe_name(r), n, bad, first);
	}
}

static long e4m3_check(uint32_t u, uint32_t *first)
{
	float s = rq_u2f(u);
	if (!(s >= 0.0f && s <= 448.0f))
		return 0;
	if (rq_e4m3_code(s) != rq_f32_to_e4m3(s)) {
		*first = u;
		return 1;
	}
	return 0;
}

static void test_e4m3(void)
{
	long bad = 0, n = 0;
	uint32_t first = 0;
	for (uint32_t u = 0; u <= 0x43E00000u; u += 61, n++)
		bad += e4m3_check(u, &first);
	for (uint32_t c = 0; c < 0x7E; c++) {
		float lo = rq_e4m3_to_f32((uint8_t)c), hi = rq_e4m3_to_f32((uint8_t)(c + 1));
		float pts[3] = {lo, (lo + hi) * 0.5f, hi};
		for (int p = 0; p < 3; p++) {
			for (int d = -8; d <= 8; d++, n++)
				bad += e4m3_check(rq_f2u(pts[p]) + (uint32_t)d, &first);
		}
	}
	TAP_OK(bad == 0, "E4M3 encoding: %ld values in [0, 448] (%ld differ, first %08X)", n, bad,
	       first);
	bad = 0;
	for (uint32_t c = 1; c <= 0x7E; c++)
		bad += rq_f2u(rq_e4m3_val(c)) != rq_f2u(rq_e4m3_to_f32((uint8_t)c));
	TAP_OK(bad == 0, "E4M3 values of codes 1..0x7E (%ld differ)", bad);
}

static void test_e2m1(void)
{
	static const float th[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f,
	                           2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f};
	long bad = 0, n = 0;
	float first = 0;
	for (size_t i = 0; i < sizeof th / sizeof th[0]; i++) {
		for (int sg = 0; sg < 2; sg++) {
			for (int d = -16; d <= 16; d++, n++) {
				uint32_t u = rq_f2u(th[i]) + (uint32_t)d;
				if ((int)rq_f2u(th[i]) + d < 0)
					continue;
				float q = rq_u2f(u | (sg ? 0x80000000u : 0));
				if (rq_e2m1_code(q) != e2m1_oracle(q) && !bad++)
					first = q;
			}
		}
	}
	for (uint32_t u = 0; u < 0x7F800000u; u += 4099, n += 2) {   /* both signs, up to FLT_MAX */
		float q = rq_u2f(u);
		if (rq_e2m1_code(q) != e2m1_oracle(q) && !bad++)
			first = q;
		if (rq_e2m1_code(-q) != e2m1_oracle(-q) && !bad++)
			first = -q;
	}
	TAP_OK(rq_e2m1_code(INFINITY) == 7 && rq_e2m1_code(-INFINITY) == 15,
	       "E2M1 code of ±inf is ±6");
	TAP_OK(bad == 0, "E2M1 codes: %ld values (%ld differ, first %a)", n, bad, first);
}

static long thr_check(float seff, float *first)
{
	uint32_t t[8];
	long bad = 0;
	rq_code_thresholds(seff, t);
	for (uint32_t w = 0; w <= 0xFF7Fu; w++) {
		if ((w & 0x7F80u) == 0x7F80u)
			continue;
		if (rq_code_thr(w, t) != rq_e2m1_code(rq_bf16f(w) / seff) && !bad++)
			*first = seff;
	}
	return bad;
}

static void test_thresholds(void)
{
	static const float gss[] = {1.0f, 2688.0f, 128.0f, 3.3848e38f, 7.9e-36f, 1e30f, 1e-30f,
	                            12345.678f, 0.3f, 448.0f, 6.5e4f, 1.7e38f,
	                            0x1p-100f, 0x1p-60f, 0x1p-120f, 0x1.8p-90f};
	long bad = 0, n = 0;
	float first = 0;
	uint64_t s = 0xD1B54A32D192ED03ull;
	for (size_t i = 0; i < sizeof gss / sizeof gss[0]; i++) {
		for (uint32_t c = 1; c <= 0x7E; c += (c < 16 ? 1 : 5), n++)
			bad += thr_check(rq_e4m3_val(c) / gss[i], &first);
	}
	for (int i = 0; i < 300; i++, n++) {            /* arbitrary positive floats */
		uint32_t u = (uint32_t)(kq_rng(&s) % 0x7F000000u) + 1;
		bad += thr_check(rq_u2f(u), &first);
	}
	TAP_OK(bad == 0, "division-free E2M1 codes == RN(w / seff) codes: every finite BF16 w, "
	       "%ld seff (%ld differ, first seff %a)", n, bad, first);
}

static void test_tensors(void)
{
	const size_t rows = 48, cols = 512, ng = rows * cols / 16;
	uint16_t *w = malloc(rows * cols * 2);
	uint8_t *pk = malloc(ng * 8), *sc = malloc(ng), *pk2 = malloc(ng * 8), *sc2 = malloc(ng);
	uint64_t seed = 0x9E3779B97F4A7C15ull;
	for (int r = 0; r < RQ_RECIPE_COUNT; r++) {
		for (int d = 0; d < KQ_DIST_COUNT; d++) {
			long bad = 0;
			for (int rep = 0; rep < 4; rep++) {
				uint16_t amax;
				kq_fill(w, rows, cols, (enum kq_dist)d, &seed);
				if (rq_absmax_bf16(w, rows * cols, &amax, NULL) < 0) {
					bad++;
					continue;
				}
				float gs = rq_global_scale(r, rq_bf16_to_f32(amax));
				rq_quantize_ref(r, w, rows, cols, gs, pk, sc);
				for (size_t g = 0; g < ng; g++) {
					uint32_t wg[16], p2[2];
					for (int j = 0; j < 16; j++)
						wg[j] = w[g * 16 + j];
					sc2[g] = (uint8_t)rq_quant_group(r, gs, wg, p2);
					for (int j = 0; j < 8; j++)
						pk2[g * 8 + j] = (uint8_t)(p2[j / 4] >> (8 * (j % 4)));
				}
				bad += memcmp(pk, pk2, ng * 8) != 0 || memcmp(sc, sc2, ng) != 0;
				for (size_t g = 0; g < ng; g++) {          /* and the literal form */
					uint32_t wg[16], p2[2];
					for (int j = 0; j < 16; j++)
						wg[j] = w[g * 16 + j];
					sc2[g] = (uint8_t)rq_quant_group_div(r, gs, wg, p2);
					for (int j = 0; j < 8; j++)
						pk2[g * 8 + j] = (uint8_t)(p2[j / 4] >> (8 * (j % 4)));
				}
				bad += memcmp(pk, pk2, ng * 8) != 0 || memcmp(sc, sc2, ng) != 0;
				bad += rq_f2u(gs_oracle(r, rq_bf16f(amax))) != rq_f2u(gs);
			}
			TAP_OK(bad == 0, "%s, %s weights: rq_quant_group and _div == rq_quantize_ref (%ld differ)",
			       rq_recipe_name(r), kq_dist_name(d), bad);
		}
	}
	free(w);
	free(pk);
	free(sc);
	free(pk2);
	free(sc2);
}

int main(void)
{
	test_global_scale();
	test_scale_rule();
	test_e4m3();
	test_e2m1();
	test_thresholds();
	test_tensors();
	return tap_done();
}
