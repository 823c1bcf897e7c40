/* ek_gemv_bf16.cuh — the GEMV kernels' argument block and block sizes, the
 * MoE down-projection's combine, and the BF16 GEMV kernel (k_gemv_bf16, its
 * modes and the fused RMSNorm; described at the top of ek_gemv.cu).
 * Internal to kernels/ (ek_gemv.cu) and to tests/kernels/test_ek_gemv_simt.cpp,
 * which runs this very kernel on the host under a SIMT emulation.
 *
 * Needs, defined before it is included: ek_dev.cuh's device helpers or the
 * emulation's (pdl_start, prefetch_l2, ld_stream16, bf16f, dsilu, the
 * reductions of ek_reduce.cuh), __ldg, __ldcg, atomicAdd, __threadfence,
 * and EK_DYN_SMEM(type, name): the block's dynamic shared memory as name. */
#ifndef RQ_KERNELS_EK_GEMV_BF16_CUH
#define RQ_KERNELS_EK_GEMV_BF16_CUH

#include "kernels/ek_gv_modes.h"

#define GV_THREADS 256
#define BF_R 2                     /* rows per warp (BF16) */
#define BF_ROWS (8 * BF_R)         /* rows per block (BF16) */
#define FP_RT 2                    /* row tiles per block (NVFP4) */
#define FP_KS 4                    /* K-splits per block (NVFP4) */
#define FP_ROWS (16 * FP_RT)
#define XS_BUDGET (32 * 1024)      /* bytes of staged fp16 x per block */
#define UNROLL 4

struct gv_args {
	const uint8_t *w, *w2;     /* set bases: PLAIN/DOWN w; GU gate w, up w2 */
	size_t stride, stride2;    /* bytes between matrices */
	const float *gs, *gs2;     /* NVFP4 global scales [n] */
	int rows, cols, n;
	const float *x;            /* inputs, rows of ldx floats */
	int ldx;
	float *y;                  /* outputs, rows of ldy floats */
	int ldy;
	int T;                     /* PLAIN: tokens; MoE: slots (= gridDim.y) */
	int acc;
	const int *ids;            /* MoE: [slots] expert per slot */
	int k;                     /* MoE: picks per token */
	const float *wts;          /* DOWN: [slots] routing weights */
	float scale;
	float *out;                /* DOWN: [slots / k][ldo] */
	int ldo;
	int *cnt;                  /* DOWN: [row blocks] arrival counters */
	const float *nw;           /* NORM: RMSNorm weights [cols] */
	float eps;
	float *xn;                 /* NORM: normalized x out (block 0), or NULL */
	int ldxn;
	int gshift;                /* FP8/INT (ek_gemv_q.cuh): scale group of column c is
	                              c >> gshift, both sets of GU */
};

/* The FP8 / INT8 / INT4 GEMVs (ek_wq.cu, kernel in ek_gemv_q.cuh): a filled
 * by ek_gv, insts = gridDim.y; norm: the fused RMSNorm (PLAIN only). */
int ek_gv_q(struct ek_dev *d, int kind, int mode, const gv_args &a, int insts, int norm);

static __device__ __forceinline__ int slot_expert(const gv_args &a, int s)
{
	int e = a.ids[s];
	return e < 0 || e >= a.n ? 0 : e;
}

/* GV_DOWN: after every slot's block of this row block has written y, the
 * last one to arrive combines them into out (fixed pick order). */
static __device__ void down_combine(const gv_args &a, int rbeg, int rend)
{
	__shared__ int last;
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		last = atomicAdd(&a.cnt[blockIdx.x], 1) == (int)gridDim.y - 1;
	}
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	int nr = rend - rbeg, ntok = (int)gridDim.y / a.k;
	for (int i = threadIdx.x; i < nr * ntok; i += blockDim.x) {
		int t = i / nr, r = rbeg + i % nr;
		float s = 0.0f;
		for (int j = 0; j < a.k; j++) {
			int sl = t * a.k + j;
			s = __fadd_rn(s, __fmul_rn(a.wts[sl], __ldcg(&a.y[(size_t)sl * a.ldy + r])));
		}
		float *o = &a.out[(size_t)t * a.ldo + r];
		*o = __fadd_rn(a.acc ? *o : 0.0f, __fmul_rn(a.scale, s));
	}
	if (threadIdx.x == 0)
		a.cnt[blockIdx.x] = 0;
}

