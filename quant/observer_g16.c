/* observer_g16.c — the MSE observers' search for NVFP4 groups of 16 on AVX-512 (BW):
 * observer_int.h's rq_obs_g16_512, the steps observer_ref.c chooses, bit for bit, with far
 * fewer exact errors computed.
 *
 * Why: an exact error is 16 lookups of T (a gather, ~10-13 cycles a vector on the machines
 * measured, which does not overlap the arithmetic) per candidate, and expanded-mse has 111
 * candidates. Most candidates can be ruled out by a cheap LOWER BOUND of their error, so:
 *
 *   1. every candidate's bound over the group's 5 largest |w| (7 batches of 16 candidates);
 *   2. the exact errors of the 16 consecutive steps around the least bound (the window;
 *      with patience, steps 0..15: the improving steps must come in step order);
 *   3. the other candidates' bounds, two pairs of weights a round, a batch dropped once
 *      none of its candidates can still win against the best so far;
 *   4. the exact errors of the candidates whose whole bound can still win, packed 16 at a
 *      time in step order.
 *
 * The bounds' candidates come from a table built once per observer (tab_build): every step
 * of max |w| = A = a 2^k (1 <= a < 2) is a's with the exponent moved by k (each operation
 * below scales exactly with a power of two while the values stay normal), so the bounds
 * compare |w| 2^-k with a's thresholds and look T up k binades higher (lbbase). The
 * largest |w| is then a itself, so its bins are the table's too (w0_bins): its bound costs
 * one lookup, and the pairs are the next ones (1, 2), (3, 4) .. (15, a zero). The work
 * goes stage by stage over the batches (all batches' first pair, then their second...):
 * one batch's chain of dependent steps at a time leaves the core waiting on latencies.
 *
 * The exact errors (exact16) use observer_fast.c's arithmetic in another layout:
 *  - thresholds instead of division: bf16(x / s) >= t (or > t) for an FP4 boundary t holds
 *    exactly when x / s > tau, tau the BF16 midpoint next to t (0.25 + 2^-10, 0.75 - 2^-9,
 *    1.25 + 2^-8, 1.75 - 2^-8, and 2x, 4x of the last two): both roundings (binary32, then
 *    BF16) are monotone, the midpoint rounds to t (t is even), and x / s is never a midpoint
 *    (observer_fast.c's proof: tau = M 2^k with M odd, 256 < M < 512). tau * s is exact in
 *    binary32 (9 by 8 significant bits) and never a BF16 value (its odd part is >= M > 255),
 *    so x / s > tau <=> x >= W = the BF16 value just above tau * s (bits + 0xFFFF, high
 *    half). The code of |x| is then the number of the 7 thresholds W it reaches, compared as
 *    16-bit integers (|BF16| bits are ordered like their values);
 *  - the dequantized levels bf16(q s): 0.5 s, s, 2 s, 4 s are s with its exponent moved
 *    (+-0x80 in BF16 bits), bf16(1.5 s) is rounded once and 3 s, 6 s are it times 2, 4;
 *  - bf16(m / 6) = bf16(m * (float)(1/6)) (observer_fast.c's proof, x = m, s = 6);
 *  - a candidate word layout of 2 weights x 16 candidates: word 2c is candidate c's for
 *    weight a, word 2c + 1 its for weight b, so that binary32 lane c holds both: shifted
 *    left by 16 it is a's value, masked to its high half b's (no shuffles);
 *  - torch's order of 16: (((0 + v0) + v1) .. + v7), v_l = p_l + p_(l+8): the exact
 *    errors pair weight l with weight l + 8, so v_l is one pair's two lookups added
 *    (0 + v0 = v0).
 *
 * The bound (pair_lb; its pairs are the weights by falling |w|): a term is T(bf16(|d|)),
 * d = fl(L - x). Its lower bound is T at |d| cut to 3 mantissa bits (a BF16 value <=
 * bf16(|d|): T is monotone), looked up in a 64-entry table of 16-bit integers in units of
 * 2^Q (floor, saturating; entry 0 and the bins below the table, by a saturating
 * subtraction of the table's first bin: 0) by vpermi2w, 32 terms an instruction, and summed with
 * saturating adds in any order: sum * 2^Q <= the real sum of the terms. torch's binary32
 * sum of 16 non-negative terms is >= the real sum * (1 - 15 * 2^-24), so a candidate whose
 * bound reaches ceil(theta (1 + 2^-19) / 2^Q) has a sum >= theta, theta being the least
 * binary32 whose BF16 rounding is >= the best error (a later step: an equal error loses)
 * or > it (an earlier step). |d| <= max(s, A - 6 s) < A / 2 (the largest step's range is
 * 1.8 A), so the table's top bin, bin(A) - 8, is never passed.
 *
 * Where the CPU has AVX512-FP16, the bounds' d is computed in binary16 instead (pair_lb16,
 * 32 terms a subtraction, no conversions): the table's thresholds and levels (BF16 values
 * in [2^-14, 4)) and |w| 2^-k >= 2^-14 are exact in binary16, compared as 16-bit integers
 * alike; |w| 2^-k < 2^-14 is taken as 0 (such a weight is below every threshold, so its
 * level is 0 either way, and its |d| below every bin: its bound is 0 either way); d = L - x
 * rounded toward zero is <= |d| in magnitude, so its bin (exponent and 3 mantissa bits) is
 * a lower bound again, and bins count alike in both formats from a's. The same steps
 * either way (test observer runs both).
 *
 * Groups whose max |w| is outside [2^-32, 2^32] (where T overflows or the binary32 steps
 * above leave the normals) and groups of zeros return -1: observer_fast.c's search takes
 * them. */
