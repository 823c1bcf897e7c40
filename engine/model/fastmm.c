/* fastmm.c — the fast mode's products (fastmm.h): FMA register tiles for
 * prefill, FMA dots for decode. Never the oracle: tests/engine/test_fast.c
 * holds these kernels within their stated tolerance of lg_matmul, and
 * tests/engine/test_fast_model.py the whole forward of a real model. */
#include "engine/model/fastmm.h"
#include "engine/model/fastdot.h"
#include "engine/model/ops.h"
#include "base/pool.h"

#include <stdlib.h>
#include <string.h>

#define TILE_ROWS 4               /* weight rows dequantized together (scratch: 4 · stride) */
#define PF_ROWS 4                 /* BF16 decode: rows prefetched ahead (as ops.c) */

static int quantized(const struct lg_linear *W)
{
	return W->kind == LG_W_NVFP4 || W->kind == LG_W_FP8 || W->kind == LG_W_INT;
}

/* A product the fast kernels take: 0 when lg_matmul's own dots serve it
 * (two quantized tokens; one where fastdot.c has no dot for the Linear). */
static int takes(const struct lg_mm *m, int lv)
{
	if (m->T <= 0)
		return 0;
	if (m->T >= 3)
		return 1;
	if (m->T == 1 && quantized(m->W))
		return lv == 2 && lg_fast_dot_takes(m->W);
	switch (m->W->kind) {
	case LG_W_BF16:
	case LG_W_F16:
	case LG_W_F32:
		return 1;
	default:
		return 0;
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

int lg_fast_level(void)
{
	static int v = -1;
	if (v < 0) {
		const char *no2 = getenv("RQ_ENGINE_NO_AVX2"), *no5 = getenv("RQ_ENGINE_NO_AVX512");
		__builtin_cpu_init();
		v = 0;
		if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		    !(no2 && *no2 && strcmp(no2, "0")))
			v = 1;
		if (v && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512vl") && !(no5 && *no5 && strcmp(no5, "0")))
			v = 2;
	}
	return v;
}

/* ------------------------------------------------------------ AVX-512 */

/* y[u·ldy + r] = Σ_k w[r·ldw + k] · x[u·ldx + k] for r < R (of the 4 rows
 * computed) and u < U (a constant where inlined: the 4·U accumulators stay in
 * registers; each weight load serves U tokens, each input load 4 rows). */
__attribute__((target("avx512f,avx512bw,avx512vl,fma"), always_inline))
static inline void tile512(const float *w, size_t ldw, int R, const float *x, size_t ldx, int U,
                           int n, float *y, size_t ldy)
{
	__m512 acc[TILE_ROWS][6];
	for (int r = 0; r < TILE_ROWS; r++)
		for (int u = 0; u < U; u++)
			acc[r][u] = _mm512_setzero_ps();
	int k = 0;
	for (; k + 16 <= n; k += 16) {
		__m512 wv[TILE_ROWS];
		for (int r = 0; r < TILE_ROWS; r++)
			wv[r] = _mm512_loadu_ps(w + (size_t)r * ldw + k);
		for (int u = 0; u < U; u++) {
			__m512 xv = _mm512_loadu_ps(x + (size_t)u * ldx + k);
			for (int r = 0; r < TILE_ROWS; r++)
				acc[r][u] = _mm512_fmadd_ps(wv[r], xv, acc[r][u]);
		}
	}
	if (k < n) {
		__mmask16 mk = (__mmask16)((1u << (n - k)) - 1);
		__m512 wv[TILE_ROWS];
		for (int r = 0; r < TILE_ROWS; r++)
			wv[r] = _mm512_maskz_loadu_ps(mk, w + (size_t)r * ldw + k);
		for (int u = 0; u < U; u++) {
			__m512 xv = _mm512_maskz_loadu_ps(mk, x + (size_t)u * ldx + k);
			for (int r = 0; r < TILE_ROWS; r++)
				acc[r][u] = _mm512_fmadd_ps(wv[r], xv, acc[r][u]);
		}
	}
	for (int u = 0; u < U; u++)
		for (int r = 0; r < R; r++)
			y[(size_t)u * ldy + r] = _mm512_reduce_add_ps(acc[r][u]);
}

__attribute__((target("avx512f,avx512bw,avx512vl,fma")))
static void tiles512(const float *w, size_t ldw, int R, const float *x, size_t ldx, int T,
                          int n, float *y, size_t ldy)
{
	int t = 0;
	for (; t + 6 <= T; t += 6)
		tile512(w, ldw, R, x + (size_t)t * ldx, ldx, 6, n, y + (size_t)t * ldy, ldy);
#define REST(UU) tile512(w, ldw, R, x + (size_t)t * ldx, ldx, UU, n, y + (size_t)t * ldy, ldy)
	switch (T - t) {
	case 5: REST(5); break;
	case 4: REST(4); break;
	case 3: REST(3); break;
	case 2: REST(2); break;
	case 1: REST(1); break;
	default: break;
	}
#undef REST
}

/* 16 BF16 values widened (exact). */
__attribute__((target("avx512f,avx512bw,avx512vl,fma")))
static inline __m512 bf16x16(const uint16_t *p)
{
	__m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
	return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

__attribute__((target("avx512f,avx512bw,avx512vl,fma")))
static float dot_bf16_512(const uint16_t *w, const float *x, int n)
{
	__m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
	int i = 0;
	for (; i + 32 <= n; i += 32) {
		a0 = _mm512_fmadd_ps(bf16x16(w + i), _mm512_loadu_ps(x + i), a0);
		a1 = _mm512_fmadd_ps(bf16x16(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
	}
	for (; i + 16 <= n; i += 16)
		a0 = _mm512_fmadd_ps(bf16x16(w + i), _mm512_loadu_ps(x + i), a0);
	if (i < n) {
		__mmask16 mk = (__mmask16)((1u << (n - i)) - 1);
		__m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, w + i));
		__m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
		a1 = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mk, x + i), a1);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

/* The 16 nibbles of 8 bytes in column order (byte k: low nibble, then high). */
__attribute__((target("avx512f,avx512bw,avx512vl,fma")))
static inline __m128i codes16(const uint8_t *p)
{
	__m128i b = _mm_loadl_epi64((const __m128i *)p), m = _mm_set1_epi8(15);
	return _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
}

/* Row r of an FP8 or symmetric 8/4-bit INT W dequantized 16 columns a step:
 * the values lg_linear_row gives (qdot.c's reasoning: e4m3(b)·s ==
 * half(b)·(s·2^8), one rounding of the same product; (q − off)·s the same
 * product), so only the speed differs. 0 (nothing written) for a row it does
 * not take: group width not a multiple of 16, an FP8 NaN code, a scale whose
 * s·2^8 is not exact, an INT zero point or width other than 8 and 4. */
__attribute__((target("avx512f,avx512bw,avx512vl,fma")))
static int dequant_512(const struct lg_linear *W, int r, float *out)
{
	int G = W->groups, gw = W->cols / G;
	if (gw % 16 || (W->kind == LG_W_INT && (W->qzero || (W->bits != 8 && W->bits != 4))))
		return 0;
	size_t sr = W->srows == 1 ? 0 : (size_t)r * G;
	if (W->kind == LG_W_FP8) {
		const uint8_t *q = W->w8 + (size_t)r * W->cols;
		const __m128i m7f = _mm_set1_epi8(0x7F);
		__m128i nan = _mm_setzero_si128();
		for (int g = 0; g < G; g++) {
			float sg = lg_qscale_at(W, sr + g);
			if (!(__builtin_fabsf(sg) < 0x1p119f))
				return 0;
			__m512 sv = _mm512_set1_ps(sg * 256.0f);
			for (int c = g * gw; c < (g + 1) * gw; c += 16) {
				__m128i b = _mm_loadu_si128((const __m128i *)(q + c));
				nan = _mm_or_si128(nan, _mm_cmpeq_epi8(_mm_and_si128(b, m7f), m7f));
				__m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8);
				h = _mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16((short)0xBFFF));
				_mm512_storeu_ps(out + c, _mm512_mul_ps(_mm512_cvtph_ps(h), sv));
			}
		}
		return _mm_testz_si128(nan, nan);
	}
	const uint8_t *row = W->qw + (size_t)r * W->words * 4;
	__m512i off = _mm512_set1_epi32(1 << (W->bits - 1));
	for (int g = 0; g < G; g++) {
		__m512 sv = _mm512_set1_ps(lg_qscale_at(W, sr + g));
		for (int c = g * gw; c < (g + 1) * gw; c += 16) {
			__m128i b = W->bits == 8 ? _mm_loadu_si128((const __m128i *)(row + c))
			                         : codes16(row + c / 2);
			__m512 w = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(b), off));
			_mm512_storeu_ps(out + c, _mm512_mul_ps(w, sv));
		}
	}
	return 1;
}

