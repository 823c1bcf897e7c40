/* ek_gemv_q.cuh — the decode GEMV (T <= 16 tokens, each weight read once)
 * and its MoE modes for FP8 (E4M3), INT8 and INT4 weights in the engine
 * layout (ek.h): k_gemv_q<KIND, TT, MODE, NORM>. Internal to kernels/
 * (ek_wq.cu launches it) and to tests/kernels/test_ek_wq_simt.cpp, which runs
 * this very source on the host under the SIMT emulation.
 *
 * SIMT, the BF16 kernel's structure (ek_gemv_bf16.cuh): a warp owns Q_R = 2
 * rows, a block 8 warps = 16 rows; each lane streams 16-byte chunks of codes
 * (16 FP8/INT8 weights, 32 INT4), UNROLL chunks per row in flight. Per chunk
 * and row: every code is dequantized exactly in registers (E4M3: the GPU's
 * cvt on cc >= 8.9, else ek_e4m3_f32's bits; INT8: PRMT under 2^23's
 * exponent, one subtraction; INT4: shift, mask, the same), times the scale
 * of its 16-column run (one load per run: gshift >= 4) with one binary32
 * product fl(v·s) — the CPU engine's weight value bit for bit —, then FMA'd
 * against fp32 x[t] (read through L1, or from shared memory with NORM) for
 * every token: each weight is read and decoded once for all T tokens.
 * Columns past cols (the last chunk's padding) meet x = 0 and code 0.
 * Lane sums meet and lane 0 writes by mode in gv_finish (ek_gemv_bf16.cuh).
 * NORM stages RMSNorm(x) in shared memory first
 * (norm_stage, ek_rmsnorm's arithmetic: the same bits as the unfused pair).
 *
 * Needs, defined before it is included, what ek_gemv_bf16.cuh needs, plus
 * __byte_perm and __uint_as_float (ek_deq.cuh); on a GPU of cc >= 8.9 also
 * e4m3x2h (ek_dev.cuh). */
#ifndef RQ_KERNELS_EK_GEMV_Q_CUH
#define RQ_KERNELS_EK_GEMV_Q_CUH

#include "kernels/ek_gemv_bf16.cuh"
#include "kernels/ek_deq.cuh"

#define Q_R 2                      /* rows per warp */
#define Q_ROWS (8 * Q_R)           /* rows per block (GV_DOWN's row blocks) */

/* bytes per row of codes, bytes of all codes (the scales follow), scale groups */
static __device__ __forceinline__ size_t wq_ldb(int kind, int cols)
{
	return kind == EK_INT4 ? ((size_t)cols + 31) / 32 * 16 : ((size_t)cols + 15) / 16 * 16;
}

static __device__ __forceinline__ size_t wq_codes(int kind, int rows, int cols)
{
	return ((size_t)rows * wq_ldb(kind, cols) + 15) & ~(size_t)15;
}

static __device__ __forceinline__ int wq_groups(int cols, int gshift)
{
	return ((cols - 1) >> gshift) + 1;
}

/* four E4M3 bytes of w → v[0..3], exactly */
static __device__ __forceinline__ void wq_fp8x4(uint32_t w, float *v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
	float2 a = __half22float2(e4m3x2h(w)), b = __half22float2(e4m3x2h(w >> 16));
	v[0] = a.x;
	v[1] = a.y;
	v[2] = b.x;
	v[3] = b.y;
#else
#pragma unroll
	for (int j = 0; j < 4; j++)
		v[j] = ek_e4m3_f32(w >> (8 * j));
#endif
}

/* Columns of one 16-byte chunk of codes. */
template <int KIND>
struct wq_cw {
	static constexpr int n = KIND == EK_INT4 ? 32 : 16;
};

/* The chunk c (16 bytes: columns c0 ..) of a row as its CW weight values
 * fl(v · s); s16: the scales of its 16-column runs. */
template <int KIND>
static __device__ __forceinline__ void wq_values(uint4 c, const float *s16, float *v)
{
	const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (KIND == EK_FP8) {
			wq_fp8x4(w[i], v + 4 * i);
		} else if (KIND == EK_INT8) {
#pragma unroll
			for (int j = 0; j < 4; j++)
				v[4 * i + j] = ek_u8_q(w[i], j);
		} else {
#pragma unroll
			for (int k = 0; k < 8; k++)
				v[8 * i + k] = ek_u4_q(w[i], k);
		}
	}
#pragma unroll
	for (int j = 0; j < wq_cw<KIND>::n; j++)
		v[j] = __fmul_rn(v[j], s16[j / 16]);
}

/* x[c .. c + 4) of one token: one 16-byte load when vec and inside K, else
 * guarded scalars (0 past K). */
template <bool SM>
static __device__ __forceinline__ float4 wq_x4(const float *xr, int c, int K, bool vec)
{
	if (vec && c + 4 <= K)
		return ldx4<SM>((const float4 *)(xr + c));
	float4 r;
	r.x = c < K ? ldx1<SM>(xr + c) : 0.0f;
	r.y = c + 1 < K ? ldx1<SM>(xr + c + 1) : 0.0f;
	r.z = c + 2 < K ? ldx1<SM>(xr + c + 2) : 0.0f;
	r.w = c + 3 < K ? ldx1<SM>(xr + c + 3) : 0.0f;
	return r;
}

