/* test_ek_deq.cpp — kernels/ek_deq.cuh, the engine kernels' dequantization bit
 * tricks, on the host (suite kernels, no GPU) against quant/'s values, for every
 * code of each format in every position of its word:
 *   - E4M3: all 256 bytes in both halves of ek_e4m3x2_h2's word: the fp16
 *     times 2^8 == rq_e4m3_to_f32, bit for bit (NaN codes NaN); the other half
 *     holding every byte too (no leak between lanes);
 *   - E2M1, the NVFP4 GEMV's A operands (ek_e2m1x8_h2m14): all 16 codes in all
 *     8 nibbles: e2m1 · 2^-14 exactly, each in the register and half the
 *     mma tile's layout puts it (k_repack's order);
 *   - E2M1, the GEMM's PRMT table (ek_e2m1x4_bf16): all 16 codes in all 4
 *     nibbles, the other nibbles random: BF16 == rq_e2m1_to_f32;
 *   - E4M3 → binary32 (ek_e4m3_f32, the FP8 GEMV/GEMM's conversion without
 *     the GPU's cvt): all 256 codes == rq_e4m3_to_f32 bit for bit;
 *   - INT8 / INT4 codes (ek_u8_q, ek_u4_q): every byte in each of the 4
 *     positions of a word and every nibble in each of the 8, random
 *     neighbours: == field − 128 / − 8 exactly, as engine/model/ops.c reads them.
 * __byte_perm is PTX prmt.b32's default mode, written out in emul/simt.h; on a
 * device the intrinsic runs (tests ek-gpu, ek-gpu-pf and ek-wq-gpu then hold
 * the kernels against their twins). */
extern "C" {
#include "quant/quant.h"
#include "kernels/ek.h"
}
#include "tests/kernels/emul/simt.h"
#include "tests/kernels/emul/simt_tap.h"

#include <math.h>

#include "kernels/ek_deq.cuh"

static int same_f(float a, float b)
{
	uint32_t x, y;
	memcpy(&x, &a, 4);
	memcpy(&y, &b, 4);
	return x == y || (isnan(a) && isnan(b));
}

static void test_e4m3(void)
{
	int bad = 0, nan = 0;
	for (uint32_t b = 0; b < 256; b++) {
		float want = rq_e4m3_to_f32((uint8_t)b);
		nan += isnan(want);
		for (uint32_t o = 0; o < 256; o++) {
			uint32_t lo = ek_e4m3x2_h2(b | o << 8 | 0xA5C30000u);   /* upper bytes ignored */
			uint32_t hi = ek_e4m3x2_h2(o | b << 8);
			float l = ldexpf(ek_f16_f32((uint16_t)lo), 8);
			float h = ldexpf(ek_f16_f32((uint16_t)(hi >> 16)), 8);
			float lo_o = ldexpf(ek_f16_f32((uint16_t)(lo >> 16)), 8);
			if (!same_f(l, want) || !same_f(h, want) || !same_f(lo_o, rq_e4m3_to_f32((uint8_t)o))) {
				if (bad++ < 4)
					printf("# e4m3 0x%02X (other 0x%02X): low %g high %g, want %g\n", b, o, l,
					       h, want);
			}
		}
	}
	OK(bad == 0 && nan == 2, "E4M3 bit trick: all 256 codes in both halves (x 256 partners) "
	   "== rq_e4m3_to_f32 as fp16 x 2^8, NaN codes NaN (%d wrong; %d NaN codes)", bad, nan);
}

/* k_repack's nibble p of a word: row half p & 1, column 2i + 8·((p >> 1) & 1) + (p >> 2) */
static void test_e2m1_mma(void)
{
	int bad = 0;
	uint64_t rng = 0x9E3779B97F4A7C15ull;
	for (int p = 0; p < 8; p++)
		for (uint32_t c = 0; c < 16; c++) {
			uint32_t w = (uint32_t)tap_xorshift(&rng);
			w = (w & ~(15u << (4 * p))) | c << (4 * p);
			uint32_t a[4];
			ek_e2m1x8_h2m14(w, a);
			/* register: rows (p & 1 → a[1], a[3]), columns (p >> 1 & 1 → a[2], a[3]);
			 * half: the odd column (p >> 2) */
			int reg = (p & 1) + 2 * ((p >> 1) & 1), half = p >> 2;
			uint16_t h = (uint16_t)(a[reg] >> (16 * half));
			float got = ek_f16_f32(h), want = ldexpf(rq_e2m1_to_f32((uint8_t)c), -14);
			if (!same_f(got, want) && bad++ < 4)
				printf("# e2m1 code %u nibble %d: %g, want %g\n", c, p, got, want);
		}
	OK(bad == 0, "E2M1 -> the GEMV's fp16 A operands: all 16 codes in all 8 nibbles == "
	   "e2m1 * 2^-14 exactly, in k_repack's register and half");
}

