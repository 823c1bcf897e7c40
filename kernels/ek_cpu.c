/* ek_cpu.c — the CPU twins of the engine kernels (kernels/ek.h).
 *
 * Plain C, one thread, compiled in every build. Each twin computes what its
 * CUDA op computes, with the same rounding points (fp16/BF16 activations of
 * the GEMV/GEMM, the KV-cache type), summing in a simple sequential order:
 * the GPU differs only by summation order, which the GPU tests bound. */
#include "kernels/ek.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ scalars */

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

float ek_bf16_f32(uint16_t b)
{
	return u2f((uint32_t)b << 16);
}

uint16_t ek_f32_bf16(float f)
{
	uint32_t u = f2u(f);
	if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu))
		return (uint16_t)((u >> 16) | 0x40);          /* quiet NaN */
	u += 0x7FFFu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

float ek_f16_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023;
	if (e == 31)
		return u2f(s | 0x7F800000u | (m << 13));
	if (e == 0) {
		float v = ldexpf((float)m, -24);
		return s ? -v : v;
	}
	return u2f(s | ((e + 112) << 23) | (m << 13));
}

uint16_t ek_f32_f16(float f)
{
	uint32_t u = f2u(f), s = (u >> 16) & 0x8000;
	float a = fabsf(f);
	if (a != a)
		return (uint16_t)(s | 0x7E00);
	if (a >= 65520.0f)                               /* rounds to infinity */
		return (uint16_t)(s | 0x7C00);
	if (a < 6.103515625e-05f) {                      /* subnormal: multiples of 2^-24 */
		float q = nearbyintf(a * 16777216.0f);   /* exact scaling, RNE */
		return (uint16_t)(s | (uint32_t)q);      /* q == 1024 is the smallest normal */
	}
	uint32_t au = f2u(a);
	uint32_t e = (au >> 23) - 112, m = au & 0x7FFFFF;
	uint32_t r = (e << 10) | (m >> 13), rem = m & 0x1FFF;
	if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
		r++;
	return (uint16_t)(s | r);
}

float ek_e4m3_f32(uint8_t b)
{
	int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
	float v;
	if (e == 15 && m == 7)
		return NAN;
	v = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf((float)m, -9);
	return s ? -v : v;
}

uint8_t ek_f32_e4m3(float f)
{
	if (f != f)
		return 0x7F;
	uint8_t s = signbit(f) ? 0x80 : 0;
	float a = fabsf(f);
	if (a >= 448.0f)
		return s | 0x7E;
	if (a < 0.015625f)                                /* subnormal: multiples of 2^-9 */
		return s | (uint8_t)nearbyintf(a * 512.0f);  /* 8 is the smallest normal */
	int ex;
	frexpf(a, &ex);
	int E = ex - 1;
	float q = nearbyintf((ldexpf(a, -E) - 1.0f) * 8.0f);
	if (q >= 8.0f) {
		E++;
		q = 0;
	}
	int bits = ((E + 7) << 3) | (int)q;
	return s | (uint8_t)(bits > 0x7E ? 0x7E : bits);
}

float ek_e2m1_f32(uint8_t code)
{
	static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
	return (code & 8) ? -mag[code & 7] : mag[code & 7];
}

static float silu(float x)
{
	return x / (1.0f + expf(-x));
}

static float softplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}

/* ------------------------------------------------------------- fills */

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

void ek_fill_bf16_cpu(uint16_t *p, size_t n, float amp, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t u = mix64(seed + (uint64_t)i * 0x9E3779B97F4A7C15ull);
		float r = (float)(u >> 40) * 5.9604644775390625e-08f;   /* [0, 1), 24 bits */
		p[i] = ek_f32_bf16((2.0f * r - 1.0f) * amp);
	}
}

void ek_fill_bytes_cpu(uint8_t *p, size_t n, int lo, int hi, uint64_t seed)
{
	uint64_t span = (uint64_t)(hi - lo + 1);
	for (size_t i = 0; i < n; i++) {
		uint64_t u = mix64(seed + (uint64_t)i * 0x9E3779B97F4A7C15ull);
		p[i] = (uint8_t)(lo + (int)((u >> 32) % span));
	}
}

