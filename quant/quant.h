/* quant.h — NVFP4 (compressed-tensors nvfp4-pack-quantized, group 16) arithmetic.
 *
 * Pure arithmetic, no I/O. The recipe is SPEC.md §3; every function here is
 * bit-exact IEEE binary32 (built with -ffp-contract=off). Weights are BF16
 * bit patterns (uint16_t), row-major [rows][cols], cols % 16 == 0. */
#ifndef RQ_QUANT_H
#define RQ_QUANT_H

#include <stddef.h>
#include <stdint.h>

struct rq_pool;

enum rq_recipe {
	RQ_RECIPE_FP32 = 0,     /* default: gs = f32(f32(1/a) * 2688), S6 = f32(g/6) */
	RQ_RECIPE_BF16 = 1,     /* gs = bf16(bf16(1/a) * 2688), S6 = bf16(g/6) */
	RQ_RECIPE_FP32DIV = 2,  /* gs = f32(2688 / a), S6 = f32(g/6) */
};
#define RQ_RECIPE_COUNT 3
/* Bumped whenever any output byte of any variant could change (cache keys use it). */
#define RQ_RECIPE_VERSION 1

int rq_recipe_parse(const char *s, enum rq_recipe *out);   /* -EINVAL if unknown */
const char *rq_recipe_name(enum rq_recipe r);              /* "fp32", "bf16", "fp32div" */

/* Conversions. */
float rq_bf16_to_f32(uint16_t b);
uint16_t rq_f32_to_bf16(float f);          /* round to nearest even */
float rq_e4m3_to_f32(uint8_t b);           /* E4M3FN; 0x7F/0xFF (NaN) -> NaN */
uint8_t rq_f32_to_e4m3(float f);           /* RNE, |f| <= 448 expected, sign kept */
float rq_e2m1_to_f32(uint8_t code);        /* low 4 bits: sign bit 8, magnitude index 0..7 */

/* Absolute maximum of n BF16 values, as the BF16 bit pattern of |max|.
 * -EDOM if a NaN or Inf is present (*bad_index, if non-NULL, gets its index). */
int rq_absmax_bf16(const uint16_t *w, size_t n, uint16_t *amax, size_t *bad_index);
/* Same result, vectorized and threaded over the pool (NULL = calling thread). */
int rq_absmax_bf16_fast(const uint16_t *w, size_t n, uint16_t *amax, size_t *bad_index,
                        struct rq_pool *pool);

/* The global scale (the large number consumers divide by) for amax (a BF16
 * value widened), including the max(amax, 2^-126) floor and inf/NaN -> 1.0. */
float rq_global_scale(enum rq_recipe r, float amax);

/* Quantize W[rows][cols] with global scale gs into
 *   packed[rows][cols/2]  two E2M1 codes per byte, column 2k in the low nibble
 *   scales[rows][cols/16] E4M3FN group scales.
 * The caller has checked finiteness and cols % 16 == 0. _ref is the scalar
 * oracle; _fast is vectorizable and threaded over rows; both give identical bytes. */
void rq_quantize_ref(enum rq_recipe r, const uint16_t *w, size_t rows, size_t cols, float gs,
                     uint8_t *packed, uint8_t *scales);
void rq_quantize_fast(enum rq_recipe r, const uint16_t *w, size_t rows, size_t cols, float gs,
                      uint8_t *packed, uint8_t *scales, struct rq_pool *pool);

/* One quantization job: one module, or a fused gate/up pair sharing ONE
 * global scale computed from the larger absmax of the two. */
struct rq_qmod {
	const uint16_t *w;      /* [rows][cols] BF16 */
	size_t rows, cols;
	uint8_t *packed;        /* out: [rows][cols/2] */
	uint8_t *scales;        /* out: [rows][cols/16] */
};
/* Runs absmax, global scale and quantization on the CPU. *gs gets the shared
 * global scale. -EDOM if a weight is NaN/Inf (*bad_module = its index),
 * -EINVAL if cols % 16 != 0. Outputs are undefined on error. */
int rq_quantize_job(enum rq_recipe r, const struct rq_qmod *m, int n, float *gs,
                    int *bad_module, struct rq_pool *pool);

/* Dequantize one row: out[c] = e2m1(code) * e4m3(scale) / gs. */
void rq_dequant_row(const uint8_t *packed_row, const uint8_t *scales_row, float gs,
                    size_t cols, float *out);

#endif
