/* observer_fast.c — the MSE observers' search, fast (observer_int.h): observer_ref.c's
 * results, bit for bit, from the same binary32 operations in a different layout. On
 * AVX-512, NVFP4's groups of 16 go to observer_g16.c (lower bounds first), and what it
 * leaves (max |w| outside [2^-32, 2^32]) comes back here.
 *
 * Ideas, all exact:
 *  - candidates in lanes: a batch of NC candidate scales is evaluated together, every
 *    weight against all NC (broadcast w), so each lane's sum follows torch's order of
 *    additions as plain element-wise adds (no horizontal reduction, no reordering);
 *  - abandoning: a partial sum of torch's order (terms not yet visited +0) is a lower
 *    bound of the error, so a candidate is dropped as soon as it cannot beat the best
 *    (search_body); groups of 16 drop a batch when all its lanes can't, wider groups
 *    (16 nv, 2 <= nv < 64) add the cascade's 32 units a few at a time to every candidate
 *    left and pack the survivors into dense batches (unit passes), whose last pass has
 *    the whole sum: no work is redone. (Skipping steps whose scale equals the step
 *    before's was measured: it saves ~10% of expanded-mse's candidates and costs as much
 *    to pack.)
 *  - no division: bf16(x / s) == bf16(x * (float)(1 / s)) for BF16 x and s whenever 1/s
 *    and x/s are binary32 normals. Proof: x = X 2^i, s = S 2^j with integers X, S <= 255,
 *    so a BF16 rounding boundary (a midpoint M 2^k, M odd, 256 < M < 512) is never hit
 *    exactly (X = S M 2^(k-i+j) would need X's odd part >= M > 255) and the quotient is at
 *    least |X 2^t - S M| / (S M) >= 2^-17 (relative) away from every one; x * r is within
 *    2^-23 of x / s (two roundings of 2^-24), and so is the binary32 quotient, so both
 *    round to the same BF16. Below the normals (a quotient < 2^-126) every kind rounds to
 *    0 and the error is |x| either way. A group with a scale outside [2^-126, 2^125]
 *    (weights near the ends of the BF16 range) divides (exhaustively checked in
 *    tests/quant/test_observer.c);
 *  - groups of 16 (NVFP4): torch's sum of 16 is (((0 + v0) + v1) .. + v7), v_l = p_l +
 *    p_(l+8), done directly; wider groups skip the cascade's levels they never reach.
 *  - the input observer's rows (rq_obs_act_rows, for observer_act.c): the same candidates
 *    in lanes, every step kept (the patience is the batch's), a row's 16 values in
 *    obs_sum.h's order of 16 and the rows added in order; 20 steps are a register of 16
 *    and one of 4 values x 4 steps.
 * |d|^2.40625 is a lookup in rq_obs_pow_table (|d| is a BF16): an AVX-512 gather in the
 * avx512 variant (pw_512, the same operations in intrinsics), scalar loads elsewhere.
 * Compiled for SSE2, AVX2 and AVX-512 like scheme_kern.c (quant_int.h's rq_quant_isa
 * picks). */
#include "quant/observer_int.h"
#include "quant/quant_int.h"

#include <string.h>

#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define RQ_X86_VARIANTS 1
#include <immintrin.h>
#endif

#define RQ_MAXU(a, b) ((a) > (b) ? (a) : (b))
#define NC 16                       /* candidates per batch (lanes) */
#define ROUND_MAGIC 12582912.0f     /* 1.5 * 2^23: x + M - M rounds |x| <= 2^22 to even */
#define FP8_MAX_BITS 0x43E00000u    /* 448.0f */
#define BF16_MAX_BITS 0x7F7F0000u
#define MAXC (RQ_OBS_MAX_STEPS + NC)  /* candidates and their padding lanes */
#define NU 32                       /* units of a group (unit_lanes) */

size_t rq_obs_scratch_bytes(size_t group)
{
	/* per chunk of 16 weights: 8 lanes x NC pair sums; below 16 weights, n x NC */
	size_t n = group < 16 ? group : group / 16 * 8;
	return n * NC * sizeof(float);
}

/* pw of weight x against the NC scales s (reciprocals r, or NULL: divide):
 * T[|bf16(bf16(R(clamp(bf16(x / s))) * s) - x)|] */
static inline __attribute__((always_inline))
void pw_lanes(int kind, float x, const float *s, const float *r, const float *T, float *out)
{
	float lo = kind == RQ_OBS_INT4 ? -8.0f : -128.0f, hi = kind == RQ_OBS_INT4 ? 7.0f : 127.0f;
	for (int c = 0; c < NC; c++) {
		float y = rq_round_bf16(r ? x * r[c] : x / s[c]), v;
		if (kind == RQ_OBS_FP4) {
			float a = rq_u2f(rq_f2u(y) & 0x7FFFFFFFu);
			v = 0.5f * (float)((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f))
			  + (float)((a > 2.5f) + (a >= 3.5f)) + 2.0f * (float)(a > 5.0f);
			v = rq_u2f(rq_f2u(v) | (rq_f2u(y) & 0x80000000u));
		} else if (kind == RQ_OBS_FP8) {
			uint32_t a = rq_f2u(y) & 0x7FFFFFFFu;
			a = a < FP8_MAX_BITS ? a : FP8_MAX_BITS;
			v = rq_e4m3_val(rq_e4m3_code(rq_u2f(a)));
			v = rq_u2f(rq_f2u(v) | (rq_f2u(y) & 0x80000000u));
		} else {
			y = y < lo ? lo : y;
			y = y > hi ? hi : y;
			v = (y + ROUND_MAGIC) - ROUND_MAGIC;
		}
		float d = rq_round_bf16(rq_round_bf16(v * s[c]) - x);
		out[c] = T[(rq_f2u(d) >> 16) & 0x7FFFu];
	}
}

#ifdef RQ_X86_VARIANTS
#define T512 __attribute__((target("arch=x86-64-v4"), always_inline)) static inline

T512 __m512 bf16_512(__m512 v)
{
	__m512i u = _mm512_castps_si512(v);
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	u = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
	return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xFFFF0000u)));
}

/* pw_lanes with NC = 16 in one register, operation for operation. FP4: the seven
 * comparisons as masked adds; INT: the clamp and rint as roundscale (ties to even, as
 * the magic-number add); FP8: rq_e4m3_code then rq_e4m3_val on the bit patterns. */
