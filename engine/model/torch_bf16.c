/* torch_bf16.c — torch's CPU summation orders and exp (torch_bf16.h). */
#include "engine/model/torch_bf16.h"

#include <math.h>

/* Vector clones where the CPU has them (as engine/model/ops.c): the same
 * operations in the same order in every clone (no FMA), so the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LG_TORCH_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LG_TORCH_CLONES
#endif

/* Σ a[i]·b[i] in the order of torch's CPU BF16 dot (bf16_dot_with_fp32_arith,
 * the x86 AVX2 build: what its BF16 GEMM runs for a Linear and for q·kᵀ):
 * 64 F32 lanes over blocks of 64, the 8 registers folded pairwise (r += r+4,
 * r += r+2, r += r+1) and the last summed by hsum8; then blocks of 16 into 8
 * lanes, hsum8, added; then one product at a time. With BF16 inputs each
 * product is exact, so this is the same bits (checked against torch 2.14's
 * F.linear and matmul on the shapes of SmolLM2: no output differs). */
LG_TORCH_CLONES float lg_torch_dot(const float *a, const float *b, int n)
{
	float acc[64] = {0}, t[8] = {0};
	int n64 = n & ~63, n16 = n & ~15;
	for (int j = 0; j < n64; j += 64)
		for (int e = 0; e < 64; e++)
			acc[e] += a[j + e] * b[j + e];
	for (int off = 32; off >= 8; off /= 2)
		for (int e = 0; e < off; e++)
			acc[e] += acc[e + off];
	float sum = lg_torch_hsum8(acc);
	for (int j = n64; j < n16; j += 16) {
		for (int l = 0; l < 8; l++)
			t[l] += a[j + l] * b[j + l];
		for (int l = 0; l < 8; l++)
			t[l] += a[j + 8 + l] * b[j + 8 + l];
	}
	sum += lg_torch_hsum8(t);
	for (int j = n16; j < n; j++)
		sum += a[j] * b[j];
	return sum;
}

/* 2^q from its exponent bits, q a normal exponent. */
static inline float pow2i(int q)
{
	uint32_t u = (uint32_t)(q + 127) << 23;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* e^d as torch's Vectorized<float>::exp computes it on AVX2 (SLEEF's
 * Sleef_expf8_u10: a Cody-Waite reduction by ln 2 in two parts, a degree-5
 * minimax polynomial, each step one FMA, the scaling by 2^q in two halves).
 * Used by the BF16 mode's softmax and SiLU, whose last bits decide BF16
 * roundings. */
float lg_torch_expf(float d)
{
	if (d != d)
		return d;
	if (d < -104.0f)
		return 0.0f;
	if (d > 100.0f)
		return INFINITY;
	float qf = rintf(d * 1.442695040888963407359924681001892137426645954152985934135449f);
	int q = (int)qf;
	float r = fmaf(qf, -0.693145751953125f, d);
	r = fmaf(qf, -1.428606765330187045e-06f, r);
	float u = 0.000198527617612853646278381f;
	u = fmaf(u, r, 0.00139304355252534151077271f);
	u = fmaf(u, r, 0.00833336077630519866943359f);
	u = fmaf(u, r, 0.0416664853692054748535156f);
	u = fmaf(u, r, 0.166666671633720397949219f);
	u = fmaf(u, r, 0.5f);
	u = 1.0f + fmaf(r * r, u, r);
	int h = q >> 1;
	u = u * pow2i(h);
	return u * pow2i(q - h);
}

/* Σ x[i]² as torch's CPU sum over a contiguous last dimension adds them
 * (SumKernel.cpp's vectorized inner sum on AVX2): 8-float vectors, taken 4 at
 * a time into 4 vector accumulators with a cascade of 4 levels (level step
 * 2^max(4, ceil(log2(groups)) / 4) groups), the leftover vectors into the
 * first, the 4 accumulators added in order, then a scalar over the leftover
 * values and the 8 lanes in order. Squares of BF16 values are exact. */
