/* qdev.h — the quantizer device: "quantize these modules with this recipe on
 * the best device".
 *
 * Chooses CUDA (kernels/) when asked for or available, else the CPU (quant/
 * and a thread pool). When the GPU fails for a passing reason (out of memory
 * while an inference server holds it, exclusive-process mode, a hung kernel
 * caught by the watchdog) jobs run on the CPU, bytes identical, and the GPU is
 * retried after an exponential back-off; permanent failures (no device,
 * kernels not built for it, a bit-exactness self-check mismatch) keep the CPU
 * for the rest of the mount. The CUDA context is released after an idle
 * period so that an inference server gets the whole GPU. Callers (fs/,
 * tools/) know nothing of CUDA. A quantizer is shared by many threads: GPU
 * jobs are serialized on its context, CPU jobs use the pool. */
#ifndef RQ_QDEV_QDEV_H
#define RQ_QDEV_QDEV_H

#include <stddef.h>

#include "quant/quant.h"   /* enum rq_recipe, struct rq_qmod */

struct rq_err;
struct rq_quantizer;

/* --device: "auto", "cpu", "cuda" or "cuda:N" with 0 <= N <= 1024 (NULL is
 * "auto"). *kind gets the choice and *index the CUDA device (0 unless
 * "cuda:N"). -EINVAL for anything else; nothing is written then. */
enum rq_device_kind { RQ_DEVICE_AUTO, RQ_DEVICE_CPU, RQ_DEVICE_CUDA };
int rq_device_parse(const char *s, enum rq_device_kind *kind, int *index);

struct rq_quantizer_opts {
	const char *device;       /* "auto", "cpu", "cuda", "cuda:N" (NULL = auto) */
	int threads;              /* CPU threads, <= 0 = all */
	size_t gpu_mem;           /* bound on device buffers, 0 = 1 GiB */
	double gpu_idle_s;        /* release the CUDA context after this idle time, <= 0 = never */
	/* zero for the defaults: */
	double gpu_timeout_s;     /* watchdog: a GPU job gets this + 1 s per GB of input before
	                             it is failed over to the CPU; <= 0 = 10 s */
	double (*now)(void);      /* monotonic seconds; NULL = CLOCK_MONOTONIC (tests inject one) */
	void (*log)(void *arg, const char *line);   /* one line per GPU state change (failure
	                             and its reason, retry, watchdog, release), or NULL; called
	                             with the quantizer's lock held: must not call back into it */
	void *log_arg;
};

/* -EINVAL for a bad device string, -ENODEV with a message when "cuda" was
 * asked for and the GPU fails for a permanent reason. A passing failure at
 * open (out of memory, busy) opens the quantizer backing off: CPU meanwhile,
 * the GPU retried later (rq_quantizer_fallback_reason says so). */
int rq_quantizer_open(const struct rq_quantizer_opts *o, struct rq_quantizer **out,
                      struct rq_err *err);
void rq_quantizer_close(struct rq_quantizer *q);
/* What jobs run on now: "cuda:0 NVIDIA H200" (also while its context is
 * released or opening), "cpu (16 threads)" (--device cpu, or no usable GPU
 * at open), "cpu (16 threads; GPU backing off)", "cpu (16 threads; GPU off)"
 * (after a permanent failure). The string stays valid until close. */
const char *rq_quantizer_device(struct rq_quantizer *q);
/* A line for the log when the open fell back to the CPU (for good, or
 * backing off), else NULL. */
const char *rq_quantizer_fallback_reason(struct rq_quantizer *q);

/* One job: n (1 or 2) modules sharing one global scale, like
 * rq_quantize_job, on the GPU when there is one (reopening a released
 * context), else, or after a GPU failure, on the CPU. Bit-identical either
 * way. -EDOM NaN/Inf (*bad = the module's index), -EINVAL cols % 16 != 0,
 * -ENOMEM. */
int rq_quantizer_run(struct rq_quantizer *q, enum rq_recipe r, const struct rq_qmod *m, int n,
                     float *gs, int *bad);
