/* simd_int.h — internal to engine/model/: the x86 register pieces that the
 * dots of ops.c, qdot.c and torch_bf16.c share, written once so that they
 * add in the same order everywhere (the oracle's bits depend on it). Include
 * inside #if defined(__x86_64__) && defined(__GNUC__), after <immintrin.h>. */
#ifndef RQ_ENGINE_SIMD_INT_H
#define RQ_ENGINE_SIMD_INT_H

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
