/* ek_gemm_q.cuh — the prefill GEMM (any number of tokens) for FP8, INT8 and
 * INT4 weights in the engine layout (ek.h): k_gemm_q<KIND>. Internal to
 * kernels/ (ek_wq.cu launches it through ek_gm) and to
 * tests/kernels/test_ek_wq_simt.cpp, which runs this source on the host.
 *
 * A SIMT tile GEMM, kept simple and exact: a block of 256 threads computes
 * 64 tokens (rows m of x, optionally gathered: experts' slots) × 64 weight
 * rows n, K in steps of 64:
 *   - the x tile is copied to shared memory as fp32, transposed (Xs[k][m]);
 *   - the weight tile is decoded once per step into shared memory as the
 *     weights' binary32 values fl(v·s) (Ws[k][n]): each thread one 16-byte
 *     chunk of one row (FP8/INT8: 4 chunks per row; INT4: 2, half the
 *     threads), the same decode as the GEMV (ek_gemv_q.cuh wq_values);
 *   - each thread accumulates a 4 × 4 register tile with fp32 FMA over the
 *     step, reusing every decoded weight for 64 tokens.
 * Numerics: the CPU engine's weight values and fp32 activations, unrounded
 * (unlike the BF16/NVFP4 GEMM's BF16 x); only the summation order differs.
 * Grouped mode (MoE prefill): tiles = {expert, m0, m1} per block row, as
 * ek_gemm.cu's k_gemm. One stage, no tensor cores, no pipelining.
 *
 * Needs what ek_gemv_q.cuh needs (it is included for the decode). */
#ifndef RQ_KERNELS_EK_GEMM_Q_CUH
#define RQ_KERNELS_EK_GEMM_Q_CUH

#include "kernels/ek_gemv_q.cuh"

#define GQ_BM 64                   /* tokens per block (== EK_GM_BM) */
#define GQ_BN 64                   /* weight rows per block */
#define GQ_BK 64                   /* columns per step */
#define GQ_LD (GQ_BM + 4)          /* floats per shared row (16-byte aligned rows) */
#define GQ_THREADS 256

struct gq_args {
	const uint8_t *w;          /* set base */
	size_t stride;             /* bytes between matrices */
	int rows, cols, gshift;
	const float *x;
	int ldx;
	const int *gather;         /* NULL or x row of each output row m */
	float *y;
	int ldy;
	int M, acc;
	const int *tiles;          /* NULL or [ntiles][3] {expert, m0, m1} */
};

template <int KIND>
__global__ __launch_bounds__(GQ_THREADS) void k_gemm_q(gq_args a)
{
	constexpr int CW = wq_cw<KIND>::n, CPR = GQ_BK / CW;   /* chunks per row per step */
	__shared__ __align__(16) float Xs[GQ_BK][GQ_LD];
	__shared__ __align__(16) float Ws[GQ_BK][GQ_LD];
	pdl_start();
	int tid = threadIdx.x, n0 = blockIdx.x * GQ_BN, e = 0, m0, m1, K = a.cols;
	if (a.tiles) {
		e = a.tiles[3 * blockIdx.y];
		m0 = a.tiles[3 * blockIdx.y + 1];
		m1 = a.tiles[3 * blockIdx.y + 2];
	} else {
		m0 = blockIdx.y * GQ_BM;
		m1 = min(a.M, m0 + GQ_BM);
	}
	const uint8_t *W = a.w + (size_t)e * a.stride;
	int G = wq_groups(K, a.gshift);
	size_t ldb = wq_ldb(KIND, K);
	const float *S = (const float *)(W + wq_codes(KIND, a.rows, K));
	int tm = tid / 16, tn = tid % 16;              /* this thread's 4 × 4 outputs */
	float acc[4][4];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0.0f;

	for (int k0 = 0; k0 < K; k0 += GQ_BK) {
		/* x tile: column k0 + tid % 64 of rows tid / 64 + 4i (coalesced along k) */
		for (int i = 0; i < GQ_BM / 4; i++) {
			int kk = tid % GQ_BK, r = tid / GQ_BK + 4 * i, m = m0 + r, col = k0 + kk;
			float v = 0.0f;
			if (m < m1 && col < K)
				v = __ldg(a.x + (size_t)(a.gather ? a.gather[m] : m) * a.ldx + col);
			Xs[kk][r] = v;
		}
		/* weight tile: chunk q of row n0 + tid / CPR */
		if (tid < GQ_BN * CPR) {
			int rr = tid / CPR, q = tid % CPR, n = n0 + rr, c0 = k0 + q * CW;
			size_t byte = KIND == EK_INT4 ? (size_t)c0 / 2 : (size_t)c0;
			float v[CW];
			if (n < a.rows && byte < ldb) {
				float s16[CW / 16];
#pragma unroll
				for (int h = 0; h < CW / 16; h++)
					s16[h] = c0 + 16 * h < K ? __ldg(S + (size_t)n * G + ((c0 + 16 * h) >> a.gshift))
					                         : 0.0f;
				wq_values<KIND>(ld_stream16(W + (size_t)n * ldb + byte), s16, v);
			} else {
#pragma unroll
				for (int j = 0; j < CW; j++)
					v[j] = 0.0f;
			}
#pragma unroll
			for (int j = 0; j < CW; j++)
				Ws[q * CW + j][rr] = v[j];
		}
		__syncthreads();
#pragma unroll 4
		for (int kk = 0; kk < GQ_BK; kk++) {
			float4 xa = *(const float4 *)&Xs[kk][4 * tm], wb = *(const float4 *)&Ws[kk][4 * tn];
			const float xv[4] = {xa.x, xa.y, xa.z, xa.w}, wv[4] = {wb.x, wb.y, wb.z, wb.w};
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		int m = m0 + 4 * tm + i;
		if (m >= m1)
			break;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int n = n0 + 4 * tn + j;
			if (n >= a.rows)
				break;
			float *o = &a.y[(size_t)m * a.ldy + n];
			*o = a.acc ? __fadd_rn(*o, acc[i][j]) : acc[i][j];
		}
	}
}

#endif
