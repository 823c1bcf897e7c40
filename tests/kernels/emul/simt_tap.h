/* simt_tap.h — the TAP lines and test data of the SIMT kernel tests
 * (test_ek_attn_simt.cpp, test_ek_gemv_simt.cpp): tests/tap.h's, each line
 * flushed as it comes (a kernel that hangs the emulator still shows how far
 * it got). End with `return tap_done();`. */
#ifndef RQ_TESTS_EMUL_SIMT_TAP_H
#define RQ_TESTS_EMUL_SIMT_TAP_H

#include "tests/tap.h"

#define OK(c, ...) do { TAP_OK(c, __VA_ARGS__); fflush(stdout); } while (0)

/* Uniform in [lo, hi) from the xorshift64 state *rng (advanced). */
static inline float simt_unif(uint64_t *rng, float lo, float hi)
{
	return lo + (hi - lo) * (float)((tap_xorshift64(rng) >> 40) * (1.0 / 16777216.0));
}

#endif