T512 __m512 pw_512v(int kind, __m512 xv, __m512 sv, __m512 rv, int recip, const float *T)
{
	__m512 v;
	__m512 y = bf16_512(recip ? _mm512_mul_ps(xv, rv) : _mm512_div_ps(xv, sv));
	__m512i sign = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32((int)0x80000000u));
	__m512 a = _mm512_abs_ps(y);
	if (kind == RQ_OBS_FP4) {
		__m512 h = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
		v = _mm512_setzero_ps();
		v = _mm512_mask_add_ps(v, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.25f), _CMP_GT_OQ), v, h);
		v = _mm512_mask_add_ps(v, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.75f), _CMP_GE_OQ), v, h);
		v = _mm512_mask_add_ps(v, _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.25f), _CMP_GT_OQ), v, h);
		v = _mm512_mask_add_ps(v, _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.75f), _CMP_GE_OQ), v, h);
		v = _mm512_mask_add_ps(v, _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.5f), _CMP_GT_OQ), v, one);
		v = _mm512_mask_add_ps(v, _mm512_cmp_ps_mask(a, _mm512_set1_ps(3.5f), _CMP_GE_OQ), v, one);
		v = _mm512_mask_add_ps(v, _mm512_cmp_ps_mask(a, _mm512_set1_ps(5.0f), _CMP_GT_OQ), v,
		                       _mm512_set1_ps(2.0f));
		v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
	} else if (kind == RQ_OBS_FP8) {
		__m512i u = _mm512_min_epu32(_mm512_castps_si512(a), _mm512_set1_epi32((int)FP8_MAX_BITS));
		__m512 af = _mm512_castsi512_ps(u);
		__m512i rr = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFFF)),
		                              _mm512_and_si512(_mm512_srli_epi32(u, 20), _mm512_set1_epi32(1)));
		__m512i nrm = _mm512_sub_epi32(_mm512_srli_epi32(rr, 20), _mm512_set1_epi32(120 << 3));
		__m512 t = _mm512_add_ps(_mm512_mul_ps(af, _mm512_set1_ps(512.0f)), _mm512_set1_ps(8388608.0f));
		__m512i sub = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4B000000));
		__mmask16 isn = _mm512_cmp_epu32_mask(u, _mm512_set1_epi32(0x3C800000), _MM_CMPINT_NLT);
		__m512i code = _mm512_mask_mov_epi32(sub, isn, nrm);
		/* rq_e4m3_val */
		__m512i vn = _mm512_add_epi32(_mm512_slli_epi32(code, 20), _mm512_set1_epi32(120 << 23));
		__m512 vs = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(code, _mm512_set1_epi32(7))),
		                          _mm512_set1_ps(0.001953125f));
		__mmask16 cn = _mm512_cmp_epu32_mask(code, _mm512_set1_epi32(8), _MM_CMPINT_NLT);
		v = _mm512_castsi512_ps(_mm512_mask_mov_epi32(_mm512_castps_si512(vs), cn, vn));
		v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
	} else {
		float lo = kind == RQ_OBS_INT4 ? -8.0f : -128.0f, hi = kind == RQ_OBS_INT4 ? 7.0f : 127.0f;
		y = _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
		v = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	}
	__m512 d = bf16_512(_mm512_sub_ps(bf16_512(_mm512_mul_ps(v, sv)), xv));
	__m512i idx = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(d), 16),
	                               _mm512_set1_epi32(0x7FFF));
	return _mm512_i32gather_ps(idx, T, 4);
}

/* pw_512v of one weight against the 16 scales */
T512 __m512 pw_512(int kind, float x, __m512 sv, __m512 rv, int recip, const float *T)
{
	return pw_512v(kind, _mm512_set1_ps(x), sv, rv, recip, T);
}

/* FP4 with reciprocals, the hot case: pw_512v's arithmetic on |x| (xa; the error's
 * magnitude is the same: R(y) has the sign of x and round-to-nearest is symmetric), with
 * the dequantized values bf16(v * s) of the 7 nonzero FP4 magnitudes made once per batch
 * (fp4_levels) and picked by the same seven comparisons. */
T512 void fp4_levels(__m512 sv, __m512 qv[7])
{
	static const float mag[7] = {0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
	for (int k = 0; k < 7; k++)
		qv[k] = bf16_512(_mm512_mul_ps(_mm512_set1_ps(mag[k]), sv));
}

T512 __m512 pw_fp4(__m512 xa, __m512 rv, const __m512 qv[7], const float *T)
{
	static const float thr[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
	__m512 y = bf16_512(_mm512_mul_ps(xa, rv)), q = _mm512_setzero_ps();
	for (int t = 0; t < 7; t++)
		q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(y, _mm512_set1_ps(thr[t]),
		                                             t % 2 ? _CMP_GE_OQ : _CMP_GT_OQ), qv[t]);
	__m512 d = bf16_512(_mm512_sub_ps(q, xa));
	__m512i idx = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(d), 16),
	                               _mm512_set1_epi32(0x7FFF));
	return _mm512_i32gather_ps(idx, T, 4);
}
#endif

/* observer_ref.c's row_sum with NC lanes per value: src[size][nl][NC] -> out[nl][NC]. The
 * levels above 0 are used only once a flush happens (rows >= 2^lp); before that they hold
 * +0, and adding +0 to a sum of values >= 0 leaves it unchanged, so they are skipped (no
 * clearing of acc either: the 8 KiB memset was most of a group's time). */
