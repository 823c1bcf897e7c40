/* ek_gemm.cu — matrix products for prefill (any number of tokens).
 *
 * BF16 weights go through cuBLAS (cublasGemmEx, BF16 inputs, fp32 compute and
 * output) when libcublas can be dlopened at ek_open (ek_rt.cu holds the
 * library, its handle and ek_blas_gemm); x is first rounded to
 * BF16 into the device scratch. Without cuBLAS, and always for NVFP4, a tile
 * GEMM on tensor cores (WMMA 16×16×16 BF16, fp32 accumulation):
 *   block = 4 warps, output tile 64 rows of x × 64 rows of W, K in steps of 64;
 *   x rows (optionally gathered through an index, for experts' slots) are
 *   rounded to BF16 into shared memory; W tiles are copied (BF16) or decoded
 *   from the repacked NVFP4 tiles (each thread one lane's 16 code bytes and 8
 *   scale bytes → 32 values e2m1·e4m3, exact in BF16; the codes through
 *   ek_deq.cuh's PRMT table, one product per value); 1/gs is applied to the
 *   fp32 result. One stage, no pipelining: a first version to measure.
 * FP8, INT8 and INT4 weights take ek_wq.cu's SIMT GEMM (ek_gemm_q.cuh).
 * Grouped mode runs the routed experts of a prefill batch in one launch: one
 * block row per (expert, 64 slots) from a tile list built on the host. */
#include "kernels/ek_dev.cuh"

#include <errno.h>
#include <mma.h>
#include <stdlib.h>

using namespace nvcuda;

#define GM_BN 64
#define GM_BK 64
#define GM_LD 72                   /* BF16 per shared row (64 + 8: no bank conflicts) */
#define GM_CLD 68                  /* floats per shared output row */

struct gm_args {
	const uint8_t *w;          /* set base */
	size_t stride;
	const float *gs;
	int kind, rows, cols;
	const float *x;
	int ldx;
	const int *gather;         /* NULL or x row of each output row */
	float *y;
	int ldy;
	int M, acc;
	const int *tiles;          /* NULL or [ntiles][3] {expert, m0, m1} */
};

static __device__ __forceinline__ uint16_t bf16bits(float v)
{
	__nv_bfloat16 b = __float2bfloat16_rn(v);
	return *(uint16_t *)&b;
}

