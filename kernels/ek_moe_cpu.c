/* ek_moe_cpu.c — CPU twins of the MoE ops (ek_route, ek_route_softmax in
 * ek_ops.cu, ek_moe in ek_moe.cu). ek_route_cpu and ek_route_softmax_cpu are
 * also the CPU engine's routers (engine/model/forward.c): one definition of each
 * top-k rule. */
#include "kernels/ek_cpu_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

/* s_e of the router: sigmoid of the (soft-capped) logit. */
static float route_score(float l, float softcap)
{
	if (softcap > 0)
		l = tanhf(l / softcap) * softcap;
	return 1.0f / (1.0f + expf(-l));
}

/* Scores are recomputed where needed (the same operations, so the same
 * bits) rather than stored: no scratch, any E. */
void ek_route_cpu(const float *logits, int ldl, const float *bias, int E, int k, int norm,
                  float softcap, int *ids, float *wts, int T)
{
	for (int t = 0; t < T; t++) {
		const float *l = logits + (size_t)t * ldl;
		int *id = ids + (size_t)t * k;
		float *w = wts + (size_t)t * k, sum = 0;
		for (int j = 0; j < k; j++) {
			int best = -1;
			float bv = 0;
			for (int e = 0; e < E; e++) {
				int taken = 0;
				for (int i = 0; i < j && !taken; i++)
					taken = id[i] == e;
				float v = route_score(l[e], softcap) + bias[e];
				if (!taken && (best < 0 || v > bv)) {
					best = e;
					bv = v;
				}
			}
			id[j] = best;
			w[j] = route_score(l[best], softcap);
			sum += w[j];
		}
		for (int j = 0; norm && j < k; j++)
			w[j] /= sum;
	}
}

void ek_route_softmax_cpu(const float *logits, int ldl, int E, int k, int norm, int *ids,
                          float *wts, int T)
{
	for (int t = 0; t < T; t++) {
		const float *l = logits + (size_t)t * ldl;
		int *id = ids + (size_t)t * k;
		float *w = wts + (size_t)t * k, mx = -INFINITY, z = 0, sum = 0;
		for (int e = 0; e < E; e++)
			mx = l[e] > mx ? l[e] : mx;
		for (int e = 0; e < E; e++)
			z += expf(l[e] - mx);
		/* p_e = exp(l_e - max) / z, recomputed where needed (the same bits) */
		for (int j = 0; j < k; j++) {
			int best = -1;
			float bv = 0;
			for (int e = 0; e < E; e++) {
				int taken = 0;
				for (int i = 0; i < j && !taken; i++)
					taken = id[i] == e;
				float v = expf(l[e] - mx) / z;
				if (!taken && (best < 0 || v > bv)) {
					best = e;
					bv = v;
				}
			}
			id[j] = best;
			w[j] = bv;
			sum += w[j];
		}
		for (int j = 0; norm && j < k; j++)
			w[j] /= sum;
	}
}

size_t ek_moe_work_bytes(int T, int k, int inter, int hidden)
{
	size_t slots = (size_t)T * k;
	/* counters (fixed prefix), then h [slots][inter], g, u [slots][inter],
	 * d [slots][hidden], then the prefill grouping tables */
	size_t b = EK_WORK_CNT_BYTES + slots * ((size_t)inter * 3 + hidden) * sizeof(float);
	b += slots * 4 * sizeof(int) + 4096 * sizeof(int) + 256;
	b = (b + 255) & ~(size_t)255;
	/* ek_moe_q: then the quantized expert inputs [slots][hidden] and the
	 * grouped slot -> slot map [slots] (at this offset for T's own b) */
	b += slots * (size_t)hidden * sizeof(float) + slots * sizeof(int);
	return (b + 255) & ~(size_t)255;
}

/* ek_moe_cpu and ek_moe_q_cpu: gs_gu/gs_dn NULL: no input quantization;
 * a8 (ek_moe_a8_cpu): FP8 per-token inputs (x[t] for gate/up, h for down);
 * obs_dn (ek_moe_obs_cpu): the observer of the down inputs, or NULL. */
