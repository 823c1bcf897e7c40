/* forward.c — every family, one batch of tokens through every layer, top to
 * bottom. What differs between families is data read at load (model.h:
 * struct lg_arch and the config's flags), never a test of the family's name:
 *
 *   x = embed(tokens)
 *   for each layer:
 *       h = RMSNorm(x)
 *       q, k, v [, g] = h·Wq (+bq), h·Wk (+bk), h·Wv (+bv) [, h·Wg]  (biases: qwen2, ...)
 *       [q, k = RMSNorm per head (q_norm, k_norm)]       (arch->qk_norm: laguna, qwen3)
 *       q, k = RoPE of the layer type
 *       a = softmax(q·kᵀ/sqrt(head_dim), causal [+ window]) · v     (GQA)
 *       x = x + (a [⊙ softplus(g)]) · Wo (+bo)           (output gate: laguna)
 *       h = RMSNorm(x)
 *       x = x + dense SwiGLU(h)                          (dense layers)
 *         | x + scale · Σ_topk w_e · SwiGLU_e(h) + [σ(h·Wsg) ·] SwiGLU_shared(h)   (MoE)
 *             w_e: sigmoid + bias pick (laguna) | softmax top-k [renormalised]
 *   logits = RMSNorm(x) · lm_head
 *
 * Buffers are [token][feature], row stride fixed per buffer (see struct).
 *
 * KV cache invariant: after a batch at positions [pos, pos + T), layer l's
 * slot (p % cap[l]) holds the key/value of position p for every p in
 * [pos + T - cap[l], pos + T). Full layers have cap = max_ctx (nothing is
 * ever overwritten); sliding layers have cap = window + B - 1, so while a
 * batch is attended, every key its queries may see (the last `window`
 * positions of each query, back to pos - window + 1) is still in the ring. */
#include "engine/model/forward_int.h"
#include "engine/model/ops.h"
#include "engine/model/qdot.h"
#include "engine/model/observe.h"
#include "engine/model/torch_bf16.h"
#include "engine/model/fastmm.h"
#include "engine/model/fastattn.h"
#include "base/err.h"
#include "base/pool.h"
#include "kernels/ek.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


/* ------------------------------------------------- the BF16 forward's roundings
 * (the rounding itself and torch's summation orders: engine/model/torch_bf16.h) */

/* One value as the state's forward holds it: BF16 in BF16 mode. */
static inline float rd(const struct lg_state *s, float x)
{
	return s->bf16 ? lg_bf16(x) : x;
}

/* Rows [0, T) of x (stride ldx, cols wide) rounded in place (BF16 mode only):
 * a tensor op's output as torch stores it. */
static void round_rows(const struct lg_state *s, float *x, size_t ldx, int T, int cols)
{
	if (!s->bf16)
		return;
	for (int t = 0; t < T; t++)
		for (int i = 0; i < cols; i++)
			x[(size_t)t * ldx + i] = lg_bf16(x[(size_t)t * ldx + i]);
}

/* <Family>RMSNorm: F32 mode, lg_rmsnorm; BF16 mode, transformers' order: the
 * mean of squares and the product by rsqrt in F32, rounded to BF16, then
 * times the weight, rounded again. */
static void norm(const struct lg_state *s, float *out, const float *x, const float *w, int n,
                 float eps)
{
	if (!s->bf16) {
		lg_rmsnorm(out, x, w, n, eps);
		return;
	}
	/* torch: pow(2).mean() = sum / n, + eps, rsqrt = 1 / sqrt */
	float r = 1.0f / sqrtf(lg_torch_sumsq(x, n) / (float)n + eps);
	for (int i = 0; i < n; i++)
		out[i] = lg_bf16(w[i] * lg_bf16(x[i] * r));
}

struct swiglu_ctx {
	float *out;
	const float *g, *u;
	int ldo, ldg, ldu, n;
};

/* BF16 mode's rows [b, e) (lg_torch_swiglu_row). */
static void swiglu_bf16_rows(void *vctx, size_t b, size_t e, int worker)
{
	const struct swiglu_ctx *c = vctx;
	(void)worker;
	for (size_t t = b; t < e; t++)
		lg_torch_swiglu_row(c->out + t * c->ldo, c->g + t * c->ldg, c->u + t * c->ldu, c->n);
}

/* F32 mode, one row: columns [b, e) (each value on its own, so any split gives
 * the same bits). */
static void swiglu_cols(void *vctx, size_t b, size_t e, int worker)
{
	const struct swiglu_ctx *c = vctx;
	(void)worker;
	ek_swiglu_cpu(c->out + b, c->ldo, c->g + b, c->ldg, c->u + b, c->ldu, 1, (int)(e - b));
}

