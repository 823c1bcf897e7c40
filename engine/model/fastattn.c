/* fastattn.c — the fast mode's attention (fastattn.h).
 *
 * One query token and one KV head, its rep query heads in passes of up to 4:
 *   scores  4 keys at a time: each key's 16-value blocks loaded once and
 *           fused into 4 × (heads of the pass) accumulators, which one
 *           transposing reduction turns into the 4 keys' dots per head;
 *   softmax per head: max, exp(s − max) 16 at a time (exp16: Cody–Waite
 *           reduction by ln 2, a degree-7 polynomial, scalef; within a few
 *           ulps of expf, 0 below −104, NaN kept), the sum, one reciprocal;
 *   P·V     64 output columns at a time in registers for every head of the
 *           pass: each value block loaded once per key, one FMA per head.
 * The oracle (forward.c's attn_items) rounds every product and takes glibc's
 * expf key by key; the differences stay within the fast mode's tolerance. */
#include "engine/model/fastattn.h"
#include "engine/model/fastmm.h"

#include <math.h>
#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define TF "avx512f,fma"

int lg_fast_attn_takes(int hd)
{
	return lg_fast_level() == 2 && hd > 0 && hd % 16 == 0 && hd <= 256;
}

/* e^x, x <= 0 expected (scores minus their max). */
__attribute__((target(TF), always_inline))
static inline __m512 exp16(__m512 x)
{
	x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);   /* NaN passes (max takes x then) */
	__m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
	                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);   /* ln 2, high bits */
	r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606765330187e-06f), r);      /* ln 2, the rest */
	__m512 p = _mm512_set1_ps(1.0f / 5040);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(p, k);
}

/* The sums of a, b, c, d's 16 lanes each, in lanes 0..3. */
__attribute__((target(TF), always_inline))
static inline __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d)
{
	__m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
	__m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
	/* per 128-bit lane: (a0+a2, b0+b2, a1+a3, b1+b3), the same for c, d */
	__m512 t = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))),
	                         _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))));
	/* per 128-bit lane: the lane's part of (Σa, Σb, Σc, Σd) */
	__m256 h = _mm256_add_ps(_mm512_castps512_ps256(t),
	                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1)));
	return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* sc[hh·n + j] = scale · q[h0 + hh] · k_j for hh < HP (<= 4), every key. */
__attribute__((target(TF)))
static void scores(const struct lg_fattn *a, int h0, int HP)
{
	int n = a->n, hd = a->hd, slot = a->lo % a->cap;
	const float *kh = a->kc + (size_t)a->kvh * hd;
	for (int j0 = 0; j0 < n; j0 += 4) {
		int nk = n - j0 < 4 ? n - j0 : 4;
		const float *kp[4];
		for (int i = 0; i < 4; i++) {   /* a short tile repeats its last key, unused */
			kp[i] = kh + (size_t)slot * a->kvd;
			if (i + 1 < nk && ++slot == a->cap)
				slot = 0;
		}
		if (++slot == a->cap)   /* past the tile's last key */
			slot = 0;
		__m512 acc[4][4];
		for (int hh = 0; hh < 4; hh++)
			for (int i = 0; i < 4; i++)
				acc[hh][i] = _mm512_setzero_ps();
		for (int d = 0; d < hd; d += 16) {
			__m512 k0 = _mm512_loadu_ps(kp[0] + d), k1 = _mm512_loadu_ps(kp[1] + d);
			__m512 k2 = _mm512_loadu_ps(kp[2] + d), k3 = _mm512_loadu_ps(kp[3] + d);
			for (int hh = 0; hh < 4; hh++) {
				if (hh >= HP)
					break;
				__m512 qv = _mm512_loadu_ps(a->q + (size_t)(h0 + hh) * hd + d);
				acc[hh][0] = _mm512_fmadd_ps(qv, k0, acc[hh][0]);
				acc[hh][1] = _mm512_fmadd_ps(qv, k1, acc[hh][1]);
				acc[hh][2] = _mm512_fmadd_ps(qv, k2, acc[hh][2]);
				acc[hh][3] = _mm512_fmadd_ps(qv, k3, acc[hh][3]);
			}
		}
		for (int hh = 0; hh < HP; hh++) {
			float s[4];
			_mm_storeu_ps(s, _mm_mul_ps(sum4(acc[hh][0], acc[hh][1], acc[hh][2], acc[hh][3]),
			                            _mm_set1_ps(a->scale)));
			for (int i = 0; i < nk; i++)
				a->sc[(size_t)hh * n + j0 + i] = s[i];
		}
	}
}

