/* qdev.h — the quantizer device: "quantize these modules with this recipe on
 * the best device".
 *
 * Chooses CUDA (kernels/) when asked for or available, else the CPU (quant/
 * and a thread pool); falls back to the CPU for good when the GPU fails; and
 * releases the CUDA context after an idle period so that an inference server
 * gets the whole GPU. Callers (fs/, tools/) know nothing of CUDA. A quantizer
 * is shared by many threads: GPU jobs are serialized on its context, CPU jobs
 * use the pool. */
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
};

/* -EINVAL for a bad device string, -ENODEV with a message when "cuda" was
 * asked for and none is usable. */
int rq_quantizer_open(const struct rq_quantizer_opts *o, struct rq_quantizer **out,
                      struct rq_err *err);
void rq_quantizer_close(struct rq_quantizer *q);
/* "cpu (16 threads)" or "cuda:0 NVIDIA H200"; what jobs run on now. */
const char *rq_quantizer_device(struct rq_quantizer *q);
/* A line for the log when auto fell back to the CPU, else NULL. */
const char *rq_quantizer_fallback_reason(struct rq_quantizer *q);

/* One job: n (1 or 2) modules sharing one global scale, like
 * rq_quantize_job, on the GPU when there is one (reopening a released
 * context), else, or after a GPU failure, on the CPU. Bit-identical either
 * way. -EDOM NaN/Inf (*bad = the module's index), -EINVAL cols % 16 != 0,
 * -ENOMEM. */
int rq_quantizer_run(struct rq_quantizer *q, enum rq_recipe r, const struct rq_qmod *m, int n,
                     float *gs, int *bad);

#endif
