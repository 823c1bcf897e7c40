/* kquant.h — the GPU twin of quant/: the same job, the same bytes, on CUDA.
 *
 * Built from kquant.cu when CUDA is enabled, else from kquant_stub.c whose
 * functions return -ENODEV. Host pointers in, host pointers out: the context
 * owns bounded device buffers (mem_limit bytes) and streams larger modules
 * through them in row chunks. A context is used by one thread at a time. */
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
 * (0 = default, 1 GiB). -ENODEV without CUDA or device; msg (may be NULL)
 * gets a reason such as the CUDA error string. */
int kq_open(int index, size_t mem_limit, struct kq_ctx **out, char *msg, size_t msglen);
/* Frees the buffers and releases the primary context. NULL is fine. */
void kq_close(struct kq_ctx *k);
/* Device name for logs/status ("NVIDIA H200"), "" when none. */
const char *kq_name(const struct kq_ctx *k);

/* Exactly rq_quantize_job() on the GPU: same results, same errors
 * (-EDOM + *bad_module, -EINVAL), plus -EIO on a CUDA failure (msg says which). */
int kq_quantize_job(struct kq_ctx *k, enum rq_recipe r, const struct rq_qmod *m, int n,
                    float *gs, int *bad_module, char *msg, size_t msglen);

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