/* out = silu(g) · u over [T][n]; BF16 mode: silu rounded, the product rounded
 * (rows in parallel over the pool). F32 mode: one token (decode) split by
 * columns over the pool (an exp each: a serial 1536 was ~3 % of a token),
 * a batch inline. */
static void swiglu(const struct lg_state *s, float *out, int ldo, const float *g, int ldg,
                   const float *u, int ldu, int T, int n)
{
	struct swiglu_ctx c = {.out = out, .g = g, .u = u, .ldo = ldo, .ldg = ldg, .ldu = ldu, .n = n};
	if (!s->bf16 && T == 1)
		rq_pool_for(s->pool, (size_t)n, 512, swiglu_cols, &c);
	else if (!s->bf16)
		ek_swiglu_cpu(out, ldo, g, ldg, u, ldu, T, n);
	else
		rq_pool_for(s->pool, (size_t)T, 1, swiglu_bf16_rows, &c);
}

/* x += y over n values (the residual adds); BF16 mode: each sum rounded. */
static void add(const struct lg_state *s, float *x, const float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = rd(s, x[i] + y[i]);
}

/* The observer: max|x| over rows [0, T) of x (row stride ldx, cols wide)
 * folded into each slot of slots[0..ns) of the current layer. Data, not
 * control: the forward calls it at each Linear's input, it returns at once
 * when no observer is set. */
static void observe(struct lg_state *s, const int *slots, int ns, const float *x, size_t ldx,
                    int T, int cols)
{
	if (!s->obs || T <= 0)
		return;
	float mx = 0;
	for (int t = 0; t < T; t++)
		for (int i = 0; i < cols; i++) {
			float a = fabsf(x[(size_t)t * ldx + i]);
			if (a > mx)
				mx = a;
		}
	size_t base = (size_t)s->li * (LG_OBS_FIXED + 3 * (size_t)s->m->cfg.n_experts);
	for (int j = 0; j < ns; j++) {
		if (mx > s->obs->amax[base + slots[j]])
			s->obs->amax[base + slots[j]] = mx;
		s->obs->tokens[base + slots[j]] += T;
	}
	lg_obs_batch(s->obs, base, slots, ns, x, ldx, T, cols, s->pool);   /* minmax, mse */
}

#define OBS(s, x, ldx, T, cols, ...)                                                  \
	observe(s, (const int[]){__VA_ARGS__}, sizeof((const int[]){__VA_ARGS__}) / sizeof(int), \
	        x, ldx, T, cols)

/* One input to quantize: rows [0, T) of x (stride ldx, cols wide) into q. */
struct qjob {
	const float *x;
	float *q;
	int ldx, cols, T, act;
	float gs;
	size_t first;              /* rows of the jobs before this one */
};

struct qctx {
	const struct qjob *j;
	int n;
};

/* Rows [b, e) of all the jobs (numbered job after job), one row at a time:
 * each row is its own NVFP4 groups or FP8 token, so the split changes nothing. */
static void quantize_rows(void *vctx, size_t b, size_t e, int worker)
{
	const struct qctx *c = vctx;
	(void)worker;
	int k = 0;
	for (size_t i = b; i < e; i++) {
		while (k + 1 < c->n && c->j[k + 1].first <= i)
			k++;
		const struct qjob *j = &c->j[k];
		size_t t = i - j->first;
		const float *x = j->x + t * j->ldx;
		float *q = j->q + t * j->cols;
		if (j->act == LG_A_NVFP4)
			ek_actq_nvfp4_cpu(x, j->ldx, q, j->cols, 1, j->cols, j->gs);
		else
			ek_actq_fp8_cpu(x, j->ldx, q, j->cols, 1, j->cols);
	}
}

/* The inputs of products whose Linear quantizes its input (W4A4: NVFP4
 * with the module's input global scale; FP8 dynamic per token), as vLLM
 * does before its quantized GEMM (kernels/ek_actq_rule.h), into s->xq; each
 * product then reads its dequantized copy. Products of one input and one
 * quantizer (q/k/v with their fused scale, an expert's gate and up) share
 * one copy. Rows are quantized in parallel over the pool. The observer has
 * already seen the unquantized input. */