#include "quant/observer_int.h"
#include "quant/quant_int.h"

#include <pthread.h>
#include <stdlib.h>

#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#include <immintrin.h>

#define T512 __attribute__((target("arch=x86-64-v4"), always_inline)) static inline
#define BF16_MAX_BITS 0x7F7F0000u
#define A_MIN 0x2F80u               /* 2^-32 as BF16 bits */
#define A_MAX 0x4F80u               /* 2^32 */
#define NB 8                        /* batches of 16 candidates at most (128 >= steps) */
#ifdef RQ_HAVE_VSUBPH               /* the assembler knows AVX512-FP16 (meson checks) */
#include <cpuid.h>
#define G16_FP16 1
#else
#define G16_FP16 0
#endif

/* T at the start of every 3-mantissa-bit bin of |BF16| (bin b: bits b << 4) */
static float t_bin[2048];
static pthread_once_t bin_once = PTHREAD_ONCE_INIT;

static void bin_init(void)
{
	const float *T = rq_obs_pow_table();
	for (int b = 0; b < 2048; b++)
		t_bin[b] = T[b << 4];
}

/* the candidate words' numbers, 0..31: word 2c is candidate c's for a pair's weight a, word
 * 2c + 1 for its weight b */
static const uint16_t word_no[32] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                     16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
                                     30, 31};

/* the thresholds W_1..7 and levels L_1..7 of 16 candidates, in candidate words */
struct cand16 {
	__m512i W[7], L[7];
	__m512i I0;                  /* the bound's entries for the largest |w| (a), in its
	                                a words (b words: entry 0); the table's only */
};

/* the group */
struct grp {
	const float *T;
	uint8_t ord[16];             /* weights by falling |w| (ties: lower index first) */
	float xf[2][17];             /* [0]: |w|; [1]: |w| 2^-k by falling |w| (A = a 2^k with
	                                1 <= a < 2), then a zero */
	__m512i xw[2][8];            /* in candidate words, [0]: pair q = weights (q, q + 8)
	                                of xf[0] (the exact errors); [1]: pair q =
	                                xf[1][2q + 1, 2q + 2] (the bounds) */
	__m512i lbt0, lbt1;          /* the bound's 64 entries */
	__m512i lbbase;              /* the bin of entry 0, less 8 k (the bounds use xf[1]) */
	__m512i xh[8], hbase;        /* half-precision bounds: xw[1]'s words in binary16, and
	                                the bin of entry 0 of xf[1] */
	__m512 ev;                   /* bf16(A * expand) */
	int Q;                       /* the bound's unit: 2^Q */
	uint32_t a;                  /* max |w|, BF16 bits */
};

T512 __m512i rne_bits(__m512i u)
{
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	return _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
}

/* bf16 rounding (to nearest even) of binary32 lanes */
T512 __m512 rne512(__m512 v)
{
	return _mm512_castsi512_ps(_mm512_and_si512(rne_bits(_mm512_castps_si512(v)),
	                                            _mm512_set1_epi32((int)0xFFFF0000u)));
}

/* T's index: the BF16 bits of |d| */
T512 __m512i tidx(__m512 d)
{
	__m512i u = _mm512_and_si512(_mm512_castps_si512(d), _mm512_set1_epi32(0x7FFFFFFF));
	return _mm512_srli_epi32(rne_bits(u), 16);
}

/* the candidates of batches k < nb whose multipliers are P[k] (the steps' p; 0 in unused
 * lanes), ev: bf16(A * expand); stage by stage over the batches: their independent chains
 * side by side */
