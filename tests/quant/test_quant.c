/* test_quant.c — the recipe against its golden vectors, conversions,
 * refusals and dequantization (TAP).
 *
 * Golden vectors: shared/vectors/nvfp4-vectors.md, embedded in vectors.h by
 * gen_vectors.py; each goes through rq_quantize_ref, rq_quantize_fast (with
 * and without a pool) and rq_quantize_job. */
#include "quant/quant.h"
#include "quant/quant_int.h"
#include "base/pool.h"
#include "tests/tap.h"
#include "vectors.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static struct rq_pool *pool2;

static uint32_t bits(float f)
{
	return rq_f2u(f);
}

/* ---- (a) golden vectors ---- */

static void test_golden(const struct golden *g)
{
	size_t n = (size_t)g->rows * g->cols;
	const char *v = rq_recipe_name(g->recipe);
	uint16_t amax = 0, amax_fast = 0;
	int rc = rq_absmax_bf16(g->in, n, &amax, NULL);
	int rc2 = rq_absmax_bf16_fast(g->in, n, &amax_fast, NULL, pool2);
	TAP_OK(rc == 0 && rc2 == 0 && amax == amax_fast, "golden %s/%s: absmax ref == fast (0x%04X)",
	       g->name, v, amax);
	float a = rq_bf16_to_f32(amax);
	if (g->partner_amax > a)
		a = g->partner_amax;
	float gs = rq_global_scale(g->recipe, a);
	TAP_OK(bits(gs) == g->gs_bits, "golden %s/%s: gs %08X (want %08X)", g->name, v, bits(gs),
	       g->gs_bits);

	uint8_t packed[24], scales[3];
	memset(packed, 0xAA, sizeof packed);
	memset(scales, 0xAA, sizeof scales);
	rq_quantize_ref(g->recipe, g->in, g->rows, g->cols, gs, packed, scales);
	TAP_OK(!memcmp(scales, g->scales, n / 16) && !memcmp(packed, g->packed, n / 2),
	       "golden %s/%s: ref bytes", g->name, v);
	for (int isa = 0; isa <= rq_quant_isa_max(); isa++) {
		rq_quant_isa_force(isa);
		for (int path = 0; path < 2; path++) {
			memset(packed, 0xAA, sizeof packed);
			memset(scales, 0xAA, sizeof scales);
			rq_quantize_fast(g->recipe, g->in, g->rows, g->cols, gs, packed, scales,
			                 path ? pool2 : NULL);
			TAP_OK(!memcmp(scales, g->scales, n / 16) && !memcmp(packed, g->packed, n / 2),
			       "golden %s/%s: fast (%s%s) bytes", g->name, v, rq_quant_isa_name(isa),
			       path ? ", pool" : "");
		}
	}
	rq_quant_isa_force(-1);

	/* the whole job: alone, or fused with a gate whose amax is partner_amax */
	uint16_t gate[16];
	uint8_t gpacked[8], gscales[1];
	struct rq_qmod m[2];
	int nm = 0;
	if (g->partner_amax > 0) {
		for (int j = 0; j < 16; j++)
			gate[j] = (uint16_t)(j & 1 ? 0x3F80 : 0xBF00);   /* 1.0, -0.5 */
		gate[5] = (uint16_t)(rq_f32_to_bf16(g->partner_amax) | 0x8000);  /* -amax */
		m[nm++] = (struct rq_qmod){gate, 1, 16, gpacked, gscales};
	}
	m[nm++] = (struct rq_qmod){g->in, (size_t)g->rows, (size_t)g->cols, packed, scales};
	float jgs = 0;
	int bad = -1;
	memset(packed, 0xAA, sizeof packed);
	rc = rq_quantize_job(g->recipe, m, nm, &jgs, &bad, pool2);
	TAP_OK(rc == 0 && bits(jgs) == g->gs_bits && !memcmp(scales, g->scales, n / 16) &&
	       !memcmp(packed, g->packed, n / 2), "golden %s/%s: rq_quantize_job (%d module%s)",
	       g->name, v, nm, nm > 1 ? "s, fused" : "");
}

