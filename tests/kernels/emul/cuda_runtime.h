/* cuda_runtime.h (emulated) — just enough of the CUDA runtime, on the host,
 * to run kernels/kquant.cu's pipeline without a GPU (tests/kernels/kq_emul.cpp).
 *
 * "Device" memory is host memory. Asynchronous work runs as late or as early
 * as CUDA allows: each stream queues its copies, memsets and kernels and
 * runs them when the host waits (cudaEventSynchronize, cudaStreamSynchronize),
 * when another stream's cudaStreamWaitEvent needs them, or, at random, right
 * after queueing. So a host write to a pinned buffer before waiting for the
 * copy that reads it, or work on one stream not ordered after the work it
 * needs on another, shows up as wrong bytes in the tests.
 * C++ only; one stream is used by one thread at a time, as kquant does. */
#ifndef RQ_TESTS_EMUL_CUDA_RUNTIME_H
#define RQ_TESTS_EMUL_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <vector>

#define __host__
#define __device__
#define __global__
#define __forceinline__ inline

typedef enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
} cudaError_t;

enum cudaMemcpyKind {
	cudaMemcpyHostToHost,
	cudaMemcpyHostToDevice,
	cudaMemcpyDeviceToHost,
	cudaMemcpyDeviceToDevice,
};

#define cudaStreamNonBlocking 1u
#define cudaEventDisableTiming 2u

struct uint4 {
	unsigned x, y, z, w;
};
struct uint2 {
	unsigned x, y;
};

struct cudaDeviceProp {
	char name[256];
	int multiProcessorCount;
	int major, minor;
};

struct kq_emul_stream {
	std::vector<std::function<void()>> ops;   /* queued, not yet run */
	size_t done = 0;                          /* ops[0..done) have run */
	size_t enqueued() const { return ops.size(); }
	void run_to(size_t pos)
	{
		while (done < pos && done < ops.size()) {
			size_t i = done++;
			ops[i]();
		}
	}
};
typedef kq_emul_stream *cudaStream_t;

struct kq_emul_event {
	kq_emul_stream *st = nullptr;   /* where it was last recorded */
	size_t pos = 0;                 /* ops before it on that stream */
};
typedef kq_emul_event *cudaEvent_t;

/* After queueing, a stream sometimes runs at once (pseudo-random, fixed
 * seed per thread): work on one stream then overtakes work on another that
 * it was not ordered after, as it may on a GPU. */
static inline bool kq_emul_eager(void)
{
	static thread_local uint64_t x = 0x9E3779B97F4A7C15ull;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return (x >> 32) & 1;
}

/* The stream a kernel launcher queues on (kq_emul.cpp). */
static inline void kq_emul_enqueue(cudaStream_t s, std::function<void()> op)
{
	if (!s) {
		op();                           /* the legacy stream: run now */
		return;
	}
	s->ops.push_back(std::move(op));
	if (kq_emul_eager())
		s->run_to(s->enqueued());
}

static inline const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory"
	                                                                     : "invalid value";
}
static inline cudaError_t cudaGetLastError(void)
{
	return cudaSuccess;
}
static inline cudaError_t cudaGetDeviceCount(int *n)
{
	*n = 1;
	return cudaSuccess;
}
static inline cudaError_t cudaSetDevice(int d)
{
	return d == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
	memset(p, 0, sizeof *p);
	strcpy(p->name, "emulated GPU (host)");
	p->multiProcessorCount = 4;
	p->major = 9;
	return cudaSuccess;
}
static inline cudaError_t cudaDeviceReset(void)
{
	return cudaSuccess;
}
static inline cudaError_t cudaMalloc(void **p, size_t n)
{
	*p = aligned_alloc(256, (n + 255) & ~(size_t)255);   /* as cudaMalloc aligns */
	if (*p)                                 /* garbage, as on a device */
		memset(*p, 0xCD, n);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaMallocHost(void **p, size_t n)
{
	return cudaMalloc(p, n);
}
static inline cudaError_t cudaFree(void *p)
{
	free(p);
	return cudaSuccess;
}
static inline cudaError_t cudaFreeHost(void *p)
{
	free(p);
	return cudaSuccess;
}
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	*s = new kq_emul_stream();
	return cudaSuccess;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	if (s)
		s->run_to(s->enqueued());
	delete s;
	return cudaSuccess;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	if (s)
		s->run_to(s->enqueued());
	return cudaSuccess;
}
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	*e = new kq_emul_event();
	return cudaSuccess;
}
static inline cudaError_t cudaEventCreate(cudaEvent_t *e)
{
	return cudaEventCreateWithFlags(e, 0);
}
static inline cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	delete e;
	return cudaSuccess;
}
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	e->st = s;
	e->pos = s ? s->enqueued() : 0;
	return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	if (e->st)
		e->st->run_to(e->pos);
	return cudaSuccess;
}
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	*ms = 0.001f;
	return cudaSuccess;
}
/* s waits for the work before e: when s reaches this point it first runs
 * e's stream up to e (captured now, as CUDA does). */
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
	kq_emul_stream *other = e->st;
	size_t pos = e->pos;
	if (other && other != s)
		kq_emul_enqueue(s, [other, pos] { other->run_to(pos); });
	return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
                                          enum cudaMemcpyKind kind, cudaStream_t s)
{
	kq_emul_enqueue(s, [dst, src, n] { memcpy(dst, src, n); });
	return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t s)
{
	kq_emul_enqueue(s, [dst, v, n] { memset(dst, v, n); });
	return cudaSuccess;
}
/* Synchronous copies: the callers have waited for their streams first. */
static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
                                     enum cudaMemcpyKind kind)
{
	memcpy(dst, src, n);
	return cudaSuccess;
}

#endif
