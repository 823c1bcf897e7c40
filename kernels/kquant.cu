/* kquant.cu — the GPU twin of quant/: rq_quantize_job() on CUDA, byte for byte.
 *
 * A job (one module, or a fused gate/up pair sharing one global scale) runs
 * in three steps on host pointers:
 *   1. upload + absmax: the BF16 weights go through pinned staging slots to
 *      the device; a reduction takes max |w| per module as BF16 bits (an
 *      integer max: |w| bits >= 0x7F80 means Inf or NaN -> -EDOM);
 *   2. scale: one thread computes the global scale from the max over the job
 *      (quant/recipe.h, the same binary32 operations as rq_global_scale);
 *   3. quantize + download: one thread per group of 16 computes the E4M3
 *      scale and eight bytes of E2M1 codes; results come back through the
 *      pinned slots.
 * When the whole job fits in mem_limit it stays resident between steps 1
 * and 3 (one upload); otherwise it streams in chunks of whole groups and is
 * uploaded twice. Each step alternates two slots, each with its own stream,
 * so the host's memcpy into one slot overlaps the other slot's copies and
 * kernels. Since cols % 16 == 0 a module is a flat run of groups: packed
 * byte e/2 and scale e/16 of element e, whatever the row length.
 *
 * Waiting: every wait of a job polls cudaEventQuery (kq_wait) and gives up
 * with -ETIMEDOUT once the job's deadline (kq_job_opts.timeout_s) has passed:
 * a kernel that never completes fails its job instead of blocking its thread
 * forever; the context is then poisoned (kq_poisoned) and must be closed and
 * reopened. Inputs in kq_host_alloc memory (kq_job_opts.pinned) are copied
 * to the device straight from the caller's buffer; others go through a host
 * memcpy into the pinned slots (counted in kq_host_copied).
 *
 * Errors are sorted for the caller's retry policy (kq_errno): -ENOMEM out of
 * memory, -EBUSY busy/exclusive-process, -ENODEV nothing to retry (no device,
 * driver, or kernel image), -ETIMEDOUT watchdog or launch timeout, -EIO the
 * rest; -EIO and -ETIMEDOUT poison the context (sticky errors need a reset).
 *
 * Context lifetime: kq_open makes the device's primary context current
 * (cudaSetDevice). The last kq_close of a device frees everything and, when
 * no one else in the process had the primary context active before our first
 * open, destroys it (cudaDeviceReset) so another process gets the whole GPU
 * back. */
#include "kernels/kquant_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- messages ---------------------------------------------------------- */