static void test_gs_extra(void)
{
	/* SPEC §3: amax 0x3C03 separates fp32 from fp32div */
	float a = rq_bf16_to_f32(0x3C03);
	TAP_OK(bits(rq_global_scale(RQ_RECIPE_FP32, a)) == 0x48A42716, "gs(0x3C03) fp32 = 48A42716");
	TAP_OK(bits(rq_global_scale(RQ_RECIPE_FP32DIV, a)) == 0x48A42715,
	       "gs(0x3C03) fp32div = 48A42715");
	TAP_OK(rq_global_scale(RQ_RECIPE_FP32, 0.0f) == 1.0f, "gs(0) = 1.0 (inf -> 1)");
	TAP_OK(rq_global_scale(RQ_RECIPE_BF16, 0.0f) == 1.0f, "gs(0) bf16 = 1.0");
	TAP_OK(rq_global_scale(RQ_RECIPE_FP32DIV, NAN) == 1.0f, "gs(NaN) = 1.0");
	TAP_OK(rq_global_scale(RQ_RECIPE_FP32, 21.0f) == 128.0f, "gs(21) = 128");
	/* the floor 2^-126: tiny amax behaves like 2^-126 (-> inf -> 1.0) */
	TAP_OK(rq_global_scale(RQ_RECIPE_FP32, 0x1p-130f) == 1.0f, "gs(2^-130) = 1.0");
	enum rq_recipe r;
	TAP_OK(rq_recipe_parse("fp32div", &r) == 0 && r == RQ_RECIPE_FP32DIV &&
	       rq_recipe_parse("bf16", &r) == 0 && r == RQ_RECIPE_BF16 &&
	       rq_recipe_parse("fp32", &r) == 0 && r == RQ_RECIPE_FP32 &&
	       rq_recipe_parse("fp16", &r) == -EINVAL && !strcmp(rq_recipe_name(RQ_RECIPE_BF16), "bf16"),
	       "recipe names parse and print");
}

/* ---- (c) refusals ---- */

static void test_refusals(void)
{
	static const uint16_t bad_vals[] = {0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81};
	size_t n = 300000;
	uint16_t *w = calloc(n, 2);
	for (size_t i = 0; i < n; i++)
		w[i] = (uint16_t)(0x3C00 + (i % 97));
	for (size_t k = 0; k < sizeof bad_vals / sizeof bad_vals[0]; k++) {
		size_t at = 1000 + k * 50000, at2 = at + 70000;
		w[at] = bad_vals[k];
		w[at2] = 0x7F80;
		uint16_t amax = 0x1234, amax2 = 0x1234;
		size_t bi = 0, bi2 = 0;
		int rc = rq_absmax_bf16(w, n, &amax, &bi);
		int rc2 = rq_absmax_bf16_fast(w, n, &amax2, &bi2, pool2);
		TAP_OK(rc == -EDOM && rc2 == -EDOM && bi == at && bi2 == at && amax == 0x1234 &&
		       amax2 == 0x1234, "0x%04X at %zu refused with -EDOM and its index (%zu, %zu)",
		       bad_vals[k], at, bi, bi2);
		w[at] = 0x3C00;
		w[at2] = 0x3C00;
	}
	uint16_t amax = 0;
	TAP_OK(rq_absmax_bf16_fast(w, n, &amax, NULL, pool2) == 0 && amax == 0x3C60,
	       "clean tensor accepted after the bad values are gone");

	uint8_t p[150000], s[20000];
	struct rq_qmod m[2] = {{w, 100, 1024, p, s}, {w + 102400, 100, 1024, p + 51200, s + 6400}};
	float gs = -1;
	int bad = -1;
	w[102400 + 5] = 0xFFC0;
	int rc = rq_quantize_job(RQ_RECIPE_FP32, m, 2, &gs, &bad, pool2);
	TAP_OK(rc == -EDOM && bad == 1 && gs == -1, "job: NaN in module 1 -> -EDOM, bad_module 1");
	w[102400 + 5] = 0x3C00;
	m[1].cols = 1000;
	bad = -1;
	rc = rq_quantize_job(RQ_RECIPE_FP32, m, 2, &gs, &bad, pool2);
	TAP_OK(rc == -EINVAL && bad == 1, "job: cols %% 16 != 0 -> -EINVAL, bad_module 1");
	m[1].cols = 1024;
	TAP_OK(rq_quantize_job(RQ_RECIPE_FP32, m, 0, &gs, &bad, pool2) == -EINVAL, "job: n = 0 -> -EINVAL");
	TAP_OK(rq_quantize_job(RQ_RECIPE_FP32, m, 2, &gs, &bad, pool2) == 0 && gs > 0,
	       "job: both modules fine -> 0");
	free(w);
}