static void quantize_inputs(struct lg_state *s, int n)
{
	if (n <= 0)
		return;
	const float *orig[n];
	struct qjob jobs[n];
	int nj = 0;
	size_t used = 0, rows = 0;
	for (int k = 0; k < n; k++) {
		struct lg_mm *m = &s->mm[k];
		const struct lg_linear *W = m->W;
		orig[k] = m->x;
		if (W->act == LG_A_NONE || m->T <= 0)
			continue;
		int j = 0;
		for (; j < k; j++) {
			const struct lg_mm *p = &s->mm[j];
			if (orig[j] == m->x && p->W->act == W->act && p->T == m->T && p->W->cols == W->cols &&
			    (W->act != LG_A_NVFP4 || p->W->in_gs == W->in_gs))
				break;
		}
		if (j < k) {
			m->x = s->mm[j].x;
			m->ldx = s->mm[j].ldx;
			continue;
		}
		size_t need = (size_t)m->T * W->cols;
		if (used + need > s->xq_cap)   /* cannot happen: lg_state_create sizes xq */
			abort();
		float *q = s->xq + used;
		used += need;
		jobs[nj++] = (struct qjob){.x = m->x, .q = q, .ldx = m->ldx, .cols = W->cols, .T = m->T,
		                           .act = W->act, .gs = W->in_gs, .first = rows};
		rows += m->T;
		m->x = q;
		m->ldx = W->cols;
	}
	if (!nj)
		return;
	struct qctx c = {.j = jobs, .n = nj};
	rq_pool_for(s->pool, rows, 4, quantize_rows, &c);
}

struct mmb_ctx {
	struct lg_state *s;
	size_t first[];            /* [n + 1] first row of each product, numbered product after product */
};

/* BF16 mode: rows [b, e) of the products, up to 4 rows of one product at a
 * time widened into the worker's scratch, each output torch's BF16 GEMM:
 * lg_torch_gemm (each dot lg_torch_dot's bits) in F32, (bias +,) rounded to
 * BF16. */
static void matmul_bf16_rows(void *vctx, size_t b, size_t e, int worker)
{
	struct mmb_ctx *c = vctx;
	struct lg_state *s = c->s;
	float *w = s->scratch + (size_t)worker * 4 * s->stride;
	int k = 0;
	for (size_t i = b; i < e;) {
		while (c->first[k + 1] <= i)
			k++;
		const struct lg_mm *m = &s->mm[k];
		size_t end = e < c->first[k + 1] ? e : c->first[k + 1];
		int r = (int)(i - c->first[k]), R = end - i < 4 ? (int)(end - i) : 4;
		for (int j = 0; j < R; j++)
			lg_linear_row(m->W, r + j, w + (size_t)j * s->stride);
		float *y = m->y + r;
		lg_torch_gemm(m->x, m->ldx, m->T, w, s->stride, R, m->W->cols, y, m->ldy);
		const float *bias = m->W->bias;
		for (int t = 0; t < m->T; t++)
			for (int j = 0; j < R; j++) {
				float d = y[(size_t)t * m->ldy + j];
				y[(size_t)t * m->ldy + j] = lg_bf16(bias ? bias[r + j] + d : d);
			}
		i += R;
	}
}

static void matmul(struct lg_state *s, int n)
{
	if (s->xq)
		quantize_inputs(s, n);
	if (s->fast) {   /* the fast mode (fastmm.h), then BF16 mode's output rounding */
		lg_fast_matmul(s->pool, s->scratch, s->stride, s->mm, n);
		for (int k = 0; k < n; k++)
			round_rows(s, s->mm[k].y, s->mm[k].ldy, s->mm[k].T, s->mm[k].W->rows);
		return;
	}
	if (!s->bf16) {
		lg_matmul(s->pool, s->scratch, s->stride, s->mm, n);
		return;
	}
	struct mmb_ctx *c = malloc(sizeof *c + (n + 1) * sizeof c->first[0]);
	if (!c)   /* a few bytes: no way to go on without the products */
		abort();
	c->s = s;
	c->first[0] = 0;
	for (int k = 0; k < n; k++)
		c->first[k + 1] = c->first[k] + (s->mm[k].T > 0 ? (size_t)s->mm[k].W->rows : 0);
	rq_pool_for(s->pool, c->first[n], 4, matmul_bf16_rows, c);
	free(c);
}

static struct lg_mm mm(const struct lg_linear *W, const float *x, int ldx, float *y, int ldy, int T)
{
	return (struct lg_mm){.W = W, .x = x, .ldx = ldx, .y = y, .ldy = ldy, .T = T};
}

/* ---------------------------------------------------------------- attention */

/* q[0..rot) rotated in (i, i + rot/2) pairs, the rest passes through.
 * BF16 mode: x·cos + rotate_half(x)·sin with each product and the sum rounded. */
static void rope(const struct lg_state *s, float *x, const float *cs, const float *sn, int rot)
{
	int half = rot / 2;
	for (int i = 0; i < half; i++) {
		float a = x[i], b = x[i + half];
		if (s->bf16) {
			x[i] = lg_bf16(lg_bf16(a * cs[i]) + lg_bf16(-b * sn[i]));
			x[i + half] = lg_bf16(lg_bf16(b * cs[i]) + lg_bf16(a * sn[i]));
		} else {
			x[i] = a * cs[i] - b * sn[i];
			x[i + half] = b * cs[i] + a * sn[i];
		}
	}
}

