/* test_qdot.c — decode's quantized dots (engine/model/qdot.c, through
 * lg_matmul at one token) give the oracle's bits: each output equal, bit for
 * bit, to a scalar sum written here over the row lg_linear_row dequantizes
 * (16 partial sums over columns ≡ j mod 16, products rounded then added,
 * then acc[j] += acc[j + w] for w = 8, 4, 2, 1), and a batch of 4 or 5 tokens
 * (rows dequantized, the oracle's path) gives the same bits as one at a time
 * (a NaN's sign aside: see same()).
 * Formats: FP8 per channel / per group (16, 32, 128) / per tensor, with BF16,
 * F16 and F32 scales, subnormal and ±0 codes, NaN codes (the oracle's row);
 * INT8 and INT4 per channel and per group, symmetric and asymmetric, INT3 (no
 * fast path); NVFP4 with and without the division table, negative and NaN
 * scale bytes. Random weights and inputs with a spread of exponents, so that
 * a different order shows. Meson runs it three times: AVX-512 where the CPU
 * has it, RQ_ENGINE_NO_AVX512=1 (AVX2), RQ_ENGINE_NO_AVX2=1 (portable). qdot.h
 * is also called directly: the fast path must take the rows it should (so
 * the checks test it, not the oracle it would fall back to). Also attention's
 * P·V rows (lg_axpy_rows) against lg_axpy row by row. */
#include "engine/model/qdot.h"
#include "quant/quant.h"
#include "tests/engine/dot_order.h"

/* dot_order.h's check in batches of 4 or 5: tiles of 3 + 1 or 3 + 2 tokens */
static int check(const struct lg_linear *W, struct rq_pool *pool2, uint64_t *s, const char *what)
{
	return check_tokens(W, 4 + (W->rows & 1), pool2, s, what);
}

/* a scale as a BF16/F16/F32 value of magnitude ~2^-7, random sign and mantissa */
static void put_scale(uint8_t *dst, enum lg_sdtype dt, uint64_t *s)
{
	float v = ldexpf(1.0f + (float)(tap_xorshift(s) & 0xFFFF) / 65536.0f, -7 - (int)(tap_xorshift(s) % 4));
	if (tap_xorshift(s) & 1)
		v = -v;
	if (dt == LG_S_F32) {
		memcpy(dst, &v, 4);
		return;
	}
	uint16_t h;
	if (dt == LG_S_BF16) {
		h = rq_f32_to_bf16(v);
	} else {   /* binary16 of a normal value in range: the top 10 mantissa bits */
		uint32_t u;
		memcpy(&u, &v, 4);
		h = (uint16_t)(((u >> 16) & 0x8000) | ((((u >> 23) & 255) - 112) << 10) | ((u >> 13) & 1023));
	}
	memcpy(dst, &h, 2);
}

static void fp8_cases(struct rq_pool *pool2, uint64_t *s)
{
	static const struct { int rows, cols, groups, srows; enum lg_sdtype dt; int nan; } cs[] = {
		{37, 576, 1, 37, LG_S_BF16, 0},  {5, 64, 4, 5, LG_S_F16, 0},  {9, 256, 2, 9, LG_S_F32, 0},
		{3, 48, 1, 1, LG_S_F32, 0},      {4, 96, 6, 4, LG_S_BF16, 0}, {6, 80, 1, 6, LG_S_BF16, 1},
		{2, 40, 1, 2, LG_S_BF16, 0},     /* 40 columns: no fast path (groups of 40) */
	};
	for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
		int R = cs[k].rows, K = cs[k].cols, G = cs[k].groups, SR = cs[k].srows;
		int es = cs[k].dt == LG_S_F32 ? 4 : 2;
		uint8_t *w8 = malloc((size_t)R * K), *sc = malloc((size_t)SR * G * es);
		for (int i = 0; i < R * K; i++) {
			uint8_t b = (uint8_t)tap_xorshift(s);
			if ((b & 0x7F) == 0x7F)
				b ^= 1;   /* NaN codes only where the case asks */
			if (i % 7 == 0)
				b &= 0x87;   /* subnormals and ±0 */
			w8[i] = b;
		}
		if (cs[k].nan)
			w8[K + 3] = 0x7F, w8[3 * K + 17] = 0xFF;
		for (int i = 0; i < SR * G; i++)
			put_scale(sc + (size_t)i * es, cs[k].dt, s);
		struct lg_linear W = {.kind = LG_W_FP8, .rows = R, .cols = K, .w8 = w8, .qscale = sc,
		                      .sdtype = cs[k].dt, .srows = SR, .groups = G};
		char what[96];
		snprintf(what, sizeof what, "FP8 %d x %d, %d scale group(s) of %s%s%s", R, K, G,
		         cs[k].dt == LG_S_F32 ? "F32" : cs[k].dt == LG_S_F16 ? "F16" : "BF16",
		         SR == 1 ? ", per tensor" : "", cs[k].nan ? ", NaN codes in rows 1 and 3" : "");
		TAP_OK(check(&W, pool2, s, what), "%s: decode == the oracle's order, bit for bit", what);
		free(w8);
		free(sc);
	}
}

