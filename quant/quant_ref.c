/* quant_ref.c — the scalar oracle of SPEC.md §3: absmax, global scale,
 * quantization and dequantization written as literally as the spec reads,
 * with the recipe's rule (GS and S6 of each variant, the clamp) taken from
 * recipe.h and the number formats encoded by table search and exact
 * distances (convert.c, e2m1_encode_ref). Speed does not matter here;
 * quant_fast.c and the CUDA quantizer must produce the same bytes.
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it.
 *
 *   observer.c       the MSE weight observers (observer.h): ranges, then the bytes
 *   observer_act.c   the MSE input observer of one calibration batch (W4A4's inputs)
 *   observer_fast.c  their search, fast: observer_ref.c's results, faster
 *   observer_g16.c   that search for NVFP4's groups of 16 on AVX-512: lower bounds first
 *   observer_ref.c   their scalar oracle, pow table and torch's order of additions
 *   scheme.c       the data-free compressed-tensors schemes (scheme.h)
 *   scheme_nv.c    NVFP4A16 from F16 and F32 weights
 *   scheme_kern.c  the row kernels of FP8_DYNAMIC, W8A16 and W4A16
 *   quant_fast.c   the fast CPU quantizer: quant_ref.c's bytes, faster
 *   quant_ref.c    the scalar oracle of SPEC.md section 3
 *   convert.c      recipe names, scalar number-format conversions
 */
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

/* GS(a) is recipe.h's: the one definition the CPU paths and the CUDA
 * quantizer share (tests/kernels/test_kq_math.c checks it against its own
 * transcription of SPEC.md §3 for every BF16 amax). */
float rq_global_scale(enum rq_recipe r, float amax)
{
	return rq_recipe_gs((int)r, amax);
}

/* Nearest magnitude index on the E2M1 grid, ties to the even index; the
 * distances below are exact (Sterbenz within each interval). */
static uint8_t e2m1_encode_ref(float q)
{
	const float *mag = rq_e2m1_mag;
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
		/* the rule (S6, multiply, clamp) is recipe.h's; the E4M3
		 * encoding and decoding below are convert.c's literal ones */
		uint8_t sc = rq_f32_to_e4m3(rq_scale_value((int)r, g, gs));
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