T512 void cand_batches(__m512 ev, const __m512 *P, int nb, struct cand16 *c)
{
	/* both words of candidate c: the high half of binary32 lane c (word 2c + 1) */
	const __m512i dup = _mm512_or_si512(_mm512_loadu_si512(word_no), _mm512_set1_epi16(1));
	const __m512i ff = _mm512_set1_epi32(0xFFFF);
	__m512 s[NB], l15[NB];
	for (int k = 0; k < nb; k++)
		s[k] = rne512(_mm512_mul_ps(ev, P[k]));
	for (int k = 0; k < nb; k++)
		s[k] = rne512(_mm512_mul_ps(s[k], _mm512_set1_ps(1.0f / 6.0f)));
	for (int k = 0; k < nb; k++)
		l15[k] = rne512(_mm512_mul_ps(s[k], _mm512_set1_ps(1.5f)));
	static const float tau[4] = {257.0f / 1024, 383.0f / 512, 321.0f / 256, 447.0f / 256};
	for (int t = 0; t < 4; t++)
		for (int k = 0; k < nb; k++)
			c[k].W[t] = _mm512_permutexvar_epi16(dup, _mm512_add_epi32(_mm512_castps_si512(
			                _mm512_mul_ps(s[k], _mm512_set1_ps(tau[t]))), ff));
	for (int k = 0; k < nb; k++) {
		c[k].W[4] = _mm512_add_epi16(c[k].W[2], _mm512_set1_epi16(0x80));
		c[k].W[5] = _mm512_add_epi16(c[k].W[3], _mm512_set1_epi16(0x80));
		c[k].W[6] = _mm512_add_epi16(c[k].W[2], _mm512_set1_epi16(0x100));
		c[k].L[1] = _mm512_permutexvar_epi16(dup, _mm512_castps_si512(s[k]));
		c[k].L[2] = _mm512_permutexvar_epi16(dup, _mm512_castps_si512(l15[k]));
		c[k].L[0] = _mm512_sub_epi16(c[k].L[1], _mm512_set1_epi16(0x80));
		c[k].L[3] = _mm512_add_epi16(c[k].L[1], _mm512_set1_epi16(0x80));
		c[k].L[4] = _mm512_add_epi16(c[k].L[2], _mm512_set1_epi16(0x80));
		c[k].L[5] = _mm512_add_epi16(c[k].L[1], _mm512_set1_epi16(0x100));
		c[k].L[6] = _mm512_add_epi16(c[k].L[2], _mm512_set1_epi16(0x100));
	}
}

/* the candidates of one batch */
T512 void cand_batch(const struct grp *g, __m512 P, struct cand16 *c)
{
	cand_batches(g->ev, &P, 1, c);
}

/* the level of each word of x (16-bit words ordered like their values: BF16 bits, or
 * binary16 ones) by candidates c (thresholds and levels in the same format) */
T512 __m512i pair_level(__m512i x, const struct cand16 *c)
{
	__mmask32 m1 = _mm512_cmpge_epu16_mask(x, c->W[0]), m2 = _mm512_cmpge_epu16_mask(x, c->W[1]),
	          m3 = _mm512_cmpge_epu16_mask(x, c->W[2]), m4 = _mm512_cmpge_epu16_mask(x, c->W[3]),
	          m5 = _mm512_cmpge_epu16_mask(x, c->W[4]), m6 = _mm512_cmpge_epu16_mask(x, c->W[5]),
	          m7 = _mm512_cmpge_epu16_mask(x, c->W[6]);
	/* the level of the highest threshold reached (they are nested), as a tree */
	__m512i l01 = _mm512_maskz_mov_epi16(m1, c->L[0]);
	__m512i l23 = _mm512_mask_blend_epi16(m3, c->L[1], c->L[2]);
	__m512i l45 = _mm512_mask_blend_epi16(m5, c->L[3], c->L[4]);
	__m512i l67 = _mm512_mask_blend_epi16(m7, c->L[5], c->L[6]);
	return _mm512_mask_blend_epi16(m4, _mm512_mask_blend_epi16(m2, l01, l23),
	                               _mm512_mask_blend_epi16(m6, l45, l67));
}

/* d = fl(L - |x|) of pair q: weight a's 16 candidates in *da, b's in *db */
T512 void pair_d(const struct grp *g, int n, const struct cand16 *c, int q, __m512 *da,
                 __m512 *db)
{
	__m512i L = pair_level(g->xw[n][q], c);
	*da = _mm512_sub_ps(_mm512_castsi512_ps(_mm512_slli_epi32(L, 16)),
	                    _mm512_set1_ps(g->xf[n][n ? 2 * q + 1 : q]));
	*db = _mm512_sub_ps(_mm512_castsi512_ps(_mm512_and_si512(L, _mm512_set1_epi32(
	                        (int)0xFFFF0000u))),
	                    _mm512_set1_ps(g->xf[n][n ? 2 * q + 2 : q + 8]));
}

