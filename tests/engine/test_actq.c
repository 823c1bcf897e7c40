/* test_actq.c — the input-activation quantizers (kernels/ek_actq_rule.h,
 * the CPU twins the engine runs) against hand-computed values and against a
 * brute-force transcription of vLLM's rule that rounds by searching the
 * E4M3 and E2M1 grids (nearest, ties to the even code) instead of quant/'s
 * bit tricks; and quantization_config's input_activations as the config
 * reader sees them (W4A4 / NVFP4A16 / FP8 per token / refusals).
 *
 * usage: test_actq */
#include "engine/model/model.h"
#include "base/err.h"
#include "kernels/ek.h"
#include "tests/tap.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------- brute force */

/* E4M3FN code c (0..126) as a value, from the format's definition. */
static double e4m3_def(int c)
{
	int e = c >> 3, m = c & 7;
	return e == 0 ? m * ldexp(1.0, -9) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
}

/* Nearest E4M3 value to 0 <= v <= 448 by search, ties to the even code. */
static float e4m3_search(float v)
{
	int best = 0;
	for (int c = 1; c <= 126; c++) {
		double d = fabs(e4m3_def(c) - v), db = fabs(e4m3_def(best) - v);
		if (d < db || (d == db && !(c & 1)))
			best = c;
	}
	return (float)e4m3_def(best);
}

/* Nearest E2M1 magnitude to 0 <= v (clamped to 6), ties to the even index. */
static float e2m1_search(float v)
{
	static const double g[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
	if (v > 6)
		v = 6;
	int best = 0;
	for (int i = 1; i < 8; i++) {
		double d = fabs(g[i] - v), db = fabs(g[best] - v);
		if (d < db || (d == db && !(i & 1)))
			best = i;
	}
	return (float)g[best];
}

/* vLLM's NVFP4 input quant-dequant of one group of 16 (ek_actq_rule.h). */
static void nv_brute(const float *x, float *y, float gs)
{
	float a = 0;
	for (int i = 0; i < 16; i++)
		a = fmaxf(a, fabsf(x[i]));
	volatile float r6 = (float)(1.0 / 6.0);
	float s = gs * (a * r6);
	if (s > 448.0f)
		s = 448.0f;
	s = e4m3_search(s);
	float inv = s == 0 ? 0 : gs / s, deq = s / gs;
	for (int i = 0; i < 16; i++) {
		float q = x[i] * inv;
		float m = e2m1_search(fabsf(q));
		y[i] = (q < 0 ? -m : m) * deq;
	}
}

/* vLLM's dynamic per-token FP8 input quant-dequant of n inputs. */
static void fp8_brute(const float *x, float *y, int n)
{
	float a = 0;
	for (int i = 0; i < n; i++)
		a = fmaxf(a, fabsf(x[i]));
	float s = a / 448.0f, mn = 1.0f / 229376.0f;
	if (s < mn)
		s = mn;
	for (int i = 0; i < n; i++) {
		float q = x[i] / s;
		float m = fabsf(q) > 448.0f ? 448.0f : fabsf(q);
		float v = e4m3_search(m);
		y[i] = (signbit(q) ? -v : v) * s;
	}
}

static int same_bits(const float *a, const float *b, int n, int *at)
{
	for (int i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], 4)) {
			*at = i;
			return 0;
		}
	return 1;
}

/* --------------------------------------------------------- NVFP4 */

