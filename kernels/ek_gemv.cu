/* ek_gemv.cu — matrix-vector products for decode and small batches
 * (T <= 16 tokens read each weight once), the NVFP4 repack, and the expert
 * GEMVs of the MoE ops (modes in ek_dev.cuh).
 *
 * BF16 (SIMT): a warp owns 2 rows; each lane streams 16-byte chunks (8
 * weights) of both rows, four chunks in flight, widens them with one shift
 * or mask and accumulates against fp32 x (read through L1, shared by the
 * block's warps) with FMA. A block is 8 warps = 16 rows.
 *
 * NVFP4 (tensor cores): a block is 8 warps = 2 row tiles (32 rows) × 4
 * K-splits. The block stages x[t] · 2^e_t as fp16 in shared memory (e_t from
 * max|x[t]|, ek.h); each warp streams its row tile's 576-byte tiles (one
 * 16-byte load of codes and one 8-byte load of scales per lane, four tiles
 * in flight), turns each code word into the four fp16x2 A registers with
 * shifts and masks (e2m1 · 2^-14 exactly), multiplies by the E4M3 group scale
 * (exact in fp16), and issues mma.m16n8k16 with x as the B operand (token t
 * = column t; 8 columns per n-tile, two n-tiles for T > 8). Split-K partials
 * meet in shared memory and are summed in a fixed order; the epilogue applies
 * 2^(14-e_t) / gs. */
#include "kernels/ek_dev.cuh"

#include <errno.h>

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
};

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

template <int TT, bool VEC, int MODE>
__global__ __launch_bounds__(GV_THREADS) void k_gemv_bf16(gv_args a)
{
	constexpr int NS = MODE == GV_GU ? 2 : 1;
	pdl_start();
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, inst = blockIdx.y;
	int r0 = (blockIdx.x * 8 + warp) * BF_R, K = a.cols;
	const uint16_t *W[NS];
	const float *x = a.x;
	int ntok = a.T;
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
						const float4 *xp = (const float4 *)(x + (size_t)t * a.ldx + cc);
						float4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
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
								acc[s][r][t] = fmaf(w, __ldg(x + (size_t)t * a.ldx + c), acc[s][r][t]);
					}
		}
	}
#pragma unroll
	for (int s = 0; s < NS; s++)
#pragma unroll
		for (int r = 0; r < BF_R; r++)
#pragma unroll
			for (int t = 0; t < TT; t++)
				acc[s][r][t] = warp_sum(acc[s][r][t]);
	if (lane == 0) {
#pragma unroll
		for (int r = 0; r < BF_R; r++) {
			int row = r0 + r;
			if (row >= a.rows)
				break;
			if (MODE == GV_PLAIN) {
#pragma unroll
				for (int t = 0; t < TT; t++)
					if (t < ntok) {
						float *o = &a.y[(size_t)t * a.ldy + row];
						*o = a.acc ? *o + acc[0][r][0 + t] : acc[0][r][t];
					}
			} else if (MODE == GV_GU) {
				a.y[(size_t)inst * a.ldy + row] = dsilu(acc[0][r][0]) * acc[NS - 1][r][0];
			} else {
				a.y[(size_t)inst * a.ldy + row] = acc[0][r][0];
			}
		}
	}
	if (MODE == GV_DOWN)
		down_combine(a, blockIdx.x * BF_ROWS, min(a.rows, (int)(blockIdx.x + 1) * BF_ROWS));
}

/* ------------------------------------------------------------ NVFP4 */

static __device__ __forceinline__ uint32_t hmul2u(uint32_t a, __half2 s)
{
	__half2 h = __hmul2(*(__half2 *)&a, s);
	return *(uint32_t *)&h;
}

static __device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1,
                                                uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
	             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* One 16×64 tile: four k16 steps, each one mma per n-tile. */