template <int KIND, int TT, int MODE, bool NORM>
__global__ __launch_bounds__(GV_THREADS) void k_gemv_q(gv_args a)
{
	constexpr int NS = MODE == GV_GU ? 2 : 1;
	constexpr int CW = wq_cw<KIND>::n;
	EK_DYN_SMEM(float, xsm);
	__shared__ float shr[33];
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, inst = blockIdx.y;
	int r0 = (blockIdx.x * 8 + warp) * Q_R, K = a.cols, G = wq_groups(K, a.gshift);
	size_t ldb = wq_ldb(KIND, K), sco = wq_codes(KIND, a.rows, K);
	if (MODE == GV_PLAIN && r0 < a.rows) {        /* first chunks, before the wait */
#pragma unroll
		for (int r = 0; r < Q_R; r++)
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
				if (lane * 16 + 512 * u < (int)ldb)
					prefetch_l2(a.w + (size_t)min(r0 + r, a.rows - 1) * ldb + lane * 16 + 512 * u);
	}
	pdl_start();
	const uint8_t *W[NS];
	const float *x = a.x;
	int ldx = a.ldx, ntok = a.T;
	if (NORM) {
		norm_stage(a, ntok, xsm, shr);
		x = xsm;
		ldx = K;
	}
	if (MODE == GV_PLAIN) {
		W[0] = a.w;
	} else {
		int e = slot_expert(a, inst);
		W[0] = a.w + (size_t)e * a.stride;
		if (MODE == GV_GU)
			W[NS - 1] = a.w2 + (size_t)e * a.stride2;
		x = a.x + (size_t)(MODE == GV_GU ? inst / a.k : inst) * a.ldx;
		ntok = 1;
	}
	bool vec = ldx % 4 == 0 && ((uintptr_t)x & 15) == 0;
	float acc[NS][Q_R][TT];
#pragma unroll
	for (int s = 0; s < NS; s++)
#pragma unroll
		for (int r = 0; r < Q_R; r++)
#pragma unroll
			for (int t = 0; t < TT; t++)
				acc[s][r][t] = 0.0f;
	if (r0 < a.rows) {
		const uint8_t *wr[NS][Q_R];
		const float *sr[NS][Q_R];
#pragma unroll
		for (int s = 0; s < NS; s++)
#pragma unroll
			for (int r = 0; r < Q_R; r++) {
				int row = min(r0 + r, a.rows - 1);
				wr[s][r] = W[s] + (size_t)row * ldb;
				sr[s][r] = (const float *)(W[s] + sco) + (size_t)row * G;
			}
		for (int b = lane * 16; b < (int)ldb; b += 512 * UNROLL) {
			uint4 wv[UNROLL][NS][Q_R];
#pragma unroll
			for (int u = 0; u < UNROLL; u++)
#pragma unroll
				for (int s = 0; s < NS; s++)
#pragma unroll
					for (int r = 0; r < Q_R; r++)
						wv[u][s][r] = b + 512 * u < (int)ldb ? ld_stream16(wr[s][r] + b + 512 * u)
						                                     : make_uint4(0, 0, 0, 0);
#pragma unroll
			for (int u = 0; u < UNROLL; u++) {
				int bb = b + 512 * u, c0 = KIND == EK_INT4 ? 2 * bb : bb;
				if (bb >= (int)ldb)
					break;
#pragma unroll
				for (int s = 0; s < NS; s++) {
					float v[Q_R][CW];
#pragma unroll
					for (int r = 0; r < Q_R; r++) {
						float s16[CW / 16];
#pragma unroll
						for (int h = 0; h < CW / 16; h++)   /* a run past K: code 0 there */
							s16[h] = c0 + 16 * h < K ? __ldg(sr[s][r] + ((c0 + 16 * h) >> a.gshift))
							                         : 0.0f;
						wq_values<KIND>(wv[u][s][r], s16, v[r]);
					}
#pragma unroll
					for (int t = 0; t < TT; t++) {
						if (t >= ntok)
							break;
						const float *xr = x + (size_t)t * ldx;
#pragma unroll
						for (int q = 0; q < CW / 4; q++) {
							float4 x4 = wq_x4<NORM>(xr, c0 + 4 * q, K, vec);
#pragma unroll
							for (int r = 0; r < Q_R; r++) {
								float &ac = acc[s][r][t];
								ac = fmaf(v[r][4 * q], x4.x, ac);
								ac = fmaf(v[r][4 * q + 1], x4.y, ac);
								ac = fmaf(v[r][4 * q + 2], x4.z, ac);
								ac = fmaf(v[r][4 * q + 3], x4.w, ac);
							}
						}
					}
				}
			}
		}
	}
	gv_finish<NS, Q_R, TT, MODE, Q_ROWS>(a, acc, r0, ntok, inst, lane);
}

#endif
