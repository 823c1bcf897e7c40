/* ek_attn_cpu.c — CPU twins of the attention ops (ek_qk_rope_kv in
 * ek_ops.cu, ek_attn in ek_attn.cu): QK-norm, RoPE, the KV cache in each of
 * its types (BF16 and FP8 E4M3 through quant/'s conversions), attention cut
 * into chunks, splits and a merge exactly as ek_attn.cu's decode kernels cut
 * it (ek_attn_int.h), whatever T is. */
#include "kernels/ek_cpu_int.h"
#include "kernels/ek_attn_int.h"
#include "quant/quant.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
	for (int i = 0; w && i < hd; i++)   /* w NULL: no norm (llama, mistral) */
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
	/* per (token, head, split): the partial output [hd], then max and sum */
	size_t b = (size_t)(T > 0 ? T : 1) * nh * ek_at_nsplit(max_keys) * (hd + 2) * sizeof(float);
	return (b + 255) & ~(size_t)255;
}

/* One split of one query head, as one block of k_attn_split computes it:
 * chunks [c0, c1) of the keys from lo, online softmax per chunk, p·v summed
 * per key group (keys g, g + G, ...) and the groups added in order. Scores
 * are the sum of two halves (every other vector of the row, like the two
 * threads of a key) and the chunk's sum of exponentials is the butterfly
 * order of warp_sum over lanes holding keys (i, i + 32). Plain multiply-add
 * where the kernel uses fmaf: the twin agrees within the tolerance of
 * test_ek_gpu, not bit for bit. Writes o[hd] (Σ e^(s - m)·v), *pm, *pl. */
static void attn_split(const float *qh, const void *kc, const void *vc, int kvtype, size_t kvo,
                       int hd, int cap, int lo, int p, int c0, int c1, float scale, float *o,
                       float *og, float *pm, float *pl)
{
	int ve = ek_at_ve(kvtype, hd), nv = hd / ve, G = EK_AT_THREADS / nv;
	int ge = G < EK_AT_CHUNK ? G : EK_AT_CHUNK;
	float sc[EK_AT_CHUNK], m = -INFINITY, l = 0;
	for (int i = 0; i < ge * hd; i++)
		og[i] = 0;
	for (int c = c0; c < c1; c++) {
		int k0 = lo + c * EK_AT_CHUNK, cnt = p + 1 - k0 < EK_AT_CHUNK ? p + 1 - k0 : EK_AT_CHUNK;
		int s0 = k0 % cap;
		for (int j = 0; j < EK_AT_CHUNK; j++) {
			if (j >= cnt) {
				sc[j] = -INFINITY;
				continue;
			}
			size_t row = kvo + (size_t)ek_at_slot(s0, j, cap) * hd;
			float hs[2] = {0, 0};
			for (int v = 0; v < nv; v++)
				for (int e = 0; e < ve; e++)
					hs[v & 1] += qh[v * ve + e] * kv_load(kc, kvtype, row + (size_t)v * ve + e);
			sc[j] = (hs[0] + hs[1]) * scale;
		}
		float cm = -INFINITY, lane[32];
		for (int j = 0; j < EK_AT_CHUNK; j++)
			cm = sc[j] > cm ? sc[j] : cm;
		float mn = m > cm ? m : cm, corr = expf(m - mn);
		for (int j = 0; j < EK_AT_CHUNK; j++)
			sc[j] = expf(sc[j] - mn);
		for (int i = 0; i < 32; i++)
			lane[i] = sc[i] + sc[i + 32];
		for (int w = 16; w > 0; w >>= 1) {
			float nx[32];
			for (int i = 0; i < 32; i++)
				nx[i] = lane[i] + lane[i ^ w];
			memcpy(lane, nx, sizeof lane);
		}
		l = l * corr + lane[0];
		m = mn;
		for (int i = 0; i < ge * hd; i++)
			og[i] *= corr;
		for (int g = 0; g < ge; g++)
			for (int k = g; k < cnt; k += G) {
				size_t row = kvo + (size_t)ek_at_slot(s0, k, cap) * hd;
				for (int i = 0; i < hd; i++)
					og[(size_t)g * hd + i] += sc[k] * kv_load(vc, kvtype, row + i);
			}
	}
	for (int i = 0; i < hd; i++) {
		float acc = 0;
		for (int g = 0; g < ge; g++)
			acc += og[(size_t)g * hd + i];
		o[i] = acc;
	}
	*pm = m;
	*pl = l;
}

int ek_attn_cpu(float *out, int ldo, const float *q, int ldq, const float *g, int ldg, int gate,
                int T, int nh, int nkv, int hd, const void *kc, const void *vc, int kvtype,
                int cap, const int *pos, int window, int max_keys, void *work)
{
	(void)work;
	int rep = nh / nkv, ns = ek_at_nsplit(max_keys), ve = ek_at_ve(kvtype, hd);
	int G = EK_AT_THREADS / (hd / ve), ge = G < EK_AT_CHUNK ? G : EK_AT_CHUNK;
	float scale = (float)(1.0 / sqrt((double)hd));
	/* partials [ns][hd + 2] of one head, the key groups' running outputs */
	float *part = malloc(sizeof(float) * ((size_t)ns * (hd + 2) + (size_t)ge * hd));
	if (!part)
		return -ENOMEM;
	float *og = part + (size_t)ns * (hd + 2);
	for (int t = 0; t < T; t++) {
		int p = *pos + t, lo = ek_at_lo(p, window), nch = ek_at_chunks(p - lo + 1);
		int nsp = ns < nch ? ns : nch;
		for (int h = 0; h < nh; h++) {
			const float *qh = q + (size_t)t * ldq + (size_t)h * hd;
			size_t kvo = (size_t)(h / rep) * cap * hd;
			for (int sp = 0; sp < nsp; sp++) {
				int c0, c1;
				float *ps = part + (size_t)sp * (hd + 2);
				ek_at_range(nch, nsp, sp, &c0, &c1);
				attn_split(qh, kc, vc, kvtype, kvo, hd, cap, lo, p, c0, c1, scale, ps, og,
				           ps + hd, ps + hd + 1);
			}
			/* the merge (k_attn_merge): weights e^(m_s - M), split order */
			float M = -INFINITY, L = 0, w[EK_AT_SPLITS];
			for (int sp = 0; sp < nsp; sp++)
				M = part[(size_t)sp * (hd + 2) + hd] > M ? part[(size_t)sp * (hd + 2) + hd] : M;
			for (int sp = 0; sp < nsp; sp++) {
				w[sp] = expf(part[(size_t)sp * (hd + 2) + hd] - M);
				L += part[(size_t)sp * (hd + 2) + hd + 1] * w[sp];
			}
			float *o = out + (size_t)t * ldo + (size_t)h * hd;
			for (int i = 0; i < hd; i++) {
				float O = 0;
				for (int sp = 0; sp < nsp; sp++)
					O += part[(size_t)sp * (hd + 2) + i] * w[sp];
				o[i] = O / L;
			}
			for (int i = 0; gate && i < hd; i++)
				o[i] *= ek_softplus(gate == 1 ? g[(size_t)t * ldg + h]
				                           : g[(size_t)t * ldg + (size_t)h * hd + i]);
		}
	}
	free(part);
	return 0;
}
