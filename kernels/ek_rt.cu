/* ek_rt.cu — the engine kernels' runtime: device context, memory, copies,
 * events, timing, CUDA graphs, programmatic dependent launch, the dlopened
 * cuBLAS (ek_blas_*), copy bandwidth, deterministic fills.
 *
 * kernels/ is one straight line: each file calls only the files below it
 * (ek_dev.cuh, ek_cpu_int.h and kquant_int.h declare what crosses). Without
 * CUDA the stubs stand in for the .cu files (meson.build's three lists).
 *
 *   quantizer kquant_stub.c    kquant.h without CUDA: -ENODEV, CPU fallback
 *             kquant_bench.cu  kq_bench: the quantizer's kernels vs copies
 *             kq_obs.cu        the MSE observers' search (kq_obs.cuh's kernel)
 *             kquant.cu        the GPU twin of quant/: jobs, slots, streams
 *             kquant_kern.cu   the quantizer's kernels and launchers
 *   ops       ek_moe.cu        the routed experts of a MoE block
 *             ek_gemm.cu       prefill matrix products (tile GEMM, cuBLAS)
 *             ek_gemv.cu       decode GEMVs, NVFP4 repack, fused RMSNorm
 *             ek_wq.cu         FP8/INT8/INT4 repack, GEMV and GEMM launches
 *             ek_ops.cu        RMSNorm, SwiGLU, add, embed, QK-norm+RoPE, router
 *             ek_actq.cu       input-activation quantizers (W4A4, FP8)
 *             ek_obs.cu        the calibration observer's reductions
 *             ek_attn.cu       causal GQA attention over the KV cache
 *   stubs     ek_stub.c        ek.h without CUDA: -ENODEV for every GPU op
 *             ek_stub_pdl.c    ... for PDL, launch counts, the fused norm
 *   runtime   ek_rt.cu         this file
 *   twins     ek_moe_cpu.c     CPU twins of the MoE ops and routers
 *             ek_gemv_cpu.c    of ek_gemv.cu and ek_gemm.cu
 *             ek_wq_cpu.c      of ek_wq.cu's repack; FP8/INT weight values
 *             ek_ops_cpu.c     of ek_ops.cu's elementwise ops, norms, fills
 *             ek_actq_cpu.c    of ek_actq.cu
 *             ek_obs_cpu.c     of ek_obs.cu
 *             ek_attn_cpu.c    of the attention ops
 *
 * One ek_dev per engine: a non-blocking stream that every op uses, eight
 * event slots for staging-buffer reuse, two timing events, grow-only scratch
 * (device ws, pinned hbuf) that may not grow while a graph is captured.
 *
 * Programmatic dependent launch (PDL). On by default where the device has
 * it: compute capability >= 9.0, a probe launch with the attribute works at
 * ek_open, and EK_PDL is not "0" (EK_PDL=0 turns it off; ek_set_pdl too).
 * Every kernel is launched through ek_launch (ek_dev.cuh), which then sets
 * cudaLaunchAttributeProgrammaticStreamSerialization: the kernel may be
 * scheduled while its predecessor on the stream is still running, as soon
 * as every block of the predecessor has executed griddepcontrol.launch_
 * dependents (pdl_trigger) or exited.
 *
 *   THE RULE. A kernel launched through ek_launch executes pdl_wait() (or
 *   pdl_start()) before its first read or write of any memory that another
 *   kernel or copy of the stream writes or reads: activations, outputs, KV
 *   caches, positions and tokens, work counters, scratch. Before it, only
 *   arithmetic on its arguments, shared-memory setup, and prefetch_l2 hints
 *   on weights (uploaded before any pass and never written during one; a
 *   prefetch returns no data, so it cannot observe a stale value).
 *   pdl_trigger may then be called anywhere: griddepcontrol.wait in the
 *   dependent waits for the whole predecessor grid to complete and flush,
 *   not for the trigger, so where a kernel triggers decides only when the
 *   next one is scheduled, never what it reads. Because every kernel waits,
 *   completion is transitive: kernel n + 2 waits for n + 1, which finished
 *   only after n had. A kernel that does not follow the rule must not be
 *   launched through ek_launch. Copies, memsets, events and other
 *   libraries' kernels (cuBLAS) are ordered by the stream as usual (a
 *   launch with the attribute after a non-kernel node gets a full
 *   dependency), and they never carry the attribute themselves.
 *
 *   Kernels checked against it (each calls pdl_start() as its first
 *   statement; tests/kernels/test_ek_pdl_rule.py checks every __global__ of
 *   kernels/ek_*.cu for that): k_pdl_probe, k_fill_bf16, k_fill_bytes
 *   (ek_rt.cu); k_gemv_bf16 (ek_gemv_bf16.cuh) and k_gemv_fp4, all modes
 *   including the fused RMSNorm, and k_repack (ek_gemv.cu; the plain-mode
 *   GEMVs prefetch their first weight lines into L2 before the wait);
 *   k_gemm, k_to_bf16 (ek_gemm.cu); k_rmsnorm (ek_rmsnorm.cuh), k_swiglu,
 *   k_add, k_embed, k_qk_rope_kv, k_route (ek_ops.cu);
 *   k_moe_combine (ek_moe.cu); k_attn_split, k_attn_merge (ek_attn_split.cuh),
 *   k_attn_prefill (ek_attn.cu).
 *   The arrival counters of GV_DOWN and attention are touched only after
 *   the wait, and every block of a grid is resident before its dependents
 *   can launch, so the last-block-combines patterns cannot starve.
 *
 * Graphs: captured PDL launches become programmatic edges (kernel node to
 * kernel node only, cudaGraphDependencyTypeProgrammatic; they need runtime
 * and driver >= 12.3). ek_open probes a capture of two PDL launches
 * (capture, instantiate, replay, result checked); if any step is refused,
 * captures launch without the attribute (pdl_graph = 0) while direct
 * launches keep it. A launch refused with the attribute is retried without
 * it and PDL is turned off (only for captures when capturing): the op
 * still runs, ek_pdl() and ek_pdl_status() say so. */
