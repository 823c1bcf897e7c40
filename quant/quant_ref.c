/* quant_ref.c — the scalar oracle of SPEC.md §3: absmax, global scale,
 * quantization and dequantization written as literally as the spec reads.
 * Speed does not matter here; quant_fast.c must produce the same bytes. */
#include "quant/quant.h"
#include "quant/quant_int.h"

#include <errno.h>
#include <math.h>

int rq_absmax_bf16(const uint16_t *w, size_t n, uint16_t *amax, size_t *bad_index)
{
	uint16_t m = 0;
	for (size_t i = 0; i < n; i++) {
		uint16_t a = w[i] & 0x7FFF;            /* |w| as bits */
		if (a >= 0x7F80) {                     /* exponent all ones: Inf or NaN */
			if (bad_index)
				*bad_index = i;
			return -EDOM;
		}
		if (a > m)                             /* non-negative floats order as integers */
			m = a;
	}
	*amax = m;
	return 0;
}

float rq_global_scale(enum rq_recipe r, float amax)
{
	const float tiny = 0x1p-126f;
	if (isnan(amax))                           /* torch: NaN gs -> 1.0 */
		return 1.0f;
	float a = amax < tiny ? tiny : amax;      /* NaN passes through, as torch.clamp */
	float gs;
	switch (r) {
	case RQ_RECIPE_BF16: {
		/* torch on a BF16 tensor: 2688 / t == t.reciprocal() * 2688, each
		 * op computed in binary32 and rounded to BF16 */
		float inv = rq_round_bf16(1.0f / a);
		gs = rq_round_bf16(inv * RQ_GS_NUM);
		break;
	}
	case RQ_RECIPE_FP32DIV:
		gs = RQ_GS_NUM / a;
		break;
	case RQ_RECIPE_FP32:
	default: {
		float inv = 1.0f / a;
		gs = inv * RQ_GS_NUM;
		break;
	}
	}
	if (isinf(gs) || isnan(gs))
		gs = 1.0f;
	return gs;
}

/* Nearest magnitude index on the E2M1 grid, ties to the even index; the
 * distances below are exact (Sterbenz within each interval). */
static uint8_t e2m1_encode_ref(float q)
{
	static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
	if (q < -6.0f)
		q = -6.0f;
	if (q > 6.0f)
		q = 6.0f;
	float a = fabsf(q);
	int k = 0;
	while (k < 7 && mag[k + 1] <= a)
		k++;
	int idx = k;
	if (k < 7 && a != mag[k]) {
		float dlo = a - mag[k], dhi = mag[k + 1] - a;
		if (dhi < dlo || (dhi == dlo && ((k + 1) % 2 == 0)))
			idx = k + 1;
	}
	return (uint8_t)(idx | (q < 0.0f ? 8 : 0));
}

void rq_quantize_row_ref(enum rq_recipe r, const uint16_t *w, size_t cols, float gs,
                         uint8_t *packed, uint8_t *scales)
{
	for (size_t g0 = 0; g0 < cols; g0 += 16) {
		float g = 0.0f;
		for (int j = 0; j < 16; j++) {
			float a = fabsf(rq_bf16_to_f32(w[g0 + j]));
			if (a > g)
				g = a;
		}
		float s6 = g / 6.0f;
		if (r == RQ_RECIPE_BF16)
			s6 = rq_bf16_to_f32(rq_f32_to_bf16(s6));
		float s = gs * s6;
		if (s > RQ_E4M3_MAX)
			s = RQ_E4M3_MAX;
		uint8_t sc = rq_f32_to_e4m3(s);
		if (sc == 0)
			sc = RQ_E4M3_EPS_CODE;
		scales[g0 / 16] = sc;
		float seff = rq_e4m3_to_f32(sc) / gs;
		for (int j = 0; j < 16; j += 2) {
			uint8_t lo = e2m1_encode_ref(rq_bf16_to_f32(w[g0 + j]) / seff);
			uint8_t hi = e2m1_encode_ref(rq_bf16_to_f32(w[g0 + j + 1]) / seff);
			packed[(g0 + j) / 2] = (uint8_t)(lo | (hi << 4));
		}
	}
}

void rq_quantize_ref(enum rq_recipe r, const uint16_t *w, size_t rows, size_t cols, float gs,
                     uint8_t *packed, uint8_t *scales)
{
	for (size_t i = 0; i < rows; i++)
		rq_quantize_row_ref(r, w + i * cols, cols, gs, packed + i * (cols / 2),
		                    scales + i * (cols / 16));
}

void rq_dequant_row(const uint8_t *packed_row, const uint8_t *scales_row, float gs,
                    size_t cols, float *out)
{
	for (size_t c = 0; c < cols; c++) {
		uint8_t code = (packed_row[c / 2] >> ((c & 1) * 4)) & 0xF;
		out[c] = rq_e2m1_to_f32(code) * rq_e4m3_to_f32(scales_row[c / 16]) / gs;
	}
}
