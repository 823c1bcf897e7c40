/* forward_cuda.c — the forward pass of every family on CUDA (forward_cuda.h);
 * the family's switches are data of the layer (biases, no q/k norm, router
 * kind, shared-expert gate), as on the CPU (forward.c).
 *
 * One batch of T tokens, every op queued on the device's stream:
 *   x = embed(tokens)                                   ek_embed
 *   per layer:
 *     xn = RMSNorm(x)                                   ek_rmsnorm
 *     [q|k|v|g] = xn · Wqkvg (+ q|k|v bias)             one fused GEMV/GEMM (+ ek_bias)
 *     q, k = RMSNorm per head, RoPE; k, v → cache       ek_qk_rope_kv
 *     a = softmax(q·kᵀ/√d) v ⊙ softplus(g)              ek_attn
 *     x += a · Wo (+ bias)                              GEMV/GEMM, accumulate
 *     xn = RMSNorm(x)
 *     dense: [g|u] = xn · Wgu; x += SwiGLU · Wdown
 *     MoE:   [router|sg|su|sgate] = xn · Wrsu; ids, w = route(router)   (sigmoid or
 *            softmax router; ids stay on the device)
 *            x += scale · Σ w · expert(xn)              ek_moe
 *            x += ([σ(sgate) ·] SwiGLU(sg, su)) · Wsd
 *   logits = RMSNorm(x) · lm_head                       last n_out tokens, 16 rows a call
 * T <= 16 uses the GEMV kernels, larger T the GEMM kernels. For T <= 4
 * (EK_GEMV_NORM_MAX_T) each RMSNorm is fused into the GEMV that reads it
 * (ek_gemv_norm: attn_norm into q|k|v|g, mlp_norm into gate|up or
 * router|shared, final_norm into lm_head): the first GEMV of the group
 * normalizes x itself and also stores xn for the group's other members and
 * for the routed experts, one launch fewer per norm, the same bits as the
 * two kernels. EK_FUSE=0 in the environment keeps them apart (read by each
 * direct pass; a captured graph keeps what it was captured with). The position and
 * the tokens come from device memory (dstep), so the single-token step,
 * from the copy of hstep to the copy of the logits, is captured once as a
 * CUDA graph (after WARM direct steps) and replayed for every decoded token. */
#include "engine/model/forward_cuda_int.h"
#include "engine/model/observe.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WARM 2                     /* direct decode steps before capturing */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cuda_err(struct lgc *g, struct rq_err *err, int rc, const char *what)
{
	return rq_errf(err, rc ? rc : -EIO, "CUDA engine: %s: %s", what, ek_error(g->d));
}

/* ------------------------------------------------------------ create */

int lgc_create(const struct lg_model *m, const struct lgc_opts *o, struct lgc **out,
               struct rq_err *err)
{
	const struct lg_config *c = &m->cfg;
	struct lgc_plan plan;
	int rc = lgc_plan_make(m, o, &plan, err);
	if (rc)
		return rc;
	struct lgc *g = calloc(1, sizeof *g);
	if (!g || !(g->L = calloc(c->n_layers, sizeof *g->L))) {
		free(g);
		return rq_errf(err, -ENOMEM, "out of memory");
	}
	g->m = m;
	g->o = *o;
	g->kv_type = plan.kv_type;
	g->B = plan.batch;
	char msg[512];
	if ((rc = ek_open(o->device, &g->d, msg, sizeof msg))) {
		rq_errf(err, rc, "CUDA engine: %s", msg);
		goto fail;
	}
	struct ek_info inf;
	if ((rc = ek_info(g->d, &inf))) {
		cuda_err(g, err, rc, "device info");
		goto fail;
	}
	g->plan = plan;
	snprintf(g->plan.device, sizeof g->plan.device, "%.127s", inf.name);
	g->plan.dev_free = inf.mem_free;
	g->plan.dev_total = inf.mem_total;
	size_t reserve = (size_t)1 << 30;
	if (!g->plan.budget)
		g->plan.budget = inf.mem_free > reserve ? inf.mem_free - reserve : 0;
	if (g->plan.budget > inf.mem_free)
		g->plan.budget = inf.mem_free;
	if (g->plan.total > g->plan.budget) {
		char t[1024];
		lgc_plan_text(&g->plan, t, sizeof t);
		rc = rq_errf(err, -ENOMEM, "CUDA engine: the model does not fit on %s (%.1f GB free): %s; "
		             "use a shorter --ctx, --kv fp8 or a smaller --batch", inf.name,
		             inf.mem_free / 1e9, t);
		goto fail;
	}
	double t0 = now();
	if ((rc = lgc_layout(g, 0, err)))
		goto fail;
	g->st.upload_s = now() - t0;
	g->plan.staging = 0;