/* ---- (d) dequantization ---- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
	return tap_xorshift(&rng);
}

static void test_dequant(void)
{
	enum { R = 8, C = 256 };
	uint16_t w[R * C];
	uint8_t p[R * C / 2], s[R * C / 16];
	float out[C];
	for (int i = 0; i < R * C; i++) {
		float x = ((float)(rnd() % 20001) - 10000.0f) * 1e-5f * (i % 48 == 0 ? 8.0f : 1.0f);
		w[i] = rq_f32_to_bf16(x);
	}
	for (int v = 0; v < RQ_RECIPE_COUNT; v++) {
		float gs = 0;
		struct rq_qmod m = {w, R, C, p, s};
		int rc = rq_quantize_job((enum rq_recipe)v, &m, 1, &gs, NULL, NULL);
		int ok = rc == 0, exact = 1;
		double err2 = 0, sig2 = 0;
		for (int i = 0; i < R && ok; i++) {
			rq_dequant_row(p + i * C / 2, s + i * C / 16, gs, C, out);
			for (int c = 0; c < C; c++) {
				float x = rq_bf16_to_f32(w[i * C + c]);
				float seff = rq_e4m3_to_f32(s[i * C / 16 + c / 16]) / gs;
				/* E2M1 grid steps are at most 2 (4 -> 6): error <= one seff */
				if (fabsf(x - out[c]) > seff * 1.0001f)
					ok = 0;
				uint8_t code = (p[(i * C + c) / 2] >> ((c & 1) * 4)) & 15;
				float want = rq_e2m1_to_f32(code) * rq_e4m3_to_f32(s[i * C / 16 + c / 16]) / gs;
				if (bits(want) != bits(out[c]))
					exact = 0;
				err2 += (double)(x - out[c]) * (x - out[c]);
				sig2 += (double)x * x;
			}
		}
		TAP_OK(ok && exact && err2 < 0.02 * sig2,
		       "%s: dequant within one step of w, = e2m1*e4m3/gs, rel. MSE %.4f",
		       rq_recipe_name((enum rq_recipe)v), sig2 > 0 ? err2 / sig2 : 0.0);
	}
}

/* ---- (e) conversions ---- */

static void test_e4m3(void)
{
	int rt = 1, nan = 1;
	for (int b = 0; b < 256; b++) {
		float f = rq_e4m3_to_f32((uint8_t)b);
		if ((b & 0x7F) == 0x7F) {
			nan &= isnan(f) && rq_f32_to_e4m3(f) == 0x7F;
			continue;
		}
		if (rq_f32_to_e4m3(f) != b)
			rt = 0;
	}
	TAP_OK(rt, "E4M3: all 254 finite bytes round-trip (incl. -0 -> 0x80)");
	TAP_OK(nan, "E4M3: 0x7F/0xFF decode to NaN");
	TAP_OK(rq_e4m3_to_f32(0x01) == 0x1p-9f && rq_e4m3_to_f32(0x08) == 0x1p-6f &&
	       rq_e4m3_to_f32(0x7E) == 448.0f && rq_e4m3_to_f32(0x20) == 0.125f &&
	       rq_e4m3_to_f32(0xFE) == -448.0f, "E4M3: 2^-9, 2^-6, 448, 0.125, -448");

	int mid_ok = 1, fast_ok = 1, val_ok = 1;
	for (int c = 0; c < 126; c++) {
		float lo = rq_e4m3_to_f32((uint8_t)c), hi = rq_e4m3_to_f32((uint8_t)(c + 1));
		float mid = (lo + hi) * 0.5f;
		int even = (c & 1) ? c + 1 : c;
		if (rq_f32_to_e4m3(mid) != even || rq_f32_to_e4m3(nextafterf(mid, 0)) != c ||
		    rq_f32_to_e4m3(nextafterf(mid, 1000)) != c + 1 ||
		    rq_f32_to_e4m3(-mid) != (0x80 | even))
			mid_ok = 0;
		/* the branch-free encoder near every value and midpoint */
		float pts[2] = {lo, mid};
		for (int k = 0; k < 2; k++) {
			uint32_t u0 = bits(pts[k]);
			for (int d = -300; d <= 300; d++) {
				if ((int64_t)u0 + d < 0)
					continue;
				float x = rq_u2f(u0 + d);
				if (x > 448.0f)
					continue;
				if (rq_e4m3_code(x) != rq_f32_to_e4m3(x))
					fast_ok = 0;
			}
		}
		if (c > 0 && bits(rq_e4m3_val((uint32_t)c)) != bits(lo))
			val_ok = 0;
	}
	/* and a sweep of every 4099th binary32 in [0, 448] */
	for (uint32_t u = 0; u <= 0x43E00000u; u += 4099)
		if (rq_e4m3_code(rq_u2f(u)) != rq_f32_to_e4m3(rq_u2f(u)))
			fast_ok = 0;
	fast_ok &= rq_e4m3_code(448.0f) == 0x7E && rq_e4m3_code(0.0f) == 0;
	TAP_OK(mid_ok, "E4M3: midpoints round to the even code, one ulp off goes to the near side");
	TAP_OK(fast_ok, "E4M3: branch-free encoder == table encoder (near all values/midpoints, sweep)");
	TAP_OK(val_ok && bits(rq_e4m3_val(0x7E)) == bits(448.0f),
	       "E4M3: branch-free decoder == decoder on 1..0x7E");
	TAP_OK(rq_f32_to_e4m3(0x1p-10f) == 0x00 && rq_f32_to_e4m3(0x1.000002p-10f) == 0x01 &&
	       rq_f32_to_e4m3(3 * 0x1p-10f) == 0x02 && rq_f32_to_e4m3(1e-30f) == 0 &&
	       rq_f32_to_e4m3(450.0f) == 0x7E, "E4M3: subnormal ties/underflow, saturation");
}

