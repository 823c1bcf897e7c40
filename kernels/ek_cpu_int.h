/* ek_cpu_int.h — what the CPU twins of the engine kernels share (internal to
 * kernels/ and its tests): activations, the NVFP4 tile addressing of ek.h and
 * the one matrix-times-tokens loop behind the GEMV, GEMM and expert twins.
 *
 * The twins are split by op family like the .cu files: ek_gemv_cpu.c
 * (weights, GEMV, GEMM), ek_wq_cpu.c (FP8 and INT weights), ek_moe_cpu.c
 * (router, experts), ek_ops_cpu.c
 * (norms, elementwise, embedding, fills, fp16), ek_attn_cpu.c (QK-norm,
 * RoPE, KV cache, attention). Number formats other than fp16 are quant/'s
 * (quant/quant.h): the same conversions the quantizer is checked with. */
#ifndef RQ_KERNELS_EK_CPU_INT_H
#define RQ_KERNELS_EK_CPU_INT_H

#include "kernels/ek.h"

#include <math.h>

static inline float ek_silu(float x)
{
	return x / (1.0f + expf(-x));
}

static inline float ek_softplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}

/* Member e of W times T tokens (x [T][ldx] -> y [T][ldy]); mode 0: the GEMV's
 * numerics (NVFP4: fp16·2^e activations), 1: the GEMM's (BF16 activations).
 * 0 or -ENOMEM (nothing written). */
int ek_matvec_cpu(const struct ek_w *W, int e, const float *x, int ldx, float *y, int ldy, int T,
                  int acc, int mode);

/* FP8 / INT8 / INT4 layout (ek_wq_cpu.c, ek.h): bytes per row of codes, scale
 * groups per row, the repack's argument check (0 or -EINVAL), and row r of
 * member e as binary32 (each weight fl(v · s), the CPU engine's value). */
size_t ek_wq_ldb(int kind, int cols);
int ek_wq_groups(int cols, int gshift);
int ek_wq_check(int kind, int rows, int cols, int gshift, int srb, int sdtype);
void ek_wq_row_cpu(const struct ek_w *W, int e, int r, float *out);

#endif
