/* ek_gemv.cu — matrix-vector products for decode and small batches
 * (T <= 16 tokens read each weight once), the NVFP4 repack, and the expert
 * GEMVs of the MoE ops (modes in ek_gv_modes.h). The BF16 kernel and the
 * argument block live in ek_gemv_bf16.cuh (so that tests/kernels/
 * test_ek_gemv_simt.cpp can run that very source on the host); the NVFP4
 * kernel, the launches and the entry points here. FP8, INT8 and INT4 weights
 * go to ek_wq.cu (kernel: ek_gemv_q.cuh) from ek_gv and ek_gemv_norm.
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
 * 2^(14-e_t) / gs.
 *
 * Fused RMSNorm (NORM, plain mode, T <= EK_GEMV_NORM_MAX_T): every block
 * first computes ss = Σ x² of each token with ek_rmsnorm's loop (256
 * threads, thread i summing elements i, i + 256, ... with fmaf, then
 * block_sum) and r = 1 / sqrt(ss / n + eps), then uses nw[i] · (x[i] · r)
 * (two rounded products, k_rmsnorm's) wherever the unfused kernel reads
 * x[i]: BF16 stages those values in shared memory, NVFP4 recomputes them in
 * its max|x| pass and as it stages fp16. The GEMV then sees exactly the
 * values k_rmsnorm would have stored, so y is bit-identical to the two
 * kernels; block 0 stores them to xn for later readers.
 *
 * PDL: plain-mode GEMVs prefetch their first weight lines into L2 before
 * pdl_wait (weights are never written during a pass; the rule in ek_rt.cu);
 * MoE modes cannot (the expert comes from ids, written by the router). */
#include "kernels/ek_dev.cuh"

#include <errno.h>

#include "kernels/ek_gemv_bf16.cuh"   /* gv_args, the MoE combine, the BF16 kernel */

#define Q_ROWS 16                     /* rows per block of ek_gemv_q.cuh (ek_wq.cu) */

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
	__half2 L01 = e4m3x2h(sw.x), L23 = e4m3x2h(sw.x >> 16);
	__half2 H01 = e4m3x2h(sw.y), H23 = e4m3x2h(sw.y >> 16);
	const __half2 sl[4] = {__low2half2(L01), __high2half2(L01), __low2half2(L23), __high2half2(L23)};
	const __half2 sh[4] = {__low2half2(H01), __high2half2(H01), __low2half2(H23), __high2half2(H23)};
	const uint32_t wd[4] = {cw.x, cw.y, cw.z, cw.w};
#pragma unroll
	for (int j = 0; j < 4; j++) {
		uint32_t c[4];
		ek_e2m1x8_h2m14(wd[j], c);            /* e2m1 · 2^-14, exact (ek_deq.cuh) */
		uint32_t a0 = hmul2u(c[0], sl[j]), a1 = hmul2u(c[1], sh[j]);
		uint32_t a2 = hmul2u(c[2], sl[j]), a3 = hmul2u(c[3], sh[j]);
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

template <int NT, int MODE, bool NORM>
__global__ __launch_bounds__(GV_THREADS) void k_gemv_fp4(gv_args a, int kch)
{
	constexpr int NS = MODE == GV_GU ? 2 : 1;
	constexpr int NC = 8 * NT;
	extern __shared__ __align__(16) unsigned char smem[];
	__shared__ int ex[16];
	__shared__ float rinv[EK_GEMV_NORM_MAX_T];
	__shared__ float shr[33];
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, i4 = lane & 3;
	int wr = warp / FP_KS, wk = warp % FP_KS, inst = blockIdx.y;
	int rt = blockIdx.x * FP_RT + wr, nrt = (a.rows + 15) / 16, nkc = (a.cols + 63) / 64;
	if (MODE == GV_PLAIN && rt < nrt) {           /* first tiles of this warp, before the wait */
		int kc1 = min(nkc, kch / 64);
#pragma unroll
		for (int u = 0; u < UNROLL; u++)
			if (wk + FP_KS * u < kc1)
				prefetch_l2(a.w + ((size_t)rt * nkc + wk + FP_KS * u) * 576 + lane * 16);
	}
	pdl_start();
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
		float m = 0.0f, r = 0.0f;
		if (NORM) {
			r = rms_rinv(xc, K, a.eps, shr);
			for (int i = threadIdx.x; i < K; i += blockDim.x) {
				float v = rms_val(a.nw[i], xc[i], r);
				m = fmaxf(m, fabsf(v));
				if (a.xn && blockIdx.x == 0)
					a.xn[(size_t)c * a.ldxn + i] = v;
			}
		} else {
			for (int i = threadIdx.x; i < K; i += blockDim.x)
				m = fmaxf(m, fabsf(xc[i]));
		}
		m = block_max(m, shr);
		if (threadIdx.x == 0) {
			ex[c] = act_exp(m);
			if (NORM)
				rinv[c] = r;
		}
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
				float v = 0.0f;
				if (col < K)
					v = NORM ? rms_val(a.nw[col], xc[col], rinv[c]) : xc[col];
				xs[c * xrow + i] = __float2half_rn(__fmul_rn(v, sc));
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
	return kind == EK_NVFP4 ? FP_ROWS : kind == EK_BF16 ? BF_ROWS : Q_ROWS;
}

#define NORM_SMEM (46 * 1024)       /* BF16 NORM: staged x of all tokens, fp32 */

template <int TT, int MODE, bool NORM = false>
static void launch_bf16(struct ek_dev *d, const gv_args &a, bool vec, int insts)
{
	dim3 grid((a.rows + BF_ROWS - 1) / BF_ROWS, insts);
	size_t smem = NORM ? (size_t)a.T * a.cols * sizeof(float) : 0;
	if (vec)
		ek_launch(d, k_gemv_bf16<TT, true, MODE, NORM>, grid, dim3(GV_THREADS), smem, a);
	else
		ek_launch(d, k_gemv_bf16<TT, false, MODE, NORM>, grid, dim3(GV_THREADS), smem, a);
}

template <int NT, int MODE, bool NORM = false>
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
	ek_launch(d, k_gemv_fp4<NT, MODE, NORM>, grid, dim3(GV_THREADS), smem, a, kch);
}