struct attn_ctx {
	struct lg_state *s;
	int layer, T, nh;
	int gh;                    /* fast mode: query heads per item (1 or nh / n_kv_heads) */
	float scale;
};

/* One (token, head) per item: scores over the keys it may see, softmax, Σ p·v. */
static void attn_items(void *vctx, size_t b, size_t e, int worker)
{
	struct attn_ctx *a = vctx;
	struct lg_state *s = a->s;
	const struct lg_config *c = &s->m->cfg;
	int hd = c->head_dim, rep = a->nh / c->n_kv_heads, cap = s->cap[a->layer];
	int sliding = s->m->layers[a->layer].type == LG_SLIDING;
	const float *kc = s->kc[a->layer], *vc = s->vc[a->layer];
	float *sc = s->scores + (size_t)worker * s->max_cap;
	for (size_t it = b; it < e; it++) {
		int t = (int)(it / a->nh), h = (int)(it % a->nh);
		int p = s->pos + t, kvh = h / rep;
		int lo = sliding && p - c->sliding_window + 1 > 0 ? p - c->sliding_window + 1 : 0;
		int n = p - lo + 1;
		const float *q = s->q + (size_t)t * s->qd + (size_t)h * hd;
		float mx = -INFINITY;
		if (s->bf16)   /* the q·k dots as lg_torch_dot's, by runs of adjacent cache slots */
			for (int j = 0; j < n;) {
				int slot = (lo + j) % cap, run = n - j < cap - slot ? n - j : cap - slot;
				lg_torch_gemm(q, (size_t)hd, 1, kc + (size_t)slot * s->kvd + (size_t)kvh * hd,
				              (size_t)s->kvd, run, hd, sc + j, (size_t)run);
				j += run;
			}
		else             /* lg_dot(q, k) by runs of adjacent slots, 4 keys a tile (qdot.h) */
			for (int j = 0; j < n;) {
				int slot = (lo + j) % cap, run = n - j < cap - slot ? n - j : cap - slot, d = 0;
				const float *k0 = kc + (size_t)slot * s->kvd + (size_t)kvh * hd;
				for (int R; d < run; d += R) {
					R = run - d < 4 ? run - d : 4;
					if (!lg_dot_tile(k0 + (size_t)d * s->kvd, s->kvd, R, q, (size_t)hd, 1, hd,
					                 sc + j + d, 1))
						break;
				}
				for (; d < run; d++)
					sc[j + d] = lg_dot(q, k0 + (size_t)d * s->kvd, hd);
				j += run;
			}
		for (int j = 0; j < n; j++) {
			/* BF16 mode: q·k rounded, times the scaling rounded (transformers' eager) */
			sc[j] = s->bf16 ? lg_bf16(lg_bf16(sc[j]) * a->scale) : sc[j] * a->scale;
			if (sc[j] > mx)
				mx = sc[j];
		}
		float sum = 0;
		if (s->bf16) {   /* torch's softmax: SLEEF's exp, reduce_all's 8 lanes, × 1/sum */
			float lane[8] = {0};
			for (int j = 0; j < n; j++)
				sc[j] = sc[j] - mx;
			lg_torch_expf_n(sc, sc, n);
			for (int j = 0; j < n; j++)
				lane[(lo + j) & 7] += sc[j];
			sum = 1.0f / lg_torch_hsum8(lane);
		} else
			for (int j = 0; j < n; j++) {
				sc[j] = expf(sc[j] - mx);
				sum += sc[j];
			}
		float *o = s->att + (size_t)t * s->qd + (size_t)h * hd;
		memset(o, 0, hd * sizeof *o);
		if (s->bf16) {
			/* torch's BF16 P·V (BlasKernel.cpp gemm_notrans_ through sum()): per
			 * output 4 F32 partial sums, key position l into partial l mod 4,
			 * then added in order; each probability rounded to BF16 first. (torch
			 * puts the last K mod 4 keys of its K-key rows into partial 0; only
			 * the last queries see them, and at 130, 253-255 tokens no observed
			 * max differed.) */
			float *pp = s->pv + (size_t)worker * 4 * hd;
			memset(pp, 0, 4 * hd * sizeof *pp);
			for (int j = 0; j < n; j++) {
				int slot = (lo + j) % cap;
				lg_axpy(pp + (size_t)((lo + j) & 3) * hd, lg_bf16(sc[j] * sum),
				        vc + (size_t)slot * s->kvd + (size_t)kvh * hd, hd);
			}
			for (int d = 0; d < hd; d++)
				o[d] = lg_bf16(((pp[d] + pp[hd + d]) + pp[2 * hd + d]) + pp[3 * hd + d]);
			continue;
		}
		for (int j = 0; j < n; j++)
			sc[j] = sc[j] / sum;
		for (int j = 0; j < n;) {   /* lg_axpy a key at a time, o in registers over a run */
			int slot = (lo + j) % cap, run = n - j < cap - slot ? n - j : cap - slot;
			const float *v0 = vc + (size_t)slot * s->kvd + (size_t)kvh * hd;
			if (!lg_axpy_rows(o, sc + j, v0, s->kvd, run, hd))
				for (int d = 0; d < run; d++)
					lg_axpy(o, sc[j + d], v0 + (size_t)d * s->kvd, hd);
			j += run;
		}
	}
}

