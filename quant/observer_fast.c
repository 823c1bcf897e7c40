/* observer_fast.c — the MSE observers' search, fast (observer_int.h): observer_ref.c's
 * results, bit for bit, from the same binary32 operations in a different layout.
 *
 * Two ideas, both exact:
 *  - candidates in lanes: a batch of NC candidate scales is evaluated together, every
 *    weight against all NC (broadcast w, NC divisions), so each lane's sum follows torch's
 *    order of additions as plain element-wise adds (no horizontal reduction, no reordering);
 *  - a step whose scale equals the previous step's has the previous error, which cannot be
 *    strictly below the best: it is skipped (scales fall with the steps, so equal ones are
 *    neighbours), and only the distinct scales are evaluated.
 * |d|^2.40625 is a lookup in rq_obs_pow_table (|d| is a BF16). Every step is one IEEE
 * binary32 operation or a bit manipulation, branch-free in the lanes; compiled for SSE2,
 * AVX2 and AVX-512 like scheme_kern.c (quant_int.h's rq_quant_isa picks). */
#include "quant/observer_int.h"
#include "quant/quant_int.h"

#include <string.h>

#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define RQ_X86_VARIANTS 1
#endif

#define NC 16                       /* candidates per batch (lanes) */
#define ROUND_MAGIC 12582912.0f     /* 1.5 * 2^23: x + M - M rounds |x| <= 2^22 to even */
#define FP8_MAX_BITS 0x43E00000u    /* 448.0f */
#define BF16_MAX_BITS 0x7F7F0000u

size_t rq_obs_scratch_bytes(size_t group)
{
	/* per chunk of 16 weights: 8 lanes x NC pair sums; below 16 weights, n x NC */
	size_t n = group < 16 ? group : group / 16 * 8;
	return n * NC * sizeof(float);
}

/* pw of weight x against the NC scales s: T[|bf16(bf16(R(clamp(bf16(x / s))) * s) - x)|] */
static inline __attribute__((always_inline))
void pw_lanes(int kind, float x, const float *s, const float *T, float *out)
{
	float lo = kind == RQ_OBS_INT4 ? -8.0f : -128.0f, hi = kind == RQ_OBS_INT4 ? 7.0f : 127.0f;
	for (int c = 0; c < NC; c++) {
		float y = rq_round_bf16(x / s[c]), r;
		if (kind == RQ_OBS_FP4) {
			float a = rq_u2f(rq_f2u(y) & 0x7FFFFFFFu);
			r = 0.5f * (float)((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f))
			  + (float)((a > 2.5f) + (a >= 3.5f)) + 2.0f * (float)(a > 5.0f);
			r = rq_u2f(rq_f2u(r) | (rq_f2u(y) & 0x80000000u));
		} else if (kind == RQ_OBS_FP8) {
			uint32_t a = rq_f2u(y) & 0x7FFFFFFFu;
			a = a < FP8_MAX_BITS ? a : FP8_MAX_BITS;
			r = rq_e4m3_val(rq_e4m3_code(rq_u2f(a)));
			r = rq_u2f(rq_f2u(r) | (rq_f2u(y) & 0x80000000u));
		} else {
			y = y < lo ? lo : y;
			y = y > hi ? hi : y;
			r = (y + ROUND_MAGIC) - ROUND_MAGIC;
		}
		float d = rq_round_bf16(rq_round_bf16(r * s[c]) - x);
		out[c] = T[(rq_f2u(d) >> 16) & 0x7FFFu];
	}
}

/* observer_ref.c's row_sum with NC lanes per value: src[size][nl][NC] -> out[nl][NC]. */
static inline __attribute__((always_inline))
void cascade(const float *src, size_t size, int nl, float *out)
{
	float acc[4][4][8][NC];
	memset(acc, 0, sizeof(acc));
	size_t rows = size / 4, i = 0, bl = (size_t)nl * NC;
	int lp = rows <= 2 ? 1 : 64 - __builtin_clzll((unsigned long long)(rows - 1));
	lp = lp / 4 < 4 ? 4 : lp / 4;
	size_t step = (size_t)1 << lp, mask = step - 1;
#define ADD(dst, s) do { float *d_ = (float *)(dst); const float *s_ = (s); \
		for (size_t q_ = 0; q_ < bl; q_++) d_[q_] += s_[q_]; } while (0)
	while (i + step <= rows) {
		for (size_t j = 0; j < step; j++, i++)
			for (int k = 0; k < 4; k++)
				ADD(acc[0][k], src + (4 * i + (size_t)k) * bl);
		for (int j = 1; j < 4; j++) {
			for (int k = 0; k < 4; k++) {
				ADD(acc[j][k], &acc[j - 1][k][0][0]);
				memset(acc[j - 1][k], 0, sizeof(acc[0][0]));
			}
			if (i & (mask << (j * lp)))
				break;
		}
	}
	for (; i < rows; i++)
		for (int k = 0; k < 4; k++)
			ADD(acc[0][k], src + (4 * i + (size_t)k) * bl);
	for (int j = 1; j < 4; j++)
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
static inline __attribute__((always_inline))
void group_errs(int kind, const uint16_t *w, size_t n, const float *s, const float *T,
                float *scratch, float *err)
{
	float tmp[2][NC], lanes[8][NC];
	if (n < 16) {
		for (size_t j = 0; j < n; j++)
			pw_lanes(kind, rq_bf16f(w[j]), s, T, scratch + j * NC);
		cascade(scratch, n, 1, lanes[0]);
		for (int c = 0; c < NC; c++)
			err[c] = rq_round_bf16(lanes[0][c]);
		return;
	}
	size_t nv = n / 16;
	for (size_t ch = 0; ch < nv; ch++) {
		for (int l = 0; l < 8; l++) {
			float *dst = scratch + (ch * 8 + (size_t)l) * NC;
			pw_lanes(kind, rq_bf16f(w[16 * ch + (size_t)l]), s, T, tmp[0]);
			pw_lanes(kind, rq_bf16f(w[16 * ch + 8 + (size_t)l]), s, T, tmp[1]);
			for (int c = 0; c < NC; c++)
				dst[c] = tmp[0][c] + tmp[1][c];
		}
	}
	cascade(scratch, nv, 8, lanes[0]);
	float acc[NC];
	for (int c = 0; c < NC; c++)
		acc[c] = 0.0f;
	for (size_t t = nv * 16; t < n; t++) {
		pw_lanes(kind, rq_bf16f(w[t]), s, T, tmp[0]);
		for (int c = 0; c < NC; c++)
			acc[c] += tmp[0][c];
	}
	for (int l = 0; l < 8; l++)
		for (int c = 0; c < NC; c++)
			acc[c] += lanes[l][c];
	for (int c = 0; c < NC; c++)
		err[c] = rq_round_bf16(acc[c]);
}