#include "kernels/ek_dev.cuh"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if __has_include(<cublas_v2.h>)
#include <cublas_v2.h>
#define EK_HAVE_CUBLAS 1
#endif

extern "C" {

int ek_compiled(void)
{
	return 1;
}

int ek_device_count(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n > 0 ? n : 0;
}

} /* extern "C" */

int ek_fail(struct ek_dev *d, int code, const char *fmt, ...)
{
	if (d) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(d->err, sizeof d->err, fmt, ap);
		va_end(ap);
	}
	return code;
}

int ek_cuda(struct ek_dev *d, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	cudaGetLastError();
	return ek_fail(d, e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO, "CUDA %s on device %d: %s",
	               what, d ? d->dev : -1, cudaGetErrorString(e));
}

int ek_launched(struct ek_dev *d, const char *what)
{
	return ek_cuda(d, cudaGetLastError(), what);
}

void *ek_ws(struct ek_dev *d, size_t n)
{
	if (n <= d->ws_bytes)
		return d->ws;
	if (d->capturing) {
		ek_fail(d, -EINVAL, "scratch of %zu bytes needed during a graph capture "
		        "(run the op once before capturing)", n);
		return NULL;
	}
	cudaStreamSynchronize(d->st);
	cudaFree(d->ws);
	d->ws = NULL;
	d->ws_bytes = 0;
	size_t want = n + n / 4;
	if (ek_cuda(d, cudaMalloc(&d->ws, want), "cudaMalloc (scratch)"))
		return NULL;
	d->ws_bytes = want;
	return d->ws;
}

void *ek_hbuf(struct ek_dev *d, size_t n)
{
	if (n <= d->hbuf_bytes)
		return d->hbuf;
	cudaStreamSynchronize(d->st);
	cudaFreeHost(d->hbuf);
	d->hbuf = NULL;
	d->hbuf_bytes = 0;
	size_t want = n + n / 4;
	if (ek_cuda(d, cudaHostAlloc(&d->hbuf, want, cudaHostAllocDefault), "cudaHostAlloc"))
		return NULL;
	d->hbuf_bytes = want;
	return d->hbuf;
}

/* ------------------------------------------------------------ PDL */

unsigned long long ek_launches_all;

__global__ void k_pdl_probe(int *p, int v)
{
	pdl_start();
	if (blockIdx.x == 0 && threadIdx.x == 0)
		*p = *p * 4 + v;
}

