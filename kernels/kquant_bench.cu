/* kquant_bench.cu — device-resident timings of the quantizer's kernels next
 * to plain copies of the same bytes (kq_bench, for `requantfs bench quant
 * --device cuda`). Kernel times come from CUDA events on the context's
 * stream; host copies from the monotonic clock around synchronous
 * cudaMemcpy. Every figure is the best of reps. */
#include "kernels/kquant_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void best(double *b, double t)
{
	if (*b <= 0 || t < *b)
		*b = t;
}

int kq_bench(struct kq_ctx *k, enum rq_recipe r, const struct rq_qmod *m, int n, int reps,
             struct kq_timing *t, float *gs, char *msg, size_t msglen)
{
	uint8_t *buf = NULL, *dcopy = NULL;
	uint8_t **din = NULL, **dpk = NULL, **dsc = NULL;
	size_t *groups = NULL;
	size_t bin = 0, bout = 0, span_in = 0, span_pk = 0, span_sc = 0;
	cudaEvent_t e0 = NULL, e1 = NULL;
	cudaStream_t st;
	float ms, g;
	int rc = 0;

	if (!k)
		return kq_fail(msg, msglen, -ENODEV, "no CUDA context");
	if (n <= 0 || (unsigned)r >= RQ_RECIPE_COUNT || !m || !t)
		return kq_fail(msg, msglen, -EINVAL, "bad job (%d modules, recipe %d)", n, (int)r);
	for (int i = 0; i < n; i++) {
		if (m[i].cols % 16 != 0 || m[i].cols == 0)
			return kq_fail(msg, msglen, -EINVAL, "module %d: %zu columns", i, m[i].cols);
	}
	if (reps < 1)
		reps = 1;
	memset(t, 0, sizeof *t);
	st = k->st[0];
	groups = (size_t *)calloc((size_t)n, sizeof *groups);
	din = (uint8_t **)calloc((size_t)n * 3, sizeof *din);
	if (!groups || !din) {
		rc = kq_fail(msg, msglen, -ENOMEM, "out of memory");
		goto fail;
	}
	dpk = din + n;
	dsc = dpk + n;
	for (int i = 0; i < n; i++) {
		groups[i] = kq_groups(&m[i]);
		bin += groups[i] * KQ_IN_G;
		bout += groups[i] * (KQ_PK_G + 1);
		span_in += (groups[i] * KQ_IN_G + 255) & ~(size_t)255;
		span_pk += (groups[i] * KQ_PK_G + 255) & ~(size_t)255;
		span_sc += (groups[i] + 255) & ~(size_t)255;
	}
	t->bytes_in = bin;
	t->bytes_out = bout;
	KQ_CK("cudaSetDevice", cudaSetDevice(k->dev));
	rc = kq_amax_need(k, n, msg, msglen);
	if (rc < 0)
		goto fail;
	/* inputs side by side (one D2D span), then packed, then scales */
	KQ_CK("cudaMalloc (bench)", cudaMalloc((void **)&buf, span_in + span_pk + span_sc + 256));
	KQ_CK("cudaMalloc (bench copy)", cudaMalloc((void **)&dcopy, bin + 256));
	{
		uint8_t *pi = buf, *pp = buf + span_in, *ps = pp + span_pk;
		for (int i = 0; i < n; i++) {
			din[i] = pi;
			dpk[i] = pp;
			dsc[i] = ps;
			pi += (groups[i] * KQ_IN_G + 255) & ~(size_t)255;
			pp += (groups[i] * KQ_PK_G + 255) & ~(size_t)255;
			ps += (groups[i] + 255) & ~(size_t)255;
		}
	}
	KQ_CK("cudaEventCreate", cudaEventCreate(&e0));
	KQ_CK("cudaEventCreate", cudaEventCreate(&e1));