template <int NT>
static __device__ __forceinline__ void fp4_tile(float (&acc)[NT][4], uint4 cw, uint2 sw,
                                                const __half *xs, int xrow, int kl, int ncol,
                                                int g, int i4)
{
	__half2_raw l01 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(sw.x & 0xFFFFu), __NV_E4M3);
	__half2_raw l23 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(sw.x >> 16), __NV_E4M3);
	__half2_raw h01 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(sw.y & 0xFFFFu), __NV_E4M3);
	__half2_raw h23 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(sw.y >> 16), __NV_E4M3);
	__half2 L01 = __half2(l01), L23 = __half2(l23), H01 = __half2(h01), H23 = __half2(h23);
	const __half2 sl[4] = {__low2half2(L01), __high2half2(L01), __low2half2(L23), __high2half2(L23)};
	const __half2 sh[4] = {__low2half2(H01), __high2half2(H01), __low2half2(H23), __high2half2(H23)};
	const uint32_t wd[4] = {cw.x, cw.y, cw.z, cw.w};
#pragma unroll
	for (int j = 0; j < 4; j++) {
		uint32_t w = wd[j];
		uint32_t a0 = hmul2u(((w << 9) & 0x0E000E00u) | ((w << 12) & 0x80008000u), sl[j]);
		uint32_t a1 = hmul2u(((w << 5) & 0x0E000E00u) | ((w << 8) & 0x80008000u), sh[j]);
		uint32_t a2 = hmul2u(((w << 1) & 0x0E000E00u) | ((w << 4) & 0x80008000u), sl[j]);
		uint32_t a3 = hmul2u(((w >> 3) & 0x0E000E00u) | (w & 0x80008000u), sh[j]);
		int k = kl + 16 * j + 2 * i4;
#pragma unroll
		for (int nt = 0; nt < NT; nt++) {
			int col = nt * 8 + g;
			uint32_t b0 = 0, b1 = 0;
			if (col < ncol) {
				b0 = *(const uint32_t *)&xs[col * xrow + k];
				b1 = *(const uint32_t *)&xs[col * xrow + k + 8];
			}
			mma16816(acc[nt], a0, a1, a2, a3, b0, b1);
		}
	}
}

