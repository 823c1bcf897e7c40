/* kquant_kern.cu — the quantizer's kernels and their launchers (the CUDA
 * half of kquant.cu and kq_obs.cu). The arithmetic is quant/recipe.h (and
 * kq_obs.cuh's, the MSE search); tests/kernels/kq_emul.cpp replaces this file
 * by host loops to test the pipelines on the CPU, and test-ptx-bitexact reads
 * its PTX. */
#include "kernels/kquant_int.h"
#include "kernels/kq_obs.cuh"
#include "quant/recipe.h"
extern "C" {
#include "quant/observer_int.h"   /* rq_obs_q */
}

/* Max of the eight |BF16| in v, as two packed 16-bit maxima. */
static __device__ __forceinline__ uint32_t vabsmax(uint4 v)
{
	const uint32_t m = 0x7FFF7FFFu;
	return __vmaxu2(__vmaxu2(v.x & m, v.y & m), __vmaxu2(v.z & m, v.w & m));
}

/* amax[0] = max(amax[0], max |w| bits over in[0..n)), n uint4 = 8 weights each. */
__global__ void __launch_bounds__(256) k_absmax(const uint4 *__restrict__ in, size_t n,
                                                uint32_t *__restrict__ amax)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint32_t m = 0;
	for (; i + 3 * stride < n; i += 4 * stride) {      /* four loads in flight */
		uint4 a = in[i], b = in[i + stride], c = in[i + 2 * stride], d = in[i + 3 * stride];
		m = __vmaxu2(m, __vmaxu2(__vmaxu2(vabsmax(a), vabsmax(b)),
		                         __vmaxu2(vabsmax(c), vabsmax(d))));
	}
	for (; i < n; i += stride)
		m = __vmaxu2(m, vabsmax(in[i]));
	m = max(m & 0xFFFFu, m >> 16);
	m = __reduce_max_sync(0xFFFFFFFFu, m);
	__shared__ uint32_t wmax[8];
	if ((threadIdx.x & 31) == 0)
		wmax[threadIdx.x >> 5] = m;
	__syncthreads();
	if (threadIdx.x < 32) {
		m = threadIdx.x < (blockDim.x >> 5) ? wmax[threadIdx.x] : 0;
		m = __reduce_max_sync(0xFFFFFFFFu, m);
		if (threadIdx.x == 0 && m)
			atomicMax(amax, m);
	}
}

/* res = {GS(max amax), first bad module, max amax}; one thread. */
__global__ void k_scale(int r, const uint32_t *__restrict__ amax, int n,
                        struct kq_res *__restrict__ res)
{
	uint32_t m = 0;
	int bad = -1;
	for (int i = 0; i < n; i++) {
		uint32_t a = amax[i];
		if (a >= RQ_BF16_INF && bad < 0)
			bad = i;
		m = a > m ? a : m;
	}
	res->gs = rq_recipe_gs(r, rq_bf16f(m));
	res->bad = bad;
	res->amax = m;
}

/* One thread per group: in[g] (32 B) -> packed[g] (8 B), scales[g]. */
template <int R>
__global__ void __launch_bounds__(256) k_quant(const uint4 *__restrict__ in, size_t groups,
                                               float gs, uint2 *__restrict__ packed,
                                               uint8_t *__restrict__ scales)
{
	size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (g >= groups)
		return;
	uint4 a = in[2 * g], b = in[2 * g + 1];
	uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
	uint32_t w[16];
	RQ_UNROLL
	for (int j = 0; j < 8; j++) {
		w[2 * j] = words[j] & 0xFFFFu;       /* little endian: column 2j is the low half */
		w[2 * j + 1] = words[j] >> 16;
	}
	uint32_t pk[2];
	uint32_t sc = rq_quant_group(R, gs, w, pk);
	packed[g] = make_uint2(pk[0], pk[1]);
	scales[g] = (uint8_t)sc;
}

/* gs[i] = GS(amax[i]) (the test hook kq_global_scales). */
__global__ void k_gs_batch(int r, const uint16_t *__restrict__ amax, size_t n,
                           float *__restrict__ gs)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		gs[i] = rq_recipe_gs(r, rq_bf16f(amax[i]));
}

void kq_launch_absmax(const struct kq_ctx *k, const uint8_t *din, size_t groups,
                      uint32_t *amax, cudaStream_t s)
{
	size_t n = groups * 2;                 /* uint4 per group */
	size_t blocks = (n + 255) / 256;
	size_t cap = (size_t)k->sms * 8;
	if (blocks > cap)
		blocks = cap;
	if (blocks)
		k_absmax<<<(unsigned)blocks, 256, 0, s>>>((const uint4 *)din, n, amax);
}

void kq_launch_scale(enum rq_recipe r, const uint32_t *amax, int n, struct kq_res *res,
                     cudaStream_t s)
{
	k_scale<<<1, 1, 0, s>>>((int)r, amax, n, res);
}

void kq_launch_quant(enum rq_recipe r, const uint8_t *din, size_t groups, float gs,
                     uint8_t *dpk, uint8_t *dsc, cudaStream_t s)
{
	if (!groups)
		return;
	unsigned blocks = (unsigned)((groups + 255) / 256);
	const uint4 *in = (const uint4 *)din;
	uint2 *pk = (uint2 *)dpk;
	if (r == RQ_RECIPE_BF16)
		k_quant<RQ_R_BF16><<<blocks, 256, 0, s>>>(in, groups, gs, pk, dsc);
	else if (r == RQ_RECIPE_FP32DIV)
		k_quant<RQ_R_FP32DIV><<<blocks, 256, 0, s>>>(in, groups, gs, pk, dsc);
	else
		k_quant<RQ_R_FP32><<<blocks, 256, 0, s>>>(in, groups, gs, pk, dsc);
}

void kq_launch_gs_batch(enum rq_recipe r, const uint16_t *amax, size_t n, float *gs)
{
	k_gs_batch<<<(unsigned)((n + 255) / 256), 256>>>((int)r, amax, n, gs);
}

void kq_launch_obs(int kind, int steps, float expand, const float *P, const float *T,
                   const uint16_t *dw, size_t ng, unsigned group, uint8_t *db, uint32_t *dm,
                   cudaStream_t s)
{
	if (!ng)
		return;
	k_obs_search<<<(unsigned)((ng + 127) / 128), 128, 0, s>>>(kind, steps, expand,
	                                                          rq_obs_q(kind), P, T, dw,
	                                                          (unsigned long long)ng, group,
	                                                          db, dm);
}

/* cudaSuccess when this build's kernels load on the current device. */
cudaError_t kq_kernels_loadable(void)
{
	cudaFuncAttributes fa;
	return cudaFuncGetAttributes(&fa, k_quant<RQ_R_FP32>);
}
