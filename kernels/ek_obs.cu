/* ek_obs.cu — the calibration observer's reductions (ek.h ek_obs_amax,
 * ek_obs_rows; engine/model/observe.h says what is observed where).
 *
 * Each folds max|x| of a Linear's input into a running max in device memory
 * with atomicMax on the float's bits: for floats >= 0 the order of the bits
 * as unsigned integers is the numeric order, so the integer max is the float
 * max, and a max is exact in any order — the op and its CPU twin
 * (ek_obs_cpu.c) agree bit for bit. NaN inputs are skipped (fmaxf), as the CPU
 * observer's `a > mx` skips them. One block per row (grid-stride), a
 * warp/block max reduction, one atomic per block and destination. Nothing
 * comes back to the host here: the engine copies the maxima once, at the end. */
#include "kernels/ek_dev.cuh"

#include <errno.h>

#define OBS_THREADS 256

/* amax[0] = max(amax[0], max |x[t][c]|), t < T, c < cols */
__global__ void k_obs_amax(const float *x, int ldx, int T, int cols, unsigned *amax)
{
	__shared__ float sh[33];
	pdl_start();
	float m = 0.0f;
	for (int t = blockIdx.x; t < T; t += gridDim.x)
		for (int c = threadIdx.x; c < cols; c += blockDim.x)
			m = fmaxf(m, fabsf(x[(size_t)t * ldx + c]));
	m = block_max(m, sh);
	if (threadIdx.x == 0 && m > 0.0f)
		atomicMax(amax, __float_as_uint(m));
}

/* per slot s < S: row (rowmap ? rowmap[s] : s) / xdiv of x, expert e = ids[s]:
 * amax[e·stride] = max(.., max|row|), cnt[e·stride] += 1 (cnt may be NULL) */
__global__ void k_obs_rows(const float *x, int ldx, const int *rowmap, int xdiv, int S, int cols,
                           const int *ids, int E, unsigned *amax, unsigned *cnt, int stride)
{
	__shared__ float sh[33];
	pdl_start();
	for (int s = blockIdx.x; s < S; s += gridDim.x) {
		int r = (rowmap ? rowmap[s] : s) / xdiv, e = ids[s];
		float m = 0.0f;
		for (int c = threadIdx.x; c < cols; c += blockDim.x)
			m = fmaxf(m, fabsf(x[(size_t)r * ldx + c]));
		m = block_max(m, sh);
		if (threadIdx.x == 0 && e >= 0 && e < E) {
			if (m > 0.0f)
				atomicMax(amax + (size_t)e * stride, __float_as_uint(m));
			if (cnt)
				atomicAdd(cnt + (size_t)e * stride, 1u);
		}
	}
}

static unsigned grid_for(struct ek_dev *d, int rows)
{
	int cap = d->sms * 8 > 0 ? d->sms * 8 : 1;
	return (unsigned)(rows < cap ? rows : cap);
}

extern "C" int ek_obs_amax(struct ek_dev *d, const float *x, int ldx, int T, int cols, float *amax)
{
	if (T < 0 || cols < 0 || (T && ldx < cols) || !amax)
		return ek_fail(d, -EINVAL, "obs_amax: T %d, cols %d, ldx %d", T, cols, ldx);
	if (!T || !cols)
		return 0;
	ek_launch(d, k_obs_amax, dim3(grid_for(d, T)), dim3(OBS_THREADS), 0, x, ldx, T, cols,
	          (unsigned *)amax);
	return ek_launched(d, "obs_amax");
}

extern "C" int ek_obs_rows(struct ek_dev *d, const float *x, int ldx, const int *rowmap, int xdiv,
                           int S, int cols, const int *ids, int E, float *amax, unsigned *cnt,
                           int stride)
{
	if (S < 0 || cols < 0 || xdiv < 1 || E < 1 || stride < 1 || !ids || !amax ||
	    (S && ldx < cols))
		return ek_fail(d, -EINVAL, "obs_rows: S %d, cols %d, ldx %d, xdiv %d, E %d, stride %d", S,
		               cols, ldx, xdiv, E, stride);
	if (!S || !cols)
		return 0;
	ek_launch(d, k_obs_rows, dim3(grid_for(d, S)), dim3(OBS_THREADS), 0, x, ldx, rowmap, xdiv, S,
	          cols, ids, E, (unsigned *)amax, cnt, stride);
	return ek_launched(d, "obs_rows");
}