static void test_bf16_e2m1(void)
{
	TAP_OK(rq_f32_to_bf16(1.0f) == 0x3F80 && rq_f32_to_bf16(rq_u2f(0x3F808000)) == 0x3F80 &&
	       rq_f32_to_bf16(rq_u2f(0x3F818000)) == 0x3F82 &&
	       rq_f32_to_bf16(rq_u2f(0x3F808001)) == 0x3F81 &&
	       rq_f32_to_bf16(rq_u2f(0x7F7FFFFF)) == 0x7F80 && (rq_f32_to_bf16(NAN) & 0x7FFF) > 0x7F80,
	       "BF16: RNE on ties, overflow to inf, NaN stays NaN");
	int ok = 1;
	for (uint32_t u = 0; u < 0x7F000000u; u += 977)
		if (bits(rq_round_bf16(rq_u2f(u))) != ((uint32_t)rq_f32_to_bf16(rq_u2f(u)) << 16))
			ok = 0;
	TAP_OK(ok, "BF16: branch-free rounding == rq_f32_to_bf16 (sweep)");

	static const struct { float q; uint32_t code; } t[] = {
		{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.0f, 6},
		{-0.1f, 8}, {-0.0f, 0}, {0.0f, 0}, {6.0f, 7}, {7.5f, 7}, {INFINITY, 7}, {-INFINITY, 15},
		{-0.25f, 8}, {-0.75f, 10}, {-5.0f, 14}, {-5.0000005f, 15}, {0.2500001f, 1}, {1.0f, 2},
	};
	ok = 1;
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (rq_e2m1_code(t[i].q) != t[i].code) {
			ok = 0;
			printf("# e2m1_code(%a) = %u, want %u\n", t[i].q, rq_e2m1_code(t[i].q), t[i].code);
		}
	TAP_OK(ok, "E2M1: ties to even index, sign only for q < 0, clamp implicit");
	ok = 1;
	for (int c = 0; c < 16; c++)
		if (rq_e2m1_code(rq_e2m1_to_f32((uint8_t)c)) != (c == 8 ? 0u : (uint32_t)c))
			ok = 0;
	TAP_OK(ok, "E2M1: all 16 codes decode and re-encode (-0 -> 0)");
}

int main(void)
{
	if (rq_pool_create(2, &pool2) != 0)
		TAP_SKIP_ALL("cannot create a thread pool");
	size_t ng = sizeof goldens / sizeof goldens[0];
	TAP_OK(rq_quant_isa_force(RQ_ISA_COUNT) == -EINVAL, "cannot force an ISA beyond the CPU's");
	TAP_OK(ng == 36, "%zu golden vectors embedded (11 cases x 3 variants + 7a/7b)", ng);
	for (size_t i = 0; i < ng; i++)
		test_golden(&goldens[i]);
	test_gs_extra();
	test_refusals();
	test_dequant();
	test_e4m3();
	test_bf16_e2m1();
	rq_pool_destroy(pool2);
	return tap_done();
}
