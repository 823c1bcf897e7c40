/* ek_stub_pdl.c — the PDL, launch-count and fused RMSNorm+GEMV entry points of
 * kernels/ek.h when requantfs is built without CUDA (beside ek_stub.c): no
 * device is ever opened, so each answers "off", 0 or -ENODEV. */
#include "kernels/ek.h"

#include <errno.h>

int ek_pdl(const struct ek_dev *d)
{
	(void)d;
	return 0;
}

int ek_set_pdl(struct ek_dev *d, int mode)
{
	(void)d;
	(void)mode;
	return -ENODEV;
}

const char *ek_pdl_status(const struct ek_dev *d)
{
	(void)d;
	return "built without CUDA";
}

unsigned long long ek_launches(const struct ek_dev *d)
{
	(void)d;
	return 0;
}

int ek_gemv_norm(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx,
                 const float *nw, float eps, float *xn, int ldxn, float *y, int ldy, int T,
                 int acc)
{
	(void)d, (void)W, (void)x, (void)ldx, (void)nw, (void)eps, (void)xn, (void)ldxn;
	(void)y, (void)ldy, (void)T, (void)acc;
	return -ENODEV;
}