/* --------------------------------------------------------------- AVX2 */

__attribute__((target("avx2,fma")))
static inline float hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

/* tile512 with 8 lanes and up to 3 tokens (16 registers); the last n % 8
 * columns by scalar fmaf (compiled to one FMA each under this target). */
__attribute__((target("avx2,fma"), always_inline))
static inline void tile256(const float *w, size_t ldw, int R, const float *x, size_t ldx, int U,
                           int n, float *y, size_t ldy)
{
	__m256 acc[TILE_ROWS][3];
	for (int r = 0; r < TILE_ROWS; r++)
		for (int u = 0; u < U; u++)
			acc[r][u] = _mm256_setzero_ps();
	int k = 0;
	for (; k + 8 <= n; k += 8) {
		__m256 xv[3];
		for (int u = 0; u < U; u++)
			xv[u] = _mm256_loadu_ps(x + (size_t)u * ldx + k);
		for (int r = 0; r < TILE_ROWS; r++) {
			__m256 wv = _mm256_loadu_ps(w + (size_t)r * ldw + k);
			for (int u = 0; u < U; u++)
				acc[r][u] = _mm256_fmadd_ps(wv, xv[u], acc[r][u]);
		}
	}
	for (int u = 0; u < U; u++)
		for (int r = 0; r < R; r++) {
			float d = hsum256(acc[r][u]);
			for (int c = k; c < n; c++)
				d = __builtin_fmaf(w[(size_t)r * ldw + c], x[(size_t)u * ldx + c], d);
			y[(size_t)u * ldy + r] = d;
		}
}

