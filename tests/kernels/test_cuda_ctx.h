/* test_cuda_ctx.h — whether the CUDA primary context of device 0 is active,
 * asked of the driver (libcuda.so.1, loaded here) rather than the runtime,
 * so that asking creates nothing: the GPU tests check that a quantizer
 * closes what it opened (test_kquant.c, test_qdev_gpu.c). */
#ifndef RQ_TESTS_CUDA_CTX_H
#define RQ_TESTS_CUDA_CTX_H

#include <dlfcn.h>

/* 1 active, 0 inactive, -1 cannot tell (no libcuda, or it failed). */
static inline int primary_active(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return -1;
	int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
	int (*get)(int *, int) = (int (*)(int *, int))dlsym(h, "cuDeviceGet");
	int (*state)(int, unsigned *, int *) =
		(int (*)(int, unsigned *, int *))dlsym(h, "cuDevicePrimaryCtxGetState");
	int dev = 0, active = -1;
	unsigned flags = 0;
	if (!init || !get || !state || init(0) || get(&dev, 0) || state(dev, &flags, &active))
		active = -1;
	dlclose(h);
	return active;
}

#endif