/* s[0..n) → its softmax, in place. */
__attribute__((target(TF)))
static void softmax(float *s, int n)
{
	__m512 mv = _mm512_set1_ps(-INFINITY);
	int j = 0;
	for (; j + 16 <= n; j += 16)
		mv = _mm512_max_ps(mv, _mm512_loadu_ps(s + j));
	__mmask16 tail = (__mmask16)((1u << (n - j)) - 1);
	if (tail)
		mv = _mm512_mask_max_ps(mv, tail, mv, _mm512_maskz_loadu_ps(tail, s + j));
	__m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(mv)), sum = _mm512_setzero_ps();
	for (j = 0; j + 16 <= n; j += 16) {
		__m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), mx));
		_mm512_storeu_ps(s + j, e);
		sum = _mm512_add_ps(sum, e);
	}
	if (tail) {
		__m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + j), mx));
		_mm512_mask_storeu_ps(s + j, tail, e);
		sum = _mm512_mask_add_ps(sum, tail, sum, e);
	}
	__m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
	for (j = 0; j + 16 <= n; j += 16)
		_mm512_storeu_ps(s + j, _mm512_mul_ps(_mm512_loadu_ps(s + j), inv));
	if (tail)
		_mm512_mask_storeu_ps(s + j, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, s + j), inv));
}

/* o[h0 + hh] = Σ_j sc[hh·n + j] · v_j, 64 columns at a time. */
__attribute__((target(TF)))
static void pv(const struct lg_fattn *a, int h0, int HP)
{
	int n = a->n, hd = a->hd;
	for (int d0 = 0; d0 < hd; d0 += 64) {
		int nb = (hd - d0) / 16 < 4 ? (hd - d0) / 16 : 4;
		__m512 acc[4][4];
		for (int hh = 0; hh < 4; hh++)
			for (int b = 0; b < 4; b++)
				acc[hh][b] = _mm512_setzero_ps();
		int slot = a->lo % a->cap;
		for (int j = 0; j < n; j++) {
			const float *vp = a->vc + (size_t)slot * a->kvd + (size_t)a->kvh * hd + d0;
			if (++slot == a->cap)
				slot = 0;
			for (int b = 0; b < 4; b++) {
				if (b >= nb)
					break;
				__m512 v = _mm512_loadu_ps(vp + 16 * b);
				for (int hh = 0; hh < 4; hh++) {
					if (hh >= HP)
						break;
					acc[hh][b] = _mm512_fmadd_ps(_mm512_set1_ps(a->sc[(size_t)hh * n + j]), v,
					                             acc[hh][b]);
				}
			}
		}
		for (int hh = 0; hh < HP; hh++)
			for (int b = 0; b < nb; b++)
				_mm512_storeu_ps(a->o + (size_t)(h0 + hh) * hd + d0 + 16 * b, acc[hh][b]);
	}
}

void lg_fast_attn(const struct lg_fattn *a)
{
	for (int h0 = 0; h0 < a->rep; h0 += LG_FATTN_HEADS) {
		int HP = a->rep - h0 < LG_FATTN_HEADS ? a->rep - h0 : LG_FATTN_HEADS;
		scores(a, h0, HP);
		for (int hh = 0; hh < HP; hh++)
			softmax(a->sc + (size_t)hh * a->n, a->n);
		pv(a, h0, HP);
	}
}

#else
int lg_fast_attn_takes(int hd)
{
	(void)hd;
	return 0;
}

void lg_fast_attn(const struct lg_fattn *a)
{
	(void)a;
}
#endif
