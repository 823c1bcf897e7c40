/* ek_actq_cpu.c — CPU twins of ek_actq.cu: the input-activation quantizers
 * (NVFP4 per 16 with a static global scale, FP8 dynamic per token) as vLLM
 * applies them before a quantized Linear. The rule is ek_actq_rule.h. */
#include "kernels/ek_cpu_int.h"
#include "kernels/ek_actq_rule.h"

/* The E2M1 magnitudes by index: ek_actq_e2m1's values (exact), looked up
 * instead of computed, the sign bit set on the value as its -v does (so
 * -0.0 for code 8): the same bits as ek_actq_nv_elem, without its branches
 * (prefill quantizes every input of every Linear). */
static const float e2m1_mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

void ek_actq_nvfp4_cpu(const float *x, int ldx, float *y, int ldy, int T, int cols, float gs)
{
	for (int t = 0; t < T; t++) {
		const float *xr = x + (size_t)t * ldx;
		float *yr = y + (size_t)t * ldy;
		for (int g = 0; g + 16 <= cols; g += 16) {
			float a = 0.0f, v[16];
			for (int i = 0; i < 16; i++) {
				v[i] = xr[g + i];
				float m = fabsf(v[i]);
				a = m > a ? m : a;
			}
			float s = ek_actq_nv_scale(a, gs);
			float inv = ek_actq_nv_inv(s, gs), deq = ek_actq_nv_deq(s, gs);
			for (int i = 0; i < 16; i++) {
				uint32_t c = rq_e2m1_code(RQ_MUL(v[i], inv));
				float q = rq_u2f(rq_f2u(e2m1_mag[c & 7u]) | ((c & 8u) << 28));
				yr[g + i] = RQ_MUL(q, deq);
			}
		}
	}
}

void ek_actq_fp8_cpu(const float *x, int ldx, float *y, int ldy, int T, int cols)
{
	for (int t = 0; t < T; t++) {
		const float *xr = x + (size_t)t * ldx;
		float *yr = y + (size_t)t * ldy;
		float a = 0.0f;
		for (int i = 0; i < cols; i++) {
			float v = fabsf(xr[i]);
			a = v > a ? v : a;
		}
		float s = ek_actq_fp8_scale(a);
		for (int i = 0; i < cols; i++)
			yr[i] = ek_actq_fp8_elem(xr[i], s);
	}
}