void ek_pdl_refused(struct ek_dev *d, cudaError_t e)
{
	cudaGetLastError();
	snprintf(d->pdl_why, sizeof d->pdl_why, "a launch with the PDL attribute was refused%s (%s)",
	         d->capturing ? " during a capture" : "", cudaGetErrorString(e));
	if (d->capturing)
		d->pdl_graph = d->pdl_graph_ok = 0;
	else
		d->pdl = d->pdl_graph = d->pdl_ok = d->pdl_graph_ok = 0;
}

/* Two dependent probe launches (64 blocks each, so the second can overlap
 * the first) directly, then as a captured graph; the value proves order. */
static int pdl_try(struct ek_dev *d, int *p, int graph)
{
	int h = 0, rc;
	cudaGraph_t g = NULL;
	cudaGraphExec_t x = NULL;
	if ((rc = ek_memset(d, p, 0, sizeof(int))))
		return rc;
	if (graph) {
		if ((rc = ek_cuda(d, cudaStreamBeginCapture(d->st, cudaStreamCaptureModeThreadLocal),
		                  "begin capture")))
			return rc;
		d->capturing = 1;
	}
	cudaError_t e1 = ek_launch(d, k_pdl_probe, dim3(64), dim3(32), 0, p, 1);
	cudaError_t e2 = ek_launch(d, k_pdl_probe, dim3(64), dim3(32), 0, p, 2);
	if (graph) {
		d->capturing = 0;
		cudaError_t e = cudaStreamEndCapture(d->st, &g);
		rc = ek_cuda(d, e1 != cudaSuccess ? e1 : e2 != cudaSuccess ? e2 : e, "capture of PDL launches");
		if (!rc)
			rc = ek_cuda(d, cudaGraphInstantiate(&x, g, 0), "instantiate with PDL edges");
		if (!rc)
			rc = ek_cuda(d, cudaGraphLaunch(x, d->st), "graph launch with PDL edges");
	} else {
		rc = ek_cuda(d, e1 != cudaSuccess ? e1 : e2, "launch with the PDL attribute");
	}
	if (!rc)
		rc = ek_cuda(d, cudaMemcpyAsync(&h, p, sizeof h, cudaMemcpyDeviceToHost, d->st), "copy");
	if (!rc)
		rc = ek_sync(d);
	if (x)
		cudaGraphExecDestroy(x);
	if (g)
		cudaGraphDestroy(g);
	if (!rc && h != 6)
		rc = ek_fail(d, -EIO, "PDL probe: got %d, not 6 (launches out of order)", h);
	return rc;
}

static void pdl_probe(struct ek_dev *d)
{
	const char *env = getenv("EK_PDL");
	int drv = 0, rt = 0;
	d->pdl = d->pdl_graph = 0;
	if (env && strcmp(env, "0") == 0) {
		snprintf(d->pdl_why, sizeof d->pdl_why, "off (EK_PDL=0)");
		return;
	}
	if (d->cc < 90) {
		snprintf(d->pdl_why, sizeof d->pdl_why, "off (compute capability %d.%d < 9.0)",
		         d->cc / 10, d->cc % 10);
		return;
	}
	int *p = NULL;
	if (ek_cuda(d, cudaMalloc(&p, sizeof(int)), "cudaMalloc")) {
		snprintf(d->pdl_why, sizeof d->pdl_why, "off (%s)", d->err);
		d->err[0] = 0;
		return;
	}
	d->pdl = d->pdl_graph = 1;
	d->pdl_why[0] = 0;
	if (pdl_try(d, p, 0)) {
		snprintf(d->pdl_why, sizeof d->pdl_why, "off (%s)", d->err);
		d->pdl = d->pdl_graph = 0;
	} else if (cudaDriverGetVersion(&drv) != cudaSuccess || cudaRuntimeGetVersion(&rt) != cudaSuccess ||
	           drv < 12030 || rt < 12030) {
		snprintf(d->pdl_why, sizeof d->pdl_why, "not in graphs (driver %d, runtime %d: need 12030)",
		         drv, rt);
		d->pdl_graph = 0;
	} else if (pdl_try(d, p, 1)) {
		snprintf(d->pdl_why, sizeof d->pdl_why, "not in graphs (%s)", d->err);
		d->pdl_graph = 0;
	}
	cudaGetLastError();
	cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
	if (cudaStreamIsCapturing(d->st, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone) {
		cudaGraph_t g = NULL;                     /* never leave the stream capturing */
		cudaStreamEndCapture(d->st, &g);
		if (g)
			cudaGraphDestroy(g);
	}
	cudaGetLastError();
	cudaFree(p);
	d->err[0] = 0;
	d->launches = 0;
	d->pdl_ok = d->pdl;
	d->pdl_graph_ok = d->pdl_graph;
}

/* ------------------------------------------------------------ cuBLAS */

#ifdef EK_HAVE_CUBLAS
struct ek_blas {
	void *lib;
	cublasHandle_t h;
	cublasStatus_t (*create)(cublasHandle_t *);
	cublasStatus_t (*destroy)(cublasHandle_t);
	cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
	cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
	                          const void *, const void *, cudaDataType, int, const void *,
	                          cudaDataType, int, const void *, void *, cudaDataType, int,
	                          cublasComputeType_t, cublasGemmAlgo_t);
};