__attribute__((target("avx2,fma")))
static void tiles256(const float *w, size_t ldw, int R, const float *x, size_t ldx, int T,
                          int n, float *y, size_t ldy)
{
	int t = 0;
	for (; t + 3 <= T; t += 3)
		tile256(w, ldw, R, x + (size_t)t * ldx, ldx, 3, n, y + (size_t)t * ldy, ldy);
	if (T - t == 2)
		tile256(w, ldw, R, x + (size_t)t * ldx, ldx, 2, n, y + (size_t)t * ldy, ldy);
	else if (T - t == 1)
		tile256(w, ldw, R, x + (size_t)t * ldx, ldx, 1, n, y + (size_t)t * ldy, ldy);
}

__attribute__((target("avx2,fma")))
static float dot_bf16_256(const uint16_t *w, const float *x, int n)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
	int i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256i p = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + i)));
		__m256i q = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + i + 8)));
		a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(p, 16)), _mm256_loadu_ps(x + i), a0);
		a1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(q, 16)),
		                     _mm256_loadu_ps(x + i + 8), a1);
	}
	float d = hsum256(_mm256_add_ps(a0, a1));
	for (; i < n; i++) {
		uint32_t u = (uint32_t)w[i] << 16;
		float f;
		memcpy(&f, &u, 4);
		d = __builtin_fmaf(f, x[i], d);
	}
	return d;
}

/* ------------------------------------------------------- the row loop */

struct fctx {
	const struct lg_mm *mm;    /* the products the fast kernels take */
	size_t *first;             /* [n + 1] prefix sums of their rows */
	float *scratch;
	size_t stride;
	int lv;
};

static inline float add_bias(const struct lg_linear *W, int r, float y)
{
	return W->bias ? y + W->bias[r] : y;
}

/* Rows [i, end) of product m, one or two tokens, BF16: FMA dots from the map. */
static void decode_bf16(const struct lg_mm *m, int r, size_t i, size_t end, int lv)
{
	int K = m->W->cols;
	for (; i < end; i++, r++) {
		if (i + PF_ROWS < end) {
			const char *nx = (const char *)(m->W->w + (size_t)(r + PF_ROWS) * K);
			for (size_t b = 0; b < (size_t)K * 2; b += 64)
				__builtin_prefetch(nx + b, 0, 3);
		}
		const uint16_t *row = m->W->w + (size_t)r * K;
		for (int t = 0; t < m->T; t++) {
			const float *x = m->x + (size_t)t * m->ldx;
			float d = lv == 2 ? dot_bf16_512(row, x, K) : dot_bf16_256(row, x, K);
			m->y[(size_t)t * m->ldy + r] = add_bias(m->W, r, d);
		}
	}
}

