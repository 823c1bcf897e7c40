/* test_obs_scale.c — lg_obs_scale (engine/model/observe.h) against compressed-tensors'
 * generate_gparam as llm-compressor's observer calls it on BF16 activations: the
 * expected values below were printed by compressed-tensors 0.19.0 (torch 2.14, CPU)
 * for a BF16 tensor holding amax (torch computes 2688 / t as t.reciprocal() * 2688, two
 * BF16 roundings: 9.96875 -> 10 -> 0.10009765625 -> 270, not 268); the F32 mode is
 * the same in F32; the edge cases (an input that was all zero, NaN, a quotient
 * past the range) give 1.0, as generate_gparam's nan_to_num (printed by the same
 * peer: amax 0, NaN, 1e-40, 1e-36 -> 1.0 in both dtypes; 1e-35 -> 2.68504055e38
 * in BF16, 2.68799976e38 in F32). */
#include "engine/model/observe.h"
#include "tests/tap.h"

#include <float.h>
#include <math.h>

static const struct { float amax, want; } peer[] = {
	{4.4655f, 600.0f},       /* amax -> 4.46875 (BF16) */
	{1.0f, 2688.0f},
	{3.0f, 896.0f},
	{0.0123f, 218112.0f},
	{250.7f, 10.75f},
	{9.96875f, 270.0f},
	{1.00390625f, 2688.0f},  /* a tie: 1 + 2^-8 rounds to even, 1.0 */
	{0.0052f, 518144.0f},
	{7.77f, 346.0f},
	{33.3f, 80.5f},
};

int main(void)
{
	int good = 1;
	for (size_t i = 0; i < sizeof peer / sizeof peer[0]; i++) {
		float got = lg_obs_scale(peer[i].amax, 1);
		if (got != peer[i].want) {
			printf("#   amax %.9g: %.9g, the peer %.9g\n", peer[i].amax, got, peer[i].want);
			good = 0;
		}
	}
	TAP_OK(good, "bf16: 10 amax values give generate_gparam's BF16 scales bit for bit");
	good = 1;
	for (size_t i = 0; i < sizeof peer / sizeof peer[0]; i++)
		good &= lg_obs_scale(peer[i].amax, 0) == (1.0f / peer[i].amax) * 2688.0f;
	TAP_OK(good, "f32: reciprocal(amax) * 448*6 in F32, as torch evaluates 2688 / t");
	TAP_OK(lg_obs_scale(4.4655f, 0) != lg_obs_scale(4.4655f, 1), "f32 and bf16 differ where "
	       "rounding matters");
	TAP_OK(lg_obs_scale(0.0f, 1) == 1.0f && lg_obs_scale(0.0f, 0) == 1.0f &&
	       lg_obs_scale(-1.0f, 1) == 1.0f && lg_obs_scale(NAN, 0) == 1.0f &&
	       lg_obs_scale(NAN, 1) == 1.0f,
	       "an all-zero (or NaN) input: 1.0, as generate_gparam writes");
	TAP_OK(lg_obs_scale(1e-40f, 0) == 1.0f && lg_obs_scale(1e-40f, 1) == 1.0f &&
	       lg_obs_scale(1e-36f, 0) == 1.0f && lg_obs_scale(1e-36f, 1) == 1.0f,
	       "a quotient past the range: 1.0, never inf or FLT_MAX");
	float b35 = lg_obs_scale(1e-35f, 1), f35 = lg_obs_scale(1e-35f, 0);
	TAP_OK(b35 == 2.68504055148553e+38f && f35 == 2.687999755046703e+38f,
	       "amax 1e-35, just inside the range: the peer's %.9g (bf16) and %.9g (f32); got %.9g, "
	       "%.9g", 2.68504055148553e+38, 2.687999755046703e+38, b35, f35);
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}