template <int NT, int MODE>
__global__ __launch_bounds__(GV_THREADS) void k_gemv_fp4(gv_args a, int kch)
{
	constexpr int NS = MODE == GV_GU ? 2 : 1;
	constexpr int NC = 8 * NT;
	extern __shared__ __align__(16) unsigned char smem[];
	__shared__ int ex[16];
	__shared__ float shr[33];
	pdl_start();
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, i4 = lane & 3;
	int wr = warp / FP_KS, wk = warp % FP_KS, inst = blockIdx.y;
	int rt = blockIdx.x * FP_RT + wr, nrt = (a.rows + 15) / 16, nkc = (a.cols + 63) / 64;
	int K = a.cols, ncol = MODE == GV_PLAIN ? a.T : 1;
	const uint8_t *W[NS];
	float gsv[NS];
	const float *x = a.x;
	if (MODE == GV_PLAIN) {
		W[0] = a.w;
		gsv[0] = a.gs[0];
	} else {
		int e = slot_expert(a, inst);
		W[0] = a.w + (size_t)e * a.stride;
		gsv[0] = a.gs[e];
		if (MODE == GV_GU) {
			W[NS - 1] = a.w2 + (size_t)e * a.stride2;
			gsv[NS - 1] = a.gs2[e];
		}
		x = a.x + (size_t)(MODE == GV_GU ? inst / a.k : inst) * a.ldx;
	}
	int xrow = kch + 8;
	__half *xs = (__half *)smem;
	float *red = (float *)(smem + (((size_t)ncol * xrow * 2 + 15) & ~(size_t)15));

	for (int c = 0; c < ncol; c++) {
		const float *xc = x + (size_t)c * a.ldx;
		float m = 0.0f;
		for (int i = threadIdx.x; i < K; i += blockDim.x)
			m = fmaxf(m, fabsf(xc[i]));
		m = block_max(m, shr);
		if (threadIdx.x == 0)
			ex[c] = act_exp(m);
	}

	float acc[NS][NT][4];
#pragma unroll
	for (int s = 0; s < NS; s++)
#pragma unroll
		for (int nt = 0; nt < NT; nt++)
#pragma unroll
			for (int q = 0; q < 4; q++)
				acc[s][nt][q] = 0.0f;
	bool live = rt < nrt;
	const uint8_t *tb[NS];
#pragma unroll
	for (int s = 0; s < NS; s++)
		tb[s] = W[s] + (size_t)(live ? rt : 0) * nkc * 576;

	for (int k0 = 0; k0 < nkc * 64; k0 += kch) {
		__syncthreads();
		for (int c = 0; c < ncol; c++) {
			float sc = ldexpf(1.0f, ex[c]);
			const float *xc = x + (size_t)c * a.ldx;
			for (int i = threadIdx.x; i < kch; i += blockDim.x) {
				int col = k0 + i;
				xs[c * xrow + i] = __float2half_rn(col < K ? __fmul_rn(xc[col], sc) : 0.0f);
			}
		}
		__syncthreads();
		int kc0 = k0 / 64, kc1 = min(nkc, (k0 + kch) / 64);
		if (!live)
			continue;
		for (int kc = kc0 + wk; kc < kc1; kc += FP_KS * UNROLL) {
			uint4 cw[NS][UNROLL];
			uint2 sw[NS][UNROLL];
#pragma unroll
			for (int u = 0; u < UNROLL; u++) {
				int kk = kc + FP_KS * u;
#pragma unroll
				for (int s = 0; s < NS; s++) {
					if (kk < kc1) {
						const uint8_t *t = tb[s] + (size_t)kk * 576;
						cw[s][u] = ld_stream16(t + lane * 16);
						sw[s][u] = ld_stream8(t + 512 + g * 8);
					} else {
						cw[s][u] = make_uint4(0, 0, 0, 0);
						sw[s][u] = make_uint2(0, 0);
					}
				}
			}
#pragma unroll
			for (int u = 0; u < UNROLL; u++) {
				int kk = kc + FP_KS * u;
				if (kk >= kc1)
					break;
#pragma unroll
				for (int s = 0; s < NS; s++)
					fp4_tile<NT>(acc[s], cw[s][u], sw[s][u], xs, xrow, (kk - kc0) * 64, ncol, g, i4);
			}
		}
	}

	/* split-K partials: red[wk][wr][s][row 0..15][col 0..NC) */
	__syncthreads();
	if (live) {
#pragma unroll
		for (int s = 0; s < NS; s++)
#pragma unroll
			for (int nt = 0; nt < NT; nt++) {
				float *p = red + ((size_t)((wk * FP_RT + wr) * NS + s) * 16) * NC;
				int c0 = nt * 8 + 2 * i4;
				p[g * NC + c0] = acc[s][nt][0];
				p[g * NC + c0 + 1] = acc[s][nt][1];
				p[(g + 8) * NC + c0] = acc[s][nt][2];
				p[(g + 8) * NC + c0 + 1] = acc[s][nt][3];
			}
	}
	__syncthreads();
	for (int idx = threadIdx.x; idx < FP_ROWS * ncol; idx += blockDim.x) {
		int rr = idx / ncol, c = idx % ncol, wr2 = rr / 16, row = rr % 16;
		int r = (blockIdx.x * FP_RT + wr2) * 16 + row;
		if (r >= a.rows)
			continue;
		float v[NS];
#pragma unroll
		for (int s = 0; s < NS; s++) {
			float t = 0.0f;
			for (int q = 0; q < FP_KS; q++)
				t = __fadd_rn(t, red[((size_t)((q * FP_RT + wr2) * NS + s) * 16 + row) * NC + c]);
			v[s] = __fdiv_rn(ldexpf(t, 14 - ex[c]), gsv[s]);
		}
		if (MODE == GV_PLAIN) {
			float *o = &a.y[(size_t)c * a.ldy + r];
			*o = a.acc ? __fadd_rn(*o, v[0]) : v[0];
		} else if (MODE == GV_GU) {
			a.y[(size_t)inst * a.ldy + r] = __fmul_rn(dsilu(v[0]), v[NS - 1]);
		} else {
			a.y[(size_t)inst * a.ldy + r] = v[0];
		}
	}
	if (MODE == GV_DOWN)
		down_combine(a, blockIdx.x * FP_ROWS, min(a.rows, (int)(blockIdx.x + 1) * FP_ROWS));
}

