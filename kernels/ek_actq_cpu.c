/* ek_actq_cpu.c — CPU twins of ek_actq.cu: the input-activation quantizers
 * (NVFP4 per 16 with a static global scale, FP8 dynamic per token) as vLLM
 * applies them before a quantized Linear. The rule is ek_actq_rule.h. */
#include "kernels/ek_cpu_int.h"
#include "kernels/ek_actq_rule.h"

void ek_actq_nvfp4_cpu(const float *x, int ldx, float *y, int ldy, int T, int cols, float gs)
{
	for (int t = 0; t < T; t++) {
		const float *xr = x + (size_t)t * ldx;
		float *yr = y + (size_t)t * ldy;
		for (int g = 0; g + 16 <= cols; g += 16) {
			float a = 0.0f;
			for (int i = 0; i < 16; i++) {
				float v = fabsf(xr[g + i]);
				a = v > a ? v : a;
			}
			float s = ek_actq_nv_scale(a, gs);
			float inv = ek_actq_nv_inv(s, gs), deq = ek_actq_nv_deq(s, gs);
			for (int i = 0; i < 16; i++)
				yr[g + i] = ek_actq_nv_elem(xr[g + i], inv, deq);
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