static void nv_hand(void)
{
	/* gs 1, amax 6: s = e4m3(1 · (6 · fl(1/6))) = 1, so x' = e2m1(x): every
	 * tie of the E2M1 grid goes to the even value, |x| > 5 to 6 */
	float x[16] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f,
	               -0.25f, 0.26f, 5.01f, -6.0f, 2.4f, 0.7f, -1.3f, 3.0f};
	float want[16] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f,
	                  -0.0f, 0.5f, 6.0f, -6.0f, 2.0f, 0.5f, -1.5f, 3.0f};
	float y[16];
	int at = -1;
	ek_actq_nvfp4_cpu(x, 16, y, 16, 1, 16, 1.0f);
	TAP_OK(same_bits(y, want, 16, &at), "nvfp4: E2M1 ties to even, > 5 -> 6, -0.25 -> -0.0 "
	       "(first difference at %d: %g vs %g)", at, at >= 0 ? y[at] : 0, at >= 0 ? want[at] : 0);

	/* scale ties: gs · 1 = 1.0625 lies between E4M3 1.0 (even code 0x38) and
	 * 1.125: s = 1, inv = 1.0625, x = 6 -> 6.375 -> 6, x' = 6 · (1/1.0625) */
	float x2[16] = {6.0f}, y2[16];
	ek_actq_nvfp4_cpu(x2, 16, y2, 16, 1, 16, 1.0625f);
	TAP_OK(y2[0] == 6.0f * (1.0f / 1.0625f) && y2[1] == 0.0f,
	       "nvfp4: group scale 1.0625 ties to 1.0: x' %.9g == %.9g", y2[0], 6.0f * (1.0f / 1.0625f));
	ek_actq_nvfp4_cpu(x2, 16, y2, 16, 1, 16, 1.1875f);   /* 1.1875 -> 1.25 (code 0x3A) */
	float want2 = 6.0f * (1.25f / 1.1875f);   /* x·inv = 6 · 0.95 = 5.7 -> 6 */
	TAP_OK(y2[0] == want2, "nvfp4: group scale 1.1875 ties to 1.25: x' %.9g == %.9g", y2[0], want2);

	/* saturation: gs 1e6, amax 1 -> gs·a/6 = 166667 clamps to 448; x·inv
	 * clamps to 6: x' = 6 · (448 / 1e6); the smaller inputs on the grid */
	float d3 = 448.0f / 1e6f;
	float x3[16] = {1.0f, -1.0f, 3.0f * d3}, y3[16];
	ek_actq_nvfp4_cpu(x3, 16, y3, 16, 1, 16, 1e6f);
	TAP_OK(y3[0] == 6.0f * d3 && y3[1] == -6.0f * d3 && y3[2] == 3.0f * d3,
	       "nvfp4: group scale saturates at 448: %.9g %.9g %.9g", y3[0], y3[1], y3[2]);

	/* zero group, and a group whose scale rounds to E4M3 zero (< 2^-10) */
	float x4[32] = {0}, y4[32];
	for (int i = 16; i < 32; i++)
		x4[i] = (i & 1 ? 1e-5f : -1e-5f);
	memset(y4, 0x55, sizeof y4);
	ek_actq_nvfp4_cpu(x4, 32, y4, 32, 1, 32, 1.0f);
	int zero = 1;
	for (int i = 0; i < 32; i++)
		zero &= y4[i] == 0.0f;
	TAP_OK(zero, "nvfp4: an all-zero group and a group whose scale rounds to 0 give zeros");

	/* in place, two tokens, row strides: the same as out of place */
	float xa[2][40], ya[2][40], yb[2][40];
	for (int t = 0; t < 2; t++)
		for (int i = 0; i < 40; i++)
			xa[t][i] = sinf((float)(t * 40 + i)) * (i + 1);
	ek_actq_nvfp4_cpu(&xa[0][0], 40, &ya[0][0], 40, 2, 32, 300.0f);
	memcpy(yb, xa, sizeof yb);
	ek_actq_nvfp4_cpu(&yb[0][0], 40, &yb[0][0], 40, 2, 32, 300.0f);
	int ok = 1;
	for (int t = 0; t < 2; t++) {
		ok &= !memcmp(ya[t], yb[t], 32 * sizeof(float));
		ok &= !memcmp(&yb[t][32], &xa[t][32], 8 * sizeof(float));   /* columns >= cols untouched */
	}
	TAP_OK(ok, "nvfp4: in place == out of place over two strided tokens; columns past cols untouched");
}

static void nv_random(void)
{
	uint64_t st = 0x9E3779B97F4A7C15ull;
	int bad = 0, n = 0;
	char why[200] = "";
	for (int it = 0; it < 20000; it++) {
		float x[16], y[16], r[16];
		/* magnitudes over 2^-20 .. 2^12, some groups of one order, ties planted */
		int e0 = (int)(tap_xorshift(&st) % 33) - 20;
		for (int i = 0; i < 16; i++) {
			int e = (it & 1) ? e0 : (int)(tap_xorshift(&st) % 33) - 20;
			float m = 1.0f + (float)(tap_xorshift(&st) & 0xFFFF) / 65536.0f;
			x[i] = ldexpf(m, e) * ((tap_xorshift(&st) & 1) ? -1.0f : 1.0f);
			if (!(tap_xorshift(&st) % 7))
				x[i] = 0.0f;
		}
		/* a global scale like calibration gives: 2688 / (amax of a "tensor") */
		float gs = ldexpf(2688.0f, -e0 - (int)(tap_xorshift(&st) % 6));
		if (it % 5 == 0)   /* values sitting exactly on E2M1 ties once the scale is 1 */
			for (int i = 0; i < 16; i++)
				x[i] = (float)((int)(tap_xorshift(&st) % 25) - 12) * 0.25f, gs = 1.0f;
		ek_actq_nvfp4_cpu(x, 16, y, 16, 1, 16, gs);
		nv_brute(x, r, gs);
		int at;
		n++;
		if (!same_bits(y, r, 16, &at) && !bad++)
			snprintf(why, sizeof why, "group %d, x %.9g, gs %.9g: %.9g vs brute force %.9g", it,
			         x[at], gs, y[at], r[at]);
	}
	TAP_OK(!bad, "nvfp4: %d random groups == brute force bit for bit (%d differ) %s", n, bad, why);
}