/* rq_quantizer_run naming the job (e.g. its first tensor) in the log and the
 * reason when the GPU fails on it. name may be NULL. */
int rq_quantizer_run_named(struct rq_quantizer *q, enum rq_recipe r, const struct rq_qmod *m,
                           int n, const char *name, float *gs, int *bad);

/* A buffer of bytes for a job's BF16 input, to pread SRC into before
 * rq_quantizer_run: page-locked memory of the GPU's context while the GPU is
 * in use, so the job copies it to the device by DMA with no memcpy under the
 * GPU lock; plain memory otherwise (CPU, backing off, released, or over
 * 512 MiB of pinned staging). The bytes are the same either way. NULL when
 * out of memory. Thread-safe; return every buffer with rq_quantizer_unstage
 * before rq_quantizer_close. */
void *rq_quantizer_stage(struct rq_quantizer *q, size_t bytes);
void rq_quantizer_unstage(struct rq_quantizer *q, void *buf);

/* What the device is doing: "gpu" (context open), "gpu-idle" (released
 * after gpu_idle_s, reopened by the next job), "gpu-opening", "backoff" (CPU
 * until the GPU is retried), "disabled" (CPU for good after a permanent
 * failure, or no usable GPU), "cpu" (--device cpu). */
const char *rq_quantizer_state(struct rq_quantizer *q);
/* Why the jobs run where they do, one line for `status`, "" when they run on
 * the GPU as asked. E.g. "cuda:0 out of memory at 10:02:03 UTC quantizing
 * model.layers.40.mlp.experts.0.gate_proj (another process, e.g. vLLM, holds
 * the GPU memory?); retrying the GPU in 40 s (failure 4), CPU meanwhile".
 * Writes at most len bytes (NUL included) and returns buf. */
const char *rq_quantizer_reason(struct rq_quantizer *q, char *buf, size_t len);

struct rq_quantizer_stats {
	unsigned long long gpu_jobs;       /* jobs done on the GPU */
	unsigned long long cpu_jobs;       /* jobs done on the CPU (all causes) */
	unsigned long long gpu_failures;   /* GPU opens or jobs that failed (then CPU) */
	unsigned long long watchdog;       /* of which the watchdog fired */
	unsigned long long gpu_opens;      /* contexts opened (first, after idle, after failure) */
	unsigned long long staged_pinned;  /* rq_quantizer_stage answered with pinned memory */
	unsigned long long staged_plain;   /* ... with plain memory */
	unsigned long long host_copied;    /* input bytes the GPU jobs memcpy'd into staging
	                                      (0 when every input came pinned) */
	unsigned long long context_bytes;  /* device memory the CUDA context itself takes
	                                      (measured at open, NVML), outside --gpu-mem; 0 unknown */
};
void rq_quantizer_get_stats(struct rq_quantizer *q, struct rq_quantizer_stats *s);

#include "quant/scheme.h"   /* enum rq_scheme, struct rq_smod */
#include "quant/observer.h" /* enum rq_observer */

/* One job of a data-free scheme (issue 12): n (1..3) modules, each written
 * whole into m[i].out as rq_scheme_layout lays it out; the NVFP4 schemes'
 * modules share one global scale. With observer o = RQ_OBSERVER_MINMAX the
 * NVFP4 family on BF16 with n <= 2 runs like rq_quantizer_run (GPU when there
 * is one), the rest on the CPU pool. With an MSE observer each module's
 * search runs on the GPU when there is one (kq_obs_search, falling back to
 * the CPU as jobs do) and the rest of the job on the CPU pool
 * (rq_scheme_quantize_obs_dev). Bit-identical either way (qdev_scheme.c).
 * Errors as rq_scheme_quantize_obs (-EDOM NaN/Inf with *bad, -EINVAL,
 * -ENOTSUP, -ERANGE, -ENOMEM). */
int rq_quantizer_run_scheme(struct rq_quantizer *q, enum rq_scheme s, enum rq_recipe r,
                            enum rq_observer o, const struct rq_smod *m, int n, int *bad);

#endif