void ek_blas_open(struct ek_dev *d)
{
	const char *env = getenv("EK_CUBLAS");
	if (env && env[0] == '0')
		return;
	static const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
	struct ek_blas *b = (struct ek_blas *)calloc(1, sizeof *b);
	if (!b)
		return;
	for (size_t i = 0; i < sizeof names / sizeof names[0] && !b->lib; i++)
		b->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!b->lib)
		goto fail;
	*(void **)&b->create = dlsym(b->lib, "cublasCreate_v2");
	*(void **)&b->destroy = dlsym(b->lib, "cublasDestroy_v2");
	*(void **)&b->set_stream = dlsym(b->lib, "cublasSetStream_v2");
	*(void **)&b->gemm_ex = dlsym(b->lib, "cublasGemmEx");
	if (!b->create || !b->destroy || !b->set_stream || !b->gemm_ex)
		goto fail;
	if (b->create(&b->h) != CUBLAS_STATUS_SUCCESS)
		goto fail;
	if (b->set_stream(b->h, d->st) != CUBLAS_STATUS_SUCCESS) {
		b->destroy(b->h);
		goto fail;
	}
	d->blas = b;
	return;
fail:
	if (b->lib)
		dlclose(b->lib);
	free(b);
}

void ek_blas_close(struct ek_dev *d)
{
	if (!d->blas)
		return;
	d->blas->destroy(d->blas->h);
	dlclose(d->blas->lib);
	free(d->blas);
	d->blas = NULL;
}

