/* simd_int.h — internal to engine/model/: the x86 register pieces that the
 * dots of ops.c, qdot.c, fastdot.c and torch_bf16.c share, written once so that they
 * add in the same order everywhere (the oracle's bits depend on it). Include
 * inside #if defined(__x86_64__) && defined(__GNUC__), after <immintrin.h>. */
#ifndef RQ_ENGINE_SIMD_INT_H
#define RQ_ENGINE_SIMD_INT_H

#include <string.h>

/* The sum of v's 8 lanes as lg_torch_hsum8 adds them: s = (v0+v4, v1+v5,
 * v2+v6, v3+v7), then (s0+s2, s1+s3), then their sum. */
__attribute__((target("avx2"), always_inline))
static inline float hsum8_avx2(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

/* lg_dot's closing sum of its 16 accumulators (lo = acc[0..7], hi =
 * acc[8..15]): acc[j] += acc[j + w] for w = 8, 4, 2, 1, the same adds. */
__attribute__((target("avx2")))
static inline float fold16(__m256 lo, __m256 hi)
{
	return hsum8_avx2(_mm256_add_ps(lo, hi));
}

/* The AVX-512 subsets the register dots take (qdot.c, fastdot.c). */
#define LG_T512 "avx512f,avx512bw,avx512vl,avx512vbmi"

/* Lane i's low byte holds nibble i of the 8 bytes at p (column i of a 4-bit
 * row), its other bits are junk: vpermps reads only an index's low 4 bits.
 * One vpmultishiftqb on the 8 bytes broadcast: byte 0 of qword k takes bits
 * 8k.., byte 4 bits 8k + 4.. */
__attribute__((target(LG_T512), always_inline))
static inline __m512i codes16(const uint8_t *p)
{
	const __m512i ctl = _mm512_setr_epi64(0x0000000400000000ll, 0x0000000C00000008ll,
	                                      0x0000001400000010ll, 0x0000001C00000018ll,
	                                      0x0000002400000020ll, 0x0000002C00000028ll,
	                                      0x0000003400000030ll, 0x0000003C00000038ll);
	long long u;
	memcpy(&u, p, 8);
	return _mm512_multishift_epi64_epi8(ctl, _mm512_set1_epi64(u));
}

/* The 16 nibbles of 8 bytes at p, one per dword lane, by a variable shift of
 * the broadcast qword: lane j holds nibble (j >> 1) + 8·(j & 1), column
 * PERM16(j) of the 16, junk above its low 4 bits as codes16's. codes16's
 * vpmultishiftqb runs on port 5 beside vpermps; vpsrlvd runs on port 0. The
 * dots that take it read x in the same order (lg_x_perm16) and, where the
 * lanes' sums are folded in a set order (the oracle), put the lanes back
 * (lanes_unperm16) first: each lane's adds are the same, in the same order. */
__attribute__((target(LG_T512), always_inline))
static inline __m512i codes16p(const uint8_t *p)
{
	const __m512i sh = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
	long long u;
	memcpy(&u, p, 8);
	return _mm512_srlv_epi32(_mm512_set1_epi64(u), sh);
}

/* xp = x (n a multiple of 16) with each 16 columns in codes16p's lane order. */
__attribute__((target(LG_T512), always_inline))
static inline const float *lg_x_perm16(const float *x, int n, float *xp)
{
	const __m512i perm = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
	for (int c = 0; c < n; c += 16)
		_mm512_storeu_ps(xp + c, _mm512_permutexvar_ps(perm, _mm512_loadu_ps(x + c)));
	return xp;
}

/* Sums in codes16p's lane order put back in column order (lane c: column c). */
__attribute__((target(LG_T512), always_inline))
static inline __m512 lanes_unperm16(__m512 acc)
{
	const __m512i inv = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
	return _mm512_permutexvar_ps(inv, acc);
}

/* 1 when a byte of rows [0, RR) (n each, ldq apart) is an e4m3 NaN code. */
__attribute__((target(LG_T512), always_inline))
static inline int fp8_has_nan(const uint8_t *q, size_t ldq, int RR, int n)
{
	const __m512i hi = _mm512_set1_epi8((char)0x80);
	__m512i m = _mm512_setzero_si512();
	for (int r = 0; r < RR; r++) {
		const uint8_t *p = q + r * ldq;
		int c = 0;
		for (; c + 64 <= n; c += 64)
			m = _mm512_max_epu8(m, _mm512_or_si512(_mm512_loadu_si512(p + c), hi));
		if (c < n)
			m = _mm512_max_epu8(m, _mm512_or_si512(_mm512_maskz_loadu_epi8(~0ull >> (64 - (n - c)),
			                                                               p + c), hi));
	}
	return _mm512_cmpeq_epi8_mask(m, _mm512_set1_epi8((char)0xFF)) != 0;
}

/* e4m3 bytes b → binary16 bits (b & 0x80) << 8 | (b & 0x7F) << 7: the same
 * sign, mantissa and (exponent − 8), subnormals included, so the half is
 * e4m3(b)·2^-8 exactly (qdot.c's top comment); widened exactly. Made as
 * (int16)(int8)b << 7 with bit 14 (the sign's second copy) cleared. 32 bytes
 * at p into two registers (columns 0..15, 16..31), or 16. */
__attribute__((target(LG_T512), always_inline))
static inline void fp8_half32(const uint8_t *p, __m512 *lo, __m512 *hi)
{
	__m512i h = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p));
	h = _mm512_and_si512(_mm512_slli_epi16(h, 7), _mm512_set1_epi16((short)0xBFFF));
	*lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
	*hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