/* ------------------------------------------------------------- BF16 */

static __device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b, float acc)
{
	acc = fmaf(__uint_as_float(w.x << 16), a.x, acc);
	acc = fmaf(__uint_as_float(w.x & 0xFFFF0000u), a.y, acc);
	acc = fmaf(__uint_as_float(w.y << 16), a.z, acc);
	acc = fmaf(__uint_as_float(w.y & 0xFFFF0000u), a.w, acc);
	acc = fmaf(__uint_as_float(w.z << 16), b.x, acc);
	acc = fmaf(__uint_as_float(w.z & 0xFFFF0000u), b.y, acc);
	acc = fmaf(__uint_as_float(w.w << 16), b.z, acc);
	acc = fmaf(__uint_as_float(w.w & 0xFFFF0000u), b.w, acc);
	return acc;
}

template <bool SM>
static __device__ __forceinline__ float4 ldx4(const float4 *p)
{
	if (SM)
		return *p;
	return __ldg(p);
}

template <bool SM>
static __device__ __forceinline__ float ldx1(const float *p)
{
	if (SM)
		return *p;
	return __ldg(p);
}

/* Plain mode: the first UNROLL 16-byte chunks of this warp's rows, before
 * the wait (weights only; addresses inside the matrix). */
static __device__ __forceinline__ void bf16_prefetch(const gv_args &a, int r0, int lane)
{
	if (r0 >= a.rows)
		return;
#pragma unroll
	for (int r = 0; r < BF_R; r++) {
		const uint16_t *w = (const uint16_t *)a.w + (size_t)min(r0 + r, a.rows - 1) * a.cols;
#pragma unroll
		for (int u = 0; u < UNROLL; u++)
			if (lane * 8 + 256 * u < a.cols)
				prefetch_l2(w + lane * 8 + 256 * u);
	}
}

/* NORM: xs[t][0..K) = nw ⊙ x[t] · r_t for t < ntok (block 0 also stores
 * them to a.xn). Ends with a barrier. */
static __device__ void norm_stage(const gv_args &a, int ntok, float *xs, float *sh)
{
	int K = a.cols;
	for (int t = 0; t < ntok; t++) {
		const float *xt = a.x + (size_t)t * a.ldx;
		float r = rms_rinv(xt, K, a.eps, sh);
		for (int i = threadIdx.x; i < K; i += blockDim.x) {
			float v = rms_val(a.nw[i], xt[i], r);
			xs[(size_t)t * K + i] = v;
			if (a.xn && blockIdx.x == 0)
				a.xn[(size_t)t * a.ldxn + i] = v;
		}
	}
	__syncthreads();
}

/* The GEMV kernels' end (BF16 here, FP8/INT in ek_gemv_q.cuh): each row's
 * lane sums meet (warp_sum); lane 0 writes rows r0 .. r0 + R by MODE (PLAIN:
 * y (+)= for each token, GU: silu(g)·u, DOWN: the slot's y); then GV_DOWN's
 * combine of the block's RB rows. */
template <int NS, int R, int TT, int MODE, int RB>
static __device__ __forceinline__ void gv_finish(const gv_args &a, float (&acc)[NS][R][TT], int r0,
                                                 int ntok, int inst, int lane)
{
#pragma unroll
	for (int s = 0; s < NS; s++)
#pragma unroll
		for (int r = 0; r < R; r++)
#pragma unroll
			for (int t = 0; t < TT; t++)
				acc[s][r][t] = warp_sum(acc[s][r][t]);
	if (lane == 0) {
#pragma unroll
		for (int r = 0; r < R; r++) {
			int row = r0 + r;
			if (row >= a.rows)
				break;
			if (MODE == GV_PLAIN) {
#pragma unroll
				for (int t = 0; t < TT; t++)
					if (t < ntok) {
						float *o = &a.y[(size_t)t * a.ldy + row];
						*o = a.acc ? __fadd_rn(*o, acc[0][r][t]) : acc[0][r][t];
					}
			} else if (MODE == GV_GU) {
				a.y[(size_t)inst * a.ldy + row] = __fmul_rn(dsilu(acc[0][r][0]), acc[NS - 1][r][0]);
			} else {
				a.y[(size_t)inst * a.ldy + row] = acc[0][r][0];
			}
		}
	}
	if (MODE == GV_DOWN)
		down_combine(a, blockIdx.x * RB, min(a.rows, (int)(blockIdx.x + 1) * RB));
}