static inline __attribute__((always_inline))
void cascade(const float *src, size_t size, int nl, float *out)
{
	float acc[4][4][8][NC];
	size_t rows = size / 4, i = 0, bl = (size_t)nl * NC;
	int lp = rows <= 2 ? 1 : 64 - __builtin_clzll((unsigned long long)(rows - 1));
	lp = lp / 4 < 4 ? 4 : lp / 4;
	size_t step = (size_t)1 << lp, mask = step - 1;
	int deep = rows >= step;
	for (int k = 0; k < 4; k++)
		memset(acc[0][k], 0, bl * sizeof(float));
	if (deep)
		for (int j = 1; j < 4; j++)
			for (int k = 0; k < 4; k++)
				memset(acc[j][k], 0, bl * sizeof(float));
#define ADD(dst, s) do { float *d_ = (float *)(dst); const float *s_ = (s); \
		for (size_t q_ = 0; q_ < bl; q_++) d_[q_] += s_[q_]; } while (0)
	while (i + step <= rows) {
		for (size_t j = 0; j < step; j++, i++)
			for (int k = 0; k < 4; k++)
				ADD(acc[0][k], src + (4 * i + (size_t)k) * bl);
		for (int j = 1; j < 4; j++) {
			for (int k = 0; k < 4; k++) {
				ADD(acc[j][k], &acc[j - 1][k][0][0]);
				memset(acc[j - 1][k], 0, bl * sizeof(float));
			}
			if (i & (mask << (j * lp)))
				break;
		}
	}
	for (; i < rows; i++)
		for (int k = 0; k < 4; k++)
			ADD(acc[0][k], src + (4 * i + (size_t)k) * bl);
	for (int j = 1; deep && j < 4; j++)
		for (int k = 0; k < 4; k++)
			ADD(acc[0][k], &acc[j][k][0][0]);
	for (size_t t = rows * 4; t < size; t++)
		ADD(acc[0][0], src + t * bl);
	for (int k = 1; k < 4; k++)
		ADD(acc[0][0], &acc[0][k][0][0]);
#undef ADD
	memcpy(out, acc[0][0], bl * sizeof(float));
}

/* err[c] = bf16(tsum_j pw(w_j, s[c])) over the group w[0..n). */
#define GROUP_ERRS_DEF(name, attr, PW, ALIVE) \
attr int name(int kind, const uint16_t *w, size_t n, const float *s, const float *r, \
              const float *T, float *scratch, float *err, float bound, int later, int live, \
              const uint8_t *ord) \
{ \
	float tmp[2][NC], lanes[8][NC]; \
	if (n < 16) { \
		for (size_t j = 0; j < n; j++) \
			PW(kind, rq_bf16f(w[j]), s, r, T, scratch + j * NC); \
		cascade(scratch, n, 1, lanes[0]); \
		for (int c = 0; c < NC; c++) \
			err[c] = rq_round_bf16(lanes[0][c]); \
		return 1; \
	} \
	float acc[NC]; \
	for (int c = 0; c < NC; c++) \
		acc[c] = 0.0f; \
	if (n == 16) {   /* one chunk: acc = 0 + v_0 + .. + v_7, v_l = p_l + p_(l+8); the \
	                    pairs in ord's order (largest |w| first), unvisited v = +0 */ \
		float v[8][NC]; \
		memset(v, 0, sizeof(v)); \
		for (int k = 0; k < 8; k++) { \
			int l = ord[k]; \
			PW(kind, rq_bf16f(w[l]), s, r, T, tmp[0]); \
			PW(kind, rq_bf16f(w[8 + l]), s, r, T, tmp[1]); \
			for (int c = 0; c < NC; c++) \
				v[l][c] = tmp[0][c] + tmp[1][c]; \
			if (k == 0 || k == 6) \
				continue; \
			for (int c = 0; c < NC; c++) \
				acc[c] = 0.0f; \
			for (int j = 0; j < 8; j++) \
				for (int c = 0; c < NC; c++) \
					acc[c] += v[j][c]; \
			if (k < 7 && !ALIVE(acc, bound, later, live)) \
				return 0; \
		} \
		for (int c = 0; c < NC; c++) \
			err[c] = rq_round_bf16(acc[c]); \
		return 1; \
	} \
	size_t nv = n / 16; \
	for (size_t ch = 0; ch < nv; ch++) { \
		for (int l = 0; l < 8; l++) { \
			float *dst = scratch + (ch * 8 + (size_t)l) * NC; \
			PW(kind, rq_bf16f(w[16 * ch + (size_t)l]), s, r, T, tmp[0]); \
			PW(kind, rq_bf16f(w[16 * ch + 8 + (size_t)l]), s, r, T, tmp[1]); \
			for (int c = 0; c < NC; c++) \
				dst[c] = tmp[0][c] + tmp[1][c]; \
		} \
	} \
	cascade(scratch, nv, 8, lanes[0]); \
	for (size_t t = nv * 16; t < n; t++) { \
		PW(kind, rq_bf16f(w[t]), s, r, T, tmp[0]); \
		for (int c = 0; c < NC; c++) \
			acc[c] += tmp[0][c]; \
	} \
	for (int l = 0; l < 8; l++) \
		for (int c = 0; c < NC; c++) \
			acc[c] += lanes[l][c]; \
	for (int c = 0; c < NC; c++) \
		err[c] = rq_round_bf16(acc[c]); \
	(void)bound; (void)later; (void)live; \
	return 1; \
}

/* whether a lane c < live of the partial sums acc can still be chosen (search_body) */
static inline __attribute__((always_inline))
int alive_lanes(const float *acc, float bound, int later, int live)
{
	int alive = 0;
	for (int c = 0; c < NC; c++) {
		float b = rq_round_bf16(acc[c]);
		alive |= (c < live) & (later ? b < bound : b <= bound);
	}
	return alive;
}

GROUP_ERRS_DEF(group_errs, static inline __attribute__((always_inline)), pw_lanes, alive_lanes)

#ifdef RQ_X86_VARIANTS
T512 void pw_512s(int kind, float x, const float *s, const float *r, const float *T, float *out)
{
	_mm512_storeu_ps(out, pw_512(kind, x, _mm512_loadu_ps(s), _mm512_loadu_ps(r ? r : s),
	                             r != NULL, T));
}
T512 int alive_512(const float *acc, float bound, int later, int live)
{
	__m512 b = bf16_512(_mm512_loadu_ps(acc)), bv = _mm512_set1_ps(bound);
	__mmask16 m = later ? _mm512_cmp_ps_mask(b, bv, _CMP_LT_OQ)
	                    : _mm512_cmp_ps_mask(b, bv, _CMP_LE_OQ);
	return (m & (__mmask16)((1u << live) - 1u)) != 0;
}
GROUP_ERRS_DEF(group_errs_512, T512, pw_512s, alive_512)
/* NVFP4's groups of 16 with reciprocals, the hot case: pw_fp4 per weight. */
T512 int fp4x16_512(const uint16_t *w, const float *s, const float *r, const float *T,
                    float *err, float bound, int later, int live, const uint8_t *ord)
{
	__m512 rv = _mm512_loadu_ps(r), qv[7], v[8];
	__m512 acc = _mm512_setzero_ps();
	fp4_levels(_mm512_loadu_ps(s), qv);
	for (int l = 0; l < 8; l++)
		v[l] = _mm512_setzero_ps();
	for (int k = 0; k < 8; k++) {
		int l = ord[k];
		v[l] = _mm512_add_ps(pw_fp4(_mm512_set1_ps(rq_bf16f(w[l] & 0x7FFFu)), rv, qv, T),
		                     pw_fp4(_mm512_set1_ps(rq_bf16f(w[l + 8] & 0x7FFFu)), rv, qv, T));
		if (k == 0 || k == 6)
			continue;
		acc = _mm512_setzero_ps();
		for (int j = 0; j < 8; j++)
			acc = _mm512_add_ps(acc, v[j]);
		if (k < 7) {
			float a[NC];
			_mm512_storeu_ps(a, acc);
			if (!alive_512(a, bound, later, live))
				return 0;
		}
	}
	_mm512_storeu_ps(err, bf16_512(acc));
	return 1;
}

