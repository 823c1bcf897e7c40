/* observer_int.h — internals of the MSE observers (observer*.c, tests/quant, kernels/,
 * qdev/).
 *
 * The search of one group, as observer.c's header derives it from llm-compressor:
 *   A      = max |w| of the group (BF16 bits)
 *   m_i    = bf16(bf16(A * E) * P_i)       E = expand, P_i = (float)(1 - i / grid)
 *   s_i    = bf16(m_i / Q), 0 -> 2^-7      Q = 6 (FP4), 7.5 (INT4), 127.5 (INT8), 448 (FP8)
 *   err_i  = bf16(tsum_j T(|bf16(bf16(R(clamp(bf16(w_j / s_i))) * s_i) - w_j)|))
 *            R: the scheme's rounding (FP4 value, rint, FP8 value), T(d) = bf16(d^2.40625)
 *            tsum: torch's CPU order of additions (observer_ref.c), in binary32
 *   step i improves the group when err_i < the best so far (starting at BF16 max); the
 *   chosen range is m of the last improving step (step 0's if none). */
#ifndef RQ_OBSERVER_INT_H
#define RQ_OBSERVER_INT_H

#include <stddef.h>
#include <stdint.h>
#include "quant/observer.h"

#define RQ_OBS_MAX_STEPS 111

struct rq_obs_params {
	float expand;               /* E: bf16(A * E) is step 0's range */
	int steps;                  /* candidates: int(maxshrink * grid) */
	int patience;               /* stop after this many steps without any improvement in
	                               the tensor; >= steps: never */
	float p[RQ_OBS_MAX_STEPS];  /* P_i = (float)(1 - i / grid) */
};
/* The parameters of an MSE observer (NULL for MINMAX). */
const struct rq_obs_params *rq_obs_params(enum rq_observer o);

/* What a scheme rounds to. */
enum rq_obs_kind { RQ_OBS_FP4 = 0, RQ_OBS_INT4, RQ_OBS_INT8, RQ_OBS_FP8 };
/* Q of the kind: bf16(m / Q) is the scale before the global scale. */
static inline float rq_obs_q(int kind)
{
	return kind == RQ_OBS_FP4 ? 6.0f : kind == RQ_OBS_INT4 ? 7.5f
	     : kind == RQ_OBS_INT8 ? 127.5f : 448.0f;
}

/* T: bf16(|d|^2.40625) as binary32 for every |BF16| bit pattern (index 0..0x7FFF: inf ->
 * inf, NaN -> NaN), built once (thread-safe) from rq_obs_pow_ref. 2.40625 is the norm 2.4
 * rounded to BF16, as torch's pow on a BF16 tensor takes its exponent. */
const float *rq_obs_pow_table(void);
float rq_obs_pow_ref(float d);      /* the literal form: bf16((float)pow(|d|, 2.40625)) */

/* The sum of v[0..n) (n >= 1, values >= 0) in torch 2.14's CPU order for a BF16 tensor
 * summed over its contiguous last dimension, in binary32, before the BF16 rounding. */
float rq_obs_tsum_ref(const float *v, size_t n);

/* Per group of `group` weights (n = rows * cols / group groups), the search's results:
 *   mask[g]  bit i set when step i improved the group (only when patience < steps, which
 *            needs steps <= 32; NULL otherwise)
 *   best[g]  the step chosen when the search runs to its end
 * rq_obs_choose() turns them into the step the tensor's patience leaves. */
int rq_obs_stop_step(const struct rq_obs_params *p, uint32_t any_mask);
static inline int rq_obs_choose(uint32_t mask, int stop)
{
	uint32_t m = stop >= 31 ? mask : mask & ((2u << stop) - 1u);
	return m ? 31 - __builtin_clz(m) : 0;
}
/* m_i of a group with max |w| bits a (BF16 bits of the range). */
uint32_t rq_obs_range(const struct rq_obs_params *p, uint32_t a, int step);

/* cast_to_fp4 (compressed-tensors, CPU): |y| to the nearest E2M1 value by these bounds,
 * times torch.sign(y) (the oracles' FP4 rounding: observer_ref.c, observer_act.c). */