template <int TT, bool VEC, int MODE, bool NORM>
__global__ __launch_bounds__(GV_THREADS) void k_gemv_bf16(gv_args a)
{
	constexpr int NS = MODE == GV_GU ? 2 : 1;
	EK_DYN_SMEM(float, xsm);
	__shared__ float shr[33];
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, inst = blockIdx.y;
	int r0 = (blockIdx.x * 8 + warp) * BF_R, K = a.cols;
	if (MODE == GV_PLAIN && VEC)
		bf16_prefetch(a, r0, lane);
	pdl_start();
	const uint16_t *W[NS];
	const float *x = a.x;
	int ldx = a.ldx;
	int ntok = a.T;
	if (NORM) {
		norm_stage(a, ntok, xsm, shr);
		x = xsm;
		ldx = K;
	}
	if (MODE == GV_PLAIN) {
		W[0] = (const uint16_t *)a.w;
	} else {
		int e = slot_expert(a, inst);
		W[0] = (const uint16_t *)(a.w + (size_t)e * a.stride);
		if (MODE == GV_GU)
			W[NS - 1] = (const uint16_t *)(a.w2 + (size_t)e * a.stride2);
		x = a.x + (size_t)(MODE == GV_GU ? inst / a.k : inst) * a.ldx;
		ntok = 1;
	}
	float acc[NS][BF_R][TT];
#pragma unroll
	for (int s = 0; s < NS; s++)
#pragma unroll
		for (int r = 0; r < BF_R; r++)
#pragma unroll
			for (int t = 0; t < TT; t++)
				acc[s][r][t] = 0.0f;
	if (r0 < a.rows) {
		const uint16_t *wr[NS][BF_R];
#pragma unroll
		for (int s = 0; s < NS; s++)
#pragma unroll
			for (int r = 0; r < BF_R; r++)
				wr[s][r] = W[s] + (size_t)min(r0 + r, a.rows - 1) * K;
		if (VEC) {
			for (int c = lane * 8; c < K; c += 256 * UNROLL) {
				uint4 wv[UNROLL][NS][BF_R];
#pragma unroll
				for (int u = 0; u < UNROLL; u++)
#pragma unroll
					for (int s = 0; s < NS; s++)
#pragma unroll
						for (int r = 0; r < BF_R; r++)
							wv[u][s][r] = c + 256 * u < K ? ld_stream16(wr[s][r] + c + 256 * u)
							                              : make_uint4(0, 0, 0, 0);
#pragma unroll
				for (int u = 0; u < UNROLL; u++) {
					int cc = c + 256 * u;
					if (cc >= K)
						break;
#pragma unroll
					for (int t = 0; t < TT; t++) {
						if (t >= ntok)
							break;
						const float4 *xp = (const float4 *)(x + (size_t)t * ldx + cc);
						float4 x0 = ldx4<NORM>(xp), x1 = ldx4<NORM>(xp + 1);
#pragma unroll
						for (int s = 0; s < NS; s++)
#pragma unroll
							for (int r = 0; r < BF_R; r++)
								acc[s][r][t] = dot8(wv[u][s][r], x0, x1, acc[s][r][t]);
					}
				}
			}
		} else {
			for (int c = lane; c < K; c += 32)
#pragma unroll
				for (int s = 0; s < NS; s++)
#pragma unroll
					for (int r = 0; r < BF_R; r++) {
						float w = bf16f(wr[s][r][c]);
#pragma unroll
						for (int t = 0; t < TT; t++)
							if (t < ntok)
								acc[s][r][t] = fmaf(w, ldx1<NORM>(x + (size_t)t * ldx + c), acc[s][r][t]);
					}
		}
	}
	gv_finish<NS, BF_R, TT, MODE, BF_ROWS>(a, acc, r0, ntok, inst, lane);
}

#endif