int ek_blas_gemm(struct ek_dev *d, const uint16_t *w, int rows, int cols, const uint16_t *xb,
                 float *y, int ldy, int T, int acc)
{
	if (!d->blas)
		return 0;
	float alpha = 1.0f, beta = acc ? 1.0f : 0.0f;
	cublasStatus_t s = d->blas->gemm_ex(d->blas->h, CUBLAS_OP_T, CUBLAS_OP_N, rows, T, cols, &alpha,
	                                    w, CUDA_R_16BF, cols, xb, CUDA_R_16BF, cols, &beta, y,
	                                    CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	if (s != CUBLAS_STATUS_SUCCESS)
		return ek_fail(d, -EIO, "cublasGemmEx [%d x %d] x %d tokens failed (status %d)", rows,
		               cols, T, (int)s);
	return 1;
}
#else
void ek_blas_open(struct ek_dev *d)
{
}

void ek_blas_close(struct ek_dev *d)
{
}

int ek_blas_gemm(struct ek_dev *d, const uint16_t *w, int rows, int cols, const uint16_t *xb,
                 float *y, int ldy, int T, int acc)
{
	return 0;
}
#endif

extern "C" {

int ek_pdl(const struct ek_dev *d)
{
	return d ? (d->pdl ? 1 + d->pdl_graph : 0) : 0;
}

const char *ek_pdl_status(const struct ek_dev *d)
{
	if (!d)
		return "no device";
	if (d->pdl)
		return d->pdl_graph ? "on (launches and graphs)" : d->pdl_why;
	return d->pdl_why[0] ? d->pdl_why : "off";
}

int ek_set_pdl(struct ek_dev *d, int mode)
{
	if (mode < 0 || mode > 2)
		return ek_fail(d, -EINVAL, "ek_set_pdl: mode %d (0 off, 1 launches, 2 also graphs)", mode);
	if ((mode >= 1 && !d->pdl_ok) || (mode == 2 && !d->pdl_graph_ok))
		return ek_fail(d, -ENODEV, "PDL mode %d is not available: %s", mode, ek_pdl_status(d));
	d->pdl = mode >= 1;
	d->pdl_graph = mode == 2;
	snprintf(d->pdl_why, sizeof d->pdl_why, "%s",
	         mode == 2 ? "" : mode == 1 ? "not in graphs (ek_set_pdl)" : "off (ek_set_pdl)");
	return 0;
}

unsigned long long ek_launches(const struct ek_dev *d)
{
	return d ? d->launches : __atomic_load_n(&ek_launches_all, __ATOMIC_RELAXED);
}

int ek_open(int index, struct ek_dev **out, char *msg, size_t msglen)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || index < 0 || index >= n) {
		if (msg && msglen)
			snprintf(msg, msglen, "no CUDA device %d (%s)", index,
			         e != cudaSuccess ? cudaGetErrorString(e) : "not present");
		cudaGetLastError();
		return -ENODEV;
	}
	struct ek_dev *d = (struct ek_dev *)calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	d->dev = index;
	cudaDeviceProp p;
	int rc = 0;
	if ((rc = ek_cuda(d, cudaSetDevice(index), "cudaSetDevice")) ||
	    (rc = ek_cuda(d, cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties")))
		goto fail;
	snprintf(d->name, sizeof d->name, "%s", p.name);
	d->cc = p.major * 10 + p.minor;
	d->sms = p.multiProcessorCount;
	d->l2 = (size_t)p.l2CacheSize;
	d->smem_optin = p.sharedMemPerBlockOptin;
	{
		int clk = 0, bus = 0;
		cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, index);
		cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, index);
		d->peak_gbs = (double)clk * 1e3 * (bus / 8) * 2 / 1e9;
	}
	if (d->cc < 80) {
		rc = ek_fail(d, -ENODEV, "%s has compute capability %d.%d; the engine kernels need 8.0+",
		             d->name, p.major, p.minor);
		goto fail;
	}
	if ((rc = ek_cuda(d, cudaStreamCreateWithFlags(&d->st, cudaStreamNonBlocking), "stream")))
		goto fail;
	for (int i = 0; i < 8; i++)
		if ((rc = ek_cuda(d, cudaEventCreateWithFlags(&d->ev[i], cudaEventDisableTiming), "event")))
			goto fail;
	if ((rc = ek_cuda(d, cudaEventCreate(&d->t0), "event")) ||
	    (rc = ek_cuda(d, cudaEventCreate(&d->t1), "event")))
		goto fail;
	pdl_probe(d);
	ek_blas_open(d);
	*out = d;
	return 0;
fail:
	if (msg && msglen)
		snprintf(msg, msglen, "%s", d->err);
	ek_close(d);
	return rc ? rc : -ENODEV;
}

void ek_close(struct ek_dev *d)
{
	if (!d)
		return;
	if (d->st)
		cudaStreamSynchronize(d->st);
	ek_blas_close(d);
	cudaFree(d->ws);
	cudaFreeHost(d->hbuf);
	for (int i = 0; i < 8; i++)
		if (d->ev[i])
			cudaEventDestroy(d->ev[i]);
	if (d->t0)
		cudaEventDestroy(d->t0);
	if (d->t1)
		cudaEventDestroy(d->t1);
	if (d->st)
		cudaStreamDestroy(d->st);
	cudaGetLastError();
	free(d);
}

const char *ek_error(const struct ek_dev *d)
{
	return d ? d->err : "no device";
}

int ek_info(struct ek_dev *d, struct ek_info *o)
{
	memset(o, 0, sizeof *o);
	snprintf(o->name, sizeof o->name, "%s", d->name);
	o->cc = d->cc;
	o->sms = d->sms;
	o->l2_bytes = d->l2;
	o->peak_gbs = d->peak_gbs;
	o->cublas = d->blas != NULL;
	return ek_cuda(d, cudaMemGetInfo(&o->mem_free, &o->mem_total), "cudaMemGetInfo");
}

void *ek_alloc(struct ek_dev *d, size_t bytes)
{
	void *p = NULL;
	if (ek_cuda(d, cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc"))
		return NULL;
	return p;
}

void ek_free(struct ek_dev *d, void *p)
{
	(void)d;
	if (p)
		cudaFree(p);
}

void *ek_host_alloc(struct ek_dev *d, size_t bytes)
{
	void *p = NULL;
	if (ek_cuda(d, cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault), "cudaHostAlloc"))
		return NULL;
	return p;
}

void ek_host_free(struct ek_dev *d, void *p)
{
	(void)d;
	if (p)
		cudaFreeHost(p);
}

int ek_h2d(struct ek_dev *d, void *dst, const void *src, size_t n)
{
	return ek_cuda(d, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, d->st), "copy to device");
}

int ek_d2h(struct ek_dev *d, void *dst, const void *src, size_t n)
{
	return ek_cuda(d, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, d->st), "copy to host");
}