static void put_field(uint8_t *row, size_t i, int bits, unsigned v)
{
	for (int b = 0; b < bits; b++) {
		size_t pos = i * bits + b;
		if (v >> b & 1)
			row[pos / 8] |= (uint8_t)(1u << (pos % 8));
	}
}

static void int_cases(struct rq_pool *pool2, uint64_t *s)
{
	/* one: a single row of scales for every row (lds 0 in qdot.h) */
	static const struct { int rows, cols, bits, groups, asym, one; } cs[] = {
		{37, 576, 4, 9, 0, 0}, {11, 96, 4, 3, 1, 0}, {9, 64, 4, 1, 1, 0}, {5, 576, 8, 1, 0, 0},
		{7, 256, 8, 2, 1, 0},  {5, 64, 3, 2, 0, 0},  {4, 48, 8, 3, 0, 0},  {29, 256, 8, 4, 0, 0},
		{14, 128, 4, 2, 0, 1}, {3, 16400, 4, 1, 0, 0},   /* wider than XPERM_MAX */
	};
	for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
		int R = cs[k].rows, K = cs[k].cols, b = cs[k].bits, G = cs[k].groups;
		int words = (K * b + 31) / 32, zrows = (R * b + 31) / 32;
		int SR = cs[k].one ? 1 : R;
		uint8_t *qw = calloc((size_t)R * words, 4), *sc = malloc((size_t)SR * G * 2);
		uint8_t *qz = cs[k].asym ? calloc((size_t)zrows * G, 4) : NULL;
		for (int r = 0; r < R; r++)
			for (int c = 0; c < K; c++)
				put_field(qw + (size_t)r * words * 4, c, b, tap_xorshift(s) & ((1u << b) - 1));
		for (int i = 0; i < SR * G; i++)
			put_scale(sc + 2 * i, LG_S_BF16, s);
		for (int g = 0; qz && g < G; g++)   /* column g of [zrows][G], packed down the rows */
			for (int r = 0; r < R; r++)
				for (int j = 0; j < b; j++) {
					size_t pos = (size_t)r * b + j;
					if (tap_xorshift(s) & 1)
						qz[((pos / 32) * G + g) * 4 + (pos % 32) / 8] |= (uint8_t)(1u << (pos % 8));
				}
		struct lg_linear W = {.kind = LG_W_INT, .rows = R, .cols = K, .qw = qw, .qzero = qz,
		                      .bits = b, .words = words, .qscale = sc, .sdtype = LG_S_BF16,
		                      .srows = SR, .groups = G};
		char what[96];
		snprintf(what, sizeof what, "INT%d %d x %d, %d group(s)%s, %s", b, R, K, G,
		         cs[k].one ? " shared by the rows" : "", cs[k].asym ? "asymmetric" : "symmetric");
		TAP_OK(check(&W, pool2, s, what), "%s: decode == the oracle's order, bit for bit", what);
		free(qw);
		free(sc);
		free(qz);
	}
}

static void nvfp4_cases(struct rq_pool *pool2, uint64_t *s)
{
	static const struct { int rows, cols, table, odd; } cs[] = {
		{37, 576, 1, 0}, {5, 1536, 1, 0}, {7, 64, 0, 0}, {9, 128, 1, 1},
		{3, 16400, 1, 0},   /* wider than qdot.c's XPERM_MAX: the AVX2 dots */
	};
	for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
		int R = cs[k].rows, K = cs[k].cols;
		uint8_t *p = malloc((size_t)R * K / 2), *sc = malloc((size_t)R * K / 16);
		float gs = 2688.0f / 0.37f, div[512];
		for (int i = 0; i < R * K / 2; i++)
			p[i] = (uint8_t)tap_xorshift(s);
		for (int i = 0; i < R * K / 16; i++) {
			uint8_t b = (uint8_t)(tap_xorshift(s) % 0x7E);
			if (cs[k].odd && i % 5 == 0)   /* negative, NaN, zero scale bytes */
				b = i % 15 == 0 ? 0x7F : i % 10 == 0 ? 0x80 : (uint8_t)(b | 0x80);
			sc[i] = b;
		}
		lg_nvfp4_div_table(gs, div);
		struct lg_linear W = {.kind = LG_W_NVFP4, .rows = R, .cols = K, .packed = p, .scales = sc,
		                      .global_scale = gs, .gs_div = cs[k].table ? div : NULL};
		char what[96];
		snprintf(what, sizeof what, "NVFP4 %d x %d, %s%s", R, K,
		         cs[k].table ? "division table" : "no table", cs[k].odd ? ", negative/NaN/zero "
		         "scale bytes" : "");
		TAP_OK(check(&W, pool2, s, what), "%s: decode == the oracle's order, bit for bit", what);
		free(p);
		free(sc);
	}
}

