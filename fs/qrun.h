/* qrun.h — runs a plan's quantization jobs on a device (CPU or CUDA).
 *
 * fs/ knows nothing of CUDA: it calls kernels/kquant.h's C interface and
 * falls back to quant/ on the CPU. A quantizer is shared by many threads;
 * jobs on the GPU are serialized on its context, CPU jobs use the pool. */
#ifndef RQ_FS_QRUN_H
#define RQ_FS_QRUN_H

#include <stddef.h>
#include <stdint.h>

struct rq_plan;
struct rq_err;
struct rq_quantizer;

struct rq_quantizer_opts {
	const char *device;       /* "auto", "cpu", "cuda", "cuda:N" (NULL = auto) */
	int threads;              /* CPU threads, <= 0 = all */
	size_t gpu_mem;           /* bound on device buffers, 0 = 1 GiB */
	double gpu_idle_s;        /* release the CUDA context after this idle time, <= 0 = never */
};

/* -ENODEV with a message when "cuda" was asked for and none is usable. */
int rq_quantizer_open(const struct rq_quantizer_opts *o, struct rq_quantizer **out,
                      struct rq_err *err);
void rq_quantizer_close(struct rq_quantizer *q);
/* "cpu (16 threads)" or "cuda:0 NVIDIA H200"; what jobs run on now. */
const char *rq_quantizer_device(struct rq_quantizer *q);
/* A line for the log when auto fell back to the CPU, else NULL. */
const char *rq_quantizer_fallback_reason(struct rq_quantizer *q);

/* Runs job j: reads its BF16 weights from SRC (fds indexed like plan->srcs),
 * quantizes, and writes plan->jobs[j].out_size bytes to out. Errors name the
 * tensor: -EDOM NaN/Inf, -EIO read error or short file, -ENOMEM. */
int rq_job_run(struct rq_quantizer *q, const struct rq_plan *p, size_t j, const int *src_fds,
               uint8_t *out, struct rq_err *err);

#endif