/* one call per batch of NC candidates: not inlined, so that the other variants can name
 * them without AVX-512 code in their bodies */
#define GERR512(k, K) __attribute__((target("arch=x86-64-v4"), noinline)) static int \
	gerr512_##k(const uint16_t *w, size_t n, const float *s, const float *r, \
	            const float *T, float *scratch, float *err, float bd, int lt, int lv, \
	            const uint8_t *od) \
	{ return group_errs_512(K, w, n, s, r, T, scratch, err, bd, lt, lv, od); }
__attribute__((target("arch=x86-64-v4"), noinline)) static int
gerr512_fp4(const uint16_t *w, size_t n, const float *s, const float *r, const float *T,
            float *scratch, float *err, float bd, int lt, int lv, const uint8_t *od)
{
	if (n == 16 && r)
		return fp4x16_512(w, s, r, T, err, bd, lt, lv, od);
	return group_errs_512(RQ_OBS_FP4, w, n, s, r, T, scratch, err, bd, lt, lv, od);
}
GERR512(int4, RQ_OBS_INT4)
GERR512(int8, RQ_OBS_INT8)
GERR512(fp8, RQ_OBS_FP8)
#endif

/* err[] of a batch by the variant's means (isa RQ_ISA_AVX512: pw_512's gathers), or 0
 * when none of its first `live` lanes can be chosen (see search_body). */
static inline __attribute__((always_inline))
int batch_errs(int isa, int kind, const uint16_t *w, size_t n, const float *s, const float *r,
               const float *T, float *scratch, float *err, float bound, int later, int live,
               const uint8_t *ord)
{
#ifdef RQ_X86_VARIANTS
	if (isa == RQ_ISA_AVX512)
		return (kind == RQ_OBS_FP4 ? gerr512_fp4 : kind == RQ_OBS_INT4 ? gerr512_int4
		        : kind == RQ_OBS_INT8 ? gerr512_int8 : gerr512_fp8)(w, n, s, r, T, scratch,
		                                                            err, bound, later, live, ord);
#endif
	(void)isa;
	return group_errs(kind, w, n, s, r, T, scratch, err, bound, later, live, ord);
}

/* The candidates of one group in step order: scale, reciprocal, step (a float, packed like
 * the others) and the units' sums once visited (unit_lanes); NC padding lanes follow the
 * last. */
struct cands {
	float s[MAXC], r[MAXC], step[MAXC];
	float u[NU][MAXC];
};

struct best {
	float v;                    /* the best error so far (BF16 max at first) */
	int i;                      /* its step */
	uint32_t mk;                /* the improving steps (< 32), in step order */
};

/* a candidate's error err at step st against the best so far (the lower step wins a tie:
 * the oracle keeps the first of equal errors) */
#define IMPROVE(err, st) do { float e_ = (err); int s_ = (st); \
	if (e_ < bestv || (e_ == bestv && s_ < bi)) { \
		bestv = e_; bi = s_; mk |= s_ < 32 ? 1u << s_ : 0u; } } while (0)

/* The units of torch's order for a group of n = 16 nv weights, 1 <= nv < 64 (observer_ref.c's
 * cascade never flushes: rows = nv / 4 < 16). Unit u = 8 k + l (column k < 4, lane l < 8)
 * is acc[0][k][l] after the rows: a sum from +0, in order, of the chunks' pair sums
 * ld(c, l) = pw(w[16 c + l]) + pw(w[16 c + 8 + l]) over c = k, k + 4, .. < 4 rows and, for
 * k = 0, then c = 4 rows .. nv - 1. The error is bf16(((0 + L_0) + L_1) .. + L_7) with
 * L_l = ((u_l + u_(8 + l)) + u_(16 + l)) + u_(24 + l) (n % 16 == 0: no tail).
 * unit_lanes: unit u of the NC candidates at o into c->u[u][o..o + NC). */
static inline __attribute__((always_inline))
void unit_lanes(int kind, const uint16_t *w, size_t nv, int u, struct cands *c, int o,
                int recip, const float *T)
{
	size_t r4 = nv / 4 * 4, k = (size_t)u / 8u, l = (size_t)u % 8u;
	const float *s = c->s + o, *r = recip ? c->r + o : NULL;
	float a[NC], b[NC], *acc = c->u[u] + o;
	for (int i = 0; i < NC; i++)
		acc[i] = 0.0f;
#define LDL(ch) do { pw_lanes(kind, rq_bf16f(w[16 * (ch) + l]), s, r, T, a); \
		pw_lanes(kind, rq_bf16f(w[16 * (ch) + 8 + l]), s, r, T, b); \
		for (int i_ = 0; i_ < NC; i_++) acc[i_] += a[i_] + b[i_]; } while (0)
	for (size_t ch = k; ch < r4; ch += 4)
		LDL(ch);
	for (size_t ch = r4; k == 0 && ch < nv; ch++)
		LDL(ch);
#undef LDL
}

/* torch's combination of the units of NC candidates at u (rows of MAXC) into tot; a unit
 * not visited (vis[u] == 0) is +0, which leaves every sum it joins unchanged */
