/* ops.h — CPU kernels of the forward pass (internal to engine/).
 *
 * Everything accumulates in binary32 in a fixed order that does not depend
 * on the thread count or on how many tokens share a batch, so a prompt
 * processed as one batch and the same prompt fed token by token give the
 * same bits. */
#ifndef RQ_ENGINE_OPS_H
#define RQ_ENGINE_OPS_H

#include <stddef.h>
#include <stdint.h>
#include "engine/model/model.h"

struct rq_pool;

/* One matrix product y[t][r] = W[r,:] · x[t,:] for t < T, r < W->rows. */
struct lg_mm {
	const struct lg_linear *W;
	const float *x;            /* [T][ldx], W->cols used */
	float *y;                  /* [T][ldy], W->rows written */
	int ldx, ldy, T;
};

/* Runs n products as one parallel loop over all their rows. Weights are read
 * once per call: rows are widened (BF16) or dequantized (NVFP4), four at a
 * time, into the worker's scratch (4 · stride floats per worker, stride >=
 * every W->cols) and dotted with the T inputs. */
void lg_matmul(struct rq_pool *pool, float *scratch, size_t stride, const struct lg_mm *mm, int n);

/* Row r of W as binary32: BF16 widened; NVFP4 e2m1(code)·e4m3(scale)/global_scale
 * (the same values as quant's rq_dequant_row). */
void lg_linear_row(const struct lg_linear *W, int r, float *out);

/* Scale k of an FP8/INT Linear's weight_scale (F32, BF16 or F16), widened exactly. */
float lg_qscale_at(const struct lg_linear *W, size_t k);

/* Σ a[i]·b[i] in 16 interleaved partial sums, combined pairwise. */
float lg_dot(const float *a, const float *b, int n);
/* out[i] += s · x[i] */
void lg_axpy(float *out, float s, const float *x, int n);

/* transformers' <Family>RMSNorm in float32: w · (x · rsqrt(mean(x²) + eps)). */
void lg_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/* torch: x > 20 ? x : log1p(e^x). SwiGLU, the router and the embedding are
 * the kernels' CPU twins (kernels/ek.h), which compute the same bits. */
float lg_softplus(float x);

/* out[b] = e4m3(b) / gs and out[256 + b] = (1.5 · e4m3(b)) / gs for every
 * byte b: the two divisions an NVFP4 group of scale b needs (struct
 * lg_linear gs_div), the same operations, so the same bits. */
void lg_nvfp4_div_table(float gs, float *out);

/* IEEE binary16 → binary32, exact. */
float lg_f16_to_f32(uint16_t h);

#endif
