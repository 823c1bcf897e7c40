/* ek_wq.cu — FP8 (E4M3), INT8 and INT4 weights on the GPU: the repack into
 * the engine layout (ek.h; twin ek_wq_cpu.c), and the launches of their
 * decode GEMV (kernel: ek_gemv_q.cuh) and prefill GEMM (ek_gemm_q.cuh),
 * reached through ek_gv (ek_gemv.cu) and ek_gm (ek_gemm.cu) by weight kind.
 *
 * Repack: one thread per output byte of codes (a row copied, its padding set
 * to the code of 0), one per binary32 scale (the checkpoint's BF16/F16/F32
 * widened exactly, per-tensor and block scales expanded to every row). */
#include "kernels/ek_dev.cuh"

#include <errno.h>

#include "kernels/ek_gemm_q.cuh"      /* k_gemm_q, and k_gemv_q (ek_gemv_q.cuh) */

static_assert(GQ_BM == EK_GM_BM, "the MoE tile table cuts slots by EK_GM_BM");

/* ------------------------------------------------------------ repack */

__global__ void k_wq_codes(int kind, const uint8_t *codes, size_t ldc, int rows, int cols,
                           size_t ldb, uint8_t *out)
{
	pdl_start();
	size_t n = (size_t)rows * ldb, nb = kind == EK_INT4 ? ((size_t)cols + 1) / 2 : (size_t)cols;
	uint8_t pad = kind == EK_FP8 ? 0x00 : kind == EK_INT8 ? 0x80 : 0x88;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t r = i / ldb, b = i % ldb;
		uint8_t v = pad;
		if (b < nb) {
			v = codes[r * ldc + b];
			if (kind == EK_INT4 && (cols & 1) && b == nb - 1)   /* high nibble: padding */
				v = (uint8_t)((v & 0x0F) | 0x80);
		}
		out[i] = v;
	}
}

__global__ void k_wq_scales(const uint8_t *scales, int sdtype, int srb, int rows, int G,
                            float *out)
{
	pdl_start();
	size_t n = (size_t)rows * G;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t r = i / G, g = i % G, k = (r / srb) * G + g;
		float f;
		if (sdtype == EK_S_F32) {
			f = __uint_as_float((uint32_t)scales[4 * k] | (uint32_t)scales[4 * k + 1] << 8 |
			                    (uint32_t)scales[4 * k + 2] << 16 | (uint32_t)scales[4 * k + 3] << 24);
		} else {
			uint16_t b = (uint16_t)(scales[2 * k] | scales[2 * k + 1] << 8);
			f = sdtype == EK_S_BF16 ? __uint_as_float((uint32_t)b << 16)
			                        : __half2float(*(const __half *)&b);   /* exact */
		}
		out[i] = f;
	}
}