static bool is_q(int kind)
{
	return kind == EK_FP8 || kind == EK_INT8 || kind == EK_INT4;
}

static int check_w(struct ek_dev *d, const struct ek_w *W, const char *what)
{
	if (!W || W->rows <= 0 || W->cols <= 0 || W->n < 1 || !W->data)
		return ek_fail(d, -EINVAL, "%s: empty weight", what);
	if (W->kind == EK_NVFP4 && (W->cols % 16 || !W->gs))
		return ek_fail(d, -EINVAL, "%s: NVFP4 needs cols %% 16 == 0 and global scales", what);
	if (is_q(W->kind) && (W->gshift < 4 || W->gshift > EK_GSHIFT_ROW))
		return ek_fail(d, -EINVAL, "%s: FP8/INT scale groups of 2^%d columns (at least 16)", what,
		               W->gshift);
	if (W->kind != EK_NVFP4 && W->kind != EK_BF16 && !is_q(W->kind))
		return ek_fail(d, -EINVAL, "%s: unknown weight kind %d", what, W->kind);
	return 0;
}

static bool bf16_vec(const struct ek_w *W, const float *x, int ldx)
{
	return W->cols % 8 == 0 && ldx % 4 == 0 && ((uintptr_t)x & 15) == 0 &&
	       ((uintptr_t)W->data & 15) == 0 && (W->n == 1 || W->stride % 16 == 0);
}

static void gv_fill(gv_args &a, const struct ek_w *A, const struct ek_w *B, const int *ids, int k,
                    const float *x, int ldx, float *y, int ldy, int T, int acc, const float *wts,
                    float scale, float *out, int ldo, int *cnt)
{
	a.w = (const uint8_t *)A->data;
	a.stride = A->stride;
	a.gs = A->gs;
	a.gshift = A->gshift;
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
}

int ek_gv(struct ek_dev *d, int mode, const struct ek_w *A, const struct ek_w *B, const int *ids,
          int k, const float *x, int ldx, float *y, int ldy, int T, int acc, const float *wts,
          float scale, float *out, int ldo, int *cnt)
{
	gv_args a = {};
	gv_fill(a, A, B, ids, k, x, ldx, y, ldy, T, acc, wts, scale, out, ldo, cnt);
	if (is_q(A->kind))
		return ek_gv_q(d, A->kind, mode, a, mode == GV_PLAIN ? 1 : T, 0);
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

/* The fused kernel when its staging fits (BF16, FP8, INT: T · cols floats
 * within NORM_SMEM), else ek_rmsnorm then ek_gemv: the same bits either way. */
extern "C" int ek_gemv_norm(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx,
                            const float *nw, float eps, float *xn, int ldxn, float *y, int ldy,
                            int T, int acc)
{
	int rc = check_w(d, W, "gemv+norm");
	if (rc)
		return rc;
	if (T < 1 || T > EK_GEMV_NORM_MAX_T || ldx < W->cols || ldy < W->rows || !nw ||
	    (xn && ldxn < W->cols))
		return ek_fail(d, -EINVAL, "gemv+norm: T %d (1..%d), ldx %d, ldxn %d, ldy %d for [%d x %d]%s",
		               T, EK_GEMV_NORM_MAX_T, ldx, ldxn, ldy, W->rows, W->cols,
		               nw ? "" : ", no norm weights");
	if (xn && (const float *)xn < x + (size_t)(T - 1) * ldx + W->cols &&
	    (const float *)x < xn + (size_t)(T - 1) * ldxn + W->cols)
		return ek_fail(d, -EINVAL, "gemv+norm: xn overlaps x (use ek_rmsnorm in place)");
	if ((W->kind == EK_BF16 || is_q(W->kind)) && (size_t)T * W->cols * sizeof(float) > NORM_SMEM) {
		float *t = xn;
		int ldt = ldxn;
		if (!t) {
			if (!(t = (float *)ek_ws(d, (size_t)T * W->cols * sizeof(float))))
				return -ENOMEM;
			ldt = W->cols;
		}
		if ((rc = ek_rmsnorm(d, t, ldt, x, ldx, nw, T, W->cols, eps)))
			return rc;
		return ek_gemv(d, W, t, ldt, y, ldy, T, acc);
	}
	gv_args a = {};
	gv_fill(a, W, NULL, NULL, 0, x, ldx, y, ldy, T, acc, NULL, 0, NULL, 0, NULL);
	a.nw = nw;
	a.eps = eps;
	a.xn = xn;
	a.ldxn = ldxn;
	if (is_q(W->kind))
		return ek_gv_q(d, W->kind, GV_PLAIN, a, 1, 1);
	if (W->kind == EK_BF16) {
		bool vec = W->cols % 8 == 0 && ((uintptr_t)W->data & 15) == 0;
		if (T == 1)
			launch_bf16<1, GV_PLAIN, true>(d, a, vec, 1);
		else if (T == 2)
			launch_bf16<2, GV_PLAIN, true>(d, a, vec, 1);
		else
			launch_bf16<4, GV_PLAIN, true>(d, a, vec, 1);
	} else {
		launch_fp4<1, GV_PLAIN, true>(d, a, 1);
	}
	return ek_launched(d, "gemv+norm");
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