static inline __attribute__((always_inline))
void combine_lanes(const float *u, const int *vis, int ncol, float *tot)
{
	float L[NC];
	for (int k = 0; k < NC; k++)
		tot[k] = 0.0f;
	for (int l = 0; l < 8; l++) {
		for (int k = 0; k < NC; k++)
			L[k] = 0.0f;
		for (int col = 0; col < ncol; col++)
			for (int k = 0; vis[8 * col + l] && k < NC; k++)
				L[k] += u[(size_t)(8 * col + l) * MAXC + (size_t)k];
		for (int k = 0; k < NC; k++)
			tot[k] += L[k];
	}
}

/* the lanes (< live) whose bf16(tot) can still be chosen against best bestv at step bi */
static inline __attribute__((always_inline))
unsigned keep_lanes(const float *tot, const float *step, float bestv, int bi, int live)
{
	unsigned keep = 0;
	for (int k = 0; k < live; k++) {
		float lb = rq_round_bf16(tot[k]);
		keep |= (unsigned)!(lb > bestv || (lb == bestv && (int)step[k] > bi)) << k;
	}
	return keep;
}

/* lanes `keep` of the batch at o of arrays a[0..na) to m, in order; returns the new m */
static inline __attribute__((always_inline))
int pack_lanes(float *const *a, int na, int o, int m, unsigned keep)
{
	for (int k = 0; k < NC; k++) {             /* branch-free */
		for (int x = 0; x < na; x++)
			a[x][m] = a[x][o + k];
		m += (keep >> k) & 1u;
	}
	return m;
}

#ifdef RQ_X86_VARIANTS
/* unit_lanes with pw_512 */
T512 void unit_512(int kind, const uint16_t *w, size_t nv, int u, struct cands *c, int o,
                   int recip, const float *T)
{
	size_t r4 = nv / 4 * 4, k = (size_t)u / 8u, l = (size_t)u % 8u;
	__m512 sv = _mm512_loadu_ps(c->s + o), rv = _mm512_loadu_ps(c->r + o);
	__m512 acc = _mm512_setzero_ps();
#define LD512(ch) do { const uint16_t *x_ = w + 16 * (ch) + l; \
		acc = _mm512_add_ps(acc, _mm512_add_ps(pw_512(kind, rq_bf16f(x_[0]), sv, rv, recip, T), \
		                                       pw_512(kind, rq_bf16f(x_[8]), sv, rv, recip, T))); \
	} while (0)
	for (size_t ch = k; ch < r4; ch += 4)
		LD512(ch);
	for (size_t ch = r4; k == 0 && ch < nv; ch++)
		LD512(ch);
#undef LD512
	_mm512_storeu_ps(c->u[u] + o, acc);
}

T512 void combine_512(const float *u, const int *vis, int ncol, float *tot)
{
	__m512 t = _mm512_setzero_ps();
	for (int l = 0; l < 8; l++) {
		__m512 L = _mm512_setzero_ps();
		for (int col = 0; col < ncol; col++)
			if (vis[8 * col + l])
				L = _mm512_add_ps(L, _mm512_loadu_ps(u + (size_t)(8 * col + l) * MAXC));
		t = _mm512_add_ps(t, L);
	}
	_mm512_storeu_ps(tot, t);
}

T512 unsigned keep_512(const float *tot, const float *step, float bestv, int bi, int live)
{
	__m512 lb = bf16_512(_mm512_loadu_ps(tot)), bv = _mm512_set1_ps(bestv);
	__mmask16 drop = _mm512_cmp_ps_mask(lb, bv, _CMP_GT_OQ) |
	                 (_mm512_cmp_ps_mask(lb, bv, _CMP_EQ_OQ) &
	                  _mm512_cmp_ps_mask(_mm512_loadu_ps(step), _mm512_set1_ps((float)bi),
	                                     _CMP_GT_OQ));
	return ~(unsigned)drop & ((1u << live) - 1u);
}

T512 int pack_512(float *const *a, int na, int o, int m, unsigned keep)
{
	for (int x = 0; x < na; x++)
		_mm512_storeu_ps(a[x] + m, _mm512_maskz_compress_ps((__mmask16)keep,
		                                                     _mm512_loadu_ps(a[x] + o)));
	return m + __builtin_popcount(keep);
}
#endif

/* One unit pass (search_body): units uo[v0..v1) of nu added to the n candidates of c; the
 * last pass (v1 == nu) has their errors, which go against b; the others drop the candidates
 * that can no longer be chosen and pack the rest. Returns the candidates left. */
#define UNIT_PASS_DEF(name, attr, UNIT, COMBINE, KEEP, PACK) \
attr int name(int kind, const uint16_t *w, size_t nv, const uint8_t *uo, int v0, int v1, \
              int nu, struct cands *c, int n, int recip, const float *T, struct best *b, \
              float *sums) \
{ \
	int vis[NU] = {0}, na = 3, m = 0; \
	float *arr[NU + 3], tot[NC], bestv = b->v; \
	int bi = b->i; \
	uint32_t mk = b->mk; \
	arr[0] = c->s; \
	arr[1] = c->r; \
	arr[2] = c->step; \
	for (int v = 0; v < v1; v++) { \
		arr[na++] = c->u[uo[v]]; \
		vis[uo[v]] = 1; \
	} \
	for (int o = 0; o < n; o += NC) { \
		int live = n - o < NC ? n - o : NC; \
		for (int v = v0; v < v1; v++) \
			UNIT(kind, w, nv, uo[v], c, o, recip, T); \
		COMBINE(&c->u[0][o], vis, nu / 8, tot); \
		if (v1 < nu) { \
			m = PACK(arr, na, o, m, KEEP(tot, c->step + o, bestv, bi, live)); \
			continue; \
		} \
		for (int k = 0; k < live; k++) { \
			IMPROVE(rq_round_bf16(tot[k]), (int)c->step[o + k]); \
			if (sums) \
				sums[o + k] = tot[k]; \
		} \
	} \
	b->v = bestv; \
	b->i = bi; \
	b->mk = mk; \
	return v1 < nu ? m : 0; \
}

UNIT_PASS_DEF(unit_pass, static inline __attribute__((always_inline)), unit_lanes, combine_lanes,
              keep_lanes, pack_lanes)
#ifdef RQ_X86_VARIANTS
UNIT_PASS_DEF(unit_pass_512, __attribute__((target("arch=x86-64-v4"), noinline)) static,
              unit_512, combine_512, keep_512, pack_512)
