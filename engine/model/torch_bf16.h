/* torch_bf16.h — what the CPU forward's BF16 mode (lg_state_round_bf16,
 * forward.h) needs to compute transformers' eager BF16 forward bit for bit:
 * the rounding to BF16, and the summation orders and exp of torch 2.14's CPU
 * kernels in its x86 AVX2 build (internal to engine/; no I/O, no state).
 * Each was checked against that torch on the shapes of SmolLM2 (no output
 * differs); tests/fs/test_calib_peer.py checks the whole forward. */
#ifndef RQ_ENGINE_TORCH_BF16_H
#define RQ_ENGINE_TORCH_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* x rounded to the nearest BF16 (ties to even), as a float (inf stays inf,
 * overflow rounds to inf as torch's conversion does). */
static inline float lg_bf16(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		return x;
	u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
	memcpy(&x, &u, 4);
	return x;
}

/* The 8 lanes of an AVX2 register summed as torch's vec_reduce_all does:
 * halves, then pairs, then the last two. */
static inline float lg_torch_hsum8(const float *v)
{
	return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

/* Σ a[i]·b[i] as torch's BF16 GEMM dot sums it (see torch_bf16.c). */
float lg_torch_dot(const float *a, const float *b, int n);
/* y[t·ldy + r] = lg_torch_dot(x + t·ldx, w + r·ldw, n) for t < T, r < R,
 * every bit the same: a GEMM tile kernel (AVX2 where the CPU has it and
 * RQ_ENGINE_NO_AVX2 is unset) that keeps each dot's lane order. */
void lg_torch_gemm(const float *x, size_t ldx, int T, const float *w, size_t ldw, int R, int n,
                   float *y, size_t ldy);
/* e^d as torch's Vectorized<float>::exp (SLEEF's expf, u10). */
float lg_torch_expf(float d);
/* out[i] = lg_torch_expf(in[i]) for i < n, the same bits (AVX2 + FMA, as
 * SLEEF's, where the CPU has them and RQ_ENGINE_NO_AVX2 is unset); in place
 * (out == in) allowed. */
void lg_torch_expf_n(const float *in, float *out, int n);
/* out[i] = bf16(bf16(silu(g[i])) · u[i]) for i < n, silu(a) = a / (1 + e^-a)
 * with lg_torch_expf's bits (vectorized, 64 at a time): transformers' eager
 * act_fn(gate) · up in BF16. out may be g. */
void lg_torch_swiglu_row(float *out, const float *g, const float *u, int n);
/* Σ x[i]² as torch's sum over a contiguous last dimension adds them. */
float lg_torch_sumsq(const float *x, int n);

#endif
