/* kq_testdata.h — random BF16 weights for the kernels' tests (test_kq_math,
 * test_kquant): distributions chosen to reach every branch of the recipe —
 * ties on the E2M1 grid, E4M3 subnormal and underflowing group scales, the
 * 448 clamp, subnormal BF16 weights, zero groups, extreme global scales. */
#ifndef RQ_TESTS_KQ_TESTDATA_H
#define RQ_TESTS_KQ_TESTDATA_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"
#include "tests/tap.h"

enum kq_dist {
	KQ_DIST_NORMAL,     /* ~N(0, 0.02) like trained weights, per-row scale 2^[-6, 6] */
	KQ_DIST_WIDE,       /* any finite BF16: random sign, exponent, mantissa */
	KQ_DIST_FEWBITS,    /* 2-bit mantissas over 2^[-12, 4]: many exact E2M1 ties */
	KQ_DIST_SPARSE,     /* mostly zeros, rare values up to 2^[-40, 40] */
	KQ_DIST_HUGE,       /* near the BF16 maximum: tiny gs, scales clamped */
	KQ_DIST_ALLTINY,    /* amax below ~7.9e-36: gs = 1.0, every scale 0x20 */
	KQ_DIST_COUNT
};

static inline uint64_t kq_rng(uint64_t *s)
{
	return tap_xorshift64(s);
}

/* uniform in [0, 1) */
static inline float kq_unif(uint64_t *s)
{
	return (float)(kq_rng(s) >> 40) * (1.0f / 16777216.0f);
}

/* Fills w[rows][cols] with finite BF16 bit patterns of distribution d. */
static inline void kq_fill(uint16_t *w, size_t rows, size_t cols, enum kq_dist d, uint64_t *s)
{
	for (size_t i = 0; i < rows; i++) {
		float rs = ldexpf(1.0f, (int)(kq_rng(s) % 13) - 6);
		for (size_t j = 0; j < cols; j++) {
			uint16_t b = 0;
			uint64_t x = kq_rng(s);
			switch (d) {
			case KQ_DIST_NORMAL: {
				float u = kq_unif(s) + kq_unif(s) + kq_unif(s) + kq_unif(s) - 2.0f;
				b = rq_f32_to_bf16(u * 0.035f * rs);
				break;
			}
			case KQ_DIST_WIDE:
				b = (uint16_t)(x & 0x807F) | (uint16_t)(((x >> 8) % 255) << 7);
				break;
			case KQ_DIST_FEWBITS: {
				uint32_t e = 127 - 12 + (uint32_t)((x >> 3) % 17);
				b = (uint16_t)((x & 1) << 15 | e << 7 | ((x >> 1) & 3) << 5);
				if ((x >> 20) % 8 == 0)
					b &= 0x8000;                       /* some (signed) zeros */
				break;
			}
			case KQ_DIST_SPARSE:
				if ((x & 31) == 0) {
					uint32_t e = 127 - 40 + (uint32_t)((x >> 5) % 81);
					b = (uint16_t)(((x >> 16) & 1) << 15 | e << 7 | ((x >> 24) & 0x7F));
				}
				break;
			case KQ_DIST_HUGE:
				b = (uint16_t)((x & 1) << 15 | (0x7E00 + ((x >> 1) % 0x17F)));
				break;
			case KQ_DIST_ALLTINY:
				b = (uint16_t)((x & 1) << 15 | ((x >> 1) % 0x0528));
				break;
			default:
				break;
			}
			w[i * cols + j] = b;
		}
	}
}

static inline const char *kq_dist_name(enum kq_dist d)
{
	static const char *const n[KQ_DIST_COUNT] = {"normal", "wide", "fewbits", "sparse", "huge",
	                                               "all-tiny"};
	return (unsigned)d < KQ_DIST_COUNT ? n[d] : "?";
}

#endif