	/* activations */
	size_t H = c->hidden, B = g->B, K = c->top_k > 0 ? c->top_k : 1;
	g->qd = c->n_heads_max * c->head_dim;
	for (int i = 0; i < c->n_layers; i++) {
		if (g->L[i].qkvg.width > g->qkvg_w)
			g->qkvg_w = g->L[i].qkvg.width;
		if (g->L[i].gu.width > g->gu_w)
			g->gu_w = g->L[i].gu.width;
		if (g->L[i].rsu.width > g->rsu_w)
			g->rsu_w = g->L[i].rsu.width;
	}
	g->hw = c->inter > c->shared_inter ? c->inter : c->shared_inter;
	int ok = (g->x = lgc_dalloc(g, B * H * 4)) && (g->xn = lgc_dalloc(g, B * H * 4)) &&
	         (g->qkvg = lgc_dalloc(g, B * g->qkvg_w * 4)) && (g->att = lgc_dalloc(g, B * g->qd * 4)) &&
	         (g->gu = lgc_dalloc(g, B * (g->gu_w + 1) * 4)) && (g->h = lgc_dalloc(g, B * (g->hw + 1) * 4)) &&
	         (g->rsu = lgc_dalloc(g, B * (g->rsu_w + 1) * 4)) && (g->ids = lgc_dalloc(g, B * K * 4)) &&
	         (g->wts = lgc_dalloc(g, B * K * 4)) &&
	         (g->logits = lgc_dalloc(g, (size_t)LGC_LOGIT_ROWS * c->vocab * 4)) &&
	         (g->dstep = lgc_dalloc(g, (1 + B) * 4)) &&
	         (g->hstep = ek_host_alloc(g->d, (1 + B) * 4)) &&
	         (g->hlogits = ek_host_alloc(g->d, (size_t)LGC_LOGIT_ROWS * c->vocab * 4));
	size_t mw = c->n_experts > 0 ? ek_moe_work_bytes((int)B, (int)K, c->moe_inter, c->hidden) : 0;
	size_t aw = ek_attn_work_bytes((int)B < EK_GEMV_MAX_T ? (int)B : EK_GEMV_MAX_T, c->n_heads_max,
	                               c->head_dim, o->max_ctx);
	ok = ok && (!mw || (g->moe_work = lgc_dalloc(g, mw))) && (g->attn_work = lgc_dalloc(g, aw));
	g->xq_w = lgc_xq_width(m);
	ok = ok && (!m->n_act || (g->xq = lgc_dalloc(g, B * g->xq_w * 4)));
	if (!ok) {
		rc = cuda_err(g, err, -ENOMEM, "activation buffers");
		goto fail;
	}
	if ((mw && (rc = ek_memset(g->d, g->moe_work, 0, mw))) ||
	    (rc = ek_memset(g->d, g->attn_work, 0, aw)) || (rc = ek_sync(g->d))) {
		cuda_err(g, err, rc, "zeroing scratch");
		goto fail;
	}
	g->st.weight_bytes_per_token = lg_model_token_bytes(m);
	*out = g;
	return 0;
fail:
	lgc_free(g);
	return rc;
}

void lgc_free(struct lgc *g)
{
	if (!g)
		return;
	if (g->d) {
		ek_sync(g->d);
		ek_graph_free(g->graph);
		for (int i = 0; i < g->nallocs; i++)
			ek_free(g->d, g->allocs[i]);
		ek_host_free(g->d, g->hstep);
		ek_host_free(g->d, g->hlogits);
		ek_close(g->d);
	}
	free(g->ob.tok);
	free(g->allocs);
	free(g->L);
	free(g);
}

const struct lgc_plan *lgc_plan_of(const struct lgc *g)
{
	return &g->plan;
}

void lgc_stats(const struct lgc *g, struct lgc_stats *s)
{
	*s = g->st;
	s->graph = g->graph != NULL;
}

void lgc_reset(struct lgc *g)
{
	g->pos = 0;
}