/* the bound's terms of pair q in candidate words, c: candidates of a (the table's) */
T512 __m512i pair_lb(const struct grp *g, const struct cand16 *c, int q)
{
	__m512 da, db;
	pair_d(g, 1, c, q, &da, &db);
	const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF);
	/* the bins (|d|'s bits 20..30): a's in the low word of each lane, b's in the high */
	__m512i ia = _mm512_srli_epi32(_mm512_and_si512(_mm512_castps_si512(da), abs), 20);
	__m512i ib = _mm512_srli_epi32(_mm512_and_si512(_mm512_castps_si512(db), abs), 4);
	__m512i bins = _mm512_ternarylogic_epi32(_mm512_set1_epi32((int)0xFFFF0000u), ib, ia,
	                                         0xCA);   /* high ? ib : ia */
	return _mm512_permutex2var_epi16(g->lbt0, _mm512_subs_epu16(bins, g->lbbase), g->lbt1);
}

/* pair_lb in half precision: the table's thresholds and levels and xh are binary16 (h
 * below), d = L - x in binary16 rounded toward zero (vsubph, by the assembler: the
 * compiler's intrinsics would need the whole search compiled for AVX512-FP16) */
T512 __m512i pair_lb16(const struct grp *g, const struct cand16 *c, int q)
{
	__m512i x = g->xh[q], L = pair_level(x, c), d;
#if G16_FP16
	__asm__("vsubph %{rz-sae%}, %2, %1, %0" : "=v"(d) : "v"(L), "v"(x));
#else
	d = L;                       /* not reached: h is 0 without the assembler's support */
#endif
	/* the bins: |d|'s bits 7..14 (exponent, 3 mantissa bits) */
	__m512i bins = _mm512_srli_epi16(_mm512_and_si512(d, _mm512_set1_epi16(0x7FFF)), 7);
	return _mm512_permutex2var_epi16(g->lbt0, _mm512_subs_epu16(bins, g->hbase), g->lbt1);
}

/* pair q's bounds in the search's precision (h: half) */
T512 __m512i lb_pair(const struct grp *g, const struct cand16 *c, int q, const int h)
{
	return h ? pair_lb16(g, c, q) : pair_lb(g, c, q);
}

/* c->I0 for the largest |w| = a (BF16 bits, 1 <= a < 2), c: a's candidates (the table's):
 * pair_lb's bins with x = a, in the table of every group whose max |w| is a 2^k */
T512 void w0_bins(uint32_t a, struct cand16 *c)
{
	struct grp g;
	__m512 da, db;
	g.xw[1][0] = _mm512_set1_epi16((short)a);
	g.xf[1][1] = g.xf[1][2] = rq_bf16f(a);
	pair_d(&g, 1, c, 0, &da, &db);
	__m512i bin = _mm512_srli_epi32(_mm512_and_si512(_mm512_castps_si512(da),
	                                                 _mm512_set1_epi32(0x7FFFFFFF)), 20);
	/* the table's first bin, grp_init's lbbase (k = 0), as there: below it entry 0 */
	__m512i base = _mm512_set1_epi32((int)(a >> 4) - 8 - 63);
	c->I0 = _mm512_max_epi32(_mm512_sub_epi32(bin, base), _mm512_setzero_si512());
}

/* the bound's terms of the largest |w| (a words; b words: 0) */
T512 __m512i w0_lb(const struct grp *g, const struct cand16 *c)
{
	return _mm512_permutex2var_epi16(g->lbt0, c->I0, g->lbt1);
}

/* the bound of each candidate (its a and b words summed, in both words) */
T512 __m512i lb_total(__m512i acc)
{
	return _mm512_adds_epu16(acc, _mm512_rol_epi32(acc, 16));
}

/* the exact errors (BF16-rounded, as binary32) of the 16 candidates */
T512 __m512 exact16(const struct grp *g, const struct cand16 *c)
{
	__m512 acc = _mm512_setzero_ps();
	for (int q = 0; q < 8; q++) {       /* pair q: weights q and q + 8 */
		__m512 da, db;
		pair_d(g, 0, c, q, &da, &db);
		__m512 v = _mm512_add_ps(_mm512_i32gather_ps(tidx(da), g->T, 4),
		                         _mm512_i32gather_ps(tidx(db), g->T, 4));
		acc = q ? _mm512_add_ps(acc, v) : v;
	}
	return rne512(acc);
}

/* ceil(x (1 + 2^-19) / 2^Q), 65536 when above the bound's range (nothing can be ruled out);
 * |Q| < 1000 */
T512 uint32_t units(float x, int Q)
{
	union { uint64_t u; double d; } sc = {(uint64_t)(1023 - Q) << 52};
	double t = __builtin_ceil((double)x * (1.0 + 0x1p-19) * sc.d);
	return t > 65535.0 ? 65536u : (uint32_t)t;
}

