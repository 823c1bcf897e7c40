/* forward_cuda_obs.c — the calibration observer on the CUDA engine
 * (forward_cuda.h lgc_observe_*; what is observed: engine/model/observe.h).
 *
 * The CPU observer's slots and rules, computed on the device:
 *   - each observed input is reduced by ek_obs_amax into the maxima of its
 *     layer's slots in device memory (atomicMax on the float's bits); the
 *     Linears that read one input (q/k/v/g; dense gate/up; shared gate/up and
 *     the shared-expert gate; an expert's gate/up) share the first slot's
 *     maximum, copied to the others when read back;
 *   - routed experts: ek_obs_rows over the routed slots (token t's normalized
 *     input for each expert it was routed to, one count per routed token) and
 *     ek_moe_obs for the down input (the SwiGLU, before any input
 *     quantization), so every expert sees exactly the tokens routed to it;
 *   - all: after the layer's MoE, every token through every expert for the
 *     observer only, K experts a call (ek_moe_obs with zero weights into a
 *     scratch output): the forward keeps its top-k, as forward.c does;
 *   - tokens of the other slots are counted on the host (T per call).
 * Nothing is copied back while the forward runs: lgc_observe_read does one
 * copy of the maxima and the counts at the end. */
#include "engine/model/forward_cuda_int.h"
#include "engine/model/observe.h"
#include "base/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int lgc_observe_start(struct lgc *g, int all_experts, struct rq_err *err)
{
	const struct lg_config *c = &g->m->cfg;
	struct lgc_obs *o = &g->ob;
	if (all_experts && c->n_experts <= 0)
		return rq_errf(err, -EINVAL, "observer: all experts asked of a model without routed experts");
	if (!o->amax) {
		size_t n = lg_obs_count(g->m);
		o->per = lg_obs_per_layer(g->m);
		o->n = n;
		if (!(o->amax = lgc_dalloc(g, n * sizeof(float))) ||
		    !(o->cnt = lgc_dalloc(g, n * sizeof(unsigned))) ||
		    !(o->tok = calloc(n ? n : 1, sizeof *o->tok)))
			return rq_errf(err, -ENOMEM, "CUDA engine: observer buffers (%zu slots): %s", n,
			               ek_error(g->d));
	}
	if (all_experts && !o->all_ids) {
		int E = c->n_experts, K = c->top_k, B = g->B, chunks = (E + K - 1) / K;
		size_t nid = (size_t)chunks * B * K;
		int *h = malloc(nid * sizeof *h);
		int rc = !h ? -ENOMEM : 0;
		/* chunk ch: B rows of its kk experts, e = ch·K + j (row stride kk) */
		for (int ch = 0; !rc && ch < chunks; ch++) {
			int e0 = ch * K, kk = E - e0 < K ? E - e0 : K;
			for (int t = 0; t < B; t++)
				for (int j = 0; j < kk; j++)
					h[(size_t)ch * B * K + (size_t)t * kk + j] = e0 + j;
		}
		if (!rc && (!(o->all_ids = lgc_dalloc(g, nid * sizeof(int))) ||
		            !(o->all_w = lgc_dalloc(g, (size_t)B * K * sizeof(float))) ||
		            !(o->all_out = lgc_dalloc(g, (size_t)B * c->hidden * sizeof(float)))))
			rc = -ENOMEM;
		if (!rc && (!(rc = ek_h2d(g->d, o->all_ids, h, nid * sizeof(int))) &&
		            !(rc = ek_memset(g->d, o->all_w, 0, (size_t)B * K * sizeof(float)))))
			rc = ek_sync(g->d);
		free(h);
		if (rc) {                  /* made again at the next start */
			o->all_ids = NULL;
			return rq_errf(err, rc, "CUDA engine: observer (all experts): %s", ek_error(g->d));
		}
	}
	int rc = ek_memset(g->d, o->amax, 0, o->n * sizeof(float));
	if (!rc)
		rc = ek_memset(g->d, o->cnt, 0, o->n * sizeof(unsigned));
	if (!rc)
		rc = ek_sync(g->d);
	if (rc)
		return rq_errf(err, rc, "CUDA engine: observer: %s", ek_error(g->d));
	memset(o->tok, 0, o->n * sizeof *o->tok);
	o->all = all_experts;
	o->on = 1;
	return 0;
}

void lgc_observe_stop(struct lgc *g)
{
	g->ob.on = 0;
}

/* The slots that share an observed input read the first one's maximum. */
static void share(float *amax, size_t base, int from, int to)
{
	amax[base + to] = amax[base + from];
}