/* 2: the AVX-512 paths (F, BW, VL, VBMI), 1: AVX2 + F16C, 0: portable, as qdot.c picks */
static int path_level(void)
{
	const char *e2 = getenv("RQ_ENGINE_NO_AVX2"), *e5 = getenv("RQ_ENGINE_NO_AVX512");
	__builtin_cpu_init();
	if ((e2 && *e2 && strcmp(e2, "0")) || !__builtin_cpu_supports("avx2") ||
	    !__builtin_cpu_supports("f16c"))
		return 0;
	if ((e5 && *e5 && strcmp(e5, "0")) || !__builtin_cpu_supports("avx512f") ||
	    !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") ||
	    !__builtin_cpu_supports("avx512vbmi"))
		return 1;
	return 2;
}

/* out[0..R) against the order's sum over rows r0.. of W; 1 when all the same bits */
static int rows_ok(const struct lg_linear *W, int r0, int R, const float *x, const float *out)
{
	float row[1536];
	for (int i = 0; i < R; i++) {
		lg_linear_row(W, r0 + i, row);
		if (!same(out[i], ref_dot(row, x, W->cols)))
			return 0;
	}
	return 1;
}

/* qdot.h called directly, R = 1..4 rows at a time: the fast path takes finite
 * rows where this CPU has one (so the checks above test it, not the oracle
 * they fall back to) and declines NaN codes; the NVFP4 table of a thread is
 * remade when the division table's contents change under the same pointer. */
static void direct_cases(uint64_t *s)
{
	int lv = path_level(), K = 576, G = 9, gw = 64, ok = 1, took = 1;
	float x[576], out[4], sc[4 * 9], div[512];
	int zo[4 * 9];
	uint8_t w8[4 * 576], qw[4 * 288], pk[4 * 288], nsc[4 * 36];
	uint16_t bsc[4 * 9];
	for (int i = 0; i < K; i++)
		x[i] = rnd(s);
	for (int i = 0; i < 4 * K; i++) {
		w8[i] = (uint8_t)tap_xorshift(s);
		if ((w8[i] & 0x7F) == 0x7F)
			w8[i] ^= 1;
	}
	for (int i = 0; i < 4 * K / 2; i++)
		qw[i] = (uint8_t)tap_xorshift(s), pk[i] = (uint8_t)tap_xorshift(s);
	for (int i = 0; i < 4 * K / 16; i++)
		nsc[i] = (uint8_t)(tap_xorshift(s) % 0x7E);
	for (int i = 0; i < 4 * G; i++) {
		put_scale((uint8_t *)&bsc[i], LG_S_BF16, s);
		sc[i] = rq_bf16_to_f32(bsc[i]);
		zo[i] = 8;
	}
	struct lg_linear F = {.kind = LG_W_FP8, .rows = 4, .cols = K, .w8 = w8,
	                      .qscale = (const uint8_t *)bsc, .sdtype = LG_S_BF16, .srows = 4, .groups = G};
	struct lg_linear I = {.kind = LG_W_INT, .rows = 4, .cols = K, .qw = qw, .bits = 4,
	                      .words = K / 8, .qscale = (const uint8_t *)bsc, .sdtype = LG_S_BF16,
	                      .srows = 4, .groups = G};
	for (int R = 1; R <= 4; R++) {
		int t = lg_qdot_fp8(w8, K, R, sc, gw, x, K, out, NULL);
		took &= t == (lv >= 1);
		ok &= !t || rows_ok(&F, 0, R, x, out);
		t = lg_qdot_int(qw, K / 2, R, 4, sc, zo, gw, x, K, out, NULL);
		took &= t == (lv >= 1);
		ok &= !t || rows_ok(&I, 0, R, x, out);
	}
	TAP_OK(took && ok, "FP8 and INT4 rows, R = 1..4: %s, the oracle's bits",
	       lv ? "the fast path takes them" : "no fast path on the portable build");
	w8[K + 100] = 0xFF;   /* a NaN code in row 1 */
	TAP_OK(!lg_qdot_fp8(w8, K, 2, sc, gw, x, K, out, NULL) && (!lv || lg_qdot_fp8(w8 + 2 * K, K, 2, sc + 2 * G, gw, x, K, out, w8)),
	       "FP8: rows with a NaN code go to the oracle, the rows after them do not");
	ok = took = 1;
	uint16_t bw[4 * 576];
	for (int i = 0; i < 4 * K; i++)
		bw[i] = rq_f32_to_bf16(rnd(s));
	for (int n = 40; n <= K; n += K - 40)   /* 40: a masked tail of 8 columns */
		for (int R = 1; R <= 4; R++) {
			struct lg_linear B = {.kind = LG_W_BF16, .rows = 4, .cols = n, .w = bw};
			int t = lg_qdot_bf16(bw, n, R, x, n, out);
			took &= t == (lv == 2);
			ok &= !t || rows_ok(&B, 0, R, x, out);
		}
	TAP_OK(took && ok, "BF16 rows of 40 and 576, R = 1..4: %s",
	       lv == 2 ? "the AVX-512 path takes them, the oracle's bits" : "this path declines them (ops.c's dot)");
	ok = took = 1;
	for (int k = 0; k < 3; k++) {   /* one division table array, three global scales */
		float gs = k == 1 ? 448.0f * 6.0f / 0.02f : 2688.0f / (0.37f + (float)k);
		lg_nvfp4_div_table(gs, div);
		struct lg_linear N = {.kind = LG_W_NVFP4, .rows = 4, .cols = K, .packed = pk,
		                      .scales = nsc, .global_scale = gs, .gs_div = div};
		for (int R = 1; R <= 4; R++) {
			int t = lg_qdot_nvfp4(pk, nsc, R, div, x, K, out);
			took &= t == (lv == 2);
			ok &= !t || rows_ok(&N, 0, R, x, out);
		}
	}
	TAP_OK(took && ok, "NVFP4 rows, R = 1..4, the division table rewritten in place twice: %s",
	       lv == 2 ? "the AVX-512 path takes them, the oracle's bits" : "this path declines them (AVX2: ops.c's dot)");
}