/* The fast mode's: one (token, KV head, a->gh query heads of it) per item,
 * the heads of an item reading each key and value once. */
static void fattn_items(void *vctx, size_t b, size_t e, int worker)
{
	struct attn_ctx *a = vctx;
	struct lg_state *s = a->s;
	const struct lg_config *c = &s->m->cfg;
	int hd = c->head_dim, nkv = c->n_kv_heads, rep = a->nh / nkv, cap = s->cap[a->layer];
	int sliding = s->m->layers[a->layer].type == LG_SLIDING, per = rep / a->gh;
	for (size_t it = b; it < e; it++) {
		int t = (int)(it / ((size_t)nkv * per)), kvh = (int)(it / per % nkv), g = (int)(it % per);
		int p = s->pos + t, lo = sliding && p - c->sliding_window + 1 > 0 ? p - c->sliding_window + 1 : 0;
		size_t qo = (size_t)t * s->qd + ((size_t)kvh * rep + (size_t)g * a->gh) * hd;
		struct lg_fattn f = {.q = s->q + qo, .o = s->att + qo, .kc = s->kc[a->layer],
		                     .vc = s->vc[a->layer], .kvd = s->kvd, .kvh = kvh, .hd = hd,
		                     .rep = a->gh, .cap = cap, .lo = lo, .n = p - lo + 1, .scale = a->scale,
		                     .sc = s->scores + (size_t)worker * LG_FATTN_HEADS * s->max_cap};
		lg_fast_attn(&f);
	}
}

static void attention(struct lg_state *s, int li, int T)
{
	const struct lg_config *c = &s->m->cfg;
	const struct lg_layer *L = &s->m->layers[li];
	int H = c->hidden, hd = c->head_dim, nh = L->n_heads, nkv = c->n_kv_heads;
	for (int t = 0; t < T; t++)
		norm(s, s->xn + (size_t)t * H, s->x + (size_t)t * H, L->attn_norm, H, c->eps);
	OBS(s, s->xn, H, T, H, LG_OBS_Q, LG_OBS_K, LG_OBS_V, LG_OBS_G);
	int n = 0;
	s->mm[n++] = mm(&L->q, s->xn, H, s->q, s->qd, T);
	s->mm[n++] = mm(&L->k, s->xn, H, s->k, s->kvd, T);
	s->mm[n++] = mm(&L->v, s->xn, H, s->v, s->kvd, T);
	if (c->gate != LG_GATE_NONE)
		s->mm[n++] = mm(&L->g, s->xn, H, s->g, s->qd, T);
	matmul(s, n);

	/* QK-norm per head (when the family has it), RoPE, and the batch's keys/values into the cache */
	const struct lg_rope *r = &c->rope[L->type];
	int cap = s->cap[li];
	for (int t = 0; t < T; t++) {
		const float *cs = s->cosb + ((size_t)L->type * s->B + t) * LG_ROPE_MAX;
		const float *sn = s->sinb + ((size_t)L->type * s->B + t) * LG_ROPE_MAX;
		for (int h = 0; h < nh; h++) {
			float *q = s->q + (size_t)t * s->qd + (size_t)h * hd;
			if (L->q_norm)
				norm(s, q, q, L->q_norm, hd, c->eps);
			rope(s, q, cs, sn, r->rot_dim);
		}
		int slot = (s->pos + t) % cap;
		for (int h = 0; h < nkv; h++) {
			float *k = s->k + (size_t)t * s->kvd + (size_t)h * hd;
			if (L->k_norm)
				norm(s, k, k, L->k_norm, hd, c->eps);
			rope(s, k, cs, sn, r->rot_dim);
		}
		memcpy(s->kc[li] + (size_t)slot * s->kvd, s->k + (size_t)t * s->kvd, s->kvd * sizeof(float));
		memcpy(s->vc[li] + (size_t)slot * s->kvd, s->v + (size_t)t * s->kvd, s->kvd * sizeof(float));
	}

	struct attn_ctx a = {.s = s, .layer = li, .T = T, .nh = nh, .scale = (float)(1.0 / sqrt(hd))};
	double keys = L->type == LG_SLIDING && c->sliding_window < s->pos + T ? c->sliding_window
	                                                                     : s->pos + T;
	if (s->fast && !s->bf16 && lg_fast_attn_takes(hd)) {
		/* fastattn.h: a KV head's query heads together, unless that leaves
		 * fewer than 4 items a thread (decode): then one head an item, as the
		 * oracle, so that no thread waits on another's second KV head */
		a.gh = (size_t)T * nkv >= 4 * (size_t)rq_pool_size(s->pool) ? nh / nkv : 1;
		size_t grain = (size_t)(16384 / (keys * hd * 2 * a.gh + 1)) + 1;
		rq_pool_for(s->pool, (size_t)T * nh / a.gh, grain, fattn_items, &a);
	} else {
		size_t grain = (size_t)(16384 / (keys * hd * 2 + 1)) + 1;
		rq_pool_for(s->pool, (size_t)T * nh, grain, attn_items, &a);
	}

	/* output gate: softplus, one per head or one per channel */
	for (int t = 0; c->gate != LG_GATE_NONE && t < T; t++) {
		float *o = s->att + (size_t)t * s->qd;
		const float *g = s->g + (size_t)t * s->qd;
		for (int h = 0; h < nh; h++)
			for (int d = 0; d < hd; d++) {
				float gv = lg_softplus(c->gate == LG_GATE_PER_HEAD ? g[h] : g[h * hd + d]);
				o[h * hd + d] = rd(s, o[h * hd + d] * rd(s, gv));
			}
	}
	OBS(s, s->att, s->qd, T, nh * hd, LG_OBS_O);
	s->mm[0] = mm(&L->o, s->att, s->qd, s->y, H, T);
	matmul(s, 1);
	add(s, s->x, s->y, (size_t)T * H);
}