float lg_torch_sumsq(const float *x, int n)
{
	enum { LV = 4, ILP = 4, W = 8 };
	float acc[LV][ILP][W];
	memset(acc, 0, sizeof acc);
	int nv = n / W, groups = nv / ILP, lg = 0;
	while ((1 << lg) < groups)
		lg++;
	int lp = lg / LV > 4 ? lg / LV : 4;
	long step = 1L << lp, mask = step - 1;
	long i = 0;
#define ADDV(dst, v) for (int l = 0; l < W; l++) dst[l] += x[(size_t)(v) * W + l] * x[(size_t)(v) * W + l]
	while (i + step <= groups) {
		for (long j = 0; j < step; j++, i++)
			for (int k = 0; k < ILP; k++)
				ADDV(acc[0][k], i * ILP + k);
		for (int j = 1; j < LV; j++) {
			for (int k = 0; k < ILP; k++)
				for (int l = 0; l < W; l++) {
					acc[j][k][l] += acc[j - 1][k][l];
					acc[j - 1][k][l] = 0;
				}
			if (i & (mask << (j * lp)))
				break;
		}
	}
	for (; i < groups; i++)
		for (int k = 0; k < ILP; k++)
			ADDV(acc[0][k], i * ILP + k);
	for (int j = 1; j < LV; j++)
		for (int k = 0; k < ILP; k++)
			for (int l = 0; l < W; l++)
				acc[0][k][l] += acc[j][k][l];
	for (int v = groups * ILP; v < nv; v++)
		ADDV(acc[0][0], v);
#undef ADDV
	for (int k = 1; k < ILP; k++)
		for (int l = 0; l < W; l++)
			acc[0][0][l] += acc[0][k][l];
	float sum = 0;
	for (int t = nv * W; t < n; t++)
		sum += x[t] * x[t];
	for (int l = 0; l < W; l++)
		sum += acc[0][0][l];
	return sum;
}


/* ------------------------------------------------------ lg_torch_gemm
 * The same dots, tiled. lg_torch_dot's 64 lanes are 8 groups of 8 that never
 * meet before the fold, so each group g can be summed on its own over all the
 * 64-blocks (lanes 8g..8g+7 of each block, in block order): one AVX2 register
 * per (row, token) and group. A tile of 4 weight rows x 3 tokens keeps its 12
 * accumulators in registers, each x load serves 4 rows and each w load 3
 * tokens. The 8 group sums are then folded as lg_torch_dot folds (g0..3 +=
 * g4..7, g0..1 += g2..3, g0 += g1, hsum8), the 16-blocks' 8 lanes summed in
 * order, hsum8, added, then the scalar tail. Every add and multiply is the
 * scalar's, separately rounded (no FMA), in the scalar's order: same bits
 * (tests/engine/test_torch_gemm.c checks every bit on awkward shapes). */

static void gemm_portable(const float *x, size_t ldx, int T, const float *w, size_t ldw, int R,
                          int n, float *y, size_t ldy)
{
	for (int t = 0; t < T; t++)
		for (int r = 0; r < R; r++)
			y[(size_t)t * ldy + r] = lg_torch_dot(x + (size_t)t * ldx, w + (size_t)r * ldw, n);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdlib.h>

#include "engine/model/simd_int.h"

enum { TR = 4, TU = 3 };   /* a tile: rows x tokens */
_Static_assert(TU == 3, "gemm_avx2 walks the tokens with TILES_R4_U3 (simd_int.h)");

/* One tile of R <= TR rows x U <= TU tokens; R and U are constants where it
 * is inlined, so the loops unroll and the accumulators stay in registers. */
__attribute__((target("avx2"), always_inline))
static inline void tile_avx2(const float *x, size_t ldx, int U, const float *w, size_t ldw, int R,
                             int n, float *y, size_t ldy)
{
	int n64 = n & ~63, n16 = n & ~15;
	__m256 grp[TR][TU][8];   /* each (row, token)'s 8 group sums */
	for (int g = 0; g < 8; g++) {
		__m256 acc[TR][TU];
		for (int r = 0; r < R; r++)
			for (int u = 0; u < U; u++)
				acc[r][u] = _mm256_setzero_ps();
		for (int j = 8 * g; j < n64; j += 64) {
			__m256 xv[TU];
			for (int u = 0; u < U; u++)
				xv[u] = _mm256_loadu_ps(x + (size_t)u * ldx + j);
			for (int r = 0; r < R; r++) {
				__m256 wv = _mm256_loadu_ps(w + (size_t)r * ldw + j);
				for (int u = 0; u < U; u++)
					acc[r][u] = _mm256_add_ps(acc[r][u], _mm256_mul_ps(xv[u], wv));
			}
		}
		for (int r = 0; r < R; r++)
			for (int u = 0; u < U; u++)
				grp[r][u][g] = acc[r][u];
	}
	for (int r = 0; r < R; r++)
		for (int u = 0; u < U; u++) {
			const float *a = x + (size_t)u * ldx, *b = w + (size_t)r * ldw;
			__m256 *v = grp[r][u];
			for (int k = 4; k >= 1; k /= 2)
				for (int e = 0; e < k; e++)
					v[e] = _mm256_add_ps(v[e], v[e + k]);
			__m256 t = _mm256_setzero_ps();
			for (int j = n64; j < n16; j += 16) {
				t = _mm256_add_ps(t, _mm256_mul_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j)));
				t = _mm256_add_ps(t, _mm256_mul_ps(_mm256_loadu_ps(a + j + 8),
				                                   _mm256_loadu_ps(b + j + 8)));
			}
			float sum = hsum8_avx2(v[0]);
			sum += hsum8_avx2(t);
			for (int j = n16; j < n; j++)
				sum += a[j] * b[j];
			y[(size_t)u * ldy + r] = sum;
		}
}

