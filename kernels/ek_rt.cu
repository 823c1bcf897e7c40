/* ek_rt.cu — the engine kernels' runtime: device context, memory, copies,
 * events, timing, CUDA graphs, copy bandwidth, deterministic fills.
 *
 * One ek_dev per engine: a non-blocking stream that every op uses, eight
 * event slots for staging-buffer reuse, two timing events, grow-only scratch
 * (device ws, pinned hbuf) that may not grow while a graph is captured. */
#include "kernels/ek_dev.cuh"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

extern "C" {

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
	{
		const char *pdl = getenv("EK_PDL");
		d->pdl = pdl && pdl[0] == '1' && d->cc >= 90;
	}
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
	if (!rc)
		d->capturing = 1;
	return rc;
}

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