int ek_d2d(struct ek_dev *d, void *dst, const void *src, size_t n)
{
	return ek_cuda(d, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, d->st), "copy on device");
}

int ek_memset(struct ek_dev *d, void *p, int byte, size_t n)
{
	return ek_cuda(d, cudaMemsetAsync(p, byte, n, d->st), "memset");
}

int ek_sync(struct ek_dev *d)
{
	return ek_cuda(d, cudaStreamSynchronize(d->st), "stream synchronize");
}

int ek_mark(struct ek_dev *d, int s)
{
	if (s < 0 || s >= 8)
		return ek_fail(d, -EINVAL, "event slot %d out of range", s);
	return ek_cuda(d, cudaEventRecord(d->ev[s], d->st), "event record");
}

int ek_wait_mark(struct ek_dev *d, int s)
{
	if (s < 0 || s >= 8)
		return ek_fail(d, -EINVAL, "event slot %d out of range", s);
	return ek_cuda(d, cudaEventSynchronize(d->ev[s]), "event synchronize");
}

int ek_time_begin(struct ek_dev *d)
{
	return ek_cuda(d, cudaEventRecord(d->t0, d->st), "event record");
}

int ek_time_end(struct ek_dev *d, double *seconds)
{
	float ms = 0;
	int rc;
	if ((rc = ek_cuda(d, cudaEventRecord(d->t1, d->st), "event record")) ||
	    (rc = ek_cuda(d, cudaEventSynchronize(d->t1), "event synchronize")) ||
	    (rc = ek_cuda(d, cudaEventElapsedTime(&ms, d->t0, d->t1), "event elapsed")))
		return rc;
	*seconds = ms / 1e3;
	return 0;
}

struct ek_graph {
	cudaGraph_t g;
	cudaGraphExec_t x;
};

int ek_capture_begin(struct ek_dev *d)
{
	int rc = ek_cuda(d, cudaStreamBeginCapture(d->st, cudaStreamCaptureModeThreadLocal),
	                 "begin capture");
	if (!rc) {
		d->capturing = 1;
		d->cap_pdl = d->pdl && d->pdl_graph;
	}
	return rc;
}

/* A capture that fails while it recorded PDL launches turns PDL off for
 * later captures (the caller may capture again; direct launches keep it). */
int ek_capture_end(struct ek_dev *d, struct ek_graph **out)
{
	struct ek_graph *g = (struct ek_graph *)calloc(1, sizeof *g);
	d->capturing = 0;
	int rc = ek_cuda(d, cudaStreamEndCapture(d->st, g ? &g->g : NULL), "end capture");
	if (!g)
		return ek_fail(d, -ENOMEM, "out of memory");
	if (!rc)
		rc = ek_cuda(d, cudaGraphInstantiate(&g->x, g->g, 0), "graph instantiate");
	if (rc) {
		if (d->cap_pdl && d->pdl_graph) {
			d->pdl_graph = d->pdl_graph_ok = 0;
			snprintf(d->pdl_why, sizeof d->pdl_why, "not in graphs (a capture with PDL edges "
			         "failed: %.400s)", d->err);
		}
		ek_graph_free(g);
		return rc;
	}
	*out = g;
	return 0;
}