/* ----------------------------------------------------------- weights */

size_t ek_w_bytes(int kind, int rows, int cols)
{
	if (kind == EK_BF16)
		return (size_t)rows * cols * 2;
	size_t rt = ((size_t)rows + 15) / 16, kc = ((size_t)cols + 63) / 64;
	return rt * kc * 576;
}

/* Byte offset of W[r][c]'s code (nibble in *hi_nib) and of its scale, in the
 * repacked tiles (ek.h). */
static size_t fp4_code_at(int cols, int r, int c, int *hi_nib, size_t *scale_off)
{
	size_t nkc = ((size_t)cols + 63) / 64;
	size_t tile = ((size_t)(r / 16) * nkc + (size_t)(c / 64)) * 576;
	int rr = r % 16, cc = c % 64, j = cc / 16, c16 = cc % 16;
	int g = rr % 8, hi = rr / 8, second = c16 >= 8, i = (c16 % 8) / 2, odd = c16 & 1;
	int p = hi + 2 * second + 4 * odd;
	*hi_nib = p & 1;
	*scale_off = tile + 512 + (size_t)(8 * g + 4 * hi + j);
	return tile + (size_t)(16 * (4 * g + i) + 4 * j + p / 2);
}

void ek_nvfp4_repack_cpu(const uint8_t *packed, const uint8_t *scales, int rows, int cols,
                         uint8_t *out)
{
	memset(out, 0, ek_w_bytes(EK_NVFP4, rows, cols));
	for (int r = 0; r < rows; r++)
		for (int c = 0; c < cols; c++) {
			int hn;
			size_t so;
			size_t o = fp4_code_at(cols, r, c, &hn, &so);
			uint8_t b = packed[(size_t)r * (cols / 2) + c / 2];
			uint8_t code = (c & 1) ? b >> 4 : b & 15;
			out[o] |= (uint8_t)(hn ? code << 4 : code);
			if (c % 16 == 0)
				out[so] = scales[(size_t)r * (cols / 16) + c / 16];
		}
}

/* e2m1(code) · e4m3(scale) of W_e[r][c] (exact in binary32). */
static float fp4_prod(const struct ek_w *W, int e, int r, int c)
{
	const uint8_t *base = (const uint8_t *)W->data + (size_t)e * W->stride;
	int hn;
	size_t so;
	size_t o = fp4_code_at(W->cols, r, c, &hn, &so);
	uint8_t code = hn ? base[o] >> 4 : base[o] & 15;
	return ek_e2m1_f32(code) * ek_e4m3_f32(base[so]);
}

void ek_w_row_cpu(const struct ek_w *W, int e, int r, float *out)
{
	if (W->kind == EK_BF16) {
		const uint16_t *w = (const uint16_t *)((const uint8_t *)W->data + (size_t)e * W->stride);
		for (int c = 0; c < W->cols; c++)
			out[c] = ek_bf16_f32(w[(size_t)r * W->cols + c]);
		return;
	}
	for (int c = 0; c < W->cols; c++)
		out[c] = fp4_prod(W, e, r, c) / W->gs[e];
}

/* -------------------------------------------------------- GEMV / GEMM */

/* The NVFP4 GEMV's activation exponent: max|x|·2^e in [2^14, 2^15) (NaNs
 * ignored like fmaxf; 0 for an all-zero or infinite x; clamped to ±64). */
static int act_exp(const float *x, int n)
{
	float amax = 0;
	for (int c = 0; c < n; c++)
		if (fabsf(x[c]) > amax)
			amax = fabsf(x[c]);
	if (!(amax > 0) || isinf(amax))
		return 0;
	int e = 14 - ilogbf(amax);
	return e < -64 ? -64 : e > 64 ? 64 : e;
}