/* lg_axpy_rows (attention's P·V): out += s[r] · x[r] row after row, per column
 * the products rounded then added in row order, as lg_axpy row by row: bit for
 * bit, for widths of 1 to 5 registers (a last partial group of 4) and 0 to 37
 * rows of a strided x. */
static void axpy_rows_cases(uint64_t *s)
{
	int lv = path_level(), ok = 1, took = 1;
	static const int widths[] = {16, 48, 64, 80, 128};
	enum { LD = 136, ROWS = 37 };
	float x[ROWS * LD], sv[ROWS], got[128], want[128];
	for (int i = 0; i < ROWS * LD; i++)
		x[i] = rnd(s);
	for (int r = 0; r < ROWS; r++)
		sv[r] = rnd(s);
	for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++)
		for (int rows = 0; rows <= ROWS; rows += rows < 2 ? 1 : 5) {
			int n = widths[k];
			for (int i = 0; i < n; i++)
				got[i] = want[i] = rnd(s);
			for (int r = 0; r < rows; r++)
				for (int i = 0; i < n; i++)
					want[i] += sv[r] * x[r * LD + i];
			int t = lg_axpy_rows(got, sv, x, LD, rows, n);
			took &= t == (lv == 2);
			ok &= !t || !memcmp(got, want, sizeof(float) * (size_t)n);
		}
	TAP_OK(took && ok, "P·V rows (lg_axpy_rows), widths 16..128, 0..37 rows: %s",
	       lv == 2 ? "the AVX-512 path takes them, lg_axpy's bits" : "this path declines them (lg_axpy)");
}

int main(void)
{
	const char *e2 = getenv("RQ_ENGINE_NO_AVX2"), *e5 = getenv("RQ_ENGINE_NO_AVX512");
	printf("# paths: %s\n", e2 && *e2 && strcmp(e2, "0") ? "portable (RQ_ENGINE_NO_AVX2)"
	       : e5 && *e5 && strcmp(e5, "0") ? "AVX2 (RQ_ENGINE_NO_AVX512)"
	       : "AVX-512, else AVX2, where the CPU has them");
	uint64_t s = 0x243F6A8885A308D3ull;
	struct rq_pool *pool2 = NULL;
	TAP_OK(rq_pool_create(2, &pool2) == 0, "pool of 2 threads");
	fp8_cases(pool2, &s);
	int_cases(pool2, &s);
	nvfp4_cases(pool2, &s);
	direct_cases(&s);
	axpy_rows_cases(&s);
	rq_pool_destroy(pool2);
	return tap_done();
}
