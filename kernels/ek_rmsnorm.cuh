/* ek_rmsnorm.cuh — the RMSNorm kernel (one block of 256 threads per token;
 * rms_rinv and rms_val of ek_reduce.cuh, shared with the fused GEMVs).
 * Internal to kernels/ (ek_ops.cu) and to tests/kernels/test_ek_gemv_simt.cpp.
 * Needs ek_reduce.cuh and pdl_start, defined before it is included. */
#ifndef RQ_KERNELS_EK_RMSNORM_CUH
#define RQ_KERNELS_EK_RMSNORM_CUH

__global__ __launch_bounds__(256) void k_rmsnorm(float *out, int ldo, const float *x, int ldx,
                                                 const float *w, int n, float eps)
{
	__shared__ float sh[33];
	pdl_start();
	const float *xt = x + (size_t)blockIdx.x * ldx;
	float *o = out + (size_t)blockIdx.x * ldo;
	float r = rms_rinv(xt, n, eps, sh);       /* the fused GEMVs' too (ek_gemv.cu) */
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		o[i] = rms_val(w[i], xt[i], r);
}

#endif
