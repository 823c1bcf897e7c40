/* test_ek_dev.h — the device side of the GPU engine-kernel tests
 * (test_ek_gpu.c, test_ek_gpu_pf.c, test_ek_wq_gpu.c): the one device D (opened
 * or the test skipped), uploads and
 * downloads that end the test (exit 1, message printed) when they fail, and
 * a tu_w weight set copied to the device. */
#ifndef RQ_TESTS_EK_DEV_H
#define RQ_TESTS_EK_DEV_H

#include "tests/kernels/test_ek_util.h"

#include <stdio.h>

static struct ek_dev *D;

/* Opens device 0 as D (inf: its info), or skips the whole test saying why. */
static inline void dev_open_or_skip(struct ek_info *inf)
{
	char msg[512];
	if (!ek_compiled())
		TAP_SKIP_ALL("built without CUDA (reconfigure with -Dcuda=enabled)");
	if (ek_device_count() == 0)
		TAP_SKIP_ALL("no usable CUDA device (ek_device_count() == 0)");
	if (ek_open(0, &D, msg, sizeof msg))
		TAP_SKIP_ALL("ek_open: %s", msg);
	ek_info(D, inf);
}

static inline void *up(const void *h, size_t n)
{
	void *d = ek_alloc(D, n);
	if (!d || ek_h2d(D, d, h, n)) {
		printf("# upload of %zu bytes: %s\n", n, ek_error(D));
		exit(1);
	}
	return d;
}

static inline void down(void *h, const void *d, size_t n)
{
	if (ek_d2h(D, h, d, n) || ek_sync(D)) {
		printf("# download: %s\n", ek_error(D));
		exit(1);
	}
}

/* t's weights on D (free with wdev_free). */
static inline struct ek_w wdev(const struct tu_w *t)
{
	struct ek_w w = t->w;
	w.data = up(t->data, t->w.stride * t->w.n);
	w.gs = t->gs ? up(t->gs, sizeof(float) * t->w.n) : NULL;
	return w;
}

static inline void wdev_free(struct ek_w *w)
{
	ek_free(D, (void *)w->data);
	ek_free(D, (void *)w->gs);
}

#endif