#endif

/* a unit pass by the variant's means */
static inline __attribute__((always_inline))
int unit_pass_isa(int isa, int kind, const uint16_t *w, size_t nv, const uint8_t *uo, int v0,
                  int v1, int nu, struct cands *c, int n, int recip, const float *T,
                  struct best *b, float *sums)
{
#ifdef RQ_X86_VARIANTS
	if (isa == RQ_ISA_AVX512)
		return unit_pass_512(kind, w, nv, uo, v0, v1, nu, c, n, recip, T, b, sums);
#endif
	(void)isa;
	return unit_pass(kind, w, nv, uo, v0, v1, nu, c, n, recip, T, b, sums);
}

static inline __attribute__((always_inline))
void search_body(int isa, int kind, const struct rq_obs_params *p, const uint16_t *w, size_t rows,
                 size_t cols, size_t group, uint8_t *best, uint32_t *mask, void *scratch)
{
	const float *T = rq_obs_pow_table();
	float q = rq_obs_q(kind);
	size_t ng = rows * cols / group, nv = group / 16;
	int probe = -1;                 /* the step whose range is max |w| (expanded search) */
	for (int i = 0; p->expand > 1.0f && i < p->steps && probe < 0; i++)
		if (p->p[i] * p->expand <= 1.0f)
			probe = i;
	/* the unit passes (below) take groups of 16 nv weights, 2 <= nv < 64; nu units, visited
	 * `per` at a time between two prunings */
	int units = group % 16 == 0 && nv >= 2 && nv < 64;
	int nu = nv >= 4 ? NU : 8, per = nu / 8;
	struct cands c;
	for (size_t g = 0; g < ng; g++) {
		const uint16_t *wg = w + g * group;
#ifdef RQ_X86_VARIANTS
		/* NVFP4's groups of 16: bounds first, few exact errors (observer_g16.c) */
		if (isa == RQ_ISA_AVX512 && kind == RQ_OBS_FP4 && group == 16 &&
		    rq_obs_g16_512(p, wg, &best[g], mask ? &mask[g] : NULL) == 0)
			continue;
#endif
		uint32_t a = 0;
		for (size_t j = 0; j < group; j++) {
			uint32_t v = wg[j] & 0x7FFFu;
			a = v > a ? v : a;
		}
		uint8_t ord[8];       /* group of 16: its pairs (l, l + 8) by falling max |w| */
		if (group == 16) {    /* ranks, branch-free (ties: the lower index first) */
			uint32_t pm[8], rk[8];
			for (int j = 0; j < 8; j++) {
				pm[j] = RQ_MAXU(wg[j] & 0x7FFFu, wg[j + 8] & 0x7FFFu);
				rk[j] = 0;
			}
			for (int k = 0; k < 8; k++)
				for (int j = 0; j < 8; j++)
					rk[j] += (pm[k] > pm[j]) | ((pm[k] == pm[j]) & (k < j));
			for (int j = 0; j < 8; j++)
				ord[rk[j]] = (uint8_t)j;
		}
		/* the candidates: every step's scale and its reciprocal */
		uint32_t far = 0;     /* a scale outside [2^-126, 2^125]: divide */
		float e = rq_round_bf16(rq_bf16f(a) * p->expand);
		int n = p->steps, f0 = probe;
		for (int i = 0; i < n; i++) {             /* vectorized */
			float si = rq_round_bf16(rq_round_bf16(e * p->p[i]) / q);
			si = si == 0.0f ? 0x1p-7f : si;
			c.s[i] = si;
			c.r[i] = 1.0f / si;
			c.step[i] = (float)i;
			far |= rq_f2u(si) - 0x00800000u > 0x7E000000u - 0x00800000u;
		}
		int recip = !far;
		/* The first batch, evaluated whole: in step order when the improving steps count
		 * (patience), else the batch around the step whose range is max |w| (minmax's,
		 * usually near the best). Its candidates then leave the list. */
		if (!mask && probe >= 0) {
			f0 = f0 - NC / 2 < n - NC ? f0 - NC / 2 : n - NC;
			f0 = f0 > 0 ? f0 : 0;
		} else {
			f0 = 0;
		}
		int n0 = n - f0 < NC ? n - f0 : NC;
		for (int i = n; i < n + NC; i++)
			c.s[i] = c.r[i] = 1.0f;               /* padding lanes: evaluated, ignored */
		float bestv = rq_u2f(BF16_MAX_BITS), err[NC];
		int bi = 0;
		uint32_t mk = 0;
		if (batch_errs(isa, kind, wg, group, c.s + f0, recip ? c.r + f0 : NULL, T, scratch,
		               err, bestv, f0 > 0, n0, ord))
			for (int k = 0; k < n0; k++)
				IMPROVE(err[k], (int)c.step[f0 + k]);
		/* The others. Abandoning: every partial sum of torch's order (the terms not yet
		 * visited +0) is <= the full sum (the terms are >= 0 and round-to-nearest is
		 * monotone: a + b >= a), and bf16 rounding is monotone, so bf16(partial) <= err.
		 * A candidate can no longer be chosen when bf16(partial) >= best and its step
		 * comes after the best's (an equal error loses to the earlier step), or
		 * bf16(partial) > best and it comes before. With patience the first batch holds
		 * the first steps and the others come after all of them, so a dropped candidate
		 * has err >= an earlier step's and the improving steps stay exact.
		 * Unit passes (groups of 16 nv, 2 <= nv < 64, more than a batch left): `per`
		 * units (for 8 units, by falling max |w|: the largest errors first) added to every
		 * candidate left, which are then dropped or packed into dense batches; the last
		 * pass has the whole sum. Otherwise the candidates go in batches of NC, a batch
		 * dropped when all its live lanes are (group_errs, for groups of 16: there a pass
		 * would add 2 weights and cost as much to pack). */
		int left = n - n0;
		if (!units || left <= NC) {
			int lo[2] = {0, f0 + n0}, hi[2] = {f0, n};
			for (int h = 0; h < 2; h++)
				for (int o = lo[h]; o < hi[h]; o += NC) {
					int live = hi[h] - o < NC ? hi[h] - o : NC;
					if (batch_errs(isa, kind, wg, group, c.s + o, recip ? c.r + o : NULL,
					               T, scratch, err, bestv, (int)c.step[o] > bi, live, ord))
						for (int k = 0; k < live; k++)
							IMPROVE(err[k], (int)c.step[o + k]);
				}
			left = 0;
		}
		for (int i = f0; left && i < left; i++) {      /* the first batch leaves */
			c.s[i] = c.s[i + n0];
			c.r[i] = c.r[i + n0];
			c.step[i] = c.step[i + n0];
		}
		n = left;
		for (int i = n; left && i < n + NC; i++)
			c.s[i] = c.r[i] = 1.0f;
		uint8_t uo[NU];
		uint32_t um[NU];
		for (int u = 0; u < nu; u++)
			uo[u] = (uint8_t)u;
		for (int u = 0; n && nu == 8 && u < nu; u++) {
			size_t k = (size_t)u / 8u, l = (size_t)u % 8u, r4 = nv / 4 * 4;
			um[u] = 0;
#define UMAX(ch) (um[u] = RQ_MAXU(um[u], RQ_MAXU(wg[16 * (ch) + l] & 0x7FFFu, \
                                                 wg[16 * (ch) + 8 + l] & 0x7FFFu)))
			for (size_t ch = k; ch < r4; ch += 4)
				UMAX(ch);
			for (size_t ch = r4; k == 0 && ch < nv; ch++)
				UMAX(ch);
