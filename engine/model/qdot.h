/* qdot.h — decode's dots of one quantized weight row with x, in registers
 * (internal to engine/model; engine/model/qdot.c).
 *
 * Each computes exactly the oracle's bits: the row dequantized as
 * lg_linear_row does (ops.c: w = e4m3(q)·s for FP8, (q − zo)·s for INT, both
 * one binary32 product per weight) and lg_dot's order over it (16
 * accumulators, acc[j] summing columns ≡ j mod 16, each product rounded then
 * added, no FMA; then acc[j] += acc[j + w] for w = 8, 4, 2, 1). The vector
 * lanes are those accumulators, so the bits are the same by construction.
 *
 * Each takes R (1..4) consecutive rows at once and writes out[0..R); rows
 * are interleaved in registers (one row's adds form a chain, R rows' do not).
 * A function returns 1 with out[] set when it took the rows, 0 when this CPU
 * or these rows have no fast path (no AVX2, RQ_ENGINE_NO_AVX2 set, a group width
 * not a multiple of 16, an FP8 NaN code, a scale the shortcut cannot take):
 * the caller then runs the oracle. AVX-512 where the CPU has it (F, BW, VL,
 * VBMI; RQ_ENGINE_NO_AVX512=1 keeps AVX2), AVX2 + F16C otherwise. */
#ifndef RQ_ENGINE_QDOT_H
#define RQ_ENGINE_QDOT_H

#include <stddef.h>
#include <stdint.h>

/* FP8 E4M3FN rows: row i is q + i·ldq ([n] bytes), its scale for column c
 * s[i·(n/gw) + c/gw]. pf: 4 rows (ldq apart) to fetch into the caches while
 * these are dotted, or NULL (no effect on the result). */
int lg_qdot_fp8(const uint8_t *q, size_t ldq, int R, const float *s, int gw, const float *x,
                int n, float *out, const uint8_t *pf);

/* lg_qdot_fp8's rows, any R >= 1 (4 at a time), with BF16 scales (the BF16
 * number at sb + 2·(i·lds + c/gw) for row i; lds 0: one row for all), the
 * rows 8 ahead fetched meanwhile: the rows done, R, or fewer where a block of
 * 4 holds a NaN code (0 without AVX-512); the caller's oracle takes the rest. */
int lg_qdot_fp8_bf16s(const uint8_t *q, size_t ldq, int R, const uint8_t *sb, size_t lds, int gw,
                      const float *x, int n, float *out);

/* INT rows of 8 or 4 bits (bytes / little-endian nibbles of the pack-quantized
 * stream, column c at byte c or nibble c; row i at row + i·ldr), w = (field −
 * zo[k]) · s[k] with k = i·(n/gw) + c/gw, zo = 2^(bits−1) + zero point (zo
 * NULL: symmetric, 2^(bits−1) everywhere). Other widths: 0. pf as for FP8. */
int lg_qdot_int(const uint8_t *row, size_t ldr, int R, int bits, const float *s, const int *zo,
                int gw, const float *x, int n, float *out, const uint8_t *pf);

/* lg_qdot_int's rows, any R >= 1 (4 at a time), symmetric (zo NULL), with
 * BF16 scales: s_k the BF16 number at sb + 2·(i·lds + c/gw) for row i (lds 0:
 * one row of scales for all); the rows 8 ahead fetched meanwhile. The same
 * bits as lg_qdot_int on the scales widened. AVX-512 only, else 0. */
int lg_qdot_int_bf16s(const uint8_t *row, size_t ldr, int R, int bits, const uint8_t *sb,
                      size_t lds, int gw, const float *x, int n, float *out);

/* NVFP4 rows, any R >= 1 (4 at a time): packed[R][n/2] E2M1 codes (column 2k
 * in the low nibble), one scale byte per group of 16 (scales[R][n/16]); div the Linear's [2][256] table (struct
 * lg_linear gs_div: f1 = div[b], f15 = div[256 + b]); the group's values are
 * 0, f1/2, f1, f15, 2f1, 2f15, 4f1, 4f15 by the code's low 3 bits, negated
 * by bit 3, as ops.c's dequant_nvfp4 tabulates them. */
int lg_qdot_nvfp4(const uint8_t *packed, const uint8_t *scales, int R, const float *div,
                  const float *x, int n, float *out);

/* The per-thread table of NVFP4 group values, lut[b][code] for every scale
 * byte b of the Linear whose division table is div (made on the first call
 * with this div, then reused; AVX-512 only): what lg_qdot_nvfp4 picks from.
 * The fast mode's NVFP4 decode dots (fastdot.c) read the same table. */
const float (*lg_qdot_nvfp4_lut(const float *div))[16];

/* BF16 rows: row i at w + i·ldw ([n] values, widened exactly). AVX-512 only
 * (AVX2: ops.c's one-row dot), else 0. */
int lg_qdot_bf16(const uint16_t *w, size_t ldw, int R, const float *x, int n, float *out);

/* A batch's products on dequantized rows: y[t·ldy + r] = lg_dot(w + r·ldw,
 * x + t·ldx, n) for r < R (1..4) and t < T, each the oracle's bits, as
 * register tiles of 4 rows x 3 tokens (each weight load serves 3 tokens,
 * each input load 4 rows). AVX-512 and n % 16 == 0 only, else 0. */
int lg_dot_tile(const float *w, size_t ldw, int R, const float *x, size_t ldx, int T, int n,
                float *y, size_t ldy);

/* out[i] += s[r] · x[r·ldx + i] for rows r = 0, 1, .. in order (i < n): lg_axpy
 * row after row, the same bits, with out held in registers across the rows
 * (attention's P·V, a key at a time). AVX-512 and n % 16 == 0 only, else 0. */
int lg_axpy_rows(float *out, const float *s, const float *x, size_t ldx, int rows, int n);

#endif