/* ------------------------------------------------------------ launch */

int ek_gv_rows_per_block(int kind)
{
	return kind == EK_BF16 ? BF_ROWS : FP_ROWS;
}

template <int TT, int MODE>
static void launch_bf16(struct ek_dev *d, const gv_args &a, bool vec, int insts)
{
	dim3 grid((a.rows + BF_ROWS - 1) / BF_ROWS, insts);
	if (vec)
		ek_launch(d, k_gemv_bf16<TT, true, MODE>, grid, dim3(GV_THREADS), 0, a);
	else
		ek_launch(d, k_gemv_bf16<TT, false, MODE>, grid, dim3(GV_THREADS), 0, a);
}

template <int NT, int MODE>
static void launch_fp4(struct ek_dev *d, const gv_args &a, int insts)
{
	int ncol = MODE == GV_PLAIN ? a.T : 1;
	int c64 = (a.cols + 63) / 64 * 64;
	int kch = (XS_BUDGET / (2 * ncol) - 8) / 64 * 64;
	if (kch > c64)
		kch = c64;
	size_t smem = (((size_t)ncol * (kch + 8) * 2 + 15) & ~(size_t)15) +
	              (size_t)FP_KS * FP_RT * (MODE == GV_GU ? 2 : 1) * 16 * 8 * NT * sizeof(float);
	dim3 grid(((a.rows + 15) / 16 + FP_RT - 1) / FP_RT, insts);
	ek_launch(d, k_gemv_fp4<NT, MODE>, grid, dim3(GV_THREADS), smem, a, kch);
}

static int check_w(struct ek_dev *d, const struct ek_w *W, const char *what)
{
	if (!W || W->rows <= 0 || W->cols <= 0 || W->n < 1 || !W->data)
		return ek_fail(d, -EINVAL, "%s: empty weight", what);
	if (W->kind == EK_NVFP4 && (W->cols % 16 || !W->gs))
		return ek_fail(d, -EINVAL, "%s: NVFP4 needs cols %% 16 == 0 and global scales", what);
	if (W->kind != EK_NVFP4 && W->kind != EK_BF16)
		return ek_fail(d, -EINVAL, "%s: unknown weight kind %d", what, W->kind);
	return 0;
}

static bool bf16_vec(const struct ek_w *W, const float *x, int ldx)
{
	return W->cols % 8 == 0 && ldx % 4 == 0 && ((uintptr_t)x & 15) == 0 &&
	       ((uintptr_t)W->data & 15) == 0 && (W->n == 1 || W->stride % 16 == 0);
}

int ek_gv(struct ek_dev *d, int mode, const struct ek_w *A, const struct ek_w *B, const int *ids,
          int k, const float *x, int ldx, float *y, int ldy, int T, int acc, const float *wts,
          float scale, float *out, int ldo, int *cnt)
{
	gv_args a = {};
	a.w = (const uint8_t *)A->data;
	a.stride = A->stride;
	a.gs = A->gs;
	a.rows = A->rows;
	a.cols = A->cols;
	a.n = A->n;
	if (B) {
		a.w2 = (const uint8_t *)B->data;
		a.stride2 = B->stride;
		a.gs2 = B->gs;
	}
	a.x = x;
	a.ldx = ldx;
	a.y = y;
	a.ldy = ldy;
	a.T = T;
	a.acc = acc;
	a.ids = ids;
	a.k = k;
	a.wts = wts;
	a.scale = scale;
	a.out = out;
	a.ldo = ldo;
	a.cnt = cnt;
	if (A->kind == EK_BF16) {
		bool vec = bf16_vec(A, x, ldx) && (!B || bf16_vec(B, x, ldx));
		if (mode == GV_GU)
			launch_bf16<1, GV_GU>(d, a, vec, T);
		else if (mode == GV_DOWN)
			launch_bf16<1, GV_DOWN>(d, a, vec, T);
		else if (T == 1)
			launch_bf16<1, GV_PLAIN>(d, a, vec, 1);
		else if (T == 2)
			launch_bf16<2, GV_PLAIN>(d, a, vec, 1);
		else if (T <= 4)
			launch_bf16<4, GV_PLAIN>(d, a, vec, 1);
		else if (T <= 8)
			launch_bf16<8, GV_PLAIN>(d, a, vec, 1);
		else
			launch_bf16<16, GV_PLAIN>(d, a, vec, 1);
	} else {
		if (mode == GV_GU)
			launch_fp4<1, GV_GU>(d, a, T);
		else if (mode == GV_DOWN)
			launch_fp4<1, GV_DOWN>(d, a, T);
		else if (T <= 8)
			launch_fp4<1, GV_PLAIN>(d, a, 1);
		else
			launch_fp4<2, GV_PLAIN>(d, a, 1);
	}
	return ek_launched(d, "gemv");
}

