/* fastmm.h — the fast mode's matrix products (internal to engine/model;
 * engine/model/fastmm.c): lg_matmul's contract (ops.h) computed with fused
 * multiply-adds and a register-tile order, so NOT the oracle's bits. The
 * forward uses it only when a state asks (lg_state_fast, forward.h); the
 * oracle (lg_matmul) stays the reference every test compares against.
 *
 * What it does differently from lg_matmul:
 *   prefill (T >= 3, every weight form): four weight rows dequantized once per
 *     token block (the batch) into the worker's scratch (FP8 and symmetric
 *     INT8 / INT4 rows 16 columns a step with AVX-512, the same values as
 *     lg_linear_row's; the others by lg_linear_row), then dotted with the
 *     block's tokens in register tiles of 4 rows x 6 tokens (AVX-512) or
 *     4 x 3 (AVX2), each step one FMA; the 16 (8) lanes summed at the end
 *   decode, BF16 (T <= 2): FMA dots straight from the mapped row
 *   decode, NVFP4, FP8 and symmetric INT8/INT4 (T = 1, AVX-512 with VBMI):
 *     fastdot.h's dots, each group's scale applied once to its FMA partial
 *     sum; two tokens, or a Linear fastdot.c does not take: lg_matmul's own
 *     register dots (qdot.h)
 * Results still do not depend on the thread count; they do depend on the
 * batch split (a token's products take a different tile path in a batch of
 * one than of many), which the oracle never does.
 *
 * Needs AVX2 + FMA (AVX-512 F/BW/VL where the CPU has it; RQ_ENGINE_NO_AVX512
 * and RQ_ENGINE_NO_AVX2 switch them off as for the oracle); without them every
 * product is lg_matmul's. */
#ifndef RQ_ENGINE_FASTMM_H
#define RQ_ENGINE_FASTMM_H

#include <stddef.h>

struct rq_pool;
struct lg_mm;

/* 2: AVX-512 FMA kernels, 1: AVX2 FMA kernels, 0: none (the oracle's). */
int lg_fast_level(void);

/* lg_matmul (ops.h) with the kernels above: the same arguments, the same
 * scratch (4 · stride floats per worker). */
void lg_fast_matmul(struct rq_pool *pool, float *scratch, size_t stride, const struct lg_mm *mm,
                    int n);

#endif
