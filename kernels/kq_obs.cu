/* kq_obs.cu — kq_obs_search (kquant.h): the MSE observers' search of one module on the
 * GPU, kq_obs.cuh's kernel (one thread per group), with the same per-group results as
 * quant/'s rq_obs_search_rows (observer_int.h). Synchronous: upload the weights, the step
 * factors and the |d|^2.40625 table, run, download best[] and mask[]; device memory freed
 * before return. Errors as kquant.cu's (kq_cuda_fail: -ENOMEM, -ENODEV, -EIO, ...). */
#include "kernels/kquant_int.h"
#include "kernels/kq_obs.cuh"
extern "C" {
#include "quant/observer_int.h"
}

#include <errno.h>

int kq_obs_search(struct kq_ctx *k, int kind, const struct rq_obs_params *p,
                  const uint16_t *w, size_t rows, size_t cols, size_t group, uint8_t *best,
                  uint32_t *mask, char *msg, size_t msglen)
{
	uint16_t *dw = NULL;
	float *dp = NULL, *dt = NULL;
	uint8_t *db = NULL;
	uint32_t *dm = NULL;
	int rc = 0;
	if (!k)
		return kq_fail(msg, msglen, -ENODEV, "no CUDA context");
	if (!p || kind < RQ_OBS_FP4 || kind > RQ_OBS_FP8 || !group || cols % group ||
	    group > 0xFFFFFFFFu)
		return kq_fail(msg, msglen, -EINVAL, "MSE search: bad kind %d or group %zu of %zu "
		               "columns", kind, group, cols);
	size_t ng = rows * cols / group, wbytes = rows * cols * 2;
	if (!ng)
		return 0;
	if (wbytes + ng * 5 + (0x8000 + RQ_OBS_MAX_STEPS) * sizeof(float) > k->mem_limit)
		return kq_fail(msg, msglen, -ENOMEM, "MSE search: %zu bytes of weights over the "
		               "device memory limit %zu", wbytes, k->mem_limit);
	KQ_CK("cudaSetDevice", cudaSetDevice(k->dev));
	KQ_CK("cudaMalloc", cudaMalloc((void **)&dw, wbytes));
	KQ_CK("cudaMalloc", cudaMalloc((void **)&dp, sizeof(float) * (size_t)p->steps));
	KQ_CK("cudaMalloc", cudaMalloc((void **)&dt, sizeof(float) * 0x8000));
	KQ_CK("cudaMalloc", cudaMalloc((void **)&db, ng));
	if (mask)
		KQ_CK("cudaMalloc", cudaMalloc((void **)&dm, sizeof(uint32_t) * ng));
	KQ_CK("copy to device", cudaMemcpy(dw, w, wbytes, cudaMemcpyHostToDevice));
	KQ_CK("copy to device", cudaMemcpy(dp, p->p, sizeof(float) * (size_t)p->steps,
	                                   cudaMemcpyHostToDevice));
	KQ_CK("copy to device", cudaMemcpy(dt, rq_obs_pow_table(), sizeof(float) * 0x8000,
	                                   cudaMemcpyHostToDevice));
	k_obs_search<<<(unsigned)((ng + 127) / 128), 128>>>(kind, p->steps, p->expand,
	                                                    rq_obs_q(kind), dp, dt, dw,
	                                                    (unsigned long long)ng,
	                                                    (unsigned)group, db, dm);
	KQ_CK("MSE search kernel", cudaGetLastError());
	KQ_CK("copy to host", cudaMemcpy(best, db, ng, cudaMemcpyDeviceToHost));
	if (mask)
		KQ_CK("copy to host", cudaMemcpy(mask, dm, sizeof(uint32_t) * ng,
		                                 cudaMemcpyDeviceToHost));
fail:
	cudaFree(dw);
	cudaFree(dp);
	cudaFree(dt);
	cudaFree(db);
	cudaFree(dm);
	return rc;
}