/* ---------------------------------------------------------------- MLP / MoE */

static void dense_mlp(struct lg_state *s, const struct lg_layer *L, int T)
{
	int H = s->m->cfg.hidden, I = s->m->cfg.inter;
	OBS(s, s->xn, H, T, H, LG_OBS_GATE, LG_OBS_UP);
	s->mm[0] = mm(&L->gate, s->xn, H, s->h1, s->fd, T);
	s->mm[1] = mm(&L->up, s->xn, H, s->h2, s->fd, T);
	matmul(s, 2);
	swiglu(s, s->h1, s->fd, s->h1, s->fd, s->h2, s->fd, T, I);
	OBS(s, s->h1, s->fd, T, I, LG_OBS_DOWN);
	s->mm[0] = mm(&L->down, s->h1, s->fd, s->y, H, T);
	matmul(s, 1);
}

/* --all-experts: every token of the batch through every routed expert, for
 * the observer only (y is already made from the top-k). K experts at a time
 * in ge/ue, which hold B·K rows and are free once y is made. */
static void all_experts_obs(struct lg_state *s, const struct lg_layer *L, int T)
{
	const struct lg_config *c = &s->m->cfg;
	int H = c->hidden, E = c->n_experts, K = c->top_k, I = c->moe_inter;
	for (int e0 = 0; e0 < E; e0 += K) {
		int ne = E - e0 < K ? E - e0 : K, n = 0;
		for (int j = 0; j < ne; j++) {
			OBS(s, s->xn, H, T, H, LG_OBS_FIXED + 3 * (e0 + j), LG_OBS_FIXED + 3 * (e0 + j) + 1);
			s->mm[n++] = mm(&L->eg[e0 + j], s->xn, H, s->ge + (size_t)j * T * I, I, T);
			s->mm[n++] = mm(&L->eu[e0 + j], s->xn, H, s->ue + (size_t)j * T * I, I, T);
		}
		matmul(s, n);
		for (int j = 0; j < ne; j++) {
			float *g = s->ge + (size_t)j * T * I;
			swiglu(s, g, I, g, I, s->ue + (size_t)j * T * I, I, T, I);
			OBS(s, g, I, T, I, LG_OBS_FIXED + 3 * (e0 + j) + 2);
		}
	}
}