/* One matrix (set member e) times T tokens. mode 0: GEMV numerics, 1: GEMM. */
static void matvec(const struct ek_w *W, int e, const float *x, int ldx, float *y, int ldy, int T,
                   int acc, int mode)
{
	int K = W->cols;
	float *row = malloc(sizeof(float) * (size_t)K * 2);
	float *xr = row + K;
	if (!row)
		abort();
	for (int t = 0; t < T; t++) {
		const float *xt = x + (size_t)t * ldx;
		int ex = 0;
		if (W->kind == EK_NVFP4 && mode == 0) {
			ex = act_exp(xt, K);
			for (int c = 0; c < K; c++)
				xr[c] = ek_f16_f32(ek_f32_f16(ldexpf(xt[c], ex)));
		} else if (mode == 1) {
			for (int c = 0; c < K; c++)
				xr[c] = ek_bf16_f32(ek_f32_bf16(xt[c]));
		} else {
			memcpy(xr, xt, sizeof(float) * K);
		}
		for (int r = 0; r < W->rows; r++) {
			float s = 0;
			if (W->kind == EK_BF16) {
				const uint16_t *w = (const uint16_t *)((const uint8_t *)W->data +
				                    (size_t)e * W->stride) + (size_t)r * K;
				for (int c = 0; c < K; c++)
					s += ek_bf16_f32(w[c]) * xr[c];
			} else {
				for (int c = 0; c < K; c++)
					row[c] = fp4_prod(W, e, r, c);
				if (mode == 0)
					for (int c = 0; c < K; c++)
						s += ldexpf(row[c], -14) * xr[c];
				else
					for (int c = 0; c < K; c++)
						s += row[c] * xr[c];
				s = ldexpf(s, mode == 0 ? 14 - ex : 0) / W->gs[e];
			}
			float *o = &y[(size_t)t * ldy + r];
			*o = acc ? *o + s : s;
		}
	}
	free(row);
}

void ek_gemv_cpu(const struct ek_w *W, const float *x, int ldx, float *y, int ldy, int T, int acc)
{
	matvec(W, 0, x, ldx, y, ldy, T, acc, 0);
}

void ek_gemm_cpu(const struct ek_w *W, const float *x, int ldx, float *y, int ldy, int T, int acc)
{
	matvec(W, 0, x, ldx, y, ldy, T, acc, 1);
}

/* ---------------------------------------------------------------- MoE */

void ek_route_cpu(const float *logits, int ldl, const float *bias, int E, int k, int norm,
                  float softcap, int *ids, float *wts, int T)
{
	float *s = malloc(sizeof(float) * (size_t)E);
	if (!s)
		abort();
	for (int t = 0; t < T; t++) {
		for (int e = 0; e < E; e++) {
			float v = logits[(size_t)t * ldl + e];
			if (softcap > 0)
				v = tanhf(v / softcap) * softcap;
			s[e] = 1.0f / (1.0f + expf(-v));
		}
		int *id = ids + (size_t)t * k;
		float *w = wts + (size_t)t * k, sum = 0;
		for (int j = 0; j < k; j++) {
			int best = -1;
			float bv = 0;
			for (int e = 0; e < E; e++) {
				int taken = 0;
				for (int i = 0; i < j && !taken; i++)
					taken = id[i] == e;
				float v = s[e] + bias[e];
				if (!taken && (best < 0 || v > bv)) {
					best = e;
					bv = v;
				}
			}
			id[j] = best;
			w[j] = s[best];
			sum += w[j];
		}
		for (int j = 0; norm && j < k; j++)
			w[j] /= sum;
	}
	free(s);
}

size_t ek_moe_work_bytes(int T, int k, int inter, int hidden)
{
	size_t slots = (size_t)T * k;
	/* counters (fixed prefix), then h [slots][inter], g, u [slots][inter],
	 * d [slots][hidden], then the prefill grouping tables */
	size_t b = EK_WORK_CNT_BYTES + slots * ((size_t)inter * 3 + hidden) * sizeof(float);
	b += slots * 4 * sizeof(int) + 4096 * sizeof(int) + 256;
	return (b + 255) & ~(size_t)255;
}