static inline float rq_obs_fp4(float y)
{
	float a = y < 0 ? -y : y, v;
	if (a <= 0.25f)
		v = 0.0f;
	else if (a < 0.75f)
		v = 0.5f;
	else if (a <= 1.25f)
		v = 1.0f;
	else if (a < 1.75f)
		v = 1.5f;
	else if (a <= 2.5f)
		v = 2.0f;
	else if (a < 3.5f)
		v = 3.0f;
	else if (a <= 5.0f)
		v = 4.0f;
	else
		v = 6.0f;
	return y < 0 ? -v : y > 0 ? v : 0.0f;
}

/* What scheme s rounds to (enum rq_obs_kind). */
int rq_obs_kind(enum rq_scheme s);

/* The oracle's error of one group w[0..n) (BF16) at step `step`: err_i of the header
 * (BF16-rounded), and in *sum the binary32 sum before that rounding. For tests that show
 * why two choices differ (near ties). */
float rq_obs_err_ref(int kind, const struct rq_obs_params *p, const uint16_t *w, size_t n,
                     int step, float *sum);

/* The oracle: one module (or a fused job of n) in the recipe's words, single-threaded:
 * literal conversions (convert.c), division, pow per element, rq_obs_tsum_ref. Same
 * results and errors as rq_scheme_quantize_obs. */
int rq_observer_quantize_ref(enum rq_scheme s, enum rq_observer o, const struct rq_smod *m,
                             int n, int *bad);

/* The fast search (observer_fast.c) over rows [0, rows) of w[rows][cols], groups of
 * `group` columns (cols for a channel): best[] and, if mask is non-NULL, mask[] per group
 * (row-major). scratch: rq_obs_scratch_bytes(group) bytes. */
size_t rq_obs_scratch_bytes(size_t group);
void rq_obs_search_rows(int kind, const struct rq_obs_params *p, const uint16_t *w,
                        size_t rows, size_t cols, size_t group, uint8_t *best, uint32_t *mask,
                        void *scratch);

/* The search of one NVFP4 group of 16, w[0..16) (observer_g16.c, AVX-512 BW): *best and,
 * when mask is non-NULL (the patience's improving steps), *mask, as rq_obs_search_rows
 * gives them. 0, or -1 when the group is left to rq_obs_search_rows' own search (max |w|
 * outside [2^-32, 2^32], a group of zeros, a build without the variant). Only when
 * rq_quant_isa() is RQ_ISA_AVX512 (observer_fast.c calls it then). */
int rq_obs_g16_512(const struct rq_obs_params *p, const uint16_t *w, uint8_t *best,
                   uint32_t *mask);
/* Its bounds in half precision (AVX512-FP16, where the CPU and the build's assembler have
 * it: the default) or not: on 0 or 1 (1: if it can), -1 for the default; returns whether
 * they are now. The same steps either way (for the tests). */
int rq_obs_g16_fp16(int on);

/* The input observer's fast search (observer_act.c) for one group of 16 columns: acc[i]
 * (i < n) += over rows [0, rows) of x[row * ldx + 0..16), in row order, the sum of the
 * row's 16 values' T(d) at scale s[i] in obs_sum.h's order for 16 values, by the
 * instruction-set variant in use (rq_quant_isa), the scalar oracle's bits. */
void rq_obs_act_rows(const float *x, size_t ldx, size_t rows, const float *s, int n, float *acc);

/* For tests: the unit passes' (observer_fast.c) binary32 sums, before the BF16 rounding,
 * of group w[0..n) at steps step0 .. step0 + 15 (fewer at the end), every unit visited
 * and, the best starting at BF16 max, none dropped while the sums stay below it, by the
 * variant in use: rq_obs_err_ref's *sum for each, bit for bit. Returns how many; 0 when n is not
 * 16 nv with 2 <= nv < 64. Not thread-safe. */
int rq_obs_unit_sums(int kind, const struct rq_obs_params *p, const uint16_t *w, size_t n,
                     int step0, float *sum);

/* The input observer's oracle (observer_act.c): rq_obs_act_mse step by step, pow() per
 * value; and the error of group g (range a, a BF16 value) at step `step` over rows [0, T)
 * of x (BF16-rounded; *sum: the binary32 sum before that rounding), for tests that show
 * why two choices differ. */
int rq_obs_act_mse_ref(const float *x, size_t ldx, size_t T, size_t cols, float *lo,
                       float *hi);
float rq_obs_act_err_ref(const float *x, size_t ldx, size_t T, size_t g, float a, int step,
                         float *sum);

#endif