static void moe(struct lg_state *s, const struct lg_layer *L, int T)
{
	const struct lg_config *c = &s->m->cfg;
	int H = c->hidden, E = c->n_experts, K = c->top_k, I = c->moe_inter, S = c->shared_inter;
	int n = 0;
	s->mm[n++] = mm(&L->router, s->xn, H, s->rl, E, T);
	int sgate = S > 0 && c->arch->shared_gate;
	if (S > 0) {
		s->mm[n++] = mm(&L->sg, s->xn, H, s->h1, s->fd, T);
		s->mm[n++] = mm(&L->su, s->xn, H, s->h2, s->fd, T);
	}
	if (sgate)
		s->mm[n++] = mm(&L->sgate, s->xn, H, s->sgl, 1, T);
	if (S > 0)
		OBS(s, s->xn, H, T, H, LG_OBS_SG, LG_OBS_SU, LG_OBS_SGATE);
	matmul(s, n);

	/* routing. sigmoid: scores, top-k by score + correction bias (the bias
	 * only picks; ties to the lower index): the kernels' twin, the same rule
	 * the CUDA engine runs. softmax: transformers' top-k router (the twin of
	 * ek_route_softmax). */
	if (c->arch->router == LG_ROUTER_SIGMOID)
		ek_route_cpu(s->rl, E, L->bias, E, K, c->norm_topk, c->router_softcap, s->tsel, s->tw, T);
	else
		ek_route_softmax_cpu(s->rl, E, E, K, c->norm_topk, s->tsel, s->tw, T);
	for (int i = 0; i < T * K; i++)   /* F32 routing, the weights then in the model's dtype */
		s->tw[i] = rd(s, s->tw[i]);
	memset(s->cnt, 0, (E + 1) * sizeof *s->cnt);
	for (int i = 0; i < T * K; i++)
		s->cnt[s->tsel[i] + 1]++;
	/* slots grouped by expert (ascending), tokens ascending within one */
	for (int e = 0; e < E; e++)
		s->cnt[e + 1] += s->cnt[e];
	int fill[E];
	memset(fill, 0, sizeof fill);
	for (int t = 0; t < T; t++)
		for (int j = 0; j < K; j++) {
			int e = s->tsel[t * K + j], slot = s->cnt[e] + fill[e]++;
			s->slot_tok[slot] = t;
			s->slot_w[slot] = s->tw[t * K + j];
		}
	for (int i = 0; i < T * K; i++)
		memcpy(s->xe + (size_t)i * H, s->xn + (size_t)s->slot_tok[i] * H, H * sizeof(float));

	/* experts' gate and up, then down (with the shared expert's down) */
	int routed_obs = !s->obs || !s->obs->all_experts;   /* else all_experts_obs() observes */
	n = 0;
	for (int e = 0; e < E; e++) {
		int o = s->cnt[e], cnt = s->cnt[e + 1] - o;
		if (!cnt)
			continue;
		if (routed_obs)
			OBS(s, s->xe + (size_t)o * H, H, cnt, H, LG_OBS_FIXED + 3 * e, LG_OBS_FIXED + 3 * e + 1);
		s->mm[n++] = mm(&L->eg[e], s->xe + (size_t)o * H, H, s->ge + (size_t)o * I, I, cnt);
		s->mm[n++] = mm(&L->eu[e], s->xe + (size_t)o * H, H, s->ue + (size_t)o * I, I, cnt);
	}
	matmul(s, n);
	swiglu(s, s->ge, I, s->ge, I, s->ue, I, T * K, I);
	if (S > 0) {
		swiglu(s, s->h1, s->fd, s->h1, s->fd, s->h2, s->fd, T, S);
		OBS(s, s->h1, s->fd, T, S, LG_OBS_SD);
	}
	n = 0;
	for (int e = 0; e < E; e++) {
		int o = s->cnt[e], cnt = s->cnt[e + 1] - o;
		if (cnt && routed_obs)
			OBS(s, s->ge + (size_t)o * I, I, cnt, I, LG_OBS_FIXED + 3 * e + 2);
		if (cnt)
			s->mm[n++] = mm(&L->ed[e], s->ge + (size_t)o * I, I, s->de + (size_t)o * H, H, cnt);
	}
	if (S > 0)
		s->mm[n++] = mm(&L->sd, s->h1, s->fd, s->ys, H, T);
	matmul(s, n);
	for (int t = 0; sgate && t < T; t++) {   /* σ(gate · h) · shared (qwen2_moe) */
		float g = rd(s, 1.0f / (1.0f + expf(-s->sgl[t])));
		for (int i = 0; i < H; i++)
			s->ys[(size_t)t * H + i] = rd(s, s->ys[(size_t)t * H + i] * g);
	}

	/* y = scale · Σ_e (w · down_e) in expert order + shared (transformers' order) */
	memset(s->y, 0, (size_t)T * H * sizeof(float));
	for (int i = 0; i < T * K; i++) {
		float *y = s->y + (size_t)s->slot_tok[i] * H, w = s->slot_w[i];
		const float *d = s->de + (size_t)i * H;
		if (s->bf16)   /* each weighted output rounded, each add rounded (index_add_) */
			for (int j = 0; j < H; j++)
				y[j] = lg_bf16(y[j] + lg_bf16(d[j] * w));
		else
			lg_axpy(y, w, d, H);
	}
	for (size_t i = 0; i < (size_t)T * H; i++)
		s->y[i] = rd(s, rd(s, s->y[i] * c->routed_scale) + (S > 0 ? s->ys[i] : 0.0f));
	if (!routed_obs)
		all_experts_obs(s, L, T);
}