	for (int rep = 0; rep < reps; rep++) {             /* host -> device, pageable */
		double t0 = now_s();
		for (int i = 0; i < n; i++)
			KQ_CK("copy to device", cudaMemcpy(din[i], m[i].w, groups[i] * KQ_IN_G,
			                                   cudaMemcpyHostToDevice));
		best(&t->h2d_s, now_s() - t0);
	}
	for (int rep = 0; rep <= reps; rep++) {            /* device -> device baseline */
		KQ_CK("event", cudaEventRecord(e0, st));
		KQ_CK("copy on device", cudaMemcpyAsync(dcopy, buf, bin, cudaMemcpyDeviceToDevice, st));
		KQ_CK("event", cudaEventRecord(e1, st));
		KQ_CK("copy on device", cudaEventSynchronize(e1));
		KQ_CK("event", cudaEventElapsedTime(&ms, e0, e1));
		if (rep)                                       /* the first one warms up */
			best(&t->d2d_s, ms * 1e-3);
	}
	for (int rep = 0; rep <= reps; rep++) {            /* absmax + scale */
		KQ_CK("event", cudaEventRecord(e0, st));
		KQ_CK("memset", cudaMemsetAsync(k->damax, 0, (size_t)n * 4, st));
		for (int i = 0; i < n; i++)
			kq_launch_absmax(k, din[i], groups[i], k->damax + i, st);
		KQ_CK("event", cudaEventRecord(e1, st));
		kq_launch_scale(r, k->damax, n, k->dres, st);
		KQ_CK("absmax kernel", cudaGetLastError());
		KQ_CK("copy result", cudaMemcpyAsync(k->hres, k->dres, sizeof *k->hres,
		                                     cudaMemcpyDeviceToHost, st));
		KQ_CK("absmax kernel", cudaStreamSynchronize(st));
		KQ_CK("event", cudaEventElapsedTime(&ms, e0, e1));
		if (rep)
			best(&t->absmax_s, ms * 1e-3);
	}
	if (k->hres->bad >= 0) {
		rc = kq_fail(msg, msglen, -EDOM, "module %d: NaN or Inf in the weights",
		             k->hres->bad);
		goto fail;
	}
	g = k->hres->gs;
	for (int rep = 0; rep <= reps; rep++) {            /* scale + quantize */
		KQ_CK("event", cudaEventRecord(e0, st));
		kq_launch_scale(r, k->damax, n, k->dres, st);
		for (int i = 0; i < n; i++)
			kq_launch_quant(r, din[i], groups[i], g, dpk[i], dsc[i], st);
		KQ_CK("event", cudaEventRecord(e1, st));
		KQ_CK("quantize kernel", cudaGetLastError());
		KQ_CK("quantize kernel", cudaEventSynchronize(e1));
		KQ_CK("event", cudaEventElapsedTime(&ms, e0, e1));
		if (rep)
			best(&t->quant_s, ms * 1e-3);
	}
	for (int rep = 0; rep <= reps; rep++) {            /* the whole job on the device */
		KQ_CK("event", cudaEventRecord(e0, st));
		KQ_CK("memset", cudaMemsetAsync(k->damax, 0, (size_t)n * 4, st));
		for (int i = 0; i < n; i++)
			kq_launch_absmax(k, din[i], groups[i], k->damax + i, st);
		kq_launch_scale(r, k->damax, n, k->dres, st);
		for (int i = 0; i < n; i++)
			kq_launch_quant(r, din[i], groups[i], g, dpk[i], dsc[i], st);
		KQ_CK("event", cudaEventRecord(e1, st));
		KQ_CK("job kernels", cudaGetLastError());
		KQ_CK("job kernels", cudaEventSynchronize(e1));
		KQ_CK("event", cudaEventElapsedTime(&ms, e0, e1));
		if (rep)
			best(&t->job_s, ms * 1e-3);
	}
	for (int rep = 0; rep < reps; rep++) {             /* device -> host, pageable */
		double t0 = now_s();
		for (int i = 0; i < n; i++) {
			KQ_CK("copy to host", cudaMemcpy(m[i].packed, dpk[i], groups[i] * KQ_PK_G,
			                                 cudaMemcpyDeviceToHost));
			KQ_CK("copy to host", cudaMemcpy(m[i].scales, dsc[i], groups[i],
			                                 cudaMemcpyDeviceToHost));
		}
		best(&t->d2h_s, now_s() - t0);
	}
	if (gs)
		*gs = g;
fail:
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	cudaFree(buf);
	cudaFree(dcopy);
	free(groups);
	free(din);
	return rc;
}