/* ----------------------------------------------------------- FP8 */

static void fp8_hand(void)
{
	/* amax 448 -> s = 1: x' = e4m3(x); 1.0625 ties to 1.0, 1.1875 to 1.25,
	 * 2^-10 (half the smallest subnormal) to 0, 3·2^-10 to 2·2^-9 (even) */
	float x[8] = {448.0f, -224.0f, 1.0625f, 1.1875f, 0x1p-10f, 3 * 0x1p-10f, -0.0f, 300.0f};
	float want[8] = {448.0f, -224.0f, 1.0f, 1.25f, 0.0f, 2 * 0x1p-9f, -0.0f, 288.0f};
	float y[8];
	int at = -1;
	ek_actq_fp8_cpu(x, 8, y, 8, 1, 8);
	TAP_OK(same_bits(y, want, 8, &at), "fp8: E4M3 ties to even, subnormal ties, -0 stays -0, 300 -> 288 "
	       "(first difference at %d: %g vs %g)", at, at >= 0 ? y[at] : 0, at >= 0 ? want[at] : 0);

	/* per token: each row its own scale; amax 896 -> s = 2, 3 -> 2 · e4m3(1.5) */
	float x2[2][4] = {{896.0f, 3.0f, -5.0f, 0.0f}, {1.0f, 0.5f, -0.25f, 0.1f}}, y2[2][4];
	ek_actq_fp8_cpu(&x2[0][0], 4, &y2[0][0], 4, 2, 4);
	float s1 = 1.0f / 448.0f;
	TAP_OK(y2[0][0] == 896.0f && y2[0][1] == 3.0f && y2[0][2] == -5.0f &&
	       y2[1][0] == e4m3_search(1.0f / s1) * s1 && y2[1][3] == e4m3_search(0.1f / s1) * s1,
	       "fp8: one scale per token (896 -> s 2; 1 -> s 1/448): %g %g %g | %.9g %.9g",
	       y2[0][0], y2[0][1], y2[0][2], y2[1][0], y2[1][3]);

	/* the scale floor: a zero token and a tiny one use s = 1/(448·512) */
	float x3[2][4] = {{0}, {1e-9f, -2e-9f, 0, 0}}, y3[2][4];
	memset(y3, 0x55, sizeof y3);
	ek_actq_fp8_cpu(&x3[0][0], 4, &y3[0][0], 4, 2, 4);
	int z = 1;
	for (int i = 0; i < 8; i++)
		z &= (&y3[0][0])[i] == 0.0f;
	TAP_OK(z, "fp8: zero and 1e-9 tokens quantize to zeros under the 1/(448·512) scale floor");

	/* saturation: a/448 rounded down makes amax/s > 448: clamped, not NaN */
	float x4[2] = {449.0f, 1.0f}, y4[2];
	ek_actq_fp8_cpu(x4, 2, y4, 2, 1, 2);
	float s4 = 449.0f / 448.0f;
	TAP_OK(y4[0] == 448.0f * s4, "fp8: amax / s past 448 clamps to 448 (x' %.9g == %.9g)", y4[0],
	       448.0f * s4);
}

static void fp8_random(void)
{
	uint64_t st = 0x1234567887654321ull;
	int bad = 0, n = 0;
	char why[200] = "";
	for (int it = 0; it < 4000; it++) {
		float x[96], y[96], r[96];
		int e0 = (int)(tap_xorshift(&st) % 40) - 25, cols = 1 + (int)(tap_xorshift(&st) % 96);
		for (int i = 0; i < cols; i++) {
			float m = 1.0f + (float)(tap_xorshift(&st) & 0xFFFFF) / 1048576.0f;
			x[i] = ldexpf(m, e0 - (int)(tap_xorshift(&st) % 14)) * ((tap_xorshift(&st) & 1) ? -1 : 1);
		}
		ek_actq_fp8_cpu(x, cols, y, cols, 1, cols);
		fp8_brute(x, r, cols);
		int at;
		n++;
		if (!same_bits(y, r, cols, &at) && !bad++)
			snprintf(why, sizeof why, "token %d: x %.9g: %.9g vs brute force %.9g", it, x[at], y[at],
			         r[at]);
	}
	TAP_OK(!bad, "fp8: %d random tokens == brute force bit for bit (%d differ) %s", n, bad, why);
}

