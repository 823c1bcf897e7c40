/* gemv_host.h — what kernels/ek_dev.cuh gives the GEMV kernels on a GPU,
 * for their sources run on the host under the SIMT emulation
 * (test_ek_gemv_simt.cpp, test_ek_wq_simt.cpp). Include after simt.h, before
 * the kernel headers. */
#ifndef RQ_TESTS_KERNELS_EMUL_GEMV_HOST_H
#define RQ_TESTS_KERNELS_EMUL_GEMV_HOST_H

#include <math.h>
#include <string.h>

static inline void pdl_start() {}
static inline void prefetch_l2(const void *p) { (void)p; }
static inline uint4 ld_stream16(const void *p)
{
	uint4 v;
	memcpy(&v, p, 16);
	return v;
}
static inline float bf16f(uint32_t b) { return __uint_as_float(b << 16); }
static inline float dsilu(float x) { return x / (1.0f + expf(-x)); }
template <typename T>
static inline T __ldcg(const T *p)
{
	return *p;
}
static inline int atomicAdd(int *p, int v)
{
	int o = *p;
	*p += v;
	return o;
}
static inline void __threadfence() {}
static float emu_dyn[48 * 1024 / 4];       /* the block's dynamic shared memory */
#define EK_DYN_SMEM(type, name) type *name = (type *)emu_dyn

#endif