int lgc_pos(const struct lgc *g)
{
	return g->pos;
}

int lgc_measure_copy(struct lgc *g, size_t bytes, struct rq_err *err)
{
	int rc = ek_copy_bw(g->d, bytes, 5, &g->st.d2d_gbs, &g->st.h2d_gbs);
	g->st.d2d_gbs /= 1e9;
	g->st.h2d_gbs /= 1e9;
	return rc ? cuda_err(g, err, rc, "copy bandwidth") : 0;
}

/* ------------------------------------------------------------ the pass */

static int linear(struct lgc *g, const struct ek_w *w, const float *x, int ldx, float *y, int ldy,
                  int T, int acc)
{
	return T <= EK_GEMV_MAX_T ? ek_gemv(g->d, w, x, ldx, y, ldy, T, acc)
	                          : ek_gemm(g->d, w, x, ldx, y, ldy, T, acc);
}

/* A product whose Linear quantizes its input (W4A4 NVFP4, FP8 per token, as
 * vLLM does; kernels/ek_actq_rule.h): the input goes through ek_actq_* into
 * g->xq first, then the product reads it. */
static int qlinear(struct lgc *g, const struct lgc_aq *aq, const struct ek_w *w, const float *x,
                   int ldx, float *y, int ldy, int T, int acc)
{
	if (aq->act != LG_A_NONE) {
		int K = w->cols,
		    rc = aq->act == LG_A_NVFP4 ? ek_actq_nvfp4(g->d, x, ldx, g->xq, K, T, K, aq->gs)
		                               : ek_actq_fp8(g->d, x, ldx, g->xq, K, T, K);
		if (rc)
			return rc;
		x = g->xq;
		ldx = K;
	}
	return linear(g, w, x, ldx, y, ldy, T, acc);
}

static int run_group(struct lgc *g, const struct lgc_group *gr, const float *x, int ldx, float *y,
                     int T)
{
	int rc = 0;
	for (int i = 0; i < gr->n && !rc; i++)
		rc = qlinear(g, &gr->aq[i], &gr->w[i], x, ldx, y + gr->off[i], gr->width, T, 0);
	return rc;
}

/* 1 if RMSNorms are fused into their GEMVs (EK_FUSE != "0"). */
static int fuse_norms(void)
{
	const char *e = getenv("EK_FUSE");
	return !(e && strcmp(e, "0") == 0);
}

/* xn = RMSNorm(x[0..T)) (H wide, leading dimension H), then the group
 * reads it: fused into the first member's GEMV when fuse and T allow (it
 * stores xn for the other members and later readers), else ek_rmsnorm and
 * the group. Either way xn holds the normalized x afterwards. */
static int norm_group(struct lgc *g, const struct lgc_group *gr, const float *x, const float *nw,
                      float *y, int T, int fuse)
{
	const struct lg_config *c = &g->m->cfg;
	int H = c->hidden, rc;
	if (!fuse || T > EK_GEMV_NORM_MAX_T || gr->n < 1 || gr->any_aq) {
		if ((rc = ek_rmsnorm(g->d, g->xn, H, x, H, nw, T, H, c->eps)))
			return rc;
		return run_group(g, gr, g->xn, H, y, T);
	}
	if ((rc = ek_gemv_norm(g->d, &gr->w[0], x, H, nw, c->eps, g->xn, H, y + gr->off[0], gr->width,
	                       T, 0)))
		return rc;
	for (int i = 1; i < gr->n && !rc; i++)
		rc = linear(g, &gr->w[i], g->xn, H, y + gr->off[i], gr->width, T, 0);
	return rc;
}

/* logits[0..n) of the n tokens at xl: final norm (fused when it may) + lm_head */
static int head(struct lgc *g, const float *xl, int n, int fuse)
{
	const struct lg_config *c = &g->m->cfg;
	struct lgc_group one = {.n = 1, .w = {g->lm_head}, .off = {0}, .width = c->vocab,
	                        .aq = {g->aq_head}, .any_aq = g->aq_head.act != LG_A_NONE};
	return norm_group(g, &one, xl, g->final_norm, g->logits, n, fuse);
}

