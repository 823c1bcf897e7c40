/* quant_int.h — internals shared by the quant sources and tests/quant (not public).
 *
 * The recipe's branch-free helpers come from recipe.h (one copy for the CPU
 * paths and the CUDA quantizer); each has a slow, obviously-correct twin in
 * convert.c / quant_ref.c, and tests/quant compares them (exhaustively where
 * feasible). */
#ifndef RQ_QUANT_INT_H
#define RQ_QUANT_INT_H

#include <stdint.h>
#include "quant/quant.h"

/* The recipe's helpers (rq_f2u, rq_bf16f, rq_round_bf16, rq_recipe_gs,
 * rq_scale_value, rq_scale_code, rq_e4m3_code, rq_e4m3_val, rq_seff,
 * rq_e2m1_code, ...) are recipe.h's, shared with the CUDA quantizer. */
#include "quant/recipe.h"

/* The literal E2M1 magnitudes [0 .5 1 1.5 2 3 4 6] by index (convert.c). */
extern const float rq_e2m1_mag[8];

/* Instruction-set variants of the fast path (quant_fast.c). All give the
 * same bytes; tests force each one the CPU supports. */
enum { RQ_ISA_BASE = 0, RQ_ISA_AVX2 = 1, RQ_ISA_AVX512 = 2, RQ_ISA_COUNT = 3 };
int rq_quant_isa_max(void);            /* best variant this CPU and build can run */
int rq_quant_isa(void);                /* the variant in use */
int rq_quant_isa_force(int isa);       /* -1 = automatic; returns the previous forced
                                          value, -EINVAL if the CPU lacks it */
const char *rq_quant_isa_name(int isa);   /* "sse2", "avx2", "avx512" */

/* rq_quantize_fast's rows (recipe bf16, the calling thread) with each group's scale taken
 * from rng[rows][cols / 16] (BF16 bits: the range an observer chose) instead of its max
 * |w|: the codes and scales of observer.c's NVFP4 modules. */
void rq_quantize_rng_rows(const uint16_t *w, size_t rows, size_t cols, float gs,
                          const uint16_t *rng, uint8_t *packed, uint8_t *scales);

/* The scalar oracle of one row (quant_ref.c); the fast path is checked against it. */
void rq_quantize_row_ref(enum rq_recipe r, const uint16_t *w, size_t cols, float gs,
                         uint8_t *packed, uint8_t *scales);

#endif