int kq_fail(char *msg, size_t msglen, int code, const char *fmt, ...)
{
	if (msg && msglen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(msg, msglen, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* What the caller can do about e: see the top of the file. */
static int kq_errno(cudaError_t e)
{
	switch (e) {
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorDevicesUnavailable:      /* exclusive-process mode, another owner */
		return -EBUSY;
	case cudaErrorLaunchTimeout:
		return -ETIMEDOUT;
	case cudaErrorNoDevice:
	case cudaErrorInvalidDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorNoKernelImageForDevice:
	case cudaErrorUnsupportedPtxVersion:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
	case cudaErrorStubLibrary:
	case cudaErrorInitializationError:
		return -ENODEV;
	default:
		return -EIO;
	}
}

int kq_cuda_fail(char *msg, size_t msglen, struct kq_ctx *k, const char *what,
                 cudaError_t e)
{
	int code = kq_errno(e);
	cudaGetLastError();                    /* clear a non-sticky error */
	if (k && (code == -EIO || code == -ETIMEDOUT))
		k->poisoned = 1;                   /* sticky errors stay until a reset */
	return kq_fail(msg, msglen, code, "CUDA %s on device %d: %s", what, k ? k->dev : -1,
	               cudaGetErrorString(e));
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Polls rather than cudaEventSynchronize so that a deadline can end the
 * wait: spins for the first 50 us (a chunk's copy takes about that long),
 * then yields for a millisecond, then sleeps 20 us doubling to 1 ms. */
int kq_wait(struct kq_ctx *k, cudaEvent_t e, const char *what, char *msg, size_t msglen)
{
	double t0 = mono_s();
	long sleep_ns = 20000;
	for (;;) {
		cudaError_t r = cudaEventQuery(e);
		if (r == cudaSuccess)
			return 0;
		if (r != cudaErrorNotReady)
			return kq_cuda_fail(msg, msglen, k, what, r);
		if (k->deadline > 0 && (k->now ? k->now() : mono_s()) > k->deadline) {
			k->poisoned = 1;
			return kq_fail(msg, msglen, -ETIMEDOUT, "CUDA %s on device %d: not completed "
			               "by the watchdog's deadline", what, k->dev);
		}
		double dt = mono_s() - t0;
		if (dt < 50e-6)
			continue;
		if (dt < 1e-3) {
			sched_yield();
			continue;
		}
		struct timespec ts = {0, sleep_ns};
		nanosleep(&ts, NULL);
		if (sleep_ns < 1000000)
			sleep_ns *= 2;
	}
}

static size_t align256(size_t x)
{
	return (x + 255) & ~(size_t)255;
}

/* Device bytes of one streaming slot of g groups: input, packed codes and
 * scales, each 256-byte aligned (the kernels load 16 and store 8 bytes). */
static size_t slot_bytes(size_t g)
{
	return align256(g * KQ_IN_G) + align256(g * KQ_PK_G) + align256(g);
}

/* The device buffers of streaming slot s (in the arena). */
static void slot_dev(const struct kq_ctx *k, int s, uint8_t **din, uint8_t **dpk,
                     uint8_t **dsc)
{
	*din = k->arena + s * slot_bytes(k->chunk);
	*dpk = *din + align256(k->chunk * KQ_IN_G);
	*dsc = *dpk + align256(k->chunk * KQ_PK_G);
}

/* ---- devices and the primary context ----------------------------------- */

int kq_compiled(void)
{
	return 1;
}

int kq_device_count(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n > 0 ? n : 0;
}

#define KQ_MAX_DEV 64
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int opens;     /* open kq_ctx on this device */
	int owned;     /* we brought the primary context up: the last close resets it */
	size_t ctx_bytes;   /* what creating it took (NVML), 0 unknown */
	int made;      /* a kq_open got the context up: there is something to reset */
} reg[KQ_MAX_DEV];

#ifdef KQ_EMUL_RUNTIME            /* tests/kernels/emul/cuda_runtime.h plays the driver */
static int primary_active(int ord)
{
	return kq_emul_primary_active(ord);
}

static int dev_used_bytes(const cudaDeviceProp *p, int ord, unsigned long long *used)
{
	return kq_emul_dev_used(ord, used);
}
#else

/* Whether device ord's primary context is active now, asked of the driver
 * directly (libcuda), which creates no context. 0 when it cannot tell. */
static int primary_active(int ord)
{
	typedef int (*init_fn)(unsigned);
	typedef int (*get_fn)(int *, int);
	typedef int (*state_fn)(int, unsigned *, int *);
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return 0;
	init_fn init = (init_fn)dlsym(h, "cuInit");
	get_fn get = (get_fn)dlsym(h, "cuDeviceGet");
	state_fn state = (state_fn)dlsym(h, "cuDevicePrimaryCtxGetState");
	int dev = 0, active = 0;
	unsigned flags = 0;
	if (!init || !get || !state || init(0) || get(&dev, ord) || state(dev, &flags, &active))
		active = 0;
	dlclose(h);
	return active;
}

/* The device's used memory, asked of NVML (which needs no CUDA context), by
 * PCI address since NVML and CUDA may number devices differently. 0 on
 * success, -1 when NVML cannot tell. */
static int dev_used_bytes(const cudaDeviceProp *p, int ord, unsigned long long *used)
{
	struct nvml_mem {
		unsigned long long total, free, used;
	} mem;
	typedef int (*init_fn)(void);
	typedef int (*byid_fn)(const char *, void **);
	typedef int (*mem_fn)(void *, struct nvml_mem *);
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return -1;
	init_fn init = (init_fn)dlsym(h, "nvmlInit_v2");
	init_fn shut = (init_fn)dlsym(h, "nvmlShutdown");
	byid_fn byid = (byid_fn)dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
	mem_fn getmem = (mem_fn)dlsym(h, "nvmlDeviceGetMemoryInfo");
	char bus[64];
	void *dev = NULL;
	int rc = -1;
	snprintf(bus, sizeof bus, "%x:%x:%x.0", (unsigned)p->pciDomainID, (unsigned)p->pciBusID,
	         (unsigned)p->pciDeviceID);
	if (init && shut && byid && getmem && init() == 0) {
		if (byid(bus, &dev) == 0 && getmem(dev, &mem) == 0) {
			*used = mem.used;
			rc = 0;
		}
		shut();
	}
	dlclose(h);
	(void)ord;
	return rc;
}
#endif

const char *kq_name(const struct kq_ctx *k)
{
	return k ? k->name : "";
}

size_t kq_context_bytes(const struct kq_ctx *k)
{
	return k ? k->ctx_bytes : 0;
}

int kq_cc(const struct kq_ctx *k)
{
	return k ? k->cc : 0;
}

int kq_poisoned(const struct kq_ctx *k)
{
	return k ? k->poisoned : 0;
}

unsigned long long kq_host_copied(const struct kq_ctx *k)
{
	return k ? k->copied : 0;
}

int kq_host_alloc(struct kq_ctx *k, size_t bytes, void **out, char *msg, size_t msglen)
{
	void *p = NULL;
	cudaError_t e = cudaSetDevice(k->dev);
	if (e == cudaSuccess)
		e = cudaMallocHost(&p, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		int code = kq_errno(e);
		cudaGetLastError();
		return kq_fail(msg, msglen, code == -ENOMEM ? -ENOMEM : code,
		               "CUDA cudaMallocHost of %zu bytes on device %d: %s", bytes, k->dev,
		               cudaGetErrorString(e));
	}
	*out = p;
	return 0;
}

void kq_host_free(struct kq_ctx *k, void *p)
{
	if (!k || !p)
		return;
	cudaSetDevice(k->dev);
	cudaFreeHost(p);
	cudaGetLastError();
}

void kq_close(struct kq_ctx *k)
{
	if (!k)
		return;
	if (!k->ctx_made)                      /* kq_open failed before the context: */
		goto unregister;                   /* no CUDA call (it would create one) */
	cudaSetDevice(k->dev);
	for (int s = 0; s < 2; s++) {
		if (k->st[s])
			cudaStreamSynchronize(k->st[s]);
	}
	cudaFree(k->arena);
	cudaFree(k->damax);
	cudaFree(k->dres);
	cudaFreeHost(k->hres);
	cudaFreeHost(k->stage[0]);
	for (int s = 0; s < 2; s++) {
		if (k->ev[s])
			cudaEventDestroy(k->ev[s]);
		if (k->st[s])
			cudaStreamDestroy(k->st[s]);
	}
	if (k->evx)
		cudaEventDestroy(k->evx);
	cudaGetLastError();
unregister:
	pthread_mutex_lock(&reg_mu);
	if (k->dev < KQ_MAX_DEV && --reg[k->dev].opens == 0 && reg[k->dev].owned &&
	    reg[k->dev].made) {
		cudaSetDevice(k->dev);             /* fails after a sticky error: reset anyway */
		cudaDeviceReset();                 /* destroys the primary context */
		reg[k->dev].made = 0;
		cudaGetLastError();
	}
	pthread_mutex_unlock(&reg_mu);
	free(k);
}

int kq_amax_need(struct kq_ctx *k, int n, char *msg, size_t msglen)
{
	int rc = 0;
	if (n <= k->amax_cap)
		return 0;
	cudaFree(k->damax);
	k->damax = NULL;
	k->amax_cap = 0;
	KQ_CK("cudaMalloc (absmax)", cudaMalloc((void **)&k->damax, (size_t)n * 4));
	k->amax_cap = n;
	return 0;
fail:
	return rc;
}

int kq_open(int index, size_t mem_limit, struct kq_ctx **out, char *msg, size_t msglen)
{
	struct kq_ctx *k = NULL;
	cudaDeviceProp p;
	cudaError_t e;
	unsigned long long used0 = 0, used1 = 0;
	int n = 0, rc = 0, measure = 0;

	if (!out)
		return kq_fail(msg, msglen, -EINVAL, "kq_open: no output pointer");
	if (mem_limit == 0)
		mem_limit = KQ_MEM_DEFAULT;
	if (mem_limit < KQ_MEM_MIN)
		return kq_fail(msg, msglen, -EINVAL, "GPU memory limit %zu bytes is below %zu",
		               mem_limit, KQ_MEM_MIN);
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return kq_fail(msg, msglen, -ENODEV, "no CUDA device: cudaGetDeviceCount: %s",
		               cudaGetErrorString(e));
	}
	if (index < 0 || index >= n || index >= KQ_MAX_DEV)
		return kq_fail(msg, msglen, -ENODEV, "CUDA device %d not present (%d device%s)",
		               index, n, n == 1 ? "" : "s");
	k = (struct kq_ctx *)calloc(1, sizeof *k);
	if (!k)
		return kq_fail(msg, msglen, -ENOMEM, "out of memory");
	k->dev = index;
	k->mem_limit = mem_limit;
	k->chunk = (mem_limit / 2 - 3 * 256) / KQ_GROUP_BYTES;   /* 2 slots fit */
	if (k->chunk > KQ_CHUNK_MAX)
		k->chunk = KQ_CHUNK_MAX;

	/* Properties first: they need no context, and NVML's used memory before
	 * and after creating it gives the context's own cost (--gpu-mem bounds
	 * only the buffers below). The registry lock is held across creation so
	 * that two threads opening at once measure one creation. */
	e = cudaGetDeviceProperties(&p, index);
	if (e != cudaSuccess) {
		free(k);                           /* not registered yet */
		rc = kq_errno(e);
		cudaGetLastError();
		return kq_fail(msg, msglen, rc, "CUDA cudaGetDeviceProperties on device %d: %s",
		               index, cudaGetErrorString(e));
	}
	snprintf(k->name, sizeof k->name, "%s", p.name);
	k->sms = p.multiProcessorCount > 0 ? p.multiProcessorCount : 1;
	k->cc = p.major * 10 + p.minor;
	pthread_mutex_lock(&reg_mu);
	if (reg[index].opens++ == 0) {
		reg[index].owned = !primary_active(index);
		reg[index].ctx_bytes = 0;
		measure = reg[index].owned && dev_used_bytes(&p, index, &used0) == 0;
	}
	int loading = 0;
	e = cudaSetDevice(index);
	if (e == cudaSuccess)
		e = cudaFree(0);                   /* the context exists from here on */
	k->ctx_made = e == cudaSuccess;
	reg[index].made |= k->ctx_made;
	if (e == cudaSuccess) {
		loading = 1;
		e = kq_kernels_loadable();         /* loads the module (lazy loading) */
	}
	if (measure && e == cudaSuccess && dev_used_bytes(&p, index, &used1) == 0 &&
	    used1 > used0)
		reg[index].ctx_bytes = (size_t)(used1 - used0);
	k->ctx_bytes = reg[index].ctx_bytes;
	pthread_mutex_unlock(&reg_mu);
	if (e != cudaSuccess) {
		rc = kq_errno(e);
		cudaGetLastError();
		if (loading && rc != -ENOMEM && rc != -EBUSY)
			rc = kq_fail(msg, msglen, -ENODEV,
			             "%s (sm_%d) cannot run these kernels, built for gpu_arch %s (%s); "
			             "reconfigure with -Dgpu_arch=%d", k->name, k->cc, KQ_GPU_ARCH,
			             cudaGetErrorString(e), k->cc);
		else
			rc = kq_fail(msg, msglen, rc, "CUDA context on device %d (%s): %s", index,
			             k->name, cudaGetErrorString(e));
		goto fail;
	}
	for (int s = 0; s < 2; s++) {
		KQ_CK("cudaStreamCreate", cudaStreamCreateWithFlags(&k->st[s], cudaStreamNonBlocking));
		KQ_CK("cudaEventCreate", cudaEventCreateWithFlags(&k->ev[s], cudaEventDisableTiming));
	}
	KQ_CK("cudaEventCreate", cudaEventCreateWithFlags(&k->evx, cudaEventDisableTiming));
	KQ_CK("cudaMalloc (result)", cudaMalloc((void **)&k->dres, sizeof *k->dres));
	KQ_CK("cudaMallocHost (result)", cudaMallocHost((void **)&k->hres, sizeof *k->hres));
	rc = kq_amax_need(k, 16, msg, msglen);
	if (rc < 0)
		goto fail;
	*out = k;
	return 0;
fail:
	kq_close(k);
	return rc < 0 ? rc : -EIO;             /* msg says why */
}

/* ---- buffers ----------------------------------------------------------- */

int kq_arena_need(struct kq_ctx *k, size_t bytes, char *msg, size_t msglen)
{
	int rc = 0;
	if (bytes <= k->arena_bytes)
		return 0;
	cudaFree(k->arena);
	k->arena = NULL;
	k->arena_bytes = 0;
	size_t want = (bytes + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
	if (want > k->mem_limit)
		want = k->mem_limit;
	KQ_CK("cudaMalloc (buffers)", cudaMalloc((void **)&k->arena, want));
	k->arena_bytes = want;
	return 0;
fail:
	return rc;
}

/* Pinned staging slots of at least groups each (<= chunk). */
static int stage_need(struct kq_ctx *k, size_t groups, char *msg, size_t msglen)
{
	int rc = 0;
	if (groups > k->chunk)
		groups = k->chunk;
	if (groups <= k->stage_groups)
		return 0;
	size_t g = 4096;
	while (g < groups)
		g *= 2;
	if (g > k->chunk)
		g = k->chunk;
	cudaFreeHost(k->stage[0]);
	k->stage[0] = k->stage[1] = NULL;
	k->stage_groups = 0;
	KQ_CK("cudaMallocHost (staging)",
	      cudaMallocHost((void **)&k->stage[0], 2 * g * KQ_GROUP_BYTES));
	k->stage[1] = k->stage[0] + g * KQ_GROUP_BYTES;
	k->stage_groups = g;
	return 0;
fail:
	return rc;
}

void kq_deadline_start(struct kq_ctx *k, const struct kq_job_opts *o)
{
	k->now = o && o->now ? o->now : mono_s;
	k->deadline = o && o->timeout_s > 0 ? k->now() + o->timeout_s : 0;
}

size_t kq_groups(const struct rq_qmod *m)
{
	return m->rows * m->cols / 16;
}

/* ---- the job ----------------------------------------------------------- */

/* kq_wait under the job's deadline, jumping to fail like KQ_CK. */
#define KQ_WAIT(what, ev) do { \
	rc = kq_wait(k, (ev), (what), msg, msglen); \
	if (rc < 0) \
		goto fail; \
} while (0)

/* Where chunk [g0, g0 + cg) of module i is copied to the device from: the
 * caller's buffer when it is pinned, else slot s after a host memcpy (the
 * caller waited for ev[s]). */
static const uint8_t *upload_src(struct kq_ctx *k, unsigned pinned, const struct rq_qmod *m,
                                 int i, size_t g0, size_t cg, int s)
{
	const uint8_t *src = (const uint8_t *)m[i].w + g0 * KQ_IN_G;
	if (i < 32 && (pinned >> i & 1u))
		return src;
	memcpy(k->stage[s], src, cg * KQ_IN_G);
	k->copied += cg * KQ_IN_G;
	return k->stage[s];
}

struct kq_mod {            /* per module of a job */
	size_t groups;         /* rows * cols / 16 */
	uint8_t *din;          /* resident only: device [groups * 32] */
	uint8_t *dpk;          /* resident only: device [groups * 8] */
	uint8_t *dsc;          /* resident only: device [groups] */
};

struct kq_pend {           /* a chunk whose outputs sit in a slot's pinned buffer */
	int mod;               /* -1 when none */
	size_t g0, groups;
};

/* Copies a slot's finished outputs to the caller (after ev[s] completed). */
static void flush(struct kq_ctx *k, int s, struct kq_pend *p, const struct rq_qmod *m)
{
	if (p->mod < 0)
		return;
	const uint8_t *pk = k->stage[s] + k->stage_groups * KQ_IN_G;
	const uint8_t *sc = pk + k->stage_groups * KQ_PK_G;
	memcpy(m[p->mod].packed + p->g0 * KQ_PK_G, pk, p->groups * KQ_PK_G);
	memcpy(m[p->mod].scales + p->g0, sc, p->groups);
	p->mod = -1;
}

/* Step 1: upload (to the resident copy, or to the slot's device buffer)
 * and absmax into damax[i]; step 2: the scale kernel; waits for hres. */
static int step_absmax(struct kq_ctx *k, enum rq_recipe r, const struct rq_qmod *m, int n,
                       struct kq_mod *mods, int resident, unsigned pinned, char *msg,
                       size_t msglen)
{
	int rc = 0;
	unsigned c = 0;
	KQ_CK("memset", cudaMemsetAsync(k->damax, 0, (size_t)n * 4, k->st[0]));
	KQ_CK("event record", cudaEventRecord(k->evx, k->st[0]));
	KQ_CK("stream wait", cudaStreamWaitEvent(k->st[1], k->evx, 0));
	for (int i = 0; i < n; i++) {
		for (size_t g0 = 0; g0 < mods[i].groups; g0 += k->chunk, c++) {
			int s = c & 1;
			size_t cg = mods[i].groups - g0 < k->chunk ? mods[i].groups - g0 : k->chunk;
			uint8_t *dst, *dpk, *dsc;
			slot_dev(k, s, &dst, &dpk, &dsc);
			if (resident)
				dst = mods[i].din + g0 * KQ_IN_G;
			if (i >= 32 || !(pinned >> i & 1u))   /* about to write stage[s] */
				KQ_WAIT("event wait", k->ev[s]);
			const uint8_t *src = upload_src(k, pinned, m, i, g0, cg, s);
			KQ_CK("copy to device", cudaMemcpyAsync(dst, src, cg * KQ_IN_G,
			                                        cudaMemcpyHostToDevice, k->st[s]));
			KQ_CK("event record", cudaEventRecord(k->ev[s], k->st[s]));
			kq_launch_absmax(k, dst, cg, k->damax + i, k->st[s]);
			KQ_CK("absmax kernel", cudaGetLastError());
		}
	}
	KQ_CK("event record", cudaEventRecord(k->evx, k->st[1]));
	KQ_CK("stream wait", cudaStreamWaitEvent(k->st[0], k->evx, 0));
	kq_launch_scale(r, k->damax, n, k->dres, k->st[0]);
	KQ_CK("scale kernel", cudaGetLastError());
	KQ_CK("copy result", cudaMemcpyAsync(k->hres, k->dres, sizeof *k->hres,
	                                     cudaMemcpyDeviceToHost, k->st[0]));
	KQ_CK("event record", cudaEventRecord(k->evx, k->st[0]));
	KQ_WAIT("absmax/scale kernels", k->evx);
	return 0;
fail:
	return rc;
}

/* Slot s's download of chunk [g0, g0 + cg) of module i: codes and scales
 * from dpk/dsc into the slot's staging, then the slot's event; p records
 * what flush() writes out once the event has passed. */
static int download_chunk(struct kq_ctx *k, int s, const uint8_t *dpk, const uint8_t *dsc,
                          size_t cg, int i, size_t g0, struct kq_pend *p, char *msg,
                          size_t msglen)
{
	int rc = 0;
	uint8_t *hpk = k->stage[s] + k->stage_groups * KQ_IN_G;
	uint8_t *hsc = hpk + k->stage_groups * KQ_PK_G;
	KQ_CK("copy to host", cudaMemcpyAsync(hpk, dpk, cg * KQ_PK_G, cudaMemcpyDeviceToHost,
	                                      k->st[s]));
	KQ_CK("copy to host", cudaMemcpyAsync(hsc, dsc, cg, cudaMemcpyDeviceToHost, k->st[s]));
	KQ_CK("event record", cudaEventRecord(k->ev[s], k->st[s]));
	*p = (struct kq_pend){.mod = i, .g0 = g0, .groups = cg};
	return 0;
fail:
	return rc;
}

/* Both slots' last downloads: waited for and written out. */
static int drain(struct kq_ctx *k, struct kq_pend pend[2], const struct rq_qmod *m, char *msg,
                 size_t msglen)
{
	int rc = 0;
	for (int s = 0; s < 2; s++) {
		KQ_WAIT("copy to host", k->ev[s]);
		flush(k, s, &pend[s], m);
	}
	return 0;
fail:
	return rc;
}

/* Step 3 for a resident job: quantize in place, then download by chunks. */
static int step_quant_resident(struct kq_ctx *k, enum rq_recipe r, float gs,
                               const struct rq_qmod *m, int n, struct kq_mod *mods,
                               char *msg, size_t msglen)
{
	int rc = 0;
	unsigned c = 0;
	struct kq_pend pend[2] = {{-1, 0, 0}, {-1, 0, 0}};
	for (int i = 0; i < n; i++)
		kq_launch_quant(r, mods[i].din, mods[i].groups, gs, mods[i].dpk, mods[i].dsc, k->st[0]);
	KQ_CK("quantize kernel", cudaGetLastError());
	KQ_CK("event record", cudaEventRecord(k->evx, k->st[0]));
	KQ_CK("stream wait", cudaStreamWaitEvent(k->st[1], k->evx, 0));
	for (int i = 0; i < n; i++) {
		for (size_t g0 = 0; g0 < mods[i].groups; g0 += k->chunk, c++) {
			int s = c & 1;
			size_t cg = mods[i].groups - g0 < k->chunk ? mods[i].groups - g0 : k->chunk;
			KQ_WAIT("copy to host", k->ev[s]);
			flush(k, s, &pend[s], m);
			if ((rc = download_chunk(k, s, mods[i].dpk + g0 * KQ_PK_G, mods[i].dsc + g0, cg,
			                         i, g0, &pend[s], msg, msglen)) < 0)
				goto fail;
		}
	}
	return drain(k, pend, m, msg, msglen);
fail:
	return rc;
}

/* Step 3 for a streamed job: upload again, quantize, download, per chunk. */
static int step_quant_stream(struct kq_ctx *k, enum rq_recipe r, float gs,
                             const struct rq_qmod *m, int n, struct kq_mod *mods,
                             unsigned pinned, char *msg, size_t msglen)
{
	int rc = 0;
	unsigned c = 0;
	struct kq_pend pend[2] = {{-1, 0, 0}, {-1, 0, 0}};
	for (int i = 0; i < n; i++) {
		for (size_t g0 = 0; g0 < mods[i].groups; g0 += k->chunk, c++) {
			int s = c & 1;
			size_t cg = mods[i].groups - g0 < k->chunk ? mods[i].groups - g0 : k->chunk;
			uint8_t *din, *dpk, *dsc;
			slot_dev(k, s, &din, &dpk, &dsc);
			KQ_WAIT("event wait", k->ev[s]);
			flush(k, s, &pend[s], m);
			const uint8_t *src = upload_src(k, pinned, m, i, g0, cg, s);
			KQ_CK("copy to device", cudaMemcpyAsync(din, src, cg * KQ_IN_G,
			                                        cudaMemcpyHostToDevice, k->st[s]));
			kq_launch_quant(r, din, cg, gs, dpk, dsc, k->st[s]);
			KQ_CK("quantize kernel", cudaGetLastError());
			if ((rc = download_chunk(k, s, dpk, dsc, cg, i, g0, &pend[s], msg, msglen)) < 0)
				goto fail;
		}
	}
	return drain(k, pend, m, msg, msglen);
fail:
	return rc;
}

int kq_quantize_job(struct kq_ctx *k, enum rq_recipe r, const struct rq_qmod *m, int n,
                    float *gs, int *bad_module, char *msg, size_t msglen)
{
	return kq_quantize_job_opt(k, r, m, n, NULL, gs, bad_module, msg, msglen);
}

int kq_quantize_job_opt(struct kq_ctx *k, enum rq_recipe r, const struct rq_qmod *m, int n,
                        const struct kq_job_opts *o, float *gs, int *bad_module, char *msg,
                        size_t msglen)
{
	struct kq_mod *mods = NULL;
	size_t resident_bytes = 0, max_groups = 0;
	unsigned pinned = o ? o->pinned : 0;
	int resident, rc = 0;

	if (!k)
		return kq_fail(msg, msglen, -ENODEV, "no CUDA context");
	if (k->poisoned)
		return kq_fail(msg, msglen, -EIO, "CUDA context on device %d is poisoned by an "
		               "earlier failure; open a fresh one", k->dev);
	if (n <= 0 || (unsigned)r >= RQ_RECIPE_COUNT || !m)
		return kq_fail(msg, msglen, -EINVAL, "bad job (%d modules, recipe %d)", n, (int)r);
	for (int i = 0; i < n; i++) {
		size_t e;
		if (m[i].cols % 16 != 0 || m[i].cols == 0 ||
		    __builtin_mul_overflow(m[i].rows, m[i].cols, &e) || e > (SIZE_MAX >> 6)) {
			if (bad_module)
				*bad_module = i;
			return kq_fail(msg, msglen, -EINVAL,
			               "module %d: shape [%zu, %zu] (columns must be a positive "
			               "multiple of 16)", i, m[i].rows, m[i].cols);
		}
	}
	mods = (struct kq_mod *)calloc((size_t)n, sizeof *mods);
	if (!mods)
		return kq_fail(msg, msglen, -ENOMEM, "out of memory");
	for (int i = 0; i < n; i++) {
		mods[i].groups = kq_groups(&m[i]);
		resident_bytes += align256(mods[i].groups * KQ_IN_G) +
		                  align256(mods[i].groups * KQ_PK_G) + align256(mods[i].groups);
		if (mods[i].groups > max_groups)
			max_groups = mods[i].groups;
	}
	kq_deadline_start(k, o);
	KQ_CK("cudaSetDevice", cudaSetDevice(k->dev));
	resident = resident_bytes <= k->mem_limit;
	rc = kq_arena_need(k, resident ? resident_bytes : 2 * slot_bytes(k->chunk), msg, msglen);
	if (rc < 0)
		goto out;
	rc = stage_need(k, max_groups, msg, msglen);
	if (rc < 0)
		goto out;
	rc = kq_amax_need(k, n, msg, msglen);
	if (rc < 0)
		goto out;
	if (resident) {
		uint8_t *p = k->arena;
		for (int i = 0; i < n; i++) {
			mods[i].din = p;
			p += align256(mods[i].groups * KQ_IN_G);
			mods[i].dpk = p;
			p += align256(mods[i].groups * KQ_PK_G);
			mods[i].dsc = p;
			p += align256(mods[i].groups);
		}
	}

	rc = step_absmax(k, r, m, n, mods, resident, pinned, msg, msglen);
	if (rc < 0)
		goto out;
	if (k->hres->bad >= 0) {
		if (bad_module)
			*bad_module = k->hres->bad;
		rc = kq_fail(msg, msglen, -EDOM, "module %d: NaN or Inf in the weights",
		             k->hres->bad);
		goto out;
	}
	if (resident)
		rc = step_quant_resident(k, r, k->hres->gs, m, n, mods, msg, msglen);
	else
		rc = step_quant_stream(k, r, k->hres->gs, m, n, mods, pinned, msg, msglen);
	if (rc < 0)
		goto out;
	if (gs)
		*gs = k->hres->gs;
	goto out;
fail:
out:
	if (rc < 0 && rc != -EDOM && rc != -EINVAL && !k->poisoned) {
		/* leave no copy in flight on our buffers (under the same deadline:
		 * a wait that times out here poisons the context instead) */
		for (int s = 0; s < 2; s++) {
			if (cudaEventRecord(k->ev[s], k->st[s]) == cudaSuccess)
				kq_wait(k, k->ev[s], "cleanup", NULL, 0);
		}
		cudaGetLastError();
	}
	k->deadline = 0;
	free(mods);
	return rc;
}

int kq_global_scales(struct kq_ctx *k, enum rq_recipe r, const uint16_t *amax, size_t n,
                     float *gs, char *msg, size_t msglen)
{
	uint16_t *da = NULL;
	float *dg = NULL;
	int rc = 0;
	if (!k)
		return kq_fail(msg, msglen, -ENODEV, "no CUDA context");
	if ((unsigned)r >= RQ_RECIPE_COUNT)
		return kq_fail(msg, msglen, -EINVAL, "bad recipe %d", (int)r);
	if (!n)
		return 0;
	KQ_CK("cudaSetDevice", cudaSetDevice(k->dev));
	KQ_CK("cudaMalloc", cudaMalloc((void **)&da, n * sizeof *da));
	KQ_CK("cudaMalloc", cudaMalloc((void **)&dg, n * sizeof *dg));
	KQ_CK("copy to device", cudaMemcpy(da, amax, n * sizeof *da, cudaMemcpyHostToDevice));
	kq_launch_gs_batch(r, da, n, dg);
	KQ_CK("scale kernel", cudaGetLastError());
	KQ_CK("copy to host", cudaMemcpy(gs, dg, n * sizeof *dg, cudaMemcpyDeviceToHost));
fail:
	cudaFree(da);
	cudaFree(dg);
	return rc;
}