int lgc_observe_read(struct lgc *g, struct lg_obs *obs, struct rq_err *err)
{
	const struct lgc_obs *o = &g->ob;
	const struct lg_config *c = &g->m->cfg;
	if (!o->amax)
		return rq_errf(err, -EINVAL, "observer: never started");
	float *a = malloc(o->n * sizeof *a);
	unsigned *cn = malloc(o->n * sizeof *cn);
	int rc = !a || !cn ? -ENOMEM : 0;
	if (!rc && ((rc = ek_d2h(g->d, a, o->amax, o->n * sizeof *a)) ||
	            (rc = ek_d2h(g->d, cn, o->cnt, o->n * sizeof *cn)) || (rc = ek_sync(g->d))))
		rq_errf(err, rc, "CUDA engine: observer: copying the maxima back: %s", ek_error(g->d));
	else if (rc)
		rq_errf(err, rc, "out of memory");
	for (int li = 0; !rc && li < c->n_layers; li++) {
		size_t b = (size_t)li * o->per;
		share(a, b, LG_OBS_Q, LG_OBS_K);
		share(a, b, LG_OBS_Q, LG_OBS_V);
		share(a, b, LG_OBS_Q, LG_OBS_G);
		share(a, b, LG_OBS_GATE, LG_OBS_UP);
		share(a, b, LG_OBS_SG, LG_OBS_SU);
		share(a, b, LG_OBS_SG, LG_OBS_SGATE);
		for (int e = 0; e < c->n_experts; e++) {
			int s = LG_OBS_FIXED + 3 * e;
			share(a, b, s, s + 1);
			cn[b + s + 1] = cn[b + s + 2] = cn[b + s];   /* gate's count: up, down */
		}
	}
	for (size_t i = 0; !rc && i < o->n; i++) {
		if (a[i] > obs->amax[i])
			obs->amax[i] = a[i];
		obs->tokens[i] += o->tok[i] + (long)cn[i];
	}
	free(a);
	free(cn);
	return rc;
}

/* x (T rows, cols wide) observed for the slots of layer li: the maximum into
 * slots[0], tokens counted for each. */
int lgc_obs_x(struct lgc *g, int li, const int *slots, int ns, const float *x, int ldx, int T,
              int cols)
{
	struct lgc_obs *o = &g->ob;
	if (!o->on || T <= 0)
		return 0;
	size_t b = (size_t)li * o->per;
	for (int j = 0; j < ns; j++)
		o->tok[b + slots[j]] += T;
	return ek_obs_amax(g->d, x, ldx, T, cols, o->amax + b + slots[0]);
}

/* Routed experts of layer li, after routing (ids on the device): the
 * gate/up inputs (xn of each routed token) and their counts; the down
 * inputs come from the MoE call itself (lgc_obs_moe_dn). */
int lgc_obs_routed(struct lgc *g, int li, int T)
{
	struct lgc_obs *o = &g->ob;
	const struct lg_config *c = &g->m->cfg;
	if (!o->on || o->all || T <= 0)
		return 0;
	size_t b = (size_t)li * o->per + LG_OBS_FIXED;
	return ek_obs_rows(g->d, g->xn, c->hidden, NULL, c->top_k, T * c->top_k, c->hidden, g->ids,
	                   c->n_experts, o->amax + b, o->cnt + b, 3);
}

/* Where the routed MoE of layer li puts its down inputs' maxima (NULL: not observing them). */
float *lgc_obs_moe_dn(struct lgc *g, int li)
{
	struct lgc_obs *o = &g->ob;
	if (!o->on || o->all)
		return NULL;
	return o->amax + (size_t)li * o->per + LG_OBS_FIXED + 2;
}

/* all: every token of the batch through every routed expert of layer li for
 * the observer only, K experts a call (after the layer's MoE: xn unchanged). */
int lgc_obs_all_experts(struct lgc *g, int li, int T)
{
	struct lgc_obs *o = &g->ob;
	const struct lg_config *c = &g->m->cfg;
	const struct lgc_layer *L = &g->L[li];
	if (!o->on || !o->all || T <= 0)
		return 0;
	int E = c->n_experts, K = c->top_k, H = c->hidden, rc = 0;
	size_t b = (size_t)li * o->per + LG_OBS_FIXED;
	for (int e0 = 0, ch = 0; e0 < E && !rc; e0 += K, ch++) {
		int kk = E - e0 < K ? E - e0 : K;
		const int *ids = o->all_ids + (size_t)ch * g->B * K;
		if (!(rc = ek_obs_rows(g->d, g->xn, H, NULL, kk, T * kk, H, ids, E, o->amax + b,
		                       o->cnt + b, 3)))
			rc = ek_moe_obs(g->d, &L->eg, &L->eu, &L->ed, ids, o->all_w, kk, 1.0f, g->xn, H,
			                o->all_out, H, T, 0, g->moe_work, L->egs_gu, L->egs_dn, o->amax + b + 2,
			                3);
	}
	return rc;
}