__global__ __launch_bounds__(128) void k_gemm(gm_args a)
{
	constexpr int AB = 2 * EK_GM_BM * GM_LD * 2, CB = EK_GM_BM * GM_CLD * 4;
	__shared__ __align__(128) unsigned char sm[AB > CB ? AB : CB];
	uint16_t *As = (uint16_t *)sm, *Bs = As + EK_GM_BM * GM_LD;
	float *Cs = (float *)sm;
	pdl_start();
	int tid = threadIdx.x, warp = tid >> 5, wm = warp >> 1, wn = warp & 1;
	int n0 = blockIdx.x * GM_BN, e = 0, m0, m1, K = a.cols;
	if (a.tiles) {
		e = a.tiles[3 * blockIdx.y];
		m0 = a.tiles[3 * blockIdx.y + 1];
		m1 = a.tiles[3 * blockIdx.y + 2];
	} else {
		m0 = blockIdx.y * EK_GM_BM;
		m1 = min(a.M, m0 + EK_GM_BM);
	}
	const uint8_t *W = a.w + (size_t)e * a.stride;
	int nkc = (K + 63) / 64, nrt = (a.rows + 15) / 16;
	bool vec = (K % 8) == 0;

	wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[2][2];
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int j = 0; j < 2; j++)
			wmma::fill_fragment(c[i][j], 0.0f);

	for (int k0 = 0; k0 < K; k0 += GM_BK) {
		{       /* x tile: thread → row tid/2, 32 columns */
			int r = tid >> 1, c0 = (tid & 1) * 32, m = m0 + r;
			const float *xr = m < m1 ? a.x + (size_t)(a.gather ? a.gather[m] : m) * a.ldx : NULL;
			for (int q = 0; q < 32; q++) {
				int col = k0 + c0 + q;
				As[r * GM_LD + c0 + q] = bf16bits(xr && col < K ? __ldg(xr + col) : 0.0f);
			}
		}
		if (a.kind == EK_BF16) {
			const uint16_t *Wb = (const uint16_t *)W;
			for (int q = 0; q < 4; q++) {
				int id = tid + 128 * q, r = id >> 3, c8 = (id & 7) * 8, n = n0 + r;
				uint16_t *dst = Bs + r * GM_LD + c8;
				if (vec && n < a.rows && k0 + c8 + 8 <= K) {
					*(uint4 *)dst = ld_stream16(Wb + (size_t)n * K + k0 + c8);
				} else {
					for (int z = 0; z < 8; z++) {
						int col = k0 + c8 + z;
						dst[z] = n < a.rows && col < K ? Wb[(size_t)n * K + col] : 0;
					}
				}
			}
		} else {        /* NVFP4: thread → lane (tid % 32) of row tile n0/16 + tid/32 */
			int rt = tid >> 5, lane = tid & 31, g = lane >> 2, i4 = lane & 3;
			int trt = n0 / 16 + rt;
			uint4 cw = make_uint4(0, 0, 0, 0);
			uint2 sw = make_uint2(0, 0);
			if (trt < nrt) {
				const uint8_t *t = W + ((size_t)trt * nkc + k0 / 64) * 576;
				cw = ld_stream16(t + 16 * lane);
				sw = ld_stream8(t + 512 + 8 * g);
			}
			const uint32_t wd[4] = {cw.x, cw.y, cw.z, cw.w};
#pragma unroll
			for (int j = 0; j < 4; j++) {
				float slo = e4m3f((sw.x >> (8 * j)) & 0xFF), shi = e4m3f((sw.y >> (8 * j)) & 0xFF);
				uint32_t e[4];               /* BF16 pairs of codes p = 0..7 (ek_deq.cuh) */
				ek_e2m1x4_bf16(wd[j] & 0xFFFFu, &e[0], &e[1]);
				ek_e2m1x4_bf16(wd[j] >> 16, &e[2], &e[3]);
#pragma unroll
				for (int p = 0; p < 8; p++) {
					int row = 16 * rt + g + 8 * (p & 1);
					int col = 16 * j + 2 * i4 + 8 * ((p >> 1) & 1) + (p >> 2);
					float m = __uint_as_float((p & 1) ? e[p >> 1] & 0xFFFF0000u : e[p >> 1] << 16);
					float v = __fmul_rn(m, (p & 1) ? shi : slo);
					Bs[row * GM_LD + col] = bf16bits(v);
				}
			}
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < GM_BK; kk += 16) {
			wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
			wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[2];
#pragma unroll
			for (int i = 0; i < 2; i++)
				wmma::load_matrix_sync(fa[i], (const __nv_bfloat16 *)As + (wm * 32 + i * 16) * GM_LD + kk, GM_LD);
#pragma unroll
			for (int j = 0; j < 2; j++)
				wmma::load_matrix_sync(fb[j], (const __nv_bfloat16 *)Bs + (wn * 32 + j * 16) * GM_LD + kk, GM_LD);
#pragma unroll
			for (int i = 0; i < 2; i++)
#pragma unroll
				for (int j = 0; j < 2; j++)
					wmma::mma_sync(c[i][j], fa[i], fb[j], c[i][j]);
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int j = 0; j < 2; j++)
			wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * GM_CLD + wn * 32 + j * 16, c[i][j],
			                        GM_CLD, wmma::mem_row_major);
	__syncthreads();
	float gsv = a.kind == EK_NVFP4 ? a.gs[e] : 1.0f;
	for (int idx = tid; idx < EK_GM_BM * GM_BN; idx += 128) {
		int r = idx / GM_BN, cn = idx % GM_BN, m = m0 + r, n = n0 + cn;
		if (m >= m1 || n >= a.rows)
			continue;
		float v = Cs[r * GM_CLD + cn];
		if (a.kind == EK_NVFP4)
			v = __fdiv_rn(v, gsv);
		float *o = &a.y[(size_t)m * a.ldy + n];
		*o = a.acc ? __fadd_rn(*o, v) : v;
	}
}

