/* kquant.h — the GPU twin of quant/: the same job, the same bytes, on CUDA.
 *
 * Built from kquant.cu when CUDA is enabled, else from kquant_stub.c whose
 * functions return -ENODEV. Host pointers in, host pointers out: the context
 * owns bounded device buffers (mem_limit bytes) and streams larger modules
 * through them in row chunks. A context is used by one thread at a time
 * (kq_host_alloc/kq_host_free excepted). Waits poll against a watchdog
 * deadline, so a hung kernel fails its job (-ETIMEDOUT) instead of blocking. */
#ifndef RQ_KQUANT_H
#define RQ_KQUANT_H

#include <stddef.h>
#include "quant/quant.h"

struct kq_ctx;

/* 1 if CUDA support was compiled in. */
int kq_compiled(void);
/* Number of usable devices (0 when none or no driver), never negative. */
int kq_device_count(void);
/* Opens device `index` with at most mem_limit bytes of device buffers
 * (0 = default, 1 GiB). msg (may be NULL) gets a reason such as the CUDA
 * error string. Errors, by what the caller should do about them:
 *   -ENODEV  permanent: no CUDA, no such device, a driver too old, or a GPU
 *            that cannot load these kernels (compute capability not built);
 *   -ENOMEM  transient: the context or its buffers did not fit (another
 *            process, e.g. vLLM, holds the GPU memory);
 *   -EBUSY   transient: the device is busy or unavailable (exclusive-process
 *            compute mode with another process on it);
 *   -EIO     any other CUDA failure (retry later with a fresh context);
 *   -EINVAL  a bad argument. */
int kq_open(int index, size_t mem_limit, struct kq_ctx **out, char *msg, size_t msglen);
/* Frees the buffers and releases the primary context. NULL is fine. Waits
 * for the context's queued work first: on a poisoned context (a hung
 * kernel) this can block until that work ends, so call it from a thread
 * that may wait. */
void kq_close(struct kq_ctx *k);
/* Device name for logs/status ("NVIDIA H200"), "" when none. */
const char *kq_name(const struct kq_ctx *k);
/* Device memory the CUDA context itself took when kq_open created it
 * (driver, kernels, heaps; not counted by mem_limit), measured through NVML
 * as the change in the device's used memory around context creation; 0 when
 * unknown (no NVML, or the context already existed in this process). */
size_t kq_context_bytes(const struct kq_ctx *k);
/* Compute capability as 10 * major + minor (90 for an H200), 0 when none. */
int kq_cc(const struct kq_ctx *k);

/* Exactly rq_quantize_job() on the GPU: same results, same errors
 * (-EDOM + *bad_module, -EINVAL), plus the device errors of kq_open
 * (-ENOMEM, -EBUSY, -EIO, -ENODEV) and -ETIMEDOUT from the watchdog
 * (kq_job_opts.timeout_s); msg says which call failed. */
int kq_quantize_job(struct kq_ctx *k, enum rq_recipe r, const struct rq_qmod *m, int n,
                    float *gs, int *bad_module, char *msg, size_t msglen);

/* How one job runs (kq_quantize_job_opt). Zeroed = kq_quantize_job. */
struct kq_job_opts {
	unsigned pinned;          /* bit i: m[i].w lies in kq_host_alloc memory of this
	                             context: DMA straight from it, no host memcpy */
	double timeout_s;         /* watchdog: the job fails with -ETIMEDOUT when its GPU work
	                             has not completed this many seconds after it started
	                             (polled with cudaEventQuery; the context is then poisoned);
	                             <= 0: wait forever */
	double (*now)(void);      /* monotonic seconds for the watchdog; NULL = CLOCK_MONOTONIC
	                             (tests pass a fake clock) */
};
int kq_quantize_job_opt(struct kq_ctx *k, enum rq_recipe r, const struct rq_qmod *m, int n,
                        const struct kq_job_opts *o, float *gs, int *bad_module, char *msg,
                        size_t msglen);
/* 1 when the context must not run another job: the watchdog fired or a
 * sticky CUDA error (illegal address, launch failure) hit it. Close it
 * (from a thread that may wait) and open a fresh one. */
int kq_poisoned(const struct kq_ctx *k);
/* Bytes the jobs so far copied with the host CPU into pinned staging (the
 * inputs not in kq_host_alloc memory); for tests and status. */
unsigned long long kq_host_copied(const struct kq_ctx *k);

/* Page-locked host memory of k's context, for job inputs (kq_job_opts.pinned):
 * the caller preads into it and the job DMAs from it. Thread-safe, also while
 * another thread runs a job on k. Free every buffer with kq_host_free before
 * kq_close (the context owns it). -ENOMEM with msg when it cannot be had. */
int kq_host_alloc(struct kq_ctx *k, size_t bytes, void **out, char *msg, size_t msglen);
void kq_host_free(struct kq_ctx *k, void *p);

/* The MSE observers' search (quant/observer_int.h) of one module on the GPU: for
 * w[rows][cols] in groups of `group` columns, best[] and (mask non-NULL) mask[] per group
 * exactly as rq_obs_search_rows gives them; kind is enum rq_obs_kind, p rq_obs_params().
 * quant/'s rq_obs_choose and rq_obs_range turn them into ranges. The module goes through
 * the context's buffers (mem_limit) in row chunks; o (NULL = no watchdog) as for a job
 * (timeout_s, now; pinned is ignored). Synchronous; -EINVAL bad kind/group, -E2BIG when
 * one row does not fit mem_limit, device errors as kq_quantize_job_opt (-ETIMEDOUT:
 * the watchdog; the context is then poisoned). (kq_obs.cu) */
struct rq_obs_params;
int kq_obs_search(struct kq_ctx *k, int kind, const struct rq_obs_params *p,
                  const uint16_t *w, size_t rows, size_t cols, size_t group,
                  const struct kq_job_opts *o, uint8_t *best, uint32_t *mask, char *msg,
                  size_t msglen);

/* ---- additions for tests and `requantfs bench quant --device cuda` ---- */

/* gs[i] = rq_global_scale(r, amax[i] widened) computed by the device code
 * (the tests compare every finite BF16). */
int kq_global_scales(struct kq_ctx *k, enum rq_recipe r, const uint16_t *amax, size_t n,
                     float *gs, char *msg, size_t msglen);

/* Device-resident timings of one job, best of reps, in seconds. */
struct kq_timing {
	double absmax_s;        /* absmax kernel(s) over the job's inputs */
	double quant_s;         /* scale + quantize kernels */
	double job_s;           /* absmax + scale + quantize back to back */
	double d2d_s;           /* cudaMemcpy device->device of bytes_in */
	double h2d_s;           /* cudaMemcpy of the inputs from the caller's (pageable) memory */
	double d2h_s;           /* cudaMemcpy of the outputs to the caller's memory */
	unsigned long long bytes_in;    /* BF16 input bytes of the job */
	unsigned long long bytes_out;   /* packed + scale bytes of the job */
};
/* Uploads the job once, times its kernels on the resident copy and the plain
 * copies above, and leaves the last run's outputs in m[i].packed/scales and
 * its global scale in *gs. Needs device memory for the job plus bytes_in
 * (not bounded by mem_limit). -EDOM/-EINVAL as kq_quantize_job. */
int kq_bench(struct kq_ctx *k, enum rq_recipe r, const struct rq_qmod *m, int n, int reps,
             struct kq_timing *t, float *gs, char *msg, size_t msglen);

#endif
