/* scheme.h — the data-free compressed-tensors quantization schemes (issue 12).
 *
 * Pure arithmetic, no I/O. A scheme turns one 2-D Linear weight [rows, cols]
 * into the tensors llm-compressor's model_free_ptq writes for it, bit-exact
 * (llmcompressor 0.14.0.1, compressed-tensors 0.19.0; facts in scheme.c).
 * One module's output is one contiguous buffer: its tensors back to back in
 * the order rq_scheme_layout() gives. RQ_SCHEME_NVFP4 is the Laguna fix of
 * SPEC.md §3 (quant.h), unchanged. */
#ifndef RQ_SCHEME_H
#define RQ_SCHEME_H

#include <stddef.h>
#include <stdint.h>
#include "quant/quant.h"

struct rq_pool;

enum rq_scheme {
	RQ_SCHEME_NVFP4 = 0,      /* Laguna fix (default, unchanged): NVFP4 weights; the plan
	                             adds input_global_scale from CALIB */
	RQ_SCHEME_NVFP4A16,       /* "nvfp4a16": NVFP4 weights, group 16, no activation scale */
	RQ_SCHEME_FP8_DYNAMIC,    /* "fp8-dynamic": FP8 E4M3 weights, per-output-channel scale;
	                             dynamic per-token activations */
	RQ_SCHEME_W8A16,          /* "w8a16": int8 round-to-nearest, group 128 (as W4A16 in this
	                             version), pack-quantized */
	RQ_SCHEME_W4A16,          /* "w4a16": int4 round-to-nearest, group 128, pack-quantized */
	RQ_SCHEME_NVFP4_W4A4,     /* "nvfp4" (--scheme nvfp4, issue 21): llm-compressor oneshot's
	                             NVFP4 preset for any checkpoint: NVFP4A16's weight bytes; the
	                             plan adds input_global_scale from a `calib run` file */
};
#define RQ_SCHEME_COUNT 6
/* Bumped whenever any output byte of a non-NVFP4 scheme could change (cache
 * keys use it together with RQ_RECIPE_VERSION). */
#define RQ_SCHEME_VERSION 1

/* "nvfp4" parses to RQ_SCHEME_NVFP4_W4A4: the Laguna fix (RQ_SCHEME_NVFP4) is chosen by
 * giving no scheme, never by name. Both are named "nvfp4". */
int rq_scheme_parse(const char *s, enum rq_scheme *out);   /* -EINVAL if unknown */
const char *rq_scheme_name(enum rq_scheme s);              /* "nvfp4", "nvfp4a16", ... */
/* 1 for the schemes whose modules also carry input_global_scale F32 [1] from CALIB (the
 * Laguna fix and RQ_SCHEME_NVFP4_W4A4): the plan adds it after the scheme's tensors. */
int rq_scheme_has_input_scale(enum rq_scheme s);
/* llm-compressor's preset name ("NVFP4", "NVFP4A16", "FP8_DYNAMIC", "W8A16", "W4A16")
 * and compressed-tensors' format string ("nvfp4-pack-quantized", "float-quantized",
 * "pack-quantized") for config.json. */
const char *rq_scheme_preset(enum rq_scheme s);
const char *rq_scheme_format(enum rq_scheme s);

enum rq_src_dtype { RQ_SRC_BF16, RQ_SRC_F16, RQ_SRC_F32 };  /* source weight element type */
/* Bytes of one element, and its safetensors dtype name. */
static inline size_t rq_src_size(enum rq_src_dtype t)
{
	return t == RQ_SRC_F32 ? 4 : 2;
}
static inline const char *rq_src_name(enum rq_src_dtype t)
{
	return t == RQ_SRC_F32 ? "F32" : t == RQ_SRC_F16 ? "F16" : "BF16";
}

