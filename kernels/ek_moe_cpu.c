/* ek_moe_cpu.c — CPU twins of the MoE ops (ek_route, ek_route_softmax in
 * ek_ops.cu, ek_moe in ek_moe.cu). ek_route_cpu and ek_route_softmax_cpu are
 * also the CPU engine's routers (engine/forward.c): one definition of each
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
	return (b + 255) & ~(size_t)255;
}

int ek_moe_cpu(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
               const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
               float *out, int ldo, int T, int acc, void *work)
{
	int I = G->rows, H = D->rows, mode = T <= EK_GEMV_MAX_T ? 0 : 1, rc = 0;
	float *g = malloc(sizeof(float) * ((size_t)I * 3 + (size_t)H * (k + 1)));
	if (!g)
		return -ENOMEM;
	float *u = g + I, *h = u + I, *dd = h + I, *sum = dd + (size_t)H * k;
	for (int t = 0; t < T && !rc; t++) {
		for (int j = 0; j < k && !rc; j++) {
			int e = ids[(size_t)t * k + j];
			if ((rc = ek_matvec_cpu(G, e, x + (size_t)t * ldx, 0, g, 0, 1, 0, mode)) ||
			    (rc = ek_matvec_cpu(U, e, x + (size_t)t * ldx, 0, u, 0, 1, 0, mode)))
				break;
			for (int i = 0; i < I; i++)
				h[i] = ek_silu(g[i]) * u[i];
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