static int moe_cpu(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
                   const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
                   float *out, int ldo, int T, int acc, const float *gs_gu, const float *gs_dn,
                   int a8, float *obs_dn, int obs_stride)
{
	int I = G->rows, H = D->rows, mode = T <= EK_GEMV_MAX_T ? 0 : 1, rc = 0;
	float *g = malloc(sizeof(float) * ((size_t)I * 3 + (size_t)H * (k + 2)));
	if (!g)
		return -ENOMEM;
	float *u = g + I, *h = u + I, *dd = h + I, *sum = dd + (size_t)H * k, *xq = sum + H;
	for (int t = 0; t < T && !rc; t++) {
		for (int j = 0; j < k && !rc; j++) {
			int e = ids[(size_t)t * k + j];
			const float *xt = x + (size_t)t * ldx;
			if (gs_gu) {
				ek_actq_nvfp4_cpu(xt, H, xq, H, 1, H, gs_gu[e]);
				xt = xq;
			} else if (a8) {
				ek_actq_fp8_cpu(xt, H, xq, H, 1, H);
				xt = xq;
			}
			if ((rc = ek_matvec_cpu(G, e, xt, 0, g, 0, 1, 0, mode)) ||
			    (rc = ek_matvec_cpu(U, e, xt, 0, u, 0, 1, 0, mode)))
				break;
			for (int i = 0; i < I; i++)
				h[i] = ek_silu(g[i]) * u[i];
			if (obs_dn)
				ek_obs_rows_cpu(h, I, NULL, 1, 1, I, &e, G->n, obs_dn, NULL, obs_stride);
			if (gs_dn)
				ek_actq_nvfp4_cpu(h, I, h, I, 1, I, gs_dn[e]);
			else if (a8)
				ek_actq_fp8_cpu(h, I, h, I, 1, I);
			rc = ek_matvec_cpu(D, e, h, 0, dd + (size_t)j * H, 0, 1, 0, mode);
		}
		for (int r = 0; r < H && !rc; r++) {
			float s = 0;
			for (int j = 0; j < k; j++)
				s += wts[(size_t)t * k + j] * dd[(size_t)j * H + r];
			sum[r] = s;
		}
		for (int r = 0; r < H && !rc; r++) {
			float *o = &out[(size_t)t * ldo + r];
			*o = (acc ? *o : 0.0f) + scale * sum[r];
		}
	}
	free(g);
	return rc;
}

int ek_moe_cpu(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
               const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
               float *out, int ldo, int T, int acc, void *work)
{
	(void)work;
	return moe_cpu(G, U, D, ids, wts, k, scale, x, ldx, out, ldo, T, acc, NULL, NULL, 0, NULL, 0);
}

int ek_moe_q_cpu(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
                 const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
                 float *out, int ldo, int T, int acc, void *work, const float *gs_gu,
                 const float *gs_dn)
{
	(void)work;
	if (!gs_gu || !gs_dn || G->cols % 16 || G->rows % 16)
		return -EINVAL;
	return moe_cpu(G, U, D, ids, wts, k, scale, x, ldx, out, ldo, T, acc, gs_gu, gs_dn, 0, NULL, 0);
}

int ek_moe_obs_cpu(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
                   const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
                   float *out, int ldo, int T, int acc, void *work, const float *gs_gu,
                   const float *gs_dn, float *obs_dn, int obs_stride)
{
	(void)work;
	if ((gs_gu && (!gs_dn || G->cols % 16 || G->rows % 16)) || !obs_dn || obs_stride < 1)
		return -EINVAL;
	return moe_cpu(G, U, D, ids, wts, k, scale, x, ldx, out, ldo, T, acc, gs_gu, gs_dn, 0, obs_dn,
	               obs_stride);
}

int ek_moe_a8_cpu(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
                  const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
                  float *out, int ldo, int T, int acc, void *work, float *obs_dn, int obs_stride)
{
	(void)work;
	if (obs_dn && obs_stride < 1)
		return -EINVAL;
	return moe_cpu(G, U, D, ids, wts, k, scale, x, ldx, out, ldo, T, acc, NULL, NULL, 1, obs_dn,
	               obs_stride);
}