static inline __attribute__((always_inline))
void search_body(int kind, const struct rq_obs_params *p, const uint16_t *w, size_t rows,
                 size_t cols, size_t group, uint8_t *best, uint32_t *mask, void *scratch)
{
	const float *T = rq_obs_pow_table();
	float q = rq_obs_q(kind);
	size_t ng = rows * cols / group;
	for (size_t g = 0; g < ng; g++) {
		const uint16_t *wg = w + g * group;
		uint32_t a = 0;
		for (size_t j = 0; j < group; j++) {
			uint32_t v = wg[j] & 0x7FFFu;
			a = v > a ? v : a;
		}
		/* the distinct scales, in step order, and the step each came from */
		float s[RQ_OBS_MAX_STEPS + NC];
		int from[RQ_OBS_MAX_STEPS + NC], ns = 0;
		float e = rq_round_bf16(rq_bf16f(a) * p->expand);
		for (int i = 0; i < p->steps; i++) {
			float si = rq_round_bf16(rq_round_bf16(e * p->p[i]) / q);
			si = si == 0.0f ? 0x1p-7f : si;
			if (ns == 0 || si != s[ns - 1]) {
				s[ns] = si;
				from[ns++] = i;
			}
		}
		for (int k = ns; k % NC; k++)
			s[k] = 1.0f;                          /* padding lanes: evaluated, ignored */
		float bestv = rq_u2f(BF16_MAX_BITS);
		int bi = 0;
		uint32_t mk = 0;
		for (int b = 0; b < ns; b += NC) {
			float err[NC];
			group_errs(kind, wg, group, s + b, T, scratch, err);
			for (int c = 0; c < NC && b + c < ns; c++) {
				if (err[c] < bestv) {
					bestv = err[c];
					bi = from[b + c];
					mk |= bi < 32 ? 1u << bi : 0u;
				}
			}
		}
		best[g] = (uint8_t)bi;
		if (mask)
			mask[g] = mk;
	}
}

typedef void (*search_fn)(const struct rq_obs_params *, const uint16_t *, size_t, size_t,
                          size_t, uint8_t *, uint32_t *, void *);

#define RQ_OVARIANT(suffix, attr) \
	attr static void fp4_##suffix(const struct rq_obs_params *p, const uint16_t *w, size_t r, \
	                              size_t c, size_t g, uint8_t *b, uint32_t *m, void *s) \
	{ search_body(RQ_OBS_FP4, p, w, r, c, g, b, m, s); } \
	attr static void int4_##suffix(const struct rq_obs_params *p, const uint16_t *w, size_t r, \
	                               size_t c, size_t g, uint8_t *b, uint32_t *m, void *s) \
	{ search_body(RQ_OBS_INT4, p, w, r, c, g, b, m, s); } \
	attr static void int8_##suffix(const struct rq_obs_params *p, const uint16_t *w, size_t r, \
	                               size_t c, size_t g, uint8_t *b, uint32_t *m, void *s) \
	{ search_body(RQ_OBS_INT8, p, w, r, c, g, b, m, s); } \
	attr static void fp8_##suffix(const struct rq_obs_params *p, const uint16_t *w, size_t r, \
	                              size_t c, size_t g, uint8_t *b, uint32_t *m, void *s) \
	{ search_body(RQ_OBS_FP8, p, w, r, c, g, b, m, s); }

RQ_OVARIANT(base, )
#ifdef RQ_X86_VARIANTS
RQ_OVARIANT(avx2, __attribute__((target("avx2"))))
RQ_OVARIANT(avx512, __attribute__((target("arch=x86-64-v4"))))
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
