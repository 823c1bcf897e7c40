/* ek_actq.cu — the input-activation quantizers of W4A4 / FP8-dynamic
 * Linears (ek.h: ek_actq_nvfp4, ek_actq_fp8): the rule of ek_actq_rule.h
 * with _rn operations, so the bits of the CPU twin (ek_actq_cpu.c).
 * NVFP4: one thread per group of 16 inputs. FP8: one block per token, a
 * max-reduction, then every input of the token. Memory-light, plain. */
#include "kernels/ek_dev.cuh"
#include "kernels/ek_actq_rule.h"

#include <errno.h>

__global__ void k_actq_nvfp4(const float *x, int ldx, float *y, int ldy, int groups, size_t total,
                             float gs)
{
	pdl_start();
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t t = i / groups, g = i % groups;
		const float *xr = x + t * ldx + g * 16;
		float *yr = y + t * ldy + g * 16;
		float v[16], a = 0.0f;
#pragma unroll
		for (int j = 0; j < 16; j++) {
			v[j] = xr[j];
			a = fmaxf(a, fabsf(v[j]));
		}
		float s = ek_actq_nv_scale(a, gs);
		float inv = ek_actq_nv_inv(s, gs), deq = ek_actq_nv_deq(s, gs);
#pragma unroll
		for (int j = 0; j < 16; j++)
			yr[j] = ek_actq_nv_elem(v[j], inv, deq);
	}
}

extern "C" int ek_actq_nvfp4(struct ek_dev *d, const float *x, int ldx, float *y, int ldy, int T,
                             int cols, float gs)
{
	if (T < 0 || cols < 0 || cols % 16 || !(gs > 0.0f))
		return ek_fail(d, -EINVAL, "actq_nvfp4: T %d, cols %d (a multiple of 16), gs %g", T, cols,
		               (double)gs);
	size_t total = (size_t)T * (cols / 16);
	if (!total)
		return 0;
	size_t b = (total + 127) / 128, cap = (size_t)d->sms * 16;
	ek_launch(d, k_actq_nvfp4, dim3((unsigned)(b > cap ? cap : b)), dim3(128), 0, x, ldx, y, ldy,
	          cols / 16, total, gs);
	return ek_launched(d, "actq_nvfp4");
}

__global__ void k_actq_fp8(const float *x, int ldx, float *y, int ldy, int cols)
{
	__shared__ float red[256];
	pdl_start();
	const float *xr = x + (size_t)blockIdx.x * ldx;
	float *yr = y + (size_t)blockIdx.x * ldy;
	float a = 0.0f;
	for (int i = threadIdx.x; i < cols; i += blockDim.x)
		a = fmaxf(a, fabsf(xr[i]));
	red[threadIdx.x] = a;
	__syncthreads();
	for (int w = blockDim.x / 2; w > 0; w /= 2) {
		if ((int)threadIdx.x < w)
			red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + w]);
		__syncthreads();
	}
	float s = ek_actq_fp8_scale(red[0]);
	for (int i = threadIdx.x; i < cols; i += blockDim.x)
		yr[i] = ek_actq_fp8_elem(xr[i], s);
}

extern "C" int ek_actq_fp8(struct ek_dev *d, const float *x, int ldx, float *y, int ldy, int T,
                           int cols)
{
	if (T < 0 || cols < 0)
		return ek_fail(d, -EINVAL, "actq_fp8: T %d, cols %d", T, cols);
	if (!T || !cols)
		return 0;
	ek_launch(d, k_actq_fp8, dim3(T), dim3(256), 0, x, ldx, y, ldy, cols);
	return ek_launched(d, "actq_fp8");
}