int ek_graph_run(struct ek_dev *d, struct ek_graph *g)
{
	return ek_cuda(d, cudaGraphLaunch(g->x, d->st), "graph launch");
}

void ek_graph_free(struct ek_graph *g)
{
	if (!g)
		return;
	if (g->x)
		cudaGraphExecDestroy(g->x);
	if (g->g)
		cudaGraphDestroy(g->g);
	free(g);
}

int ek_copy_bw(struct ek_dev *d, size_t bytes, int reps, double *d2d, double *h2d)
{
	void *a = NULL, *b = NULL, *h = NULL;
	int rc;
	double best_d = 1e30, best_h = 1e30, s;
	if ((rc = ek_cuda(d, cudaMalloc(&a, bytes), "cudaMalloc")) ||
	    (rc = ek_cuda(d, cudaMalloc(&b, bytes), "cudaMalloc")) ||
	    (rc = ek_cuda(d, cudaHostAlloc(&h, bytes, cudaHostAllocDefault), "cudaHostAlloc")))
		goto out;
	memset(h, 1, bytes);
	if ((rc = ek_memset(d, a, 0, bytes)) || (rc = ek_d2d(d, b, a, bytes)) || (rc = ek_sync(d)))
		goto out;
	for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
		if ((rc = ek_time_begin(d)) || (rc = ek_d2d(d, b, a, bytes)) || (rc = ek_time_end(d, &s)))
			goto out;
		if (s < best_d)
			best_d = s;
		if ((rc = ek_time_begin(d)) || (rc = ek_h2d(d, a, h, bytes)) || (rc = ek_time_end(d, &s)))
			goto out;
		if (s < best_h)
			best_h = s;
	}
	if (d2d)
		*d2d = 2.0 * bytes / best_d;
	if (h2d)
		*h2d = bytes / best_h;
out:
	cudaFree(a);
	cudaFree(b);
	cudaFreeHost(h);
	return rc;
}

} /* extern "C" */

/* ------------------------------------------------------------ fills */

static __device__ __forceinline__ uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

__global__ void k_fill_bf16(uint16_t *p, size_t n, float amp, uint64_t seed)
{
	pdl_start();
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint64_t u = mix64(seed + (uint64_t)i * 0x9E3779B97F4A7C15ull);
		float r = (float)(u >> 40) * 5.9604644775390625e-08f;
		float v = __fmul_rn(__fsub_rn(__fmul_rn(2.0f, r), 1.0f), amp);
		__nv_bfloat16 b = __float2bfloat16_rn(v);
		p[i] = *(uint16_t *)&b;
	}
}

__global__ void k_fill_bytes(uint8_t *p, size_t n, int lo, int hi, uint64_t seed)
{
	uint64_t span = (uint64_t)(hi - lo + 1);
	pdl_start();
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint64_t u = mix64(seed + (uint64_t)i * 0x9E3779B97F4A7C15ull);
		p[i] = (uint8_t)(lo + (int)((u >> 32) % span));
	}
}

static unsigned fill_grid(struct ek_dev *d, size_t n)
{
	size_t b = (n + 255) / 256, cap = (size_t)d->sms * 16;
	return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

extern "C" {

int ek_fill_bf16(struct ek_dev *d, uint16_t *p, size_t n, float amp, uint64_t seed)
{
	if (!n)
		return 0;
	ek_launch(d, k_fill_bf16, dim3(fill_grid(d, n)), dim3(256), 0, p, n, amp, seed);
	return ek_launched(d, "fill bf16");
}

int ek_fill_bytes(struct ek_dev *d, uint8_t *p, size_t n, int lo, int hi, uint64_t seed)
{
	if (!n)
		return 0;
	if (lo < 0 || hi > 255 || lo > hi)
		return ek_fail(d, -EINVAL, "fill bytes: bad range [%d, %d]", lo, hi);
	ek_launch(d, k_fill_bytes, dim3(fill_grid(d, n)), dim3(256), 0, p, n, lo, hi, seed);
	return ek_launched(d, "fill bytes");
}

} /* extern "C" */
