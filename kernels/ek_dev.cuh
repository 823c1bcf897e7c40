/* ek_dev.cuh — what the engine kernels' .cu files share (nvcc only): the
 * device context, error plumbing, launch helper and small device functions.
 * Internal to kernels/. */
#ifndef RQ_EK_DEV_CUH
#define RQ_EK_DEV_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "kernels/ek.h"

struct ek_blas;                /* dlopened cuBLAS (ek_rt.cu) */

/* Invariant: st is the only stream ops use; ws is device scratch of ws_bytes
 * that ops may use between their own kernels (grown by ek_ws outside of a
 * capture); hbuf is pinned host scratch of hbuf_bytes (prefill grouping). */
struct ek_dev {
	int dev;                   /* CUDA ordinal */
	int cc, sms;
	size_t l2, smem_optin;     /* bytes */
	double peak_gbs;
	char name[256];
	cudaStream_t st;
	cudaEvent_t ev[8];         /* ek_mark slots */
	cudaEvent_t t0, t1;        /* ek_time_* */
	int capturing;
	int pdl;                   /* launches carry the PDL attribute (ek_rt.cu: the rule) */
	int pdl_graph;             /* ... also while capturing (programmatic graph edges work) */
	int pdl_ok, pdl_graph_ok;  /* what ek_open's probe found (ek_set_pdl may not exceed it) */
	int cap_pdl;               /* the capture under way records PDL launches */
	unsigned long long launches;   /* kernels launched or captured through ek_launch */
	char pdl_why[600];         /* why PDL is off ("" when on) */
	struct ek_blas *blas;      /* NULL without cuBLAS */
	void *ws;
	size_t ws_bytes;
	void *hbuf;
	size_t hbuf_bytes;
	char err[512];
};

