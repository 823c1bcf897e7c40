/* ek_reduce.cuh — warp and block reductions and the RMSNorm arithmetic of
 * the engine kernels (internal to kernels/: included by ek_dev.cuh; also by
 * tests/kernels/test_ek_gemv_simt.cpp, which runs the kernels that use them
 * on the host under tests/kernels/emul/simt.h).
 *
 * Needs, defined before it is included: __shfl_xor_sync, __syncthreads,
 * threadIdx, blockDim, fmaxf, fmaf, sqrtf, __fmul_rn, INFINITY. */
#ifndef RQ_KERNELS_EK_REDUCE_CUH
#define RQ_KERNELS_EK_REDUCE_CUH

static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Block-wide sum / max (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. Uses 33 floats of shared memory at `sh`. */
static __device__ __forceinline__ float block_sum(float v, float *sh)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads();
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	if (w == 0) {
		float s = lane < nw ? sh[lane] : 0.0f;
		s = warp_sum(s);
		if (lane == 0)
			sh[32] = s;
	}
	__syncthreads();
	return sh[32];
}

static __device__ __forceinline__ float block_max(float v, float *sh)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	if (w == 0) {
		float s = lane < nw ? sh[lane] : -INFINITY;
		s = warp_max(s);
		if (lane == 0)
			sh[32] = s;
	}
	__syncthreads();
	return sh[32];
}

/* RMSNorm, shared by k_rmsnorm and the fused GEMVs so that both compute the
 * same bits: 1 / rms of xt[0..n) (thread i sums i, i + blockDim, ... with
 * fmaf, then block_sum; every thread gets it; 33 floats at sh), and one
 * normalized element w · (x · r), two rounded products. */
static __device__ __forceinline__ float rms_rinv(const float *xt, int n, float eps, float *sh)
{
	float ss = 0.0f;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		ss = fmaf(xt[i], xt[i], ss);
	ss = block_sum(ss, sh);
	return 1.0f / sqrtf(ss / (float)n + eps);
}

static __device__ __forceinline__ float rms_val(float w, float x, float r)
{
	return __fmul_rn(w, __fmul_rn(x, r));
}

#endif