static int layer(struct lgc *g, int li, int T, int fuse)
{
	const struct lg_config *c = &g->m->cfg;
	const struct lgc_layer *L = &g->L[li];
	const struct lg_rope *r = &c->rope[L->type];
	int H = c->hidden, hd = c->head_dim, nkv = c->n_kv_heads, W = L->qkvg.width, rc;
	int sliding = L->type == LG_SLIDING, window = sliding ? c->sliding_window : 0;
	if ((rc = norm_group(g, &L->qkvg, g->x, L->attn_norm, g->qkvg, T, fuse)) ||
	    (rc = LGC_OBS(g, li, g->xn, H, T, H, LG_OBS_Q, LG_OBS_K, LG_OBS_V, LG_OBS_G)) ||
	    (L->qkvg_b && (rc = ek_bias(g->d, g->qkvg, W, L->qkvg_b, T, W))) ||
	    (rc = ek_qk_rope_kv(g->d, g->qkvg + L->qo, W, g->qkvg + L->ko, W, g->qkvg + L->vo, W, T,
	                        L->nh, nkv, hd, L->q_norm, L->k_norm, c->eps, g->inv_freq[L->type],
	                        r->rot_dim, r->attn_scale, g->dstep, L->kc, L->vc, g->kv_type, L->cap)) ||
	    (rc = ek_attn(g->d, g->att, g->qd, g->qkvg + L->qo, W, g->qkvg + L->go, W, (int)c->gate, T,
	                  L->nh, nkv, hd, L->kc, L->vc, g->kv_type, L->cap, g->dstep, window,
	                  sliding && window < g->o.max_ctx ? window : g->o.max_ctx, g->attn_work)) ||
	    (rc = LGC_OBS(g, li, g->att, g->qd, T, L->nh * hd, LG_OBS_O)) ||
	    (rc = qlinear(g, &L->aq_o, &L->o, g->att, g->qd, g->x, H, T, 1)) ||
	    (L->o_b && (rc = ek_bias(g->d, g->x, H, L->o_b, T, H))))
		return rc;
	if (!L->moe) {
		int I = c->inter;
		if ((rc = norm_group(g, &L->gu, g->x, L->mlp_norm, g->gu, T, fuse)) ||
		    (rc = LGC_OBS(g, li, g->xn, H, T, H, LG_OBS_GATE, LG_OBS_UP)) ||
		    (L->gu_b && (rc = ek_bias(g->d, g->gu, L->gu.width, L->gu_b, T, L->gu.width))) ||
		    (rc = ek_swiglu(g->d, g->h, I, g->gu, L->gu.width, g->gu + I, L->gu.width, T, I)) ||
		    (rc = LGC_OBS(g, li, g->h, I, T, I, LG_OBS_DOWN)) ||
		    (rc = qlinear(g, &L->aq_down, &L->down, g->h, I, g->x, H, T, 1)))
			return rc;
		return L->down_b ? ek_bias(g->d, g->x, H, L->down_b, T, H) : 0;
	}
	int E = c->n_experts, S = c->shared_inter, RW = L->rsu.width;
	float *obs_dn = lgc_obs_moe_dn(g, li);
	if ((rc = norm_group(g, &L->rsu, g->x, L->mlp_norm, g->rsu, T, fuse)) ||
	    (S > 0 && (rc = LGC_OBS(g, li, g->xn, H, T, H, LG_OBS_SG, LG_OBS_SU, LG_OBS_SGATE))) ||
	    (rc = c->arch->router == LG_ROUTER_SIGMOID
	          ? ek_route(g->d, g->rsu, RW, L->bias, E, c->top_k, c->norm_topk, c->router_softcap,
	                     g->ids, g->wts, T)
	          : ek_route_softmax(g->d, g->rsu, RW, E, c->top_k, c->norm_topk, g->ids, g->wts, T)) ||
	    (rc = lgc_obs_routed(g, li, T)) ||
	    (rc = L->ea8
	          ? ek_moe_a8(g->d, &L->eg, &L->eu, &L->ed, g->ids, g->wts, c->top_k, c->routed_scale,
	                      g->xn, H, g->x, H, T, 1, g->moe_work, obs_dn, 3)
	          : obs_dn
	          ? ek_moe_obs(g->d, &L->eg, &L->eu, &L->ed, g->ids, g->wts, c->top_k, c->routed_scale,
	                       g->xn, H, g->x, H, T, 1, g->moe_work, L->egs_gu, L->egs_dn, obs_dn, 3)
	          : L->egs_gu
	          ? ek_moe_q(g->d, &L->eg, &L->eu, &L->ed, g->ids, g->wts, c->top_k, c->routed_scale,
	                     g->xn, H, g->x, H, T, 1, g->moe_work, L->egs_gu, L->egs_dn)
	          : ek_moe(g->d, &L->eg, &L->eu, &L->ed, g->ids, g->wts, c->top_k, c->routed_scale,
	                   g->xn, H, g->x, H, T, 1, g->moe_work)) ||
	    (rc = lgc_obs_all_experts(g, li, T)))
		return rc;
	if (S <= 0)
		return 0;
	if ((rc = ek_swiglu(g->d, g->h, S, g->rsu + E, RW, g->rsu + E + S, RW, T, S)) ||
	    (rc = LGC_OBS(g, li, g->h, S, T, S, LG_OBS_SD)) ||
	    (L->sgo >= 0 && (rc = ek_sigmoid_scale(g->d, g->h, S, g->rsu + L->sgo, RW, T, S))))
		return rc;
	return qlinear(g, &L->aq_sd, &L->sd, g->h, S, g->x, H, T, 1);
}

