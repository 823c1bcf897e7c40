/* ek_obs_cpu.c — CPU twins of the calibration observer's reductions
 * (ek_obs.cu): the same maxima, so the same bits (a max is exact in any
 * order; NaN skipped). Host memory. */
#include "kernels/ek.h"

#include <math.h>
#include <stddef.h>

static float row_max(const float *x, int cols)
{
	float m = 0.0f;
	for (int c = 0; c < cols; c++) {
		float a = fabsf(x[c]);
		if (a > m)
			m = a;
	}
	return m;
}

void ek_obs_amax_cpu(const float *x, int ldx, int T, int cols, float *amax)
{
	for (int t = 0; t < T; t++) {
		float m = row_max(x + (size_t)t * ldx, cols);
		if (m > *amax)
			*amax = m;
	}
}

void ek_obs_rows_cpu(const float *x, int ldx, const int *rowmap, int xdiv, int S, int cols,
                     const int *ids, int E, float *amax, unsigned *cnt, int stride)
{
	for (int s = 0; s < S; s++) {
		int r = (rowmap ? rowmap[s] : s) / xdiv, e = ids[s];
		if (e < 0 || e >= E)
			continue;
		float m = row_max(x + (size_t)r * ldx, cols);
		if (m > amax[(size_t)e * stride])
			amax[(size_t)e * stride] = m;
		if (cnt)
			cnt[(size_t)e * stride]++;
	}
}