/* the search's state: the best error so far, its step, the improving steps (< 32) */
struct best {
	float v;
	int i;
	uint32_t mk;
};

static inline void improve(struct best *b, float e, int st)
{
	if (e < b->v || (e == b->v && st < b->i)) {
		b->v = e;
		b->i = st;
		b->mk |= st < 32 ? 1u << st : 0u;
	}
}

/* the 16 errors err of steps st[0..k) (ascending): in order when the improving steps count,
 * else the first least error only (the same result) */
T512 void improve16(struct best *b, __m512 err, const int *st, int k, int ordered)
{
	__mmask16 m = (__mmask16)((1u << k) - 1u);
	if (ordered) {
		float e[16];
		_mm512_storeu_ps(e, err);
		for (int c = 0; c < k; c++)
			improve(b, e[c], st[c]);
		return;
	}
	/* the errors are BF16 values >= 0: their bits with the step in the low half order
	 * them by error, then step */
	uint32_t mn = _mm512_mask_reduce_min_epu32(m, _mm512_or_si512(_mm512_castps_si512(err),
	                                           _mm512_maskz_loadu_epi32(m, st)));
	improve(b, rq_u2f(mn & 0xFFFF0000u), (int)(mn & 0xFFFFu));
}

/* the bounds that rule a candidate out, in units: lt for a step after the best's (an equal
 * error loses), le for one before; 0 when the bound's range cannot rule any out */
T512 int thetas(const struct best *b, int Q, __m512i *lt, __m512i *le)
{
	uint32_t bb = rq_f2u(b->v), odd = (bb >> 16) & 1u;
	uint32_t t = b->v == 0.0f ? 0u : units(rq_u2f(bb - 0x8000u + odd), Q);
	uint32_t e = units(rq_u2f(bb + 0x8000u + (odd ^ 1u)), Q);
	*lt = _mm512_set1_epi16((short)(t > 65535u ? 65535 : t));
	*le = _mm512_set1_epi16((short)e);
	return e <= 65535u;
}

/* the live candidates of steps s0.. (of n) */
static inline __mmask16 live16(int n, int s0)
{
	return (__mmask16)(n - s0 >= 16 ? 0xFFFFu : n > s0 ? (1u << (n - s0)) - 1u : 0u);
}

/* the group's order, pair words, bound table (h: the bounds in half precision); 0, or -1
 * when the group is not for this search */
