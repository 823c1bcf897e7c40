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
 * C++ only; one stream is used by one thread at a time, as kquant does.
 *
 * Faults (kq_emul.h, set by the tests): allocations that fail for lack of
 * memory (counted, or for real against a device size that "another
 * process" fills), a busy device (exclusive-process mode), no kernel image,
 * launch and query failures that are sticky until cudaDeviceReset like CUDA's,
 * and kernels that never complete (kq_emul_hang): a stream stops at such a
 * kernel, cudaEventQuery says not ready, and the synchronizing calls block
 * until the hang is lifted. The primary context is modelled: the first call
 * after a reset creates it (costing KQ_EMUL_CONTEXT_BYTES of device memory,
 * visible to kquant's NVML query), cudaDeviceReset destroys it. */
#ifndef RQ_TESTS_EMUL_CUDA_RUNTIME_H
#define RQ_TESTS_EMUL_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "kq_emul.h"

#define KQ_EMUL_RUNTIME 1

#define __host__
#define __device__
#define __global__
#define __forceinline__ inline

typedef enum cudaError {        /* CUDA's numbers */
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInitializationError = 3,
	cudaErrorInsufficientDriver = 35,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorDevicesUnavailable = 46,
	cudaErrorStubLibrary = 34,
	cudaErrorSystemDriverMismatch = 803,
	cudaErrorCompatNotSupportedOnDevice = 804,
	cudaErrorNoKernelImageForDevice = 209,
	cudaErrorUnsupportedPtxVersion = 222,
	cudaErrorNotReady = 600,
	cudaErrorIllegalAddress = 700,
	cudaErrorLaunchTimeout = 702,
	cudaErrorLaunchFailure = 719,
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
	int pciDomainID, pciBusID, pciDeviceID;
};

/* ---- the emulated driver's state (kq_emul.h) ---- */

struct kq_emul_state {
	std::mutex mu;                         /* all below but hang */
	kq_emul_faults f;
	kq_emul_stats st;
	std::map<void *, size_t> dev;          /* device allocations and sizes */
	cudaError_t sticky = cudaSuccess;      /* until cudaDeviceReset */
	cudaError_t last = cudaSuccess;        /* what cudaGetLastError reports next */
	std::atomic<int> hang{0};
};
inline kq_emul_state kq_emul_g;

static inline long long kq_emul_total(void)
{
	return kq_emul_g.f.mem_total ? kq_emul_g.f.mem_total : 80ll << 30;
}

/* The first use after a reset creates the primary context (g.mu held).
 * cudaErrorDevicesUnavailable while the busy fault lasts. */
static inline cudaError_t kq_emul_context(void)
{
	kq_emul_state &g = kq_emul_g;
	if (g.st.context_active)
		return cudaSuccess;
	if (g.f.busy > 0) {
		g.f.busy--;
		return cudaErrorDevicesUnavailable;
	}
	if (g.st.dev_used + g.f.mem_others + KQ_EMUL_CONTEXT_BYTES > kq_emul_total())
		return cudaErrorMemoryAllocation;
	g.st.context_active = 1;
	g.st.contexts_created++;
	g.st.dev_used += KQ_EMUL_CONTEXT_BYTES;
	return cudaSuccess;
}

/* Context + sticky error check at the start of most calls. */
static inline cudaError_t kq_emul_enter(void)
{
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	if (kq_emul_g.sticky != cudaSuccess)
		return kq_emul_g.sticky;
	return kq_emul_context();
}

/* An op returns false while it cannot complete (a hung kernel, or a wait
 * on another stream that has not got there); the stream stops at it. */
struct kq_emul_stream {
	std::vector<std::function<bool()>> ops;   /* queued, not yet run */
	size_t done = 0;                          /* ops[0..done) have run */
	size_t enqueued() const { return ops.size(); }
	void run_to(size_t pos)
	{
		while (done < pos && done < ops.size()) {
			if (!ops[done]())
				return;
			done++;
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

static inline void kq_emul_push(cudaStream_t s, std::function<bool()> op)
{
	if (!s) {
		while (!op())                   /* the legacy stream: run now */
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
		return;
	}
	s->ops.push_back(std::move(op));
	if (kq_emul_eager())
		s->run_to(s->enqueued());
}

/* The stream a kernel launcher queues on (kq_emul.cpp): a launch may fail
 * (kq_emul_faults.launch_fail: sticky, reported by cudaGetLastError), and a
 * kernel launched while kq_emul_hang is on completes only once it is off. */
static inline void kq_emul_enqueue(cudaStream_t s, std::function<void()> op)
{
	{
		std::lock_guard<std::mutex> l(kq_emul_g.mu);
		kq_emul_g.st.launches++;
		if (kq_emul_g.sticky != cudaSuccess)
			return;
		if (kq_emul_g.f.launch_fail > 0) {
			kq_emul_g.f.launch_fail--;
			kq_emul_g.sticky = kq_emul_g.last = cudaErrorLaunchFailure;
			return;
		}
	}
	if (kq_emul_g.hang.load()) {
		kq_emul_push(s, [op] {
			if (kq_emul_g.hang.load())
				return false;
			op();
			return true;
		});
		return;
	}
	kq_emul_push(s, [op] {
		op();
		return true;
	});
}

/* Blocks (as CUDA does) until s has run to pos. */
static inline void kq_emul_block(cudaStream_t s, size_t pos)
{
	for (;;) {
		s->run_to(pos);
		if (s->done >= pos || s->done >= s->enqueued())
			return;
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	}
}

static inline const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorDevicesUnavailable: return "CUDA-capable device(s) is/are busy or unavailable";
	case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution "
	                                             "on the device";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorNotReady: return "device not ready";
	case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
	case cudaErrorLaunchFailure: return "unspecified launch failure";
	case cudaErrorLaunchTimeout: return "the launch timed out and was terminated";
	default: return "invalid value";
	}
}
static inline cudaError_t cudaGetLastError(void)
{
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	cudaError_t e = kq_emul_g.last;
	kq_emul_g.last = kq_emul_g.sticky;   /* sticky ones come back */
	return e;
}
static inline cudaError_t cudaGetDeviceCount(int *n)
{
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	*n = kq_emul_g.f.no_device ? 0 : 1;
	return kq_emul_g.f.no_device ? cudaErrorNoDevice : cudaSuccess;
}
static inline cudaError_t cudaSetDevice(int d)
{
	if (d != 0)
		return cudaErrorInvalidDevice;
	return kq_emul_enter();
}
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
	if (d != 0)
		return cudaErrorInvalidDevice;
	memset(p, 0, sizeof *p);
	strcpy(p->name, "emulated GPU (host)");
	p->multiProcessorCount = 4;
	p->major = 9;
	p->pciBusID = 0x3B;
	return cudaSuccess;
}
/* Destroys the primary context: device memory goes back, errors clear. */
static inline cudaError_t cudaDeviceReset(void)
{
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	kq_emul_state &g = kq_emul_g;
	for (auto &a : g.dev) {
		g.st.dev_used -= (long long)a.second;
		free(a.first);
	}
	g.dev.clear();
	if (g.st.context_active)
		g.st.dev_used -= KQ_EMUL_CONTEXT_BYTES;
	g.st.context_active = 0;
	g.sticky = g.last = cudaSuccess;
	return cudaSuccess;
}
static inline cudaError_t cudaMalloc(void **p, size_t n)
{
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	kq_emul_state &g = kq_emul_g;
	size_t r = (n + 255) & ~(size_t)255;
	if (g.sticky != cudaSuccess)
		return g.sticky;
	cudaError_t e = kq_emul_context();
	if (e != cudaSuccess)
		return e;
	if (g.f.malloc_fail > 0 && g.f.malloc_after > 0) {
		g.f.malloc_after--;
	} else if (g.f.malloc_fail > 0) {
		g.f.malloc_fail--;
		return cudaErrorMemoryAllocation;
	}
	if (g.st.dev_used + g.f.mem_others + (long long)r > kq_emul_total())
		return cudaErrorMemoryAllocation;
	*p = aligned_alloc(256, r ? r : 256);    /* as cudaMalloc aligns */
	if (!*p)
		return cudaErrorMemoryAllocation;
	memset(*p, 0xCD, n);                     /* garbage, as on a device */
	g.dev[*p] = r;
	g.st.dev_used += (long long)r;
	return cudaSuccess;
}
static inline cudaError_t cudaMallocHost(void **p, size_t n)
{
	cudaError_t e = kq_emul_enter();
	if (e != cudaSuccess)
		return e;
	*p = aligned_alloc(256, (n + 255) & ~(size_t)255);
	if (!*p)
		return cudaErrorMemoryAllocation;
	memset(*p, 0xCD, n);
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	kq_emul_g.st.host_allocs++;
	kq_emul_g.st.host_live++;
	return cudaSuccess;
}
/* cudaFree(0) only makes sure the context exists, as in CUDA. */
static inline cudaError_t cudaFree(void *p)
{
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	kq_emul_state &g = kq_emul_g;
	if (!p)
		return g.sticky != cudaSuccess ? g.sticky : kq_emul_context();
	auto it = g.dev.find(p);
	if (it == g.dev.end())
		return cudaErrorInvalidValue;      /* freed by a reset, or never ours */
	g.st.dev_used -= (long long)it->second;
	g.dev.erase(it);
	free(p);
	return cudaSuccess;
}
static inline cudaError_t cudaFreeHost(void *p)
{
	if (!p)
		return cudaSuccess;
	free(p);
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	kq_emul_g.st.host_live--;
	return cudaSuccess;
}
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	cudaError_t e = kq_emul_enter();
	if (e != cudaSuccess)
		return e;
	*s = new kq_emul_stream();
	return cudaSuccess;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	if (s)
		kq_emul_block(s, s->enqueued());
	delete s;
	return cudaSuccess;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	if (s)
		kq_emul_block(s, s->enqueued());
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	return kq_emul_g.sticky;
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
		kq_emul_block(e->st, e->pos);
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	return kq_emul_g.sticky;
}
/* The GPU makes what progress it can, then: done, not ready, or a fault. */
static inline cudaError_t cudaEventQuery(cudaEvent_t e)
{
	{
		std::lock_guard<std::mutex> l(kq_emul_g.mu);
		kq_emul_state &g = kq_emul_g;
		if (g.sticky != cudaSuccess)
			return g.sticky;
		if (g.f.query_fail > 0) {
			g.f.query_fail--;
			g.sticky = g.last = cudaErrorIllegalAddress;
			return g.sticky;
		}
	}
	if (!e->st)
		return cudaSuccess;
	e->st->run_to(e->pos);
	return e->st->done >= e->pos ? cudaSuccess : cudaErrorNotReady;
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
		kq_emul_push(s, [other, pos] {
			other->run_to(pos);
			return other->done >= pos;
		});
	return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
                                          enum cudaMemcpyKind kind, cudaStream_t s)
{
	cudaError_t e = kq_emul_enter();
	if (e != cudaSuccess)
		return e;
	kq_emul_push(s, [dst, src, n] {
		memcpy(dst, src, n);
		return true;
	});
	return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t s)
{
	cudaError_t e = kq_emul_enter();
	if (e != cudaSuccess)
		return e;
	kq_emul_push(s, [dst, v, n] {
		memset(dst, v, n);
		return true;
	});
	return cudaSuccess;
}
/* Synchronous copies: the callers have waited for their streams first. */
static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
                                     enum cudaMemcpyKind kind)
{
	cudaError_t e = kq_emul_enter();
	if (e != cudaSuccess)
		return e;
	memcpy(dst, src, n);
	return cudaSuccess;
}

/* kquant.cu's driver queries (KQ_EMUL_RUNTIME). */
static inline int kq_emul_primary_active(int ord)
{
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	return ord == 0 && kq_emul_g.st.context_active;
}
static inline int kq_emul_dev_used(int ord, unsigned long long *used)
{
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	*used = (unsigned long long)(kq_emul_g.st.dev_used + kq_emul_g.f.mem_others);
	return 0;
}

#endif
