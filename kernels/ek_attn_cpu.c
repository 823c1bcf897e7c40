/* ek_attn_cpu.c — CPU twins of the attention ops (ek_qk_rope_kv in
 * ek_ops.cu, ek_attn in ek_attn.cu): QK-norm, RoPE, the KV cache in each of
 * its types (BF16 and FP8 E4M3 through quant/'s conversions), attention. */
#include "kernels/ek_cpu_int.h"
#include "quant/quant.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

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
		((uint16_t *)c)[i] = rq_f32_to_bf16(v);
	else
		((uint8_t *)c)[i] = rq_f32_to_e4m3(v);
}

static float kv_load(const void *c, int kvtype, size_t i)
{
	if (kvtype == EK_KV_F32)
		return ((const float *)c)[i];
	if (kvtype == EK_KV_BF16)
		return rq_bf16_to_f32(((const uint16_t *)c)[i]);
	return rq_e4m3_to_f32(((const uint8_t *)c)[i]);
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

int ek_attn_cpu(float *out, int ldo, const float *q, int ldq, const float *g, int ldg, int gate,
                int T, int nh, int nkv, int hd, const void *kc, const void *vc, int kvtype,
                int cap, const int *pos, int window, int max_keys, void *work)
{
	int rep = nh / nkv;
	float scale = (float)(1.0 / sqrt((double)hd));
	float *sc = malloc(sizeof(float) * ((size_t)cap + 1));
	if (!sc)
		return -ENOMEM;
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
				o[i] *= ek_softplus(gate == 1 ? g[(size_t)t * ldg + h]
				                           : g[(size_t)t * ldg + (size_t)h * hd + i]);
		}
	}
	free(sc);
	return 0;
}