__attribute__((target(LG_T512), always_inline))
static inline __m512 fp8_half16(const uint8_t *p)
{
	__m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
	h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xBFFF));
	return _mm512_cvtph_ps(h);
}

/* The 64-byte line at byte o of each of the 4 rows at pf (ld bytes apart),
 * into every cache level: a block's dots ask for the next block's rows a line
 * at a time across their steps (a burst of a whole block's lines at its
 * start left the FP8 and INT8 decode waiting on the L3's fill buffers). */
__attribute__((always_inline)) static inline void prefetch4(const uint8_t *pf, size_t ld, size_t o)
{
	for (int r = 0; r < 4; r++)
		_mm_prefetch((const char *)(pf + r * ld + o), _MM_HINT_T0);
}

/* BODY(RR) for RR = R (1..4) as a constant, so that an R-row body inlined
 * keeps its accumulators in registers (qdot.c, fastdot.c). */
#define ROWS4(R, BODY)                           \
	do {                                     \
		switch (R) {                     \
		case 4: BODY(4); break;          \
		case 3: BODY(3); break;          \
		case 2: BODY(2); break;          \
		default: BODY(1); break;         \
		}                                \
	} while (0)

/* The token loop of a register-tile product over rows R (1..4) and tokens
 * [t, T): TILE(RR, UU) on each full tile of UU = 3 tokens, then on the 2 or
 * 1 left, t advanced past each; RR and UU are constants in every call, so
 * the tile's loops unroll and its accumulators stay in registers. TILE is
 * the caller's macro. */
#define TILES_R4_U3(t, T, R, TILE)                        \
	do {                                              \
		switch (R) {                              \
		case 4: TILE_ROWS_U3(t, T, 4, TILE); break;  \
		case 3: TILE_ROWS_U3(t, T, 3, TILE); break;  \
		case 2: TILE_ROWS_U3(t, T, 2, TILE); break;  \
		default: TILE_ROWS_U3(t, T, 1, TILE); break; \
		}                                         \
	} while (0)
#define TILE_ROWS_U3(t, T, RR, TILE)      \
	do {                              \
		for (; t + 3 <= T; t += 3) \
			TILE(RR, 3);      \
		if (T - t == 2)           \
			TILE(RR, 2);      \
		else if (T - t == 1)      \
			TILE(RR, 1);      \
	} while (0)

#endif