void ek_moe_cpu(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
                const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
                float *out, int ldo, int T, int acc, void *work)
{
	int I = G->rows, H = D->rows, mode = T <= EK_GEMV_MAX_T ? 0 : 1;
	float *g = malloc(sizeof(float) * ((size_t)I * 3 + (size_t)H * (k + 1)));
	if (!g)
		abort();
	float *u = g + I, *h = u + I, *dd = h + I, *sum = dd + (size_t)H * k;
	for (int t = 0; t < T; t++) {
		for (int j = 0; j < k; j++) {
			int e = ids[(size_t)t * k + j];
			matvec(G, e, x + (size_t)t * ldx, 0, g, 0, 1, 0, mode);
			matvec(U, e, x + (size_t)t * ldx, 0, u, 0, 1, 0, mode);
			for (int i = 0; i < I; i++)
				h[i] = silu(g[i]) * u[i];
			matvec(D, e, h, 0, dd + (size_t)j * H, 0, 1, 0, mode);
		}
		for (int r = 0; r < H; r++) {
			float s = 0;
			for (int j = 0; j < k; j++)
				s += wts[(size_t)t * k + j] * dd[(size_t)j * H + r];
			sum[r] = s;
		}
		for (int r = 0; r < H; r++) {
			float *o = &out[(size_t)t * ldo + r];
			*o = (acc ? *o : 0.0f) + scale * sum[r];
		}
	}
	free(g);
}

/* ------------------------------------------------ elementwise, norms */

void ek_rmsnorm_cpu(float *out, int ldo, const float *x, int ldx, const float *w, int T, int n,
                    float eps)
{
	for (int t = 0; t < T; t++) {
		const float *xt = x + (size_t)t * ldx;
		float *o = out + (size_t)t * ldo, ss = 0;
		for (int i = 0; i < n; i++)
			ss += xt[i] * xt[i];
		float r = 1.0f / sqrtf(ss / (float)n + eps);
		for (int i = 0; i < n; i++)
			o[i] = w[i] * (xt[i] * r);
	}
}

void ek_swiglu_cpu(float *out, int ldo, const float *g, int ldg, const float *u, int ldu, int T,
                   int n)
{
	for (int t = 0; t < T; t++)
		for (int i = 0; i < n; i++)
			out[(size_t)t * ldo + i] = silu(g[(size_t)t * ldg + i]) * u[(size_t)t * ldu + i];
}

void ek_add_cpu(float *x, const float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] += y[i];
}

void ek_embed_cpu(float *x, const uint16_t *table, const int *tokens, int T, int hidden)
{
	for (int t = 0; t < T; t++)
		for (int i = 0; i < hidden; i++)
			x[(size_t)t * hidden + i] = ek_bf16_f32(table[(size_t)tokens[t] * hidden + i]);
}

/* ---------------------------------------------------------- attention */

size_t ek_kv_bytes(int kvtype, int cap, int nkv, int hd)
{
	size_t el = kvtype == EK_KV_F32 ? 4 : kvtype == EK_KV_BF16 ? 2 : 1;
	return (size_t)cap * nkv * hd * el;
}

static void kv_store(void *c, int kvtype, size_t i, float v)
{
	if (kvtype == EK_KV_F32)
		((float *)c)[i] = v;
	else if (kvtype == EK_KV_BF16)
		((uint16_t *)c)[i] = ek_f32_bf16(v);
	else
		((uint8_t *)c)[i] = ek_f32_e4m3(v);
}

static float kv_load(const void *c, int kvtype, size_t i)
{
	if (kvtype == EK_KV_F32)
		return ((const float *)c)[i];
	if (kvtype == EK_KV_BF16)
		return ek_bf16_f32(((const uint16_t *)c)[i]);
	return ek_e4m3_f32(((const uint8_t *)c)[i]);
}

static void head_norm_rope(float *x, const float *w, int hd, float eps, const float *cs,
                           const float *sn, int rot)
{
	float ss = 0;
	for (int i = 0; i < hd; i++)
		ss += x[i] * x[i];
	float r = 1.0f / sqrtf(ss / (float)hd + eps);
	for (int i = 0; i < hd; i++)
		x[i] = w[i] * (x[i] * r);
	for (int i = 0; i < rot / 2; i++) {
		float a = x[i], b = x[i + rot / 2];
		x[i] = a * cs[i] - b * sn[i];
		x[i + rot / 2] = b * cs[i] + a * sn[i];
	}
}