int ek_fail(struct ek_dev *d, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* -EIO with the CUDA error of a failed call or launch (cudaGetLastError). */
int ek_cuda(struct ek_dev *d, cudaError_t e, const char *what);
int ek_launched(struct ek_dev *d, const char *what);
/* Device scratch of at least n bytes; NULL (and ek_error) on failure or
 * when it would have to grow during a capture. */
void *ek_ws(struct ek_dev *d, size_t n);
void *ek_hbuf(struct ek_dev *d, size_t n);
/* BF16 GEMM through cuBLAS when loaded: 1 done, 0 not available, <0 error. */
int ek_blas_gemm(struct ek_dev *d, const uint16_t *w, int rows, int cols, const uint16_t *xb,
                 float *y, int ldy, int T, int acc);
void ek_blas_close(struct ek_dev *d);
void ek_blas_open(struct ek_dev *d);

#include "kernels/ek_gv_modes.h"       /* GV_PLAIN, GV_GU, GV_DOWN */
int ek_gv(struct ek_dev *d, int mode, const struct ek_w *A, const struct ek_w *B, const int *ids,
          int k, const float *x, int ldx, float *y, int ldy, int T, int acc, const float *wts,
          float scale, float *out, int ldo, int *cnt);
/* Rows per block of the GEMV kernels (row blocks counted by GV_DOWN's cnt). */
int ek_gv_rows_per_block(int kind);

/* Tile GEMM (ek_gemm.cu): y[m] (+)= W_e · x[gather ? gather[m] : m] for
 * output rows m; plain (tiles NULL: expert 0, rows 0..M) or grouped by
 * expert (tiles: ntiles × {expert, m0, m1}, m1 - m0 <= 64). BF16 and NVFP4
 * round x to BF16; FP8 and INT weights are passed on to ek_gm_q. */
int ek_gm(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx, const int *gather,
          float *y, int ldy, int M, int acc, const int *tiles, int ntiles);
/* ek_gm for FP8 / INT8 / INT4 weights (ek_wq.cu): fp32 x, not rounded. */
int ek_gm_q(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx, const int *gather,
            float *y, int ldy, int M, int acc, const int *tiles, int ntiles);
#define EK_GM_BM 64

/* Launch with the device's options: the PDL attribute when d->pdl (and,
 * while capturing, d->pdl_graph). A launch refused with the attribute is
 * retried once without it and PDL is turned off for the device (ek_rt.cu,
 * ek_pdl_refused). Every kernel launched here obeys the rule at the top of
 * ek_rt.cu. Counts launches in d->launches. */
void ek_pdl_refused(struct ek_dev *d, cudaError_t e);
extern unsigned long long ek_launches_all;   /* every device's launches (ek_launches(NULL)) */
template <typename... KArgs, typename... Args>
static inline cudaError_t ek_launch(struct ek_dev *d, void (*kern)(KArgs...), dim3 grid,
                                    dim3 block, size_t smem, Args... args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[1];
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = d->st;
	d->launches++;
	__atomic_add_fetch(&ek_launches_all, 1ull, __ATOMIC_RELAXED);
	int pdl = d->pdl && (!d->capturing || d->pdl_graph);
	if (pdl) {
		at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[0].val.programmaticStreamSerializationAllowed = 1;
		cfg.attrs = at;
		cfg.numAttrs = 1;
	}
	cudaError_t e = cudaLaunchKernelEx(&cfg, kern, ((KArgs)args)...);
	if (e != cudaSuccess && pdl) {
		ek_pdl_refused(d, e);
		cfg.attrs = NULL;
		cfg.numAttrs = 0;
		e = cudaLaunchKernelEx(&cfg, kern, ((KArgs)args)...);
	}
	return e;
}

/* --------------------------------------------------------- device side */

/* The block's dynamic shared memory as `type name[]` (the SIMT emulation of
 * the tests defines its own). */
#define EK_DYN_SMEM(type, name) extern __shared__ __align__(16) type name[]

/* Programmatic dependent launch (the rule: top of ek_rt.cu). pdl_wait:
 * wait until every kernel before this one on the stream has completed and
 * its writes are visible; pdl_trigger: let the next kernel start launching
 * (it waits for this whole grid before touching memory, so where this is
 * called only affects scheduling); pdl_start: both, trigger first. No-ops
 * below sm_90 and in launches without the attribute. */
static __device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

static __device__ __forceinline__ void pdl_start()
{
	pdl_trigger();
	pdl_wait();
}

/* A hint that the line at p (weights: never written during a pass) will be
 * read soon; returns nothing, so it may precede pdl_wait(). */
static __device__ __forceinline__ void prefetch_l2(const void *p)
{
	asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

static __device__ __forceinline__ float bf16f(uint32_t b)
{
	return __uint_as_float(b << 16);
}

/* Streaming loads of weights: read once, kept out of L1. */
static __device__ __forceinline__ uint4 ld_stream16(const void *p)
{
	uint4 v;
	asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
	             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
	return v;
}

static __device__ __forceinline__ uint2 ld_stream8(const void *p)
{
	uint2 v;
	asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];"
	             : "=r"(v.x), "=r"(v.y) : "l"(p));
	return v;
}

#include "kernels/ek_reduce.cuh"       /* warp/block reductions, RMSNorm arithmetic */

static __device__ __forceinline__ float dsilu(float x)
{
	return x / (1.0f + expf(-x));
}

static __device__ __forceinline__ float dsoftplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}

#include "kernels/ek_deq.cuh"          /* E2M1 / E4M3 bit tricks, host-tested */

/* Bytes 0 and 1 of w (E4M3) as fp16x2, exactly: the GPU's conversion where it
 * has one (cc >= 8.9: one instruction), else ek_deq.cuh's bits times 2^8
 * (exact: |e4m3| <= 448; the software conversion of cuda_fp8.h is longer). */
static __device__ __forceinline__ __half2 e4m3x2h(uint32_t w)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
	uint32_t h = ek_e4m3x2_h2(w);
	return __hmul2(*(__half2 *)&h, __float2half2_rn(256.0f));
#else
	return __half2(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xFFFFu), __NV_E4M3));
#endif
}

static __device__ __forceinline__ float e4m3f(uint32_t b)
{
	return __low2float(e4m3x2h(b & 0xFFu));
}

/* The NVFP4 GEMV's activation exponent for max |x| = amax (ek_cpu.c act_exp). */
static __device__ __forceinline__ int act_exp(float amax)
{
	if (!(amax > 0.0f) || isinf(amax))
		return 0;
	int e = 14 - ilogbf(amax);
	return e < -64 ? -64 : e > 64 ? 64 : e;
}

#endif
