/* ek_deq.cuh — the engine kernels' weight and KV dequantization in integer bit
 * operations, exact by construction (no rounding anywhere), host-testable:
 * tests/kernels/test_ek_deq.cpp runs every code of each format through them
 * against quant/'s values. Internal to kernels/ (ek_dev.cuh includes it).
 *
 *   ek_e2m1x8_h2m14  eight E2M1 codes → four fp16x2 of e2m1·2^-14: the code's
 *                    3 magnitude bits ARE the fp16 exponent's low 2 bits and
 *                    the mantissa's top bit at that scale (0.5·2^-14 is the
 *                    subnormal 2^-15), the sign bit moves to bit 15. Two
 *                    shift-and-mask pairs per two weights (the NVFP4 GEMV's
 *                    A operands, k_gemv_fp4: then one exact HMUL2 by the
 *                    E4M3 group scale, since e2m1·e4m3·2^-14 has <= 6
 *                    significant bits and is >= 2^-24).
 *   ek_e2m1x4_bf16   four E2M1 codes → four BF16 through a 16-entry table held
 *                    in four 32-bit constants: PRMT picks the 8 magnitudes'
 *                    high and low bytes for four codes at once, the sign comes
 *                    from bit 3 (the prefill GEMM's B tile, k_gemm).
 *   ek_e4m3x2_h2     two E4M3 bytes → fp16x2 of e4m3·2^-8: sign to bit 15, the
 *                    7 exponent and mantissa bits to bits 7..13 (E4M3's bias
 *                    7 vs binary16's 15: the factor 2^-8; E4M3's subnormals
 *                    m·2^-9 land on m·2^-17, still exact), NaN codes (0x7F,
 *                    0xFF) to fp16 NaN. engine/model/qdot.c's trick on x86;
 *                    here the replacement of cvt.rn.f16x2.e4m3x2 on GPUs
 *                    without it (compute capability < 8.9, where cuda_fp8.h
 *                    converts in software).
 *   ek_e4m3_f32      one E4M3 byte → binary32 exactly: its 7 exponent and
 *                    mantissa bits placed at bits 20..26 read as a binary32 of
 *                    e4m3·2^-120 (E4M3 subnormals land on binary32 subnormals,
 *                    still exact), times 2^120; NaN codes (0x7F, 0xFF) to NaN.
 *                    The FP8 GEMV/GEMM's conversion where the GPU has no cvt
 *                    from E4M3 (cc < 8.9, and the host emulation).
 *   ek_u8_q          byte j of a word as binary32 q = byte − 128 (INT8 codes):
 *                    PRMT puts the byte under the exponent of 2^23 (the bits
 *                    0x4B0000bb are 2^23 + bb), one exact subtraction.
 *   ek_u4_q          nibble k of a word as q = nibble − 8 (INT4 codes), the
 *                    same way: shift, mask, OR 2^23's exponent, subtract.
 *
 * Needs __byte_perm (CUDA's intrinsic; the host test defines its twin) and
 * __uint_as_float. */
#ifndef RQ_KERNELS_EK_DEQ_CUH
#define RQ_KERNELS_EK_DEQ_CUH

#include <stdint.h>

/* The 4 fp16x2 A registers of one 16-column group of the GEMV's mma tile from
 * its code word w (nibble p: row half p & 1, column pair bit (p >> 1) & 1,
 * odd column p >> 2; ek_gemv.cu k_repack's order): a[0] rows g, columns
 * 2i, 2i + 1; a[1] rows g + 8; a[2], a[3] the same 8 columns further. */
static __device__ __forceinline__ void ek_e2m1x8_h2m14(uint32_t w, uint32_t a[4])
{
	a[0] = ((w << 9) & 0x0E000E00u) | ((w << 12) & 0x80008000u);
	a[1] = ((w << 5) & 0x0E000E00u) | ((w << 8) & 0x80008000u);
	a[2] = ((w << 1) & 0x0E000E00u) | ((w << 4) & 0x80008000u);
	a[3] = ((w >> 3) & 0x0E000E00u) | (w & 0x80008000u);
}

/* E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 as BF16 0000 3F00 3F80 3FC0 4000 4040
 * 4080 40C0: their high bytes (codes 0-3 | 4-7) and low bytes. */
#define EK_E2M1_BF16_HI0 0x3F3F3F00u
#define EK_E2M1_BF16_HI1 0x40404040u
#define EK_E2M1_BF16_LO0 0xC0800000u
#define EK_E2M1_BF16_LO1 0xC0804000u

/* Codes k = 0..3 in nibbles k of c (bits 4k..4k+3) → BF16 bits: codes 0, 1 in
 * *b01 (low, high half), codes 2, 3 in *b23. */
static __device__ __forceinline__ void ek_e2m1x4_bf16(uint32_t c, uint32_t *b01,
                                                               uint32_t *b23)
{
	uint32_t m = c & 0x7777u;                       /* selector bit 3 would sign-replicate */
	uint32_t hi = __byte_perm(EK_E2M1_BF16_HI0, EK_E2M1_BF16_HI1, m);
	uint32_t lo = __byte_perm(EK_E2M1_BF16_LO0, EK_E2M1_BF16_LO1, m);
	*b01 = __byte_perm(lo, hi, 0x5140) | ((c << 12) & 0x8000u) | ((c << 24) & 0x80000000u);
	*b23 = __byte_perm(lo, hi, 0x7362) | ((c << 4) & 0x8000u) | ((c << 16) & 0x80000000u);
}

/* Bytes 0 and 1 of w (E4M3) → fp16x2 bits (byte 0 in the low half) of e4m3·2^-8. */
static __device__ __forceinline__ uint32_t ek_e4m3x2_h2(uint32_t w)
{
	uint32_t v = __byte_perm(w, 0u, 0x1404);        /* b0 << 8 | b1 << 24 */
	uint32_t h = ((v >> 1) & 0x3F803F80u) | (v & 0x80008000u);
	uint32_t e = v & 0x7F007F00u;                   /* |b| == 0x7F: NaN */
	uint32_t nan = ((e & 0xFFFFu) == 0x7F00u ? 0x7C00u : 0u) |
	               ((e >> 16) == 0x7F00u ? 0x7C000000u : 0u);
	return h | nan;
}

/* Byte b (bits 0..7 of b) as binary32, exactly (NaN codes NaN). Needs an
 * FMUL that keeps subnormals (the engine kernels are built -ftz=false). */
static __device__ __forceinline__ float ek_e4m3_f32(uint32_t b)
{
	uint32_t m = (b & 0x7Fu) << 20;
	float f = __uint_as_float(m | (b & 0x80u) << 24) * 0x1p120f;
	return m == 0x07F00000u ? __uint_as_float(0x7FC00000u) : f;
}

/* byte j (0..3) of w − 128, exactly */
static __device__ __forceinline__ float ek_u8_q(uint32_t w, int j)
{
	return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | (uint32_t)j)) - 8388736.0f;
}

/* nibble k (0..7) of w − 8, exactly */
static __device__ __forceinline__ float ek_u4_q(uint32_t w, int k)
{
	return __uint_as_float(((w >> (4 * k)) & 15u) | 0x4B000000u) - 8388616.0f;
}

#endif
