/* kq_obs.cu — kq_obs_search (kquant.h): the MSE observers' search of one module on the
 * GPU, kq_obs.cuh's kernel (one thread per group, launched by kquant_kern.cu), with the
 * same per-group results as quant/'s rq_obs_search_rows (observer_int.h).
 *
 * In the context's arena (kquant.cu: bounded by mem_limit, kept between jobs): the step
 * factors and the |d|^2.40625 table, then the weights of as many whole rows as fit with
 * their best[] and mask[]; a module larger than that goes through in row chunks, each
 * uploaded, searched and downloaded on the context's first stream. The search is ~100
 * times minmax's work per byte, so the copies are not overlapped with it. Every wait polls
 * against the job's watchdog (kq_job_opts.timeout_s, kq_wait): a kernel that never
 * completes fails the search with -ETIMEDOUT and poisons the context, as a quantize job
 * does. Errors as kquant.cu's (kq_cuda_fail: -ENOMEM, -EBUSY, -ENODEV, -EIO,
 * -ETIMEDOUT), plus -E2BIG when not even one row fits mem_limit. */
#include "kernels/kquant_int.h"
extern "C" {
#include "quant/observer_int.h"
}

#include <errno.h>

#define KQ_OBS_T_BYTES ((size_t)0x8000 * sizeof(float))
#define KQ_OBS_P_BYTES ((size_t)256 * ((RQ_OBS_MAX_STEPS * sizeof(float) + 255) / 256))

static size_t a256(size_t x)
{
	return (x + 255) & ~(size_t)255;
}

/* kq_wait under the job's deadline, jumping to fail like KQ_CK. */
#define KQ_OBS_WAIT(what) do { \
	KQ_CK("event record", cudaEventRecord(k->ev[0], k->st[0])); \
	rc = kq_wait(k, k->ev[0], (what), msg, msglen); \
	if (rc < 0) \
		goto fail; \
} while (0)

int kq_obs_search(struct kq_ctx *k, int kind, const struct rq_obs_params *p,
                  const uint16_t *w, size_t rows, size_t cols, size_t group,
                  const struct kq_job_opts *o, uint8_t *best, uint32_t *mask, char *msg,
                  size_t msglen)
{
	int rc = 0;
	if (!k)
		return kq_fail(msg, msglen, -ENODEV, "no CUDA context");
	if (k->poisoned)
		return kq_fail(msg, msglen, -EIO, "CUDA context on device %d is poisoned by an "
		               "earlier failure; open a fresh one", k->dev);
	if (!p || p->steps < 1 || p->steps > RQ_OBS_MAX_STEPS || kind < RQ_OBS_FP4 ||
	    kind > RQ_OBS_FP8 || !group || cols % group || group > 0xFFFFFFFFu)
		return kq_fail(msg, msglen, -EINVAL, "MSE search: bad kind %d or group %zu of %zu "
		               "columns", kind, group, cols);
	size_t gpr = cols / group, ng = rows * gpr;
	if (!ng)
		return 0;
	/* per row: its weights, best[] and mask[]; each region 256-aligned */
	size_t fixed = KQ_OBS_T_BYTES + KQ_OBS_P_BYTES + 3 * 256;
	size_t per_row = cols * 2 + gpr * (1 + (mask ? 4 : 0));
	if (k->mem_limit < fixed + per_row)
		return kq_fail(msg, msglen, -E2BIG, "MSE search: a row of %zu weights needs %zu "
		               "bytes of device buffers, over the limit of %zu (--gpu-mem)", cols,
		               fixed + per_row, k->mem_limit);
	size_t crows = (k->mem_limit - fixed) / per_row;
	crows = crows < rows ? crows : rows;
	size_t cng = crows * gpr;
	kq_deadline_start(k, o);
	KQ_CK("cudaSetDevice", cudaSetDevice(k->dev));
	rc = kq_arena_need(k, fixed + crows * per_row, msg, msglen);
	if (rc < 0)
		goto out;
	{
		float *dT = (float *)k->arena;
		float *dP = (float *)(k->arena + KQ_OBS_T_BYTES);
		uint16_t *dw = (uint16_t *)(k->arena + KQ_OBS_T_BYTES + KQ_OBS_P_BYTES);
		uint8_t *db = (uint8_t *)dw + a256(crows * cols * 2);
		uint32_t *dm = mask ? (uint32_t *)(db + a256(cng)) : NULL;
		KQ_CK("copy to device", cudaMemcpyAsync(dT, rq_obs_pow_table(), KQ_OBS_T_BYTES,
		                                        cudaMemcpyHostToDevice, k->st[0]));
		KQ_CK("copy to device", cudaMemcpyAsync(dP, p->p, sizeof(float) * (size_t)p->steps,
		                                        cudaMemcpyHostToDevice, k->st[0]));
		for (size_t r0 = 0; r0 < rows; r0 += crows) {
			size_t nr = rows - r0 < crows ? rows - r0 : crows, g0 = r0 * gpr;
			KQ_CK("copy to device", cudaMemcpyAsync(dw, w + r0 * cols, nr * cols * 2,
			                                        cudaMemcpyHostToDevice, k->st[0]));
			kq_launch_obs(kind, p->steps, p->expand, dP, dT, dw, nr * gpr, (unsigned)group,
			              db, dm, k->st[0]);
			KQ_CK("MSE search kernel", cudaGetLastError());
			KQ_OBS_WAIT("MSE search kernel");
			KQ_CK("copy to host", cudaMemcpyAsync(best + g0, db, nr * gpr,
			                                      cudaMemcpyDeviceToHost, k->st[0]));
			if (mask)
				KQ_CK("copy to host", cudaMemcpyAsync(mask + g0, dm, 4 * nr * gpr,
				                                      cudaMemcpyDeviceToHost, k->st[0]));
			KQ_OBS_WAIT("copy to host");
		}
	}
	goto out;
fail:
out:
	if (rc < 0 && !k->poisoned) {          /* leave no copy in flight on the arena */
		if (cudaEventRecord(k->ev[0], k->st[0]) == cudaSuccess)
			kq_wait(k, k->ev[0], "cleanup", NULL, 0);
		cudaGetLastError();
	}
	k->deadline = 0;
	return rc;
}