void ek_qk_rope_kv_cpu(float *q, int ldq, float *k, int ldk, const float *v, int ldv, int T,
                       int nh, int nkv, int hd, const float *qn, const float *kn, float eps,
                       const float *inv_freq, int rot, float attn_scale, const int *pos, void *kc,
                       void *vc, int kvtype, int cap)
{
	float cs[256], sn[256];
	for (int t = 0; t < T; t++) {
		int p = *pos + t;
		for (int i = 0; i < rot / 2; i++) {
			float f = (float)p * inv_freq[i];
			cs[i] = cosf(f) * attn_scale;
			sn[i] = sinf(f) * attn_scale;
		}
		for (int h = 0; h < nh; h++)
			head_norm_rope(q + (size_t)t * ldq + (size_t)h * hd, qn, hd, eps, cs, sn, rot);
		int slot = p % cap;
		for (int h = 0; h < nkv; h++) {
			float *kh = k + (size_t)t * ldk + (size_t)h * hd;
			const float *vh = v + (size_t)t * ldv + (size_t)h * hd;
			head_norm_rope(kh, kn, hd, eps, cs, sn, rot);
			size_t o = ((size_t)h * cap + slot) * hd;
			for (int i = 0; i < hd; i++) {
				kv_store(kc, kvtype, o + i, kh[i]);
				kv_store(vc, kvtype, o + i, vh[i]);
			}
		}
	}
}

size_t ek_attn_work_bytes(int T, int nh, int hd, int max_keys)
{
	size_t splits = ((size_t)(max_keys > 0 ? max_keys : 1) + 511) / 512;
	/* counters (fixed prefix), then per (token, head, split): acc[hd], max, sum */
	size_t b = EK_WORK_CNT_BYTES + (size_t)T * nh * splits * (hd + 2) * sizeof(float);
	return (b + 255) & ~(size_t)255;
}

void ek_attn_cpu(float *out, int ldo, const float *q, int ldq, const float *g, int ldg, int gate,
                 int T, int nh, int nkv, int hd, const void *kc, const void *vc, int kvtype,
                 int cap, const int *pos, int window, int max_keys, void *work)
{
	int rep = nh / nkv;
	float scale = (float)(1.0 / sqrt((double)hd));
	float *sc = malloc(sizeof(float) * ((size_t)cap + 1));
	if (!sc)
		abort();
	for (int t = 0; t < T; t++) {
		int p = *pos + t, lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
		int n = p - lo + 1;
		for (int h = 0; h < nh; h++) {
			const float *qh = q + (size_t)t * ldq + (size_t)h * hd;
			size_t kvo = (size_t)(h / rep) * cap * hd;
			float mx = -INFINITY, sum = 0;
			for (int j = 0; j < n; j++) {
				size_t o = kvo + (size_t)((lo + j) % cap) * hd;
				float s = 0;
				for (int i = 0; i < hd; i++)
					s += qh[i] * kv_load(kc, kvtype, o + i);
				sc[j] = s * scale;
				if (sc[j] > mx)
					mx = sc[j];
			}
			for (int j = 0; j < n; j++) {
				sc[j] = expf(sc[j] - mx);
				sum += sc[j];
			}
			float *o = out + (size_t)t * ldo + (size_t)h * hd;
			for (int i = 0; i < hd; i++)
				o[i] = 0;
			for (int j = 0; j < n; j++) {
				size_t vo = kvo + (size_t)((lo + j) % cap) * hd;
				float pj = sc[j] / sum;
				for (int i = 0; i < hd; i++)
					o[i] += pj * kv_load(vc, kvtype, vo + i);
			}
			for (int i = 0; gate && i < hd; i++)
				o[i] *= softplus(gate == 1 ? g[(size_t)t * ldg + h]
				                           : g[(size_t)t * ldg + (size_t)h * hd + i]);
		}
	}
	free(sc);
}