struct rq_stensor {            /* one output tensor of a quantized module */
	const char *suffix;        /* tensor name is <module>.<suffix>: "weight_packed", "weight",
	                              "weight_scale", "weight_global_scale", "weight_shape" */
	const char *dtype;         /* safetensors dtype: "U8" "F8_E4M3" "F32" "BF16" "F16" "I32" "I64" */
	int ndim;
	uint64_t shape[2];         /* [ndim] */
	uint64_t off, len;         /* its bytes within the module's output */
};
#define RQ_SCHEME_MAX_TENSORS 4

/* Tensors scheme s computes for a weight [rows, cols] of type src, in a fixed
 * order, and the module's output size (the sum of their lengths; offsets are
 * contiguous from 0). -EINVAL when the shape cannot take the scheme (rows or
 * cols 0, cols % group, as model_free_ptq refuses) or src is unknown, -ENOTSUP
 * for a source type the scheme does not take: RQ_SCHEME_NVFP4 (Laguna) takes BF16
 * only; the others take BF16, F16 and F32 (FP8_DYNAMIC's, W8A16's and W4A16's
 * weight_scale is then of the source dtype: "BF16", "F16" or "F32"; NVFP4A16's
 * tensors do not change).
 * For RQ_SCHEME_NVFP4 the layout is EXACTLY today's job layout:
 * weight_packed | weight_scale | weight_global_scale (4 B), so Laguna cache
 * entries stay valid. Outputs are written only on success. */
int rq_scheme_layout(enum rq_scheme s, enum rq_src_dtype src, uint64_t rows, uint64_t cols,
                     struct rq_stensor t[RQ_SCHEME_MAX_TENSORS], int *nt, uint64_t *out_size);

unsigned rq_scheme_group(enum rq_scheme s);       /* columns per scale group: 16, 128, 0 = per channel */
int rq_scheme_shares_scale(enum rq_scheme s);     /* 1: fused partners (q/k/v, gate/up) share a
                                                     global scale (the NVFP4 schemes) */
/* The recipe that reproduces llm-compressor for a BF16 model. Only the NVFP4
 * schemes have recipe variants; the others take RQ_RECIPE_BF16 only, meaning
 * "llm-compressor's arithmetic in the source's own dtype" (torch on the CPU; see
 * scheme.c for what its CUDA path does differently), and quantize refuses any
 * other with -ENOTSUP. */
enum rq_recipe rq_scheme_default_recipe(enum rq_scheme s);
int rq_scheme_recipe_ok(enum rq_scheme s, enum rq_recipe r);   /* 1 if the pair is valid */

struct rq_smod {
	const void *w;             /* [rows][cols] of dtype */
	enum rq_src_dtype dtype;
	size_t rows, cols;
	uint8_t *out;              /* out_size bytes of rq_scheme_layout(s, dtype, rows, cols) */
};

/* A job: n (1..3) modules; for the NVFP4 schemes they share one global scale
 * (from the largest absmax) and must have one source dtype (-ENOTSUP otherwise);
 * for the others each module is independent.
 * -EDOM NaN/Inf (*bad = module index), -EINVAL bad shape or n (*bad = index),
 * -ENOTSUP source dtype or recipe the scheme does not take. Threaded over pool
 * (NULL = caller). Outputs are undefined on error. */
int rq_scheme_quantize(enum rq_scheme s, enum rq_recipe r, const struct rq_smod *m, int n,
                       int *bad, struct rq_pool *pool);

/* Dequantize row `row` of a module output to float (cols values), for tests and
 * the engine's oracle: what compressed-tensors' decompress computes (NVFP4:
 * e2m1 * e4m3 / gs in binary32; FP8 and INT: q * scale rounded to the scale's
 * dtype). -EINVAL for a bad shape or row, -ENOTSUP as layout. */
int rq_scheme_dequant_row(enum rq_scheme s, enum rq_src_dtype src, const uint8_t *out,
                          size_t rows, size_t cols, size_t row, float *dst);

#endif
