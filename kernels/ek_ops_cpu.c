/* ek_ops_cpu.c — CPU twins of ek_ops.cu's elementwise ops and norms, the
 * embedding, the deterministic fills (ek_rt.cu) and the fp16 conversions of
 * the NVFP4 GEMV's activations (the one number format quant/ has no use for). */
#include "kernels/ek_cpu_int.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

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

/* ------------------------------------------------------------- fp16 */

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
		p[i] = rq_f32_to_bf16((2.0f * r - 1.0f) * amp);
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
			out[(size_t)t * ldo + i] = ek_silu(g[(size_t)t * ldg + i]) * u[(size_t)t * ldu + i];
}

void ek_add_cpu(float *x, const float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] += y[i];
}

void ek_bias_cpu(float *y, int ldy, const float *b, int T, int n)
{
	for (int t = 0; t < T; t++)
		for (int i = 0; i < n; i++)
			y[(size_t)t * ldy + i] += b[i];
}

void ek_sigmoid_scale_cpu(float *h, int ldh, const float *g, int ldg, int T, int n)
{
	for (int t = 0; t < T; t++) {
		float s = 1.0f / (1.0f + expf(-g[(size_t)t * ldg]));
		for (int i = 0; i < n; i++)
			h[(size_t)t * ldh + i] *= s;
	}
}

void ek_embed_cpu(float *x, const uint16_t *table, const int *tokens, int T, int hidden)
{
	for (int t = 0; t < T; t++)
		for (int i = 0; i < hidden; i++)
			x[(size_t)t * hidden + i] = rq_bf16_to_f32(table[(size_t)tokens[t] * hidden + i]);
}