/* Everything after the host wrote hstep (1 + T ints): copies it in, runs the
 * layers and, when nb > 0, leaves the last nb tokens' logits (nb <= 16) in
 * hlogits. Queued only: the caller synchronises. */
static int pass(struct lgc *g, int T, int nb)
{
	const struct lg_config *c = &g->m->cfg;
	int H = c->hidden, rc, fuse = fuse_norms();
	if ((rc = ek_h2d(g->d, g->dstep, g->hstep, sizeof(int) * (1 + T))) ||
	    (rc = ek_embed(g->d, g->x, g->embed, g->dstep + 1, T, H)))
		return rc;
	for (int li = 0; li < c->n_layers; li++)
		if ((rc = layer(g, li, T, fuse)))
			return rc;
	if (!nb)
		return 0;
	if ((rc = head(g, g->x + (size_t)(T - nb) * H, nb, fuse)))
		return rc;
	return ek_d2h(g->d, g->hlogits, g->logits, sizeof(float) * nb * c->vocab);
}

/* The decode step (hstep already written) captured into *out: 0; 1 when a
 * capture cannot begin (no graphs on this device); else -errno, *out kept. */
static int capture_step(struct lgc *g, struct ek_graph **out)
{
	struct ek_graph *cap = NULL;
	if (ek_capture_begin(g->d))
		return 1;
	int rc = pass(g, 1, 1);
	int rc2 = ek_capture_end(g->d, &cap);
	if (rc || rc2) {
		ek_graph_free(cap);
		return rc ? rc : rc2;
	}
	*out = cap;
	return 0;
}