/* ---------------------------------------------------------------- the model */

static void rope_tables(struct lg_state *s, int T)
{
	const struct lg_config *c = &s->m->cfg;
	for (int ty = 0; ty < 2; ty++) {
		const struct lg_rope *r = &c->rope[ty];
		for (int t = 0; t < T; t++) {
			float p = (float)(s->pos + t);
			float *cs = s->cosb + ((size_t)ty * s->B + t) * LG_ROPE_MAX;
			float *sn = s->sinb + ((size_t)ty * s->B + t) * LG_ROPE_MAX;
			for (int i = 0; i < r->rot_dim / 2; i++) {
				float f = p * r->inv_freq[i];
				cs[i] = rd(s, cosf(f) * r->attn_scale);   /* cos, sin in the model's dtype */
				sn[i] = rd(s, sinf(f) * r->attn_scale);
			}
		}
	}
}

/* One batch of T <= B tokens; logits for its last n_out tokens. */
static void forward_batch(struct lg_state *s, const int *tok, int T, float *logits, int n_out)
{
	const struct lg_model *m = s->m;
	const struct lg_config *c = &m->cfg;
	int H = c->hidden;
	if (m->embed)
		ek_embed_cpu(s->x, m->embed, tok, T, H);
	else   /* a quantized embedding: its rows dequantized like any Linear's */
		for (int t = 0; t < T; t++)
			lg_linear_row(&m->embed_q, tok[t], s->x + (size_t)t * H);
	round_rows(s, s->x, H, T, H);
	rope_tables(s, T);
	for (int li = 0; li < c->n_layers; li++) {
		const struct lg_layer *L = &m->layers[li];
		s->li = li;
		attention(s, li, T);
		for (int t = 0; t < T; t++)
			norm(s, s->xn + (size_t)t * H, s->x + (size_t)t * H, L->mlp_norm, H, c->eps);
		if (L->moe)
			moe(s, L, T);
		else
			dense_mlp(s, L, T);
		add(s, s->x, s->y, (size_t)T * H);
	}
	if (n_out > 0) {
		int t0 = T - n_out;
		for (int t = t0; t < T; t++)
			norm(s, s->xn + (size_t)t * H, s->x + (size_t)t * H, m->final_norm, H, c->eps);
		s->mm[0] = mm(&m->lm_head, s->xn + (size_t)t0 * H, H, logits, c->vocab, n_out);
		matmul(s, 1);
	}
	s->pos += T;
}

int lg_forward(struct lg_state *s, const int *tokens, int n, float *logits, int n_out,
               struct rq_err *err)
{
	const struct lg_config *c = &s->m->cfg;
	if (n < 0 || n_out < 0 || n_out > n || (n_out > 0 && !logits))
		return rq_errf(err, -EINVAL, "lg_forward: bad arguments (n %d, n_out %d)", n, n_out);
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= c->vocab)
			return rq_errf(err, -EINVAL, "token id %d at position %d is outside the vocabulary (%d)",
			               tokens[i], s->pos + i, c->vocab);
	if ((long)s->pos + n > s->max_ctx)
		return rq_errf(err, -ENOSPC, "the sequence would reach %ld tokens; the context holds %d",
		               (long)s->pos + n, s->max_ctx);
	for (int t = 0; t < 2; t++)
		if (c->rope[t].exact_ctx && (long)s->pos + n > c->rope[t].exact_ctx)
			return rq_errf(err, -ENOSPC, "the sequence would reach %ld tokens; rope_type dynamic "
			               "changes its frequencies past max_position_embeddings (%ld), which "
			               "this engine does not follow", (long)s->pos + n, c->rope[t].exact_ctx);
	for (int done = 0; done < n;) {
		int T = n - done < s->B ? n - done : s->B;
		/* logits wanted from this batch: positions in the last n_out of all n */
		int first_out = n - n_out;
		int out_lo = first_out > done ? first_out : done;
		int nb = done + T > out_lo ? done + T - out_lo : 0;
		float *dst = nb ? logits + (size_t)(out_lo - first_out) * c->vocab : NULL;
		forward_batch(s, tokens + done, T, dst, nb);
		done += T;
	}
	return 0;
}
