/* fastdot.h — the fast mode's decode dots of quantized rows (internal to
 * engine/model; engine/model/fastdot.c): one token, y = W·x straight from the
 * mapped NVFP4, FP8 or symmetric INT8/INT4 rows, in registers, with fused
 * multiply-adds and each group's scale applied once to the group's partial
 * sum (FP8: Σ e4m3(b)·x, then · s; INT: Σ (q − 2^(bits−1))·x, then · s;
 * NVFP4: the oracle's group values, each product fused into the add). NOT the
 * oracle's bits: within the fast mode's bound (tests/engine/test_fast.c). */
#ifndef RQ_ENGINE_FASTDOT_H
#define RQ_ENGINE_FASTDOT_H

struct lg_linear;

/* 1 when lg_fast_dot_rows takes W on this CPU: AVX-512 (F, BW, VL, VBMI) and
 * FMA, NVFP4 with its division table, FP8 or INT of 8 or 4 bits without zero
 * points, groups a multiple of 16 columns wide. The caller (fastmm.c) asks
 * only when its own level is AVX-512 (RQ_ENGINE_NO_AVX512 unset). */
int lg_fast_dot_takes(const struct lg_linear *W);

/* y[i] = Σ_c w[r + i][c] · x[c] for i < R (any R >= 1), for a W that
 * lg_fast_dot_takes; no bias. A block of 4 FP8/INT rows holding an FP8 NaN
 * code, or whose result is not finite (a scale that is not, an overflow), is
 * redone the oracle's way (lg_linear_row, lg_dot), so NaN and inf come out
 * as there. scratch: 2 · cols floats (that row, and x in the lanes' order of
 * the 4-bit codes). */
void lg_fast_dot_rows(const struct lg_linear *W, int r, int R, const float *x, float *y,
                      float *scratch);

#endif