extern "C" int ek_gemv(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx, float *y,
                       int ldy, int T, int acc)
{
	int rc = check_w(d, W, "gemv");
	if (rc)
		return rc;
	if (T < 1 || T > EK_GEMV_MAX_T || ldx < W->cols || ldy < W->rows)
		return ek_fail(d, -EINVAL, "gemv: T %d (1..%d), ldx %d, ldy %d for [%d x %d]", T,
		               EK_GEMV_MAX_T, ldx, ldy, W->rows, W->cols);
	return ek_gv(d, GV_PLAIN, W, NULL, NULL, 0, x, ldx, y, ldy, T, acc, NULL, 0, NULL, 0, NULL);
}

/* ------------------------------------------------------------ repack */

/* One thread per (tile, lane): 16 code bytes, and the 8 scale bytes of its
 * row pair when it is lane 4g. */
__global__ void k_repack(const uint8_t *packed, const uint8_t *scales, int rows, int cols,
                         uint8_t *out, size_t lanes)
{
	pdl_start();
	size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (id >= lanes)
		return;
	int nkc = (cols + 63) / 64, lane = (int)(id % 32), g = lane >> 2, i = lane & 3;
	size_t tile = id / 32;
	int rt = (int)(tile / nkc), kc = (int)(tile % nkc);
	uint8_t *t = out + tile * 576;
	uint32_t words[4];
	for (int j = 0; j < 4; j++) {
		uint32_t w = 0;
		for (int p = 0; p < 8; p++) {
			int r = rt * 16 + g + 8 * (p & 1);
			int c = kc * 64 + 16 * j + 2 * i + 8 * ((p >> 1) & 1) + (p >> 2);
			uint32_t code = 0;
			if (r < rows && c < cols) {
				uint8_t b = packed[(size_t)r * (cols / 2) + c / 2];
				code = (c & 1) ? b >> 4 : b & 15;
			}
			w |= code << (4 * p);
		}
		words[j] = w;
	}
	*(uint4 *)(t + 16 * lane) = make_uint4(words[0], words[1], words[2], words[3]);
	if (i == 0)
		for (int h = 0; h < 2; h++)
			for (int j = 0; j < 4; j++) {
				int r = rt * 16 + g + 8 * h, grp = kc * 4 + j;
				t[512 + 8 * g + 4 * h + j] =
				    r < rows && grp * 16 < cols ? scales[(size_t)r * (cols / 16) + grp] : 0;
			}
}

extern "C" int ek_nvfp4_repack(struct ek_dev *d, const uint8_t *packed, const uint8_t *scales,
                               int rows, int cols, uint8_t *out)
{
	if (rows <= 0 || cols <= 0 || cols % 16)
		return ek_fail(d, -EINVAL, "nvfp4 repack: bad shape [%d x %d]", rows, cols);
	size_t lanes = (size_t)((rows + 15) / 16) * ((cols + 63) / 64) * 32;
	ek_launch(d, k_repack, dim3((unsigned)((lanes + 255) / 256)), dim3(256), 0, packed, scales,
	          rows, cols, out, lanes);
	return ek_launched(d, "nvfp4 repack");
}