static unsigned grid_for(struct ek_dev *d, size_t n)
{
	size_t b = (n + 255) / 256, cap = (size_t)d->sms * 32;
	return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

extern "C" int ek_wq_repack(struct ek_dev *d, int kind, const uint8_t *codes, size_t ldc,
                            const void *scales, int sdtype, int srb, int rows, int cols,
                            int gshift, uint8_t *out)
{
	if ((kind != EK_FP8 && kind != EK_INT8 && kind != EK_INT4) || rows <= 0 || cols <= 0 ||
	    gshift < 4 || gshift > EK_GSHIFT_ROW || srb < 1 || sdtype < EK_S_BF16 || sdtype > EK_S_F32)
		return ek_fail(d, -EINVAL, "fp8/int repack: kind %d [%d x %d], gshift %d, srb %d, "
		               "sdtype %d", kind, rows, cols, gshift, srb, sdtype);
	size_t ldb = kind == EK_INT4 ? ((size_t)cols + 31) / 32 * 16 : ((size_t)cols + 15) / 16 * 16;
	size_t cb = ((size_t)rows * ldb + 15) & ~(size_t)15;
	int G = ((cols - 1) >> gshift) + 1;
	ek_launch(d, k_wq_codes, dim3(grid_for(d, (size_t)rows * ldb)), dim3(256), 0, kind, codes, ldc,
	          rows, cols, ldb, out);
	int rc = ek_launched(d, "fp8/int repack");
	if (rc)
		return rc;
	ek_launch(d, k_wq_scales, dim3(grid_for(d, (size_t)rows * G)), dim3(256), 0,
	          (const uint8_t *)scales, sdtype, srb, rows, G, (float *)(out + cb));
	return ek_launched(d, "fp8/int repack scales");
}

/* ------------------------------------------------------------ GEMV */

template <int KIND, int TT, int MODE, bool NORM = false>
static void launch_q(struct ek_dev *d, const gv_args &a, int insts)
{
	dim3 grid((a.rows + Q_ROWS - 1) / Q_ROWS, insts);
	size_t smem = NORM ? (size_t)a.T * a.cols * sizeof(float) : 0;
	ek_launch(d, k_gemv_q<KIND, TT, MODE, NORM>, grid, dim3(GV_THREADS), smem, a);
}

template <int KIND>
static void gv_kind(struct ek_dev *d, int mode, const gv_args &a, int insts, int norm)
{
	int T = a.T;
	if (mode == GV_GU)
		launch_q<KIND, 1, GV_GU>(d, a, insts);
	else if (mode == GV_DOWN)
		launch_q<KIND, 1, GV_DOWN>(d, a, insts);
	else if (norm && T == 1)
		launch_q<KIND, 1, GV_PLAIN, true>(d, a, 1);
	else if (norm && T == 2)
		launch_q<KIND, 2, GV_PLAIN, true>(d, a, 1);
	else if (norm)
		launch_q<KIND, 4, GV_PLAIN, true>(d, a, 1);
	else if (T == 1)
		launch_q<KIND, 1, GV_PLAIN>(d, a, 1);
	else if (T == 2)
		launch_q<KIND, 2, GV_PLAIN>(d, a, 1);
	else if (T <= 4)
		launch_q<KIND, 4, GV_PLAIN>(d, a, 1);
	else if (T <= 8)
		launch_q<KIND, 8, GV_PLAIN>(d, a, 1);
	else
		launch_q<KIND, 16, GV_PLAIN>(d, a, 1);
}

int ek_gv_q(struct ek_dev *d, int kind, int mode, const gv_args &a, int insts, int norm)
{
	if (kind == EK_FP8)
		gv_kind<EK_FP8>(d, mode, a, insts, norm);
	else if (kind == EK_INT8)
		gv_kind<EK_INT8>(d, mode, a, insts, norm);
	else
		gv_kind<EK_INT4>(d, mode, a, insts, norm);
	return ek_launched(d, norm ? "gemv+norm (fp8/int)" : "gemv (fp8/int)");
}

/* ------------------------------------------------------------ GEMM */

int ek_gm_q(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx, const int *gather,
            float *y, int ldy, int M, int acc, const int *tiles, int ntiles)
{
	gq_args a = {};
	a.w = (const uint8_t *)W->data;
	a.stride = W->stride;
	a.rows = W->rows;
	a.cols = W->cols;
	a.gshift = W->gshift;
	a.x = x;
	a.ldx = ldx;
	a.gather = gather;
	a.y = y;
	a.ldy = ldy;
	a.M = M;
	a.acc = acc;
	a.tiles = tiles;
	unsigned gy = tiles ? (unsigned)ntiles : (unsigned)((M + GQ_BM - 1) / GQ_BM);
	if (!gy)
		return 0;
	dim3 grid((W->rows + GQ_BN - 1) / GQ_BN, gy);
	if (W->kind == EK_FP8)
		ek_launch(d, k_gemm_q<EK_FP8>, grid, dim3(GQ_THREADS), 0, a);
	else if (W->kind == EK_INT8)
		ek_launch(d, k_gemm_q<EK_INT8>, grid, dim3(GQ_THREADS), 0, a);
	else
		ek_launch(d, k_gemm_q<EK_INT4>, grid, dim3(GQ_THREADS), 0, a);
	return ek_launched(d, "gemm (fp8/int)");
}