static void fast_rows(void *vctx, size_t b, size_t e, int worker)
{
	struct fctx *c = vctx;
	float *w = c->scratch + (size_t)worker * TILE_ROWS * c->stride;
	int k = 0;
	for (size_t i = b; i < e;) {
		while (c->first[k + 1] <= i)
			k++;
		const struct lg_mm *m = &c->mm[k];
		const struct lg_linear *W = m->W;
		int r = (int)(i - c->first[k]), K = W->cols;
		size_t end = e < c->first[k + 1] ? e : c->first[k + 1];
		if (W->kind == LG_W_BF16 && m->T <= 2) {
			decode_bf16(m, r, i, end, c->lv);
			i = end;
			continue;
		}
		if (m->T == 1 && quantized(W)) {   /* takes() saw lg_fast_dot_takes */
			lg_fast_dot_rows(W, r, (int)(end - i), m->x, m->y + r, w);
			for (int j = 0; W->bias && j < (int)(end - i); j++)
				m->y[r + j] += W->bias[r + j];
			i = end;
			continue;
		}
		/* a token block: up to four rows dequantized once, reused by every token */
		int R = end - i < TILE_ROWS ? (int)(end - i) : TILE_ROWS;
		for (int j = 0; j < TILE_ROWS; j++) {
			float *wr = w + (size_t)j * c->stride;
			if (j < R) {
				if (c->lv < 2 || (W->kind != LG_W_FP8 && W->kind != LG_W_INT) ||
				    !dequant_512(W, r + j, wr))
					lg_linear_row(W, r + j, wr);
			}
			else   /* a short tile: rows computed, never stored */
				memset(wr, 0, (size_t)K * sizeof *wr);
		}
		float *y = m->y + r;
		if (c->lv == 2)
			tiles512(w, c->stride, R, m->x, m->ldx, m->T, K, y, m->ldy);
		else
			tiles256(w, c->stride, R, m->x, m->ldx, m->T, K, y, m->ldy);
		for (int t = 0; W->bias && t < m->T; t++)
			for (int j = 0; j < R; j++)
				y[(size_t)t * m->ldy + j] += W->bias[r + j];
		i += R;
	}
}

void lg_fast_matmul(struct rq_pool *pool, float *scratch, size_t stride, const struct lg_mm *mm,
                    int n)
{
	int lv = lg_fast_level();
	if (!lv || n <= 0) {
		lg_matmul(pool, scratch, stride, mm, n);
		return;
	}
	struct lg_mm fast[n], rest[n];
	int nf = 0, nr = 0;
	for (int k = 0; k < n; k++) {
		if (takes(&mm[k], lv))
			fast[nf++] = mm[k];
		else if (mm[k].T > 0)
			rest[nr++] = mm[k];
	}
	if (nr)
		lg_matmul(pool, scratch, stride, rest, nr);
	if (!nf)
		return;
	size_t first[nf + 1];
	double work = 0;
	first[0] = 0;
	for (int k = 0; k < nf; k++) {
		first[k + 1] = first[k] + (size_t)fast[k].W->rows;
		work += (double)fast[k].W->rows * fast[k].W->cols * (fast[k].T + 1);
	}
	/* chunks of at least ~64K multiply-adds, whole 4-row tiles (as lg_matmul) */
	double per_row = work / (double)first[nf];
	size_t grain = per_row >= 65536 ? 4 : ((size_t)(65536 / per_row) + 3) & ~(size_t)3;
	struct fctx c = {.mm = fast, .first = first, .scratch = scratch, .stride = stride, .lv = lv};
	rq_pool_for(pool, first[nf], grain, fast_rows, &c);
}

#else
int lg_fast_level(void)
{
	return 0;
}

void lg_fast_matmul(struct rq_pool *pool, float *scratch, size_t stride, const struct lg_mm *mm,
                    int n)
{
	(void)takes;
	lg_matmul(pool, scratch, stride, mm, n);
}
#endif