int ek_gm(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx, const int *gather,
          float *y, int ldy, int M, int acc, const int *tiles, int ntiles)
{
	if (W->kind != EK_BF16 && W->kind != EK_NVFP4)     /* FP8, INT: ek_wq.cu */
		return ek_gm_q(d, W, x, ldx, gather, y, ldy, M, acc, tiles, ntiles);
	gm_args a = {};
	a.w = (const uint8_t *)W->data;
	a.stride = W->stride;
	a.gs = W->gs;
	a.kind = W->kind;
	a.rows = W->rows;
	a.cols = W->cols;
	a.x = x;
	a.ldx = ldx;
	a.gather = gather;
	a.y = y;
	a.ldy = ldy;
	a.M = M;
	a.acc = acc;
	a.tiles = tiles;
	unsigned gy = tiles ? (unsigned)ntiles : (unsigned)((M + EK_GM_BM - 1) / EK_GM_BM);
	if (!gy)
		return 0;
	ek_launch(d, k_gemm, dim3((W->rows + GM_BN - 1) / GM_BN, gy), dim3(128), 0, a);
	return ek_launched(d, "gemm");
}

/* x [T][ldx] fp32 → xb [T][cols] BF16 (cuBLAS input). */
__global__ void k_to_bf16(const float *x, int ldx, uint16_t *xb, int cols, size_t n)
{
	pdl_start();
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		xb[i] = bf16bits(x[(i / cols) * ldx + i % cols]);
}

extern "C" int ek_gemm(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx, float *y,
                       int ldy, int T, int acc)
{
	if (!W || W->rows <= 0 || W->cols <= 0 || !W->data || T < 1 || ldx < W->cols || ldy < W->rows)
		return ek_fail(d, -EINVAL, "gemm: bad arguments (T %d, ldx %d, ldy %d)", T, ldx, ldy);
	if (W->kind == EK_NVFP4 && (W->cols % 16 || !W->gs))
		return ek_fail(d, -EINVAL, "gemm: NVFP4 needs cols %% 16 == 0 and global scales");
	if ((W->kind == EK_FP8 || W->kind == EK_INT8 || W->kind == EK_INT4) &&
	    (W->gshift < 4 || W->gshift > EK_GSHIFT_ROW))
		return ek_fail(d, -EINVAL, "gemm: FP8/INT scale groups of 2^%d columns", W->gshift);
	if (W->kind < EK_BF16 || W->kind > EK_INT4)
		return ek_fail(d, -EINVAL, "gemm: unknown weight kind %d", W->kind);
	if (W->kind == EK_BF16 && d->blas && !d->capturing) {
		size_t n = (size_t)T * W->cols;
		uint16_t *xb = (uint16_t *)ek_ws(d, n * 2);
		if (!xb)
			return -ENOMEM;
		size_t blocks = (n + 255) / 256, cap = (size_t)d->sms * 16;
		ek_launch(d, k_to_bf16, dim3((unsigned)(blocks < cap ? blocks : cap)), dim3(256), 0, x,
		          ldx, xb, W->cols, n);
		int rc = ek_launched(d, "to bf16");
		if (rc)
			return rc;
		rc = ek_blas_gemm(d, (const uint16_t *)W->data, W->rows, W->cols, xb, y, ldy, T, acc);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	return ek_gm(d, W, x, ldx, NULL, y, ldy, T, acc, NULL, 0);
}