T512 int grp_init(const struct rq_obs_params *p, const uint16_t *wg, struct grp *g, const int h)
{
	__m256i wv = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)wg),
	                              _mm256_set1_epi16(0x7FFF));
	__m512i key = _mm512_or_si512(_mm512_slli_epi32(_mm512_cvtepu16_epi32(wv), 4),
	                              _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4,
	                                                3, 2, 1, 0));
	uint32_t a = (uint32_t)_mm512_reduce_max_epu32(key) >> 4;
	if (a < A_MIN || a > A_MAX)
		return -1;
	g->T = rq_obs_pow_table();
	uint32_t kk[16];
	/* A = a 2^k, 1 <= a < 2: the bounds compare |w| 2^-k with a's candidates (the table);
	 * the scaling is exact where |w| 2^-k is normal, and the rest (|w| < A 2^-126) stay
	 * below every threshold and every bin of the bound either way */
	int k = (int)(a >> 7) - 127;
	__m512 xf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(wv), 16));
	__m512 xn = _mm512_mul_ps(xf, _mm512_castsi512_ps(_mm512_set1_epi32((127 - k) << 23)));
	_mm512_storeu_ps(g->xf[0], xf);
	_mm512_storeu_si512(kk, key);
	for (int j = 0; j < 16; j++) {     /* the keys are distinct: ranks 0..15 */
		int r = __builtin_popcount(_mm512_cmpgt_epu32_mask(key, _mm512_set1_epi32((int)kk[j])));
		g->ord[r] = (uint8_t)j;
	}
	/* |w| 2^-k by falling |w| (words 0..15, then zeros), then each pair's words */
	__m512i xo = _mm512_maskz_permutexvar_epi16(0xFFFF, _mm512_cvtepu8_epi16(
	                 _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)g->ord))),
	                 _mm512_castsi256_si512(_mm512_cvtepi32_epi16(_mm512_srli_epi32(
	                     _mm512_castps_si512(xn), 16))));
	__m512 xs = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
	                _mm512_castsi512_si256(xo)), 16));
	_mm512_storeu_ps(g->xf[1], xs);
	g->xf[1][16] = 0.0f;
	if (h) {
		/* binary16 holds every BF16 value in [2^-14, 2) exactly; below (|w| < A 2^-14) the
		 * weights are under every threshold (>= 0.25 s) and bin of the bound (> A 2^-10),
		 * as zero is: they are zero here */
		xs = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(xs, _mm512_set1_ps(0x1p-14f),
		                                            _CMP_GE_OQ), xs);
		xo = _mm512_zextsi256_si512(_mm512_cvtps_ph(xs, _MM_FROUND_TO_NEAREST_INT |
		                                                _MM_FROUND_NO_EXC));
		/* the bin of entry 0 (below): a's binary16 bits are 0x3C00 | its mantissa << 3 */
		int hbin = (int)((0x3C00u | (a & 0x7Fu) << 3) >> 7);
		g->hbase = _mm512_set1_epi16((short)(hbin - 8 - 63));
	}
	__m512i b = _mm512_and_si512(_mm512_loadu_si512(word_no), _mm512_set1_epi16(1));
	for (int q = 0; q < 8; q++) {     /* words 2c: weight a; 2c + 1: weight b */
		g->xw[0][q] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_slli_epi16(b, 3),
		                  _mm512_set1_epi16((short)q)), _mm512_castsi256_si512(wv));
		__m512i x1 = _mm512_permutexvar_epi16(_mm512_add_epi16(b, _mm512_set1_epi16(
		                 (short)(2 * q + 1))), xo);
		if (h)
			g->xh[q] = x1;
		else
			g->xw[1][q] = x1;
	}
	g->a = a;
	g->ev = _mm512_set1_ps(rq_round_bf16(rq_bf16f(a) * p->expand));
	/* the bound's table: bins base + 1 .. base + 63 (bin(A) - 8 at the top), units of 2^Q,
	 * 2^20 of them in T(A)'s binade */
	int base = (int)(a >> 4) - 8 - 63;
	g->Q = (int)((rq_f2u(g->T[a]) >> 23) & 0xFFu) - 127 - 20;
	__m512 sc = _mm512_castsi512_ps(_mm512_set1_epi32((127 - g->Q) << 23));
	__m256i t[4];
	for (int k = 0; k < 4; k++) {
		__m512i u = _mm512_cvttps_epu32(_mm512_mul_ps(_mm512_loadu_ps(t_bin + base + 16 * k), sc));
		if (k == 0)
			u = _mm512_mask_mov_epi32(u, 1, _mm512_setzero_si512());
		t[k] = _mm512_cvtusepi32_epi16(u);
	}
	g->lbt0 = _mm512_inserti64x4(_mm512_castsi256_si512(t[0]), t[1], 1);
	g->lbt1 = _mm512_inserti64x4(_mm512_castsi256_si512(t[2]), t[3], 1);
	g->lbbase = _mm512_set1_epi16((short)(base - 8 * k));
	return 0;
}

/* Each observer's candidates for max |w| = a, 1 <= a < 2 (a's BF16 bits 0x3F80 | m), all
 * steps: c[m * nb + batch]; a module's are these with the exponent moved (every step
 * scales exactly with A within [2^-32, 2^32]), so the bounds use them with |w| 2^-k.
 * ~0.9 MiB for expanded-mse, built on first use. */
struct cand_tab {
	struct cand16 *c;
	int nb;
	int tried;                       /* tab_build ran (under tab_mu) */
	const struct rq_obs_params *p;   /* set (release) once c is built */
};
static struct cand_tab tabs[RQ_OBSERVER_COUNT][2];   /* [observer][h] */
static pthread_mutex_t tab_mu = PTHREAD_MUTEX_INITIALIZER;