/* Rows [0, R) x tokens [0, T): full tiles, then the edges, each a tile of
 * constant size. */
__attribute__((target("avx2")))
static void gemm_avx2(const float *x, size_t ldx, int T, const float *w, size_t ldw, int R, int n,
                      float *y, size_t ldy)
{
	for (int r = 0; r < R; r += TR) {
		const float *wr = w + (size_t)r * ldw;
		float *yr = y + r;
		int rr = R - r < TR ? R - r : TR, t = 0;
#define TILE(RR, UU) tile_avx2(x + (size_t)t * ldx, ldx, UU, wr, ldw, RR, n, yr + (size_t)t * ldy, ldy)
		TILES_R4_U3(t, T, rr, TILE);   /* TU = 3 */
#undef TILE
	}
}

static int use_avx2(void)
{
	static int v = -1;
	if (v < 0) {   /* RQ_ENGINE_NO_AVX2 (tests): the portable path, as engine/model/ops.c */
		const char *e = getenv("RQ_ENGINE_NO_AVX2");
		__builtin_cpu_init();
		v = __builtin_cpu_supports("avx2") && !(e && *e && strcmp(e, "0")) ? 1 : 0;
	}
	return v;
}
/* lg_torch_expf on 8 lanes: the same operations (the reduction and the
 * polynomial's steps as FMAs, as fmaf; rintf as round-to-nearest-even; the
 * 2^q scaling in two halves), the same special cases blended in last. */
__attribute__((target("avx2,fma")))
static void expf_avx2(const float *in, float *out, int n)
{
	const __m256 l2e = _mm256_set1_ps(1.442695040888963407359924681001892137426645954152985934135449f);
	int i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 d = _mm256_loadu_ps(in + i);
		__m256 qf = _mm256_round_ps(_mm256_mul_ps(d, l2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
		__m256i q = _mm256_cvtps_epi32(qf);
		__m256 r = _mm256_fmadd_ps(qf, _mm256_set1_ps(-0.693145751953125f), d);
		r = _mm256_fmadd_ps(qf, _mm256_set1_ps(-1.428606765330187045e-06f), r);
		__m256 u = _mm256_set1_ps(0.000198527617612853646278381f);
		u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(0.00139304355252534151077271f));
		u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(0.00833336077630519866943359f));
		u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(0.0416664853692054748535156f));
		u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(0.166666671633720397949219f));
		u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(0.5f));
		u = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_mul_ps(r, r), u, r));
		__m256i h = _mm256_srai_epi32(q, 1), k = _mm256_set1_epi32(127);
		__m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, k), 23));
		__m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(q, h), k), 23));
		u = _mm256_mul_ps(_mm256_mul_ps(u, p1), p2);
		u = _mm256_blendv_ps(u, _mm256_setzero_ps(), _mm256_cmp_ps(d, _mm256_set1_ps(-104.0f), _CMP_LT_OQ));
		u = _mm256_blendv_ps(u, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(d, _mm256_set1_ps(100.0f), _CMP_GT_OQ));
		u = _mm256_blendv_ps(u, d, _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
		_mm256_storeu_ps(out + i, u);
	}
	for (; i < n; i++)
		out[i] = lg_torch_expf(in[i]);
}

static int use_fma(void)
{
	static int v = -1;
	if (v < 0) {
		__builtin_cpu_init();
		v = use_avx2() && __builtin_cpu_supports("fma");
	}
	return v;
}
#endif

void lg_torch_expf_n(const float *in, float *out, int n)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (use_fma()) {
		expf_avx2(in, out, n);
		return;
	}
#endif
	for (int i = 0; i < n; i++)
		out[i] = lg_torch_expf(in[i]);
}

void lg_torch_gemm(const float *x, size_t ldx, int T, const float *w, size_t ldw, int R, int n,
                   float *y, size_t ldy)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (use_avx2()) {
		gemm_avx2(x, ldx, T, w, ldw, R, n, y, ldy);
		return;
	}
#endif
	gemm_portable(x, ldx, T, w, ldw, R, n, y, ldy);
}

void lg_torch_swiglu_row(float *out, const float *g, const float *u, int n)
{
	float ex[64];
	for (int i0 = 0; i0 < n; i0 += 64) {
		int m = n - i0 < 64 ? n - i0 : 64;
		for (int i = 0; i < m; i++)
			ex[i] = -g[i0 + i];
		lg_torch_expf_n(ex, ex, m);
		for (int i = 0; i < m; i++) {
			float a = g[i0 + i];
			out[i0 + i] = lg_bf16(lg_bf16(a / (1.0f + ex[i])) * u[i0 + i]);
		}
	}
}