#undef UMAX
		}
		for (int u = 0; n && nu == 8 && u < nu; u++) {
			int rk = 0;
			for (int v = 0; v < nu; v++)
				rk += (um[v] > um[u]) | ((um[v] == um[u]) & (v < u));
			uo[rk] = (uint8_t)u;
		}
		struct best b = {bestv, bi, mk};
		for (int v0 = 0; n && v0 < nu; v0 += per) {
			n = unit_pass_isa(isa, kind, wg, nv, uo, v0, v0 + per < nu ? v0 + per : nu, nu,
			                  &c, n, recip, T, &b, NULL);
			for (int i = n; i < n + NC; i++)
				c.s[i] = c.r[i] = 1.0f;
		}
		bestv = b.v;
		bi = b.i;
		mk = b.mk;
		best[g] = (uint8_t)bi;
		if (mask)
			mask[g] = mk;
	}
}

typedef void (*search_fn)(const struct rq_obs_params *, const uint16_t *, size_t, size_t,
                          size_t, uint8_t *, uint32_t *, void *);

#define RQ_OVARIANT(suffix, isa, attr) \
	attr static void fp4_##suffix(const struct rq_obs_params *p, const uint16_t *w, size_t r, \
	                              size_t c, size_t g, uint8_t *b, uint32_t *m, void *s) \
	{ search_body(isa, RQ_OBS_FP4, p, w, r, c, g, b, m, s); } \
	attr static void int4_##suffix(const struct rq_obs_params *p, const uint16_t *w, size_t r, \
	                               size_t c, size_t g, uint8_t *b, uint32_t *m, void *s) \
	{ search_body(isa, RQ_OBS_INT4, p, w, r, c, g, b, m, s); } \
	attr static void int8_##suffix(const struct rq_obs_params *p, const uint16_t *w, size_t r, \
	                               size_t c, size_t g, uint8_t *b, uint32_t *m, void *s) \
	{ search_body(isa, RQ_OBS_INT8, p, w, r, c, g, b, m, s); } \
	attr static void fp8_##suffix(const struct rq_obs_params *p, const uint16_t *w, size_t r, \
	                              size_t c, size_t g, uint8_t *b, uint32_t *m, void *s) \
	{ search_body(isa, RQ_OBS_FP8, p, w, r, c, g, b, m, s); }

RQ_OVARIANT(base, RQ_ISA_BASE, )
#ifdef RQ_X86_VARIANTS
RQ_OVARIANT(avx2, RQ_ISA_AVX2, __attribute__((target("avx2"))))
RQ_OVARIANT(avx512, RQ_ISA_AVX512, __attribute__((target("arch=x86-64-v4"))))
#endif

static const search_fn variants[RQ_ISA_COUNT][4] = {
	{fp4_base, int4_base, int8_base, fp8_base},
#ifdef RQ_X86_VARIANTS
	{fp4_avx2, int4_avx2, int8_avx2, fp8_avx2},
	{fp4_avx512, int4_avx512, int8_avx512, fp8_avx512},
#endif
};

void rq_obs_search_rows(int kind, const struct rq_obs_params *p, const uint16_t *w,
                        size_t rows, size_t cols, size_t group, uint8_t *best, uint32_t *mask,
                        void *scratch)
{
	variants[rq_quant_isa()][kind](p, w, rows, cols, group, best, mask, scratch);
}

int rq_obs_unit_sums(int kind, const struct rq_obs_params *p, const uint16_t *w, size_t n,
                     int step0, float *sum)
{
	static struct cands c;          /* tests only: one thread */
	size_t nv = n / 16;
	int nu = nv >= 4 ? NU : 8, cnt = p->steps - step0 < NC ? p->steps - step0 : NC;
	uint8_t uo[NU];
	struct best b = {rq_u2f(BF16_MAX_BITS), 0, 0};
	uint32_t a = 0;
	if (n % 16 || nv < 2 || nv >= 64 || step0 < 0 || cnt < 1)
		return 0;
	for (size_t j = 0; j < n; j++)
		a = RQ_MAXU(a, w[j] & 0x7FFFu);
	float e = rq_round_bf16(rq_bf16f(a) * p->expand);
	uint32_t far = 0;
	for (int k = 0; k < NC; k++) {
		float si = k < cnt ? rq_round_bf16(rq_round_bf16(e * p->p[step0 + k]) /
		                                   rq_obs_q(kind)) : 1.0f;
		c.s[k] = si == 0.0f ? 0x1p-7f : si;
		c.r[k] = 1.0f / c.s[k];
		c.step[k] = (float)(step0 + k);
		far |= rq_f2u(c.s[k]) - 0x00800000u > 0x7E000000u - 0x00800000u;
	}
	for (int u = 0; u < nu; u++)
		uo[u] = (uint8_t)(nu - 1 - u);     /* any order: the passes keep torch's */
	for (int v0 = 0; v0 < nu; v0 += nu / 8)
		unit_pass_isa(rq_quant_isa(), kind, w, nv, uo, v0, v0 + nu / 8, nu, &c, cnt, !far,
		              rq_obs_pow_table(), &b, sum);
	return cnt;
}