/* BF16 words (a lane's two alike) as binary16 ones */
T512 __m512i to_half(__m512i v)
{
	__m512i e = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(_mm512_castsi512_ps(_mm512_slli_epi32(
	                v, 16)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	return _mm512_or_si512(e, _mm512_slli_epi32(e, 16));
}

/* h: the thresholds and levels in binary16 for pair_lb16 (the table's are BF16 values in
 * [2^-14, 4), which binary16 holds exactly; lanes past the steps are not read) */
__attribute__((target("arch=x86-64-v4"))) static void tab_build(enum rq_observer o, int h)
{
	const struct rq_obs_params *p = rq_obs_params(o);
	int n = p->steps, nb = (n + 15) / 16;
	struct cand16 *c = aligned_alloc(64, sizeof(*c) * 128 * (size_t)nb);
	if (!c)
		return;
	for (uint32_t m = 0; m < 128; m++) {
		__m512 P[NB], ev = _mm512_set1_ps(rq_round_bf16(rq_bf16f(0x3F80u | m) * p->expand));
		for (int k = 0; k < nb; k++)
			P[k] = _mm512_maskz_loadu_ps(live16(n, 16 * k), p->p + 16 * k);
		cand_batches(ev, P, nb, c + m * (uint32_t)nb);
		for (int k = 0; k < nb; k++) {
			struct cand16 *ck = &c[m * (uint32_t)nb + k];
			w0_bins(0x3F80u | m, ck);
			for (int i = 0; h && i < 7; i++) {
				ck->W[i] = to_half(ck->W[i]);
				ck->L[i] = to_half(ck->L[i]);
			}
		}
	}
	tabs[o][h].nb = nb;
	tabs[o][h].c = c;
	__atomic_store_n(&tabs[o][h].p, p, __ATOMIC_RELEASE);
}

/* the observer's table in precision h, or NULL (other parameters, no memory) */
static const struct cand_tab *cand_tab(const struct rq_obs_params *p, int h)
{
	for (int o = RQ_OBSERVER_MSE; o < RQ_OBSERVER_COUNT; o++)   /* built: no lock per group */
		if (p == __atomic_load_n(&tabs[o][h].p, __ATOMIC_ACQUIRE))
			return &tabs[o][h];
	pthread_once(&bin_once, bin_init);
	const struct cand_tab *t = NULL;
	pthread_mutex_lock(&tab_mu);
	for (int o = RQ_OBSERVER_MSE; o < RQ_OBSERVER_COUNT; o++)
		if (p == rq_obs_params((enum rq_observer)o)) {
			if (!tabs[o][h].tried) {
				tabs[o][h].tried = 1;
				tab_build((enum rq_observer)o, h);
			}
			t = tabs[o][h].c ? &tabs[o][h] : NULL;
		}
	pthread_mutex_unlock(&tab_mu);
	return t;
}

/* exact errors of the candidates of steps st[0..k) (ascending), multipliers pv */
T512 void exact_list(const struct grp *g, struct best *b, const float *pv, const int *st, int k,
                     int ordered)
{
	for (int o = 0; o < k; o += 16) {
		int m = k - o < 16 ? k - o : 16;
		struct cand16 c;
		cand_batch(g, _mm512_maskz_loadu_ps((__mmask16)((1u << m) - 1u), pv + o), &c);
		improve16(b, exact16(g, &c), st + o, m, ordered);
	}
}

/* rq_obs_g16_512 with the bounds in half precision (h) or not */
T512 int search(const struct rq_obs_params *p, const uint16_t *wg, uint8_t *best,
                uint32_t *mask, const int h)
{
	struct grp g;
	const struct cand_tab *tab = cand_tab(p, h);
	if (!tab || grp_init(p, wg, &g, h) < 0)
		return -1;
	int n = p->steps, nb = tab->nb, ordered = mask != NULL, ws = 0;
	struct best b = {rq_u2f(BF16_MAX_BITS), 0, 0};
	const struct cand16 *cb = tab->c + (g.a & 0x7Fu) * (uint32_t)nb;   /* a's candidates */
	__m512i lacc[NB];
	/* 1. the bounds over the 5 largest weights; the window around the least */
	if (!ordered) {
		__m512i mv = _mm512_set1_epi32(-1);
		__m512i stk = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
		/* stage by stage over the batches: independent chains side by side (one batch's
		 * chain of dependent steps at a time leaves the core waiting on latencies) */
		for (int k = 0; k < nb; k++)
			lacc[k] = _mm512_adds_epu16(w0_lb(&g, &cb[k]), lb_pair(&g, &cb[k], 0, h));
		for (int k = 0; k < nb; k++)
			lacc[k] = _mm512_adds_epu16(lacc[k], lb_pair(&g, &cb[k], 1, h));
		/* the first candidate of least bound: the least bound << 16 | step */
		for (int k = 0; k < nb; k++, stk = _mm512_add_epi32(stk, _mm512_set1_epi32(16)))
			mv = _mm512_mask_min_epu32(mv, live16(n, 16 * k), mv, _mm512_or_si512(stk,
			         _mm512_and_si512(lb_total(lacc[k]),
			                          _mm512_set1_epi32((int)0xFFFF0000u))));
		int am = (int)(_mm512_reduce_min_epu32(mv) & 0xFFFFu);
		ws = am - 7 < 0 ? 0 : am - 7;
		ws = ws > n - 16 ? n - 16 : ws;
		ws = ws < 0 ? 0 : ws;
	}
	/* 2. the window exactly */
	int st[128], ns = 0;
	float pv[128];
	for (int c = 0; c < 16; c++)
		st[c] = ws + c;
	{
		struct cand16 c;
		__mmask16 live = live16(n, ws);
		cand_batch(&g, _mm512_maskz_loadu_ps(live, p->p + ws), &c);
		improve16(&b, exact16(&g, &c), st, __builtin_popcount(live), ordered);
	}
	/* 3. the others' bounds: the batches alive after each round go on */
	__mmask32 al[NB];
	__m512i th[NB], tlt, tle;
	int list[NB], nl = 0, q0 = ordered ? 0 : 2, none = !thetas(&b, g.Q, &tlt, &tle);
	const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	/* each candidate word's step: alive while in range, outside the window and bounded
	 * below its theta */
	__m512i stw = _mm512_srli_epi16(_mm512_loadu_si512(word_no), 1);
	const __m512i vn = _mm512_set1_epi16((short)n), vws = _mm512_set1_epi16((short)ws);
	const __m512i v16 = _mm512_set1_epi16(16), vbi = _mm512_set1_epi16((short)b.i);
	for (int k = 0; k < nb && !none; k++, stw = _mm512_add_epi16(stw, v16)) {
		th[k] = _mm512_mask_blend_epi16(_mm512_cmpgt_epu16_mask(stw, vbi), tle, tlt);
		if (ordered)
			lacc[k] = w0_lb(&g, &cb[k]);
		al[k] = _mm512_cmplt_epu16_mask(stw, vn) &
		        ~_mm512_cmplt_epu16_mask(_mm512_sub_epi16(stw, vws), v16) &
		        _mm512_cmplt_epu16_mask(lb_total(lacc[k]), th[k]);
		list[nl] = k;
		nl += al[k] != 0;
	}
	if (none) {
		/* the best error is beyond the bound's range: every other step exactly */
		for (int s = 0; s < n; s++)
			if (s < ws || s >= ws + 16) {
				st[ns] = s;
				pv[ns++] = p->p[s];
			}
	} else {
		/* rounds of two pairs: a round's check waits on its bounds' latency, so one pair a
		 * round spends more waiting than the extra pair of an undecided batch costs */
		for (int q = q0; q < 8 && nl; q += 2) {
			for (int i = 0; i < nl; i++) {
				int k = list[i];
				__m512i t = _mm512_adds_epu16(lb_pair(&g, &cb[k], q, h),
				                              lb_pair(&g, &cb[k], q + 1, h));
				lacc[k] = _mm512_adds_epu16(lacc[k], t);
			}
			int nn = 0;
			for (int i = 0; i < nl; i++) {
				int k = list[i];
				al[k] &= _mm512_cmplt_epu16_mask(lb_total(lacc[k]), th[k]);
				list[nn] = k;
				nn += al[k] != 0;
			}
			nl = nn;
		}
		for (int i = 0; i < nl; i++) {       /* in step order */
			int k = list[i];
			__mmask16 sv = (__mmask16)_pext_u32(al[k], 0x55555555u);
			_mm512_mask_compressstoreu_ps(pv + ns, sv, _mm512_maskz_loadu_ps(live16(n, 16 * k),
			                                                                  p->p + 16 * k));
			_mm512_mask_compressstoreu_epi32(st + ns, sv, _mm512_add_epi32(lane,
			                                 _mm512_set1_epi32(16 * k)));
			ns += __builtin_popcount(sv);
		}
	}
	/* 4. the survivors exactly */
	exact_list(&g, &b, pv, st, ns, ordered);
	*best = (uint8_t)b.i;
	if (mask)
		*mask = b.mk;
	return 0;
}

__attribute__((target("arch=x86-64-v4"), noinline))
static int search_bf(const struct rq_obs_params *p, const uint16_t *wg, uint8_t *best,
                     uint32_t *mask)
{
	return search(p, wg, best, mask, 0);
}

__attribute__((target("arch=x86-64-v4"), noinline))
static int search_h(const struct rq_obs_params *p, const uint16_t *wg, uint8_t *best,
                    uint32_t *mask)
{
	return search(p, wg, best, mask, 1);
}

static int fp16_mode = -1;           /* the bounds in half precision: -1 unknown (relaxed) */

int rq_obs_g16_fp16(int on)
{
	int can = 0;
#if G16_FP16
	unsigned a, b, c, d;
	can = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 23 & 1u);   /* AVX512-FP16 */
#endif
	int m = on != 0 && can;
	__atomic_store_n(&fp16_mode, m, __ATOMIC_RELAXED);
	return m;
}

int rq_obs_g16_512(const struct rq_obs_params *p, const uint16_t *wg, uint8_t *best,
                   uint32_t *mask)
{
	int m = __atomic_load_n(&fp16_mode, __ATOMIC_RELAXED);
	if (m < 0)
		m = rq_obs_g16_fp16(-1);
	return m ? search_h(p, wg, best, mask) : search_bf(p, wg, best, mask);
}
#else
int rq_obs_g16_fp16(int on)
{
	(void)on;
	return 0;
}

int rq_obs_g16_512(const struct rq_obs_params *p, const uint16_t *wg, uint8_t *best,
                   uint32_t *mask)
{
	(void)p, (void)wg, (void)best, (void)mask;
	return -1;
}
#endif