static void test_e2m1_bf16(void)
{
	int bad = 0;
	uint64_t rng = 0x2545F4914F6CDD1Dull;
	for (int k = 0; k < 4; k++)
		for (uint32_t c = 0; c < 16; c++)
			for (int rep = 0; rep < 16; rep++) {
				uint32_t w = (uint32_t)tap_xorshift(&rng) & 0xFFFFu;
				w = (w & ~(15u << (4 * k))) | c << (4 * k);
				uint32_t b[2];
				ek_e2m1x4_bf16(w, &b[0], &b[1]);
				for (int j = 0; j < 4; j++) {
					uint16_t h = (uint16_t)(b[j >> 1] >> (16 * (j & 1)));
					float want = rq_e2m1_to_f32((uint8_t)((w >> (4 * j)) & 15));
					if (!same_f(rq_bf16_to_f32(h), want) && bad++ < 4)
						printf("# e2m1 word %04X code %d: bf16 %04X, want %g\n", w, j, h, want);
				}
			}
	OK(bad == 0, "E2M1 -> BF16 through the PRMT table: all 16 codes in all 4 nibbles "
	   "(16 random neighbours each) == rq_e2m1_to_f32");
}

static void test_e4m3_f32(void)
{
	int bad = 0;
	for (uint32_t b = 0; b < 256; b++) {
		float want = rq_e4m3_to_f32((uint8_t)b);
		for (uint32_t hi = 0; hi < 4; hi++) {     /* bits above the byte are ignored */
			float got = ek_e4m3_f32(b | (hi * 0x5A5A5Au) << 8);
			if (!same_f(got, want) && bad++ < 4)
				printf("# e4m3 0x%02X: %g, want %g\n", b, got, want);
		}
	}
	OK(bad == 0, "E4M3 -> binary32 by bits: all 256 codes == rq_e4m3_to_f32 (NaN codes NaN, "
	   "subnormals exact)");
}

static void test_int_codes(void)
{
	int bad8 = 0, bad4 = 0;
	uint64_t rng = 0x51ED270B27F4C1A3ull;
	for (int j = 0; j < 4; j++)
		for (uint32_t b = 0; b < 256; b++)
			for (int rep = 0; rep < 4; rep++) {
				uint32_t w = (uint32_t)tap_xorshift(&rng);
				w = (w & ~(0xFFu << (8 * j))) | b << (8 * j);
				float got = ek_u8_q(w, j);
				if (!same_f(got, (float)((int)b - 128)) && bad8++ < 4)
					printf("# int8 byte %u at %d: %g\n", b, j, got);
			}
	for (int k = 0; k < 8; k++)
		for (uint32_t c = 0; c < 16; c++)
			for (int rep = 0; rep < 4; rep++) {
				uint32_t w = (uint32_t)tap_xorshift(&rng);
				w = (w & ~(15u << (4 * k))) | c << (4 * k);
				float got = ek_u4_q(w, k);
				if (!same_f(got, (float)((int)c - 8)) && bad4++ < 4)
					printf("# int4 nibble %u at %d: %g\n", c, k, got);
			}
	OK(bad8 == 0, "INT8 codes: all 256 bytes in all 4 positions (random neighbours) == byte - 128");
	OK(bad4 == 0, "INT4 codes: all 16 nibbles in all 8 positions (random neighbours) == nibble - 8");
}

int main(void)
{
	test_e4m3();
	test_e4m3_f32();
	test_int_codes();
	test_e2m1_mma();
	test_e2m1_bf16();
	return tap_done();
}
