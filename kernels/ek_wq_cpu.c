/* ek_wq_cpu.c — FP8 (E4M3) and symmetric INT8 / INT4 weights in the engine
 * layout (ek.h, EK_FP8 / EK_INT8 / EK_INT4): sizes, the repack twin, and
 * each weight's exact value (the CPU engine's: engine/model/ops.c
 * dequant_fp8 / dequant_int).
 *
 * A weight's value is the binary32 product fl(v · s): v = e4m3(code) or
 * q = field − 2^(bits−1) (an exact small integer), s the binary32 scale the
 * repack widened from the checkpoint's BF16 / F16 / F32 (exact). The GEMV
 * and GEMM twins (ek_gemv_cpu.c) read rows through ek_wq_row_cpu. */
#include "kernels/ek_cpu_int.h"
#include "quant/quant.h"

#include <errno.h>
#include <string.h>

size_t ek_wq_ldb(int kind, int cols)
{
	return kind == EK_INT4 ? ((size_t)cols + 31) / 32 * 16 : ((size_t)cols + 15) / 16 * 16;
}

static size_t codes_bytes(int kind, int rows, int cols)
{
	return ((size_t)rows * ek_wq_ldb(kind, cols) + 15) & ~(size_t)15;
}

int ek_wq_groups(int cols, int gshift)
{
	return ((cols - 1) >> gshift) + 1;
}

size_t ek_w_bytes_g(int kind, int rows, int cols, int gshift)
{
	if (kind == EK_BF16)
		return (size_t)rows * cols * 2;
	if (kind == EK_NVFP4) {
		size_t rt = ((size_t)rows + 15) / 16, kc = ((size_t)cols + 63) / 64;
		return rt * kc * 576;
	}
	size_t sc = (size_t)rows * ek_wq_groups(cols, gshift) * 4;
	return codes_bytes(kind, rows, cols) + ((sc + 15) & ~(size_t)15);
}

size_t ek_w_bytes(int kind, int rows, int cols)
{
	return ek_w_bytes_g(kind, rows, cols, EK_GSHIFT_ROW);
}

/* scale k of a [srows][G] table of sdtype, widened exactly */
static float scale_at(const void *scales, int sdtype, size_t k)
{
	const uint8_t *p = scales;
	if (sdtype == EK_S_F32) {
		float f;
		memcpy(&f, p + 4 * k, 4);
		return f;
	}
	uint16_t b;
	memcpy(&b, p + 2 * k, 2);
	return sdtype == EK_S_BF16 ? rq_bf16_to_f32(b) : ek_f16_f32(b);
}

int ek_wq_check(int kind, int rows, int cols, int gshift, int srb, int sdtype)
{
	if ((kind != EK_FP8 && kind != EK_INT8 && kind != EK_INT4) || rows <= 0 || cols <= 0 ||
	    gshift < 4 || gshift > EK_GSHIFT_ROW || srb < 1 || sdtype < EK_S_BF16 || sdtype > EK_S_F32)
		return -EINVAL;
	return 0;
}

int ek_wq_repack_cpu(int kind, const uint8_t *codes, size_t ldc, const void *scales, int sdtype,
                     int srb, int rows, int cols, int gshift, uint8_t *out)
{
	int rc = ek_wq_check(kind, rows, cols, gshift, srb, sdtype);
	if (rc)
		return rc;
	size_t ldb = ek_wq_ldb(kind, cols), nb = kind == EK_INT4 ? ((size_t)cols + 1) / 2 : (size_t)cols;
	uint8_t pad = kind == EK_FP8 ? 0x00 : kind == EK_INT8 ? 0x80 : 0x88;   /* codes of 0 */
	memset(out, 0, ek_w_bytes_g(kind, rows, cols, gshift));
	for (int r = 0; r < rows; r++) {
		uint8_t *o = out + (size_t)r * ldb;
		memcpy(o, codes + (size_t)r * ldc, nb);
		memset(o + nb, pad, ldb - nb);
		if (kind == EK_INT4 && (cols & 1))   /* the last byte's high nibble is padding */
			o[nb - 1] = (uint8_t)((o[nb - 1] & 0x0F) | 0x80);
	}
	int G = ek_wq_groups(cols, gshift);
	float *s = (float *)(out + codes_bytes(kind, rows, cols));
	for (int r = 0; r < rows; r++)
		for (int g = 0; g < G; g++)
			s[(size_t)r * G + g] = scale_at(scales, sdtype, (size_t)(r / srb) * G + g);
	return 0;
}

/* v of code c in row `row` (E4M3 value or q), exact in binary32 */
static float code_value(int kind, const uint8_t *row, int c)
{
	if (kind == EK_FP8)
		return rq_e4m3_to_f32(row[c]);
	if (kind == EK_INT8)
		return (float)((int)row[c] - 128);
	uint8_t b = row[c / 2];
	return (float)((int)((c & 1) ? b >> 4 : b & 15) - 8);
}

void ek_wq_row_cpu(const struct ek_w *W, int e, int r, float *out)
{
	const uint8_t *base = (const uint8_t *)W->data + (size_t)e * W->stride;
	const uint8_t *row = base + (size_t)r * ek_wq_ldb(W->kind, W->cols);
	const float *s = (const float *)(base + codes_bytes(W->kind, W->rows, W->cols)) +
	                 (size_t)r * ek_wq_groups(W->cols, W->gshift);
	for (int c = 0; c < W->cols; c++)
		out[c] = code_value(W->kind, row, c) * s[c >> W->gshift];
}
