/* kquant_stub.c — kquant.h when requantfs is built without CUDA: nothing is
 * compiled in, no device is ever present, and every operation answers
 * -ENODEV with the reason, so callers fall back to quant/ on the CPU. */
#include "kernels/kquant.h"

#include <errno.h>
#include <stdio.h>

#define KQ_NO_CUDA "built without CUDA (reconfigure with -Dcuda=enabled)"

static int no_cuda(char *msg, size_t msglen)
{
	if (msg && msglen)
		snprintf(msg, msglen, "%s", KQ_NO_CUDA);
	return -ENODEV;
}

int kq_compiled(void)
{
	return 0;
}

int kq_device_count(void)
{
	return 0;
}

int kq_open(int index, size_t mem_limit, struct kq_ctx **out, char *msg, size_t msglen)
{
	return no_cuda(msg, msglen);
}

void kq_close(struct kq_ctx *k)
{
}

const char *kq_name(const struct kq_ctx *k)
{
	return "";
}

int kq_quantize_job(struct kq_ctx *k, enum rq_recipe r, const struct rq_qmod *m, int n,
                    float *gs, int *bad_module, char *msg, size_t msglen)
{
	return no_cuda(msg, msglen);
}

int kq_global_scales(struct kq_ctx *k, enum rq_recipe r, const uint16_t *amax, size_t n,
                     float *gs, char *msg, size_t msglen)
{
	return no_cuda(msg, msglen);
}

int kq_bench(struct kq_ctx *k, enum rq_recipe r, const struct rq_qmod *m, int n, int reps,
             struct kq_timing *t, float *gs, char *msg, size_t msglen)
{
	return no_cuda(msg, msglen);
}

size_t kq_context_bytes(const struct kq_ctx *k)
{
	return 0;
}

int kq_cc(const struct kq_ctx *k)
{
	return 0;
}

int kq_quantize_job_opt(struct kq_ctx *k, enum rq_recipe r, const struct rq_qmod *m, int n,
                        const struct kq_job_opts *o, float *gs, int *bad_module, char *msg,
                        size_t msglen)
{
	return no_cuda(msg, msglen);
}

int kq_poisoned(const struct kq_ctx *k)
{
	return 0;
}

unsigned long long kq_host_copied(const struct kq_ctx *k)
{
	return 0;
}

int kq_host_alloc(struct kq_ctx *k, size_t bytes, void **out, char *msg, size_t msglen)
{
	return no_cuda(msg, msglen);
}

void kq_host_free(struct kq_ctx *k, void *p)
{
}

int kq_obs_search(struct kq_ctx *k, int kind, const struct rq_obs_params *p,
                  const uint16_t *w, size_t rows, size_t cols, size_t group,
                  const struct kq_job_opts *o, uint8_t *best, uint32_t *mask, char *msg,
                  size_t msglen)
{
	return no_cuda(msg, msglen);
}