/* One batch of T tokens at g->pos; logits of its last nb into dst. */
static int batch(struct lgc *g, const int *tok, int T, float *dst, int nb, struct rq_err *err)
{
	const struct lg_config *c = &g->m->cfg;
	double t0 = now();
	int rc, graph = T == 1 && nb == 1 && !g->o.no_graph && !g->ob.on;   /* no observer in the graph */
	g->hstep[0] = g->pos;
	memcpy(g->hstep + 1, tok, sizeof(int) * T);
	if (graph && !g->graph && g->warm >= WARM) {
		/* Always end the capture, even after a failed op: a capture that
		 * stays valid would otherwise hand back the ops queued before the
		 * failure as a graph. A graph is kept only when every op and the
		 * end (and instantiate) succeeded; otherwise it is destroyed. When
		 * the failed capture had PDL edges, ek_capture_end turned PDL off
		 * for captures: the step is captured once more without them (PDL
		 * stays on for direct launches). If that fails too (or PDL was not
		 * the suspect), the step fails with the error (nothing ran: capture
		 * only records, so pos and the KV cache are as before and the
		 * caller may repeat the step) and graphs are turned off for this
		 * engine: later steps decode directly, never replaying a graph
		 * from a failed capture. Not retried further: a failure that
		 * repeats would fail every (WARM + 1)th step. */
		int pdl0 = ek_pdl(g->d);
		rc = capture_step(g, &g->graph);
		if (rc < 0 && pdl0 == 2 && ek_pdl(g->d) == 1)
			rc = capture_step(g, &g->graph);
		if (rc == 1) {                      /* no graphs here: decode directly */
			g->o.no_graph = 1;
			graph = 0;
		} else if (rc) {
			g->o.no_graph = 1;
			return cuda_err(g, err, rc, "graph capture");
		}
	}
	if (graph && g->graph) {
		if ((rc = ek_graph_run(g->d, g->graph)))
			return cuda_err(g, err, rc, "graph launch");
	} else {
		/* logits beyond 16 rows: every 16 after the pass, from the final x */
		int first = nb > LGC_LOGIT_ROWS ? LGC_LOGIT_ROWS : nb;
		if ((rc = pass(g, T, nb > LGC_LOGIT_ROWS ? 0 : first)))
			return cuda_err(g, err, rc, "forward");
		for (int o = 0; nb > LGC_LOGIT_ROWS && o < nb; o += LGC_LOGIT_ROWS) {
			int n = nb - o < LGC_LOGIT_ROWS ? nb - o : LGC_LOGIT_ROWS, H = c->hidden;
			float *xl = g->x + (size_t)(T - nb + o) * H;
			if ((rc = head(g, xl, n, fuse_norms())) ||
			    (rc = ek_d2h(g->d, g->hlogits, g->logits, sizeof(float) * n * c->vocab)) ||
			    (rc = ek_sync(g->d)))
				return cuda_err(g, err, rc, "logits");
			memcpy(dst + (size_t)o * c->vocab, g->hlogits, sizeof(float) * n * c->vocab);
		}
		if (graph)
			g->warm++;
	}
	if ((rc = ek_sync(g->d)))
		return cuda_err(g, err, rc, "forward");
	if (nb && nb <= LGC_LOGIT_ROWS)
		memcpy(dst, g->hlogits, sizeof(float) * nb * c->vocab);
	double dt = now() - t0;
	if (T == 1 && nb == 1) {
		g->st.decode_steps++;
		g->st.decode_s += dt;
	} else {
		g->st.prefill_tokens += T;
		g->st.prefill_s += dt;
	}
	g->pos += T;
	return 0;
}

int lgc_forward(struct lgc *g, const int *tokens, int n, float *logits, int n_out,
                struct rq_err *err)
{
	const struct lg_config *c = &g->m->cfg;
	if (n < 0 || n_out < 0 || n_out > n || (n_out > 0 && !logits))
		return rq_errf(err, -EINVAL, "lgc_forward: bad arguments (n %d, n_out %d)", n, n_out);
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= c->vocab)
			return rq_errf(err, -EINVAL, "token id %d at position %d is outside the vocabulary (%d)",
			               tokens[i], g->pos + i, c->vocab);
	if ((long)g->pos + n > g->o.max_ctx)
		return rq_errf(err, -ENOSPC, "the sequence would reach %ld tokens; the context holds %d",
		               (long)g->pos + n, g->o.max_ctx);
	for (int done = 0; done < n;) {
		int T = n - done < g->B ? n - done : g->B;
		int first_out = n - n_out, out_lo = first_out > done ? first_out : done;
		int nb = done + T > out_lo ? done + T - out_lo : 0;
		float *dst = nb ? logits + (size_t)(out_lo - first_out) * c->vocab : NULL;
		int rc = batch(g, tokens + done, T, dst, nb, err);
		if (rc)
			return rc;
		done += T;
	}
	return 0;
}

int lgc_time_step(struct lgc *g, int token, int reps, double *seconds, struct rq_err *err)
{
	if (g->pos >= g->o.max_ctx)
		return rq_errf(err, -ENOSPC, "the context is full");
	float *tmp = malloc(sizeof(float) * g->m->cfg.vocab);
	if (!tmp)
		return rq_errf(err, -ENOMEM, "out of memory");
	int pos = g->pos, rc = 0;
	while (!rc && !g->graph && !g->o.no_graph) {     /* warm up and capture */
		g->pos = pos;
		rc = batch(g, &token, 1, tmp, 1, err);
	}
	g->pos = pos;
	free(tmp);
	if (rc)
		return rc;
	g->hstep[0] = pos;
	g->hstep[1] = token;
	if ((rc = ek_time_begin(g->d)))
		return cuda_err(g, err, rc, "timing");
	for (int i = 0; i < reps && !rc; i++)
		rc = g->graph ? ek_graph_run(g->d, g->graph) : pass(g, 1, 1);
	if (rc || (rc = ek_time_end(g->d, seconds)))
		return cuda_err(g, err, rc, "timing");
	*seconds /= reps > 0 ? reps : 1;
	return 0;
}