/* ---- the input observer's rows (observer_act.c) ---- */

/* acc[0..NC) += over rows [0, rows) of the group at x, in row order, the row's 16 values'
 * T(d) at the NC scales s (reciprocals r, or NULL: divide) summed in obs_sum.h's order
 * for 16 values: (((0 + v_0) + v_1) .. + v_7), v_l = T(d_l) + T(d_(l+8)). x signed: pw
 * takes the sign (its error's magnitude is that of |x|). */
static inline __attribute__((always_inline))
void act_batch(const float *x, size_t ldx, size_t rows, const float *s, const float *r,
               const float *T, float *acc)
{
	for (size_t t = 0; t < rows; t++) {
		const float *v = x + t * ldx;
		float a[NC], b[NC], row[NC];
		for (int c = 0; c < NC; c++)
			row[c] = 0.0f;
		for (int l = 0; l < 8; l++) {
			pw_lanes(RQ_OBS_FP4, v[l], s, r, T, a);
			pw_lanes(RQ_OBS_FP4, v[l + 8], s, r, T, b);
			for (int c = 0; c < NC; c++)
				row[c] += a[c] + b[c];
		}
		for (int c = 0; c < NC; c++)
			acc[c] += row[c];
	}
}

#ifdef RQ_X86_VARIANTS
/* T(d) of 16 lanes of values xv (|x| with reciprocals: pw_fp4; else pw_512v, dividing) */
T512 __m512 act_pw(__m512 xv, __m512 sv, __m512 rv, const __m512 qv[7], int recip,
                   const float *T)
{
	return recip ? pw_fp4(_mm512_abs_ps(xv), rv, qv, T) : pw_512v(RQ_OBS_FP4, xv, sv, rv, 0, T);
}

__attribute__((target("arch=x86-64-v4"), noinline)) static void
act_batch_512(const float *x, size_t ldx, size_t rows, const float *s, const float *r,
              const float *T, float *acc)
{
	__m512 sv = _mm512_loadu_ps(s), rv = _mm512_loadu_ps(r ? r : s), qv[7];
	__m512 sum = _mm512_loadu_ps(acc);
	fp4_levels(sv, qv);
	for (size_t t = 0; t < rows; t++) {
		const float *v = x + t * ldx;
		__m512 row = _mm512_setzero_ps();
		for (int l = 0; l < 8; l++)
			row = _mm512_add_ps(row, _mm512_add_ps(
			    act_pw(_mm512_set1_ps(v[l]), sv, rv, qv, r != NULL, T),
			    act_pw(_mm512_set1_ps(v[l + 8]), sv, rv, qv, r != NULL, T)));
		sum = _mm512_add_ps(sum, row);
	}
	_mm512_storeu_ps(acc, sum);
}

/* The last 1..4 scales of act_rows (memoryless's 20 steps are 16 + 4): lane 4 i + c holds
 * value i of a block of 4 against scale c, so a row's 16 values are 4 registers (not 16 with
 * 12 idle lanes each); blocks k and k + 2 pair values l and l + 8 (v_l, 4 lanes each), and
 * the row's sum takes them in order l = 0..7 from their 128-bit lanes. */
__attribute__((target("arch=x86-64-v4"), noinline)) static void
act_tail4_512(const float *x, size_t ldx, size_t rows, const float *s, const float *r,
              const float *T, float *acc)
{
	const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
	__m512 sv = _mm512_broadcast_f32x4(_mm_loadu_ps(s));
	__m512 rv = _mm512_broadcast_f32x4(_mm_loadu_ps(r ? r : s)), qv[7];
	__m128 sum = _mm_loadu_ps(acc);
	fp4_levels(sv, qv);
	for (size_t t = 0; t < rows; t++) {
		const float *v = x + t * ldx;
		__m512 p[4];
		for (int k = 0; k < 4; k++)
			p[k] = act_pw(_mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_loadu_ps(v + 4 * k))),
			              sv, rv, qv, r != NULL, T);
		__m512 lo = _mm512_add_ps(p[0], p[2]), hi = _mm512_add_ps(p[1], p[3]);
		__m128 row = _mm_setzero_ps();
		row = _mm_add_ps(row, _mm512_castps512_ps128(lo));
		row = _mm_add_ps(row, _mm512_extractf32x4_ps(lo, 1));
		row = _mm_add_ps(row, _mm512_extractf32x4_ps(lo, 2));
		row = _mm_add_ps(row, _mm512_extractf32x4_ps(lo, 3));
		row = _mm_add_ps(row, _mm512_castps512_ps128(hi));
		row = _mm_add_ps(row, _mm512_extractf32x4_ps(hi, 1));
		row = _mm_add_ps(row, _mm512_extractf32x4_ps(hi, 2));
		row = _mm_add_ps(row, _mm512_extractf32x4_ps(hi, 3));
		sum = _mm_add_ps(sum, row);
	}
	_mm_storeu_ps(acc, sum);
}
#endif

void rq_obs_act_rows(const float *x, size_t ldx, size_t rows, const float *s, int n, float *acc)
{
	const float *T = rq_obs_pow_table();
	float sb[NC], rb[NC], ab[NC];
	int isa = rq_quant_isa();
	for (int o = 0; o < n; o += NC) {
		uint32_t far = 0;
		for (int c = 0; c < NC; c++) {
			sb[c] = o + c < n ? s[o + c] : 1.0f;   /* padding lanes: evaluated, ignored */
			rb[c] = 1.0f / sb[c];
			ab[c] = o + c < n ? acc[o + c] : 0.0f;
			far |= rq_f2u(sb[c]) - 0x00800000u > 0x7E000000u - 0x00800000u;
		}
		const float *r = far ? NULL : rb;   /* a scale outside [2^-126, 2^125]: divide */
#ifdef RQ_X86_VARIANTS
		if (isa == RQ_ISA_AVX512 && n - o <= 4)
			act_tail4_512(x, ldx, rows, sb, r, T, ab);
		else if (isa == RQ_ISA_AVX512)
			act_batch_512(x, ldx, rows, sb, r, T, ab);
		else
#endif
			act_batch(x, ldx, rows, sb, r, T, ab);
		for (int c = 0; c < NC && o + c < n; c++)
			acc[o + c] = ab[c];
	}
	(void)isa;
}