/* ------------------------------------------------------- config */

#define NV_W "\"weights\": {\"num_bits\": 4, \"type\": \"float\", \"strategy\": \"tensor_group\", \"group_size\": 16}"
#define NV_A "\"input_activations\": {\"num_bits\": 4, \"type\": \"float\", \"strategy\": \"tensor_group\", \"group_size\": 16, \"dynamic\": \"local\"}"
#define F8_W "\"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"channel\"}"
#define F8_A "\"input_activations\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"token\", \"dynamic\": true}"

static void config_cases(void)
{
	static const struct { const char *q, *what; int code, nv, f8; } cases[] = {
		{"{\"format\": \"nvfp4-pack-quantized\", \"config_groups\": {\"group_0\": {" NV_W ", " NV_A
		 "}}}", "W4A4 (llm-compressor NVFP4)", 0, 1, 0},
		{"{\"format\": \"nvfp4-pack-quantized\", \"config_groups\": {\"group_0\": {" NV_W
		 ", \"input_activations\": null}}}", "NVFP4A16", 0, 0, 0},
		{"{\"format\": \"mixed-precision\", \"config_groups\": {\"a\": {\"format\": "
		 "\"nvfp4-pack-quantized\", " NV_W ", " NV_A "}, \"b\": {\"format\": \"nvfp4-pack-quantized\", "
		 NV_W "}, \"c\": {\"format\": \"float-quantized\", " F8_W ", " F8_A "}}}",
		 "W4A4 + NVFP4A16 + FP8_DYNAMIC groups", 0, 2, 1},
		{"{\"format\": \"float-quantized\", \"config_groups\": {\"FP8_DYNAMIC\": {" F8_W ", " F8_A
		 "}}}", "FP8_DYNAMIC", 0, 0, 1},
		{"{\"format\": \"float-quantized\", \"config_groups\": {\"FP8\": {" F8_W ", \"input_activations\": "
		 "{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"tensor\", \"dynamic\": false}}}}",
		 "static FP8 (not computed: A16)", 0, 0, 0},
		{"{\"format\": \"mixed-precision\", \"config_groups\": {\"a\": {\"format\": \"float-quantized\", "
		 F8_W ", " F8_A "}, \"b\": {\"format\": \"float-quantized\", " F8_W "}}}",
		 "FP8 groups with and without per-token inputs", -ENOTSUP, 0, 0},
		{"{\"format\": \"nvfp4-pack-quantized\", \"config_groups\": {\"g\": {" NV_W ", "
		 "\"input_activations\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"token\", "
		 "\"dynamic\": true}}}}", "NVFP4 weights with FP8 inputs", -ENOTSUP, 0, 0},
		{"{\"format\": \"nvfp4-pack-quantized\", \"config_groups\": {\"g\": {" NV_W ", "
		 "\"input_activations\": {\"num_bits\": 4, \"type\": \"float\", \"strategy\": \"tensor_group\", "
		 "\"group_size\": 16, \"dynamic\": true}}}}", "NVFP4 inputs with a dynamic global scale",
		 -ENOTSUP, 0, 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char json[4096];
		snprintf(json, sizeof json, "{\"model_type\": \"llama\", \"hidden_size\": 64, "
		         "\"num_hidden_layers\": 1, \"vocab_size\": 100, \"num_attention_heads\": 2, "
		         "\"num_key_value_heads\": 1, \"intermediate_size\": 128, \"quantization_config\": %s}",
		         cases[i].q);
		struct lg_config c;
		enum lg_attn_type *types = NULL;
		int *heads = NULL, *moe = NULL;
		struct rq_err err = {0};
		int rc = lg_config_parse(json, "config.json", &c, &types, &heads, &moe, &err);
		if (cases[i].code)
			TAP_OK(rc == cases[i].code, "config %s -> %d (%s)", cases[i].what, rc, err.msg);
		else
			TAP_OK(rc == 0 && c.act_nvfp4 == cases[i].nv && c.act_fp8 == cases[i].f8,
			       "config %s -> act_nvfp4 %d, act_fp8 %d (%s)", cases[i].what, rc ? -1 : c.act_nvfp4,
			       rc ? -1 : c.act_fp8, rc ? err.msg : "ok");
		free(types);
		free(heads);
		free(moe);
	}
}

int main(void)
{
	nv_hand();
	nv_random();
	fp8_hand();
	fp8_random();
	config_cases();
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}
