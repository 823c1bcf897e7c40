/* test_ek_emul.c — the CUDA engine's host code (engine/forward_cuda*.c) on
 * the CPU, against the CPU engine (suite unit).
 *
 * usage: test_ek_emul REQUANTFS
 *
 * This file defines every GPU entry point of kernels/ek.h as a host
 * emulation: "device" memory is host memory, copies are memcpy, and each op
 * runs its CPU twin (kernels/ek_cpu.c) at once, or is recorded while the
 * stream is captured and run again at each launch of the graph (below).
 * Linked before the kernels library, these definitions replace ek_stub.c /
 * the CUDA objects in this one executable. Products (GEMV, GEMM, experts)
 * use the CPU engine's numerics — exact weights, fp32 activations — not the
 * kernels' fp16/BF16 activations, which test_ek_cpu / test_ek_gpu check:
 * here they would only move near-tied router scores of the random tiny
 * models (another expert, a large difference) and hide what this test is
 * for. The BF16 KV cache is the twins', so its case allows a greedy
 * divergence at a near tie. What it checks is everything
 * forward_cuda does around the kernels — the memory plan and upload (fused
 * q|k|v|g, gate|up, router|shared groups and their column offsets, repacked
 * expert sets and their global scales, tied or untied lm_head), KV ring
 * sizes, position and token plumbing through dstep, batch splitting and the
 * logits of the last n_out tokens — on mkckpt's tiny models:
 *   - 32 greedy tokens identical to the CPU engine's, logits within 2e-3 ·
 *     max (NVFP4 GEMV numerics) or 1e-4 (all BF16), F32 KV;
 *   - a 40-token prompt through the GEMM twins with a BF16 KV cache;
 *   - logits of several trailing positions across batch boundaries;
 *   - -ENOSPC past the context, -EINVAL for a bad token, reset;
 *   - decode steps after the capture replay the graph; a capture whose op
 *     or end fails (injected) fails that step, and no graph from it is ever
 *     launched: the decode goes on with the CPU engine's tokens and logits. */
#include "engine/forward.h"
#include "engine/forward_cuda.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "kernels/ek.h"
#include "base/err.h"
#include "tests/tap.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------- the emulation */

/* Stream capture is emulated: between ek_capture_begin and ek_capture_end
 * every op is recorded (its function and a copy of its arguments, pointers
 * included, as a CUDA graph node keeps them) instead of run; ek_graph_run
 * runs the recorded ops in order, reading memory as it is then (hstep, the
 * position in dstep). A synchronisation while capturing invalidates the
 * capture (ek_capture_end fails), as in CUDA.
 *
 * Test hooks (set by the test, read by the emulation):
 *   emul_fail_op: when > 0, the emul_fail_op-th op enqueued during a capture
 *     fails with -EIO and the capture stays valid (like a launch refused
 *     before it reaches the stream); the graph ended from that capture is
 *     marked tainted. Cleared once it fired.
 *   emul_fail_end: when 1, the next ek_capture_end fails with -EIO (an end
 *     capture or instantiate error). Cleared once it fired.
 * Counters: ops of the last capture ended without a failure, graphs instantiated, graph launches, and launches of a tainted
 * graph (a graph from a failed capture: must stay 0). */
static int emul_fail_op, emul_fail_end;
static int emul_graphs, emul_runs, emul_tainted_runs;
static int emul_last_ops;       /* ops of the last capture ended without a failure */

typedef int (*emul_fn)(const void *args);

struct emul_node {
	emul_fn fn;
	void *args;
};

struct ek_dev {
	int capturing;
	int invalid;               /* the capture was invalidated (sync while capturing) */
	int failed;                /* an op failed during this capture */
	int ops;                   /* ops enqueued during this capture */
	struct emul_node *nodes;   /* [n] recorded ops */
	int n, cap;
};
struct ek_graph {
	struct emul_node *nodes;   /* [n] */
	int n;
	int tainted;               /* ended from a capture in which an op failed */
};

static void emul_nodes_free(struct emul_node *nodes, int n)
{
	for (int i = 0; i < n; i++)
		free(nodes[i].args);
	free(nodes);
}

/* Runs the op now, or records it when capturing (the injected fault fires
 * here, before the op is recorded). */
static int emul_op(struct ek_dev *d, emul_fn fn, const void *args, size_t bytes)
{
	if (!d->capturing)
		return fn(args);
	if (emul_fail_op > 0 && ++d->ops == emul_fail_op) {
		emul_fail_op = 0;
		d->failed = 1;
		return -EIO;
	}
	if (d->n == d->cap) {
		int c = d->cap ? 2 * d->cap : 64;
		struct emul_node *nn = realloc(d->nodes, sizeof *nn * c);
		if (!nn)
			return -ENOMEM;
		d->nodes = nn;
		d->cap = c;
	}
	void *a = malloc(bytes);
	if (!a)
		return -ENOMEM;
	memcpy(a, args, bytes);
	d->nodes[d->n++] = (struct emul_node){fn, a};
	return 0;
}

/* Defines an op's runner from a struct of its arguments: RUNNER(name,
 * (struct fields), body using a->field); ENQUEUE(d, name, field values...)
 * runs or records it. */
#define EMUL_FIELDS(...) __VA_ARGS__
#define RUNNER(name, fields, ...) \
	struct a_##name { EMUL_FIELDS fields }; \
	static int r_##name(const void *p) \
	{ \
		const struct a_##name *a = p; \
		__VA_ARGS__ \
	}
#define ENQUEUE(d, name, ...) \
	do { \
		struct a_##name a_ = {__VA_ARGS__}; \
		return emul_op(d, r_##name, &a_, sizeof a_); \
	} while (0)

int ek_compiled(void) { return 1; }
int ek_device_count(void) { return 1; }

int ek_open(int index, struct ek_dev **out, char *msg, size_t msglen)
{
	if (index != 0) {
		snprintf(msg, msglen, "emulation has device 0 only");
		return -ENODEV;
	}
	*out = calloc(1, sizeof **out);
	return *out ? 0 : -ENOMEM;
}

void ek_close(struct ek_dev *d)
{
	if (d)
		emul_nodes_free(d->nodes, d->n);
	free(d);
}
const char *ek_error(const struct ek_dev *d) { return "host emulation"; }

int ek_info(struct ek_dev *d, struct ek_info *o)
{
	memset(o, 0, sizeof *o);
	snprintf(o->name, sizeof o->name, "host emulation");
	o->mem_total = o->mem_free = (size_t)64 << 30;
	o->sms = 1;
	return 0;
}

void *ek_alloc(struct ek_dev *d, size_t bytes) { return calloc(1, bytes ? bytes : 1); }
void ek_free(struct ek_dev *d, void *p) { free(p); }
void *ek_host_alloc(struct ek_dev *d, size_t bytes) { return calloc(1, bytes ? bytes : 1); }
void ek_host_free(struct ek_dev *d, void *p) { free(p); }
RUNNER(copy, (void *dst; const void *src; size_t n;), memmove(a->dst, a->src, a->n); return 0;)
RUNNER(set, (void *p; int byte; size_t n;), memset(a->p, a->byte, a->n); return 0;)
int ek_h2d(struct ek_dev *d, void *dst, const void *src, size_t n) { ENQUEUE(d, copy, dst, src, n); }
int ek_d2h(struct ek_dev *d, void *dst, const void *src, size_t n) { ENQUEUE(d, copy, dst, src, n); }
int ek_d2d(struct ek_dev *d, void *dst, const void *src, size_t n) { ENQUEUE(d, copy, dst, src, n); }
int ek_memset(struct ek_dev *d, void *p, int byte, size_t n) { ENQUEUE(d, set, p, byte, n); }
int ek_sync(struct ek_dev *d)
{
	if (d->capturing) {        /* not allowed while capturing: invalidates it */
		d->invalid = 1;
		return -EIO;
	}
	return 0;
}
int ek_mark(struct ek_dev *d, int s) { return s < 0 || s >= 8 ? -EINVAL : 0; }
int ek_wait_mark(struct ek_dev *d, int s) { return s < 0 || s >= 8 ? -EINVAL : 0; }
int ek_time_begin(struct ek_dev *d) { return 0; }
int ek_time_end(struct ek_dev *d, double *s) { *s = 0; return 0; }
int ek_capture_begin(struct ek_dev *d)
{
	if (d->capturing)
		return -EINVAL;
	d->capturing = 1;
	d->invalid = d->failed = d->ops = 0;
	d->n = 0;
	return 0;
}

int ek_capture_end(struct ek_dev *d, struct ek_graph **out)
{
	if (!d->capturing)
		return -EINVAL;
	d->capturing = 0;
	struct ek_graph *g = NULL;
	int rc = d->invalid || emul_fail_end ? -EIO : (g = calloc(1, sizeof *g)) ? 0 : -ENOMEM;
	emul_fail_end = 0;
	if (rc) {
		emul_nodes_free(d->nodes, d->n);
	} else {
		g->nodes = d->nodes;
		g->n = d->n;
		g->tainted = d->failed;
		emul_graphs++;
		if (!d->failed)
			emul_last_ops = d->n;
		*out = g;
	}
	d->nodes = NULL;
	d->n = d->cap = 0;
	return rc;
}

int ek_graph_run(struct ek_dev *d, struct ek_graph *g)
{
	if (d->capturing)
		return -EINVAL;
	emul_runs++;
	emul_tainted_runs += g->tainted;
	int rc = 0;
	for (int i = 0; i < g->n && !rc; i++)
		rc = g->nodes[i].fn(g->nodes[i].args);
	return rc;
}

void ek_graph_free(struct ek_graph *g)
{
	if (!g)
		return;
	emul_nodes_free(g->nodes, g->n);
	free(g);
}

int ek_copy_bw(struct ek_dev *d, size_t bytes, int reps, double *d2d, double *h2d)
{
	*d2d = *h2d = 1e9;
	return 0;
}

int ek_fill_bf16(struct ek_dev *d, uint16_t *p, size_t n, float amp, uint64_t seed)
{
	ek_fill_bf16_cpu(p, n, amp, seed);
	return 0;
}

int ek_fill_bytes(struct ek_dev *d, uint8_t *p, size_t n, int lo, int hi, uint64_t seed)
{
	ek_fill_bytes_cpu(p, n, lo, hi, seed);
	return 0;
}

int ek_nvfp4_repack(struct ek_dev *d, const uint8_t *packed, const uint8_t *scales, int rows,
                    int cols, uint8_t *out)
{
	ek_nvfp4_repack_cpu(packed, scales, rows, cols, out);
	return 0;
}

/* Products with the CPU engine's numerics (exact weights, fp32 activations):
 * see the header. */
static void exact_mv(const struct ek_w *W, int e, const float *x, int ldx, float *y, int ldy, int T,
                     int acc)
{
	float *row = malloc(sizeof(float) * W->cols);
	for (int r = 0; r < W->rows; r++) {
		ek_w_row_cpu(W, e, r, row);
		for (int t = 0; t < T; t++) {
			float s = 0;
			for (int c = 0; c < W->cols; c++)
				s += row[c] * x[(size_t)t * ldx + c];
			float *o = &y[(size_t)t * ldy + r];
			*o = acc ? *o + s : s;
		}
	}
	free(row);
}

/* the weights' descriptors are copied into the node (the engine's live as
 * long as it does, but a graph node must not depend on that) */
RUNNER(mv, (struct ek_w W; const float *x; int ldx; float *y; int ldy, T, acc;),
       exact_mv(&a->W, 0, a->x, a->ldx, a->y, a->ldy, a->T, a->acc); return 0;)

int ek_gemv(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx, float *y, int ldy,
            int T, int acc)
{
	if (T < 1 || T > EK_GEMV_MAX_T || ldx < W->cols || ldy < W->rows)
		return -EINVAL;
	ENQUEUE(d, mv, *W, x, ldx, y, ldy, T, acc);
}

int ek_gemm(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx, float *y, int ldy,
            int T, int acc)
{
	if (T < 1 || ldx < W->cols || ldy < W->rows)
		return -EINVAL;
	ENQUEUE(d, mv, *W, x, ldx, y, ldy, T, acc);
}

RUNNER(route, (const float *logits; int ldl; const float *bias; int E, k, norm; float softcap;
       int *ids; float *wts; int T;),
       ek_route_cpu(a->logits, a->ldl, a->bias, a->E, a->k, a->norm, a->softcap, a->ids, a->wts,
                    a->T);
       return 0;)

int ek_route(struct ek_dev *d, const float *logits, int ldl, const float *bias, int E, int k,
             int norm, float softcap, int *ids, float *wts, int T)
{
	ENQUEUE(d, route, logits, ldl, bias, E, k, norm, softcap, ids, wts, T);
}

static int moe_now(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
                   const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
                   float *out, int ldo, int T, int acc)
{
	int I = G->rows, H = D->rows;
	float *g = malloc(sizeof(float) * (3 * (size_t)I + H)), *u = g + I, *h = u + I, *dd = h + I;
	for (int t = 0; t < T; t++) {
		float *o = out + (size_t)t * ldo;
		for (int r = 0; !acc && r < H; r++)
			o[r] = 0;
		for (int j = 0; j < k; j++) {
			int e = ids[(size_t)t * k + j];
			exact_mv(G, e, x + (size_t)t * ldx, ldx, g, I, 1, 0);
			exact_mv(U, e, x + (size_t)t * ldx, ldx, u, I, 1, 0);
			ek_swiglu_cpu(h, I, g, I, u, I, 1, I);
			exact_mv(D, e, h, I, dd, H, 1, 0);
			for (int r = 0; r < H; r++)
				o[r] += scale * wts[(size_t)t * k + j] * dd[r];
		}
	}
	free(g);
	return 0;
}

RUNNER(moe, (struct ek_w G, U, D; const int *ids; const float *wts; int k; float scale;
       const float *x; int ldx; float *out; int ldo, T, acc;),
       return moe_now(&a->G, &a->U, &a->D, a->ids, a->wts, a->k, a->scale, a->x, a->ldx, a->out,
                      a->ldo, a->T, a->acc);)

int ek_moe(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
           const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
           float *out, int ldo, int T, int acc, void *work)
{
	if (!work)
		return -EINVAL;
	ENQUEUE(d, moe, *G, *U, *D, ids, wts, k, scale, x, ldx, out, ldo, T, acc);
}

RUNNER(rmsnorm, (float *out; int ldo; const float *x; int ldx; const float *w; int T, n; float eps;),
       ek_rmsnorm_cpu(a->out, a->ldo, a->x, a->ldx, a->w, a->T, a->n, a->eps); return 0;)

int ek_rmsnorm(struct ek_dev *d, float *out, int ldo, const float *x, int ldx, const float *w,
               int T, int n, float eps)
{
	ENQUEUE(d, rmsnorm, out, ldo, x, ldx, w, T, n, eps);
}

RUNNER(swiglu, (float *out; int ldo; const float *g; int ldg; const float *u; int ldu, T, n;),
       ek_swiglu_cpu(a->out, a->ldo, a->g, a->ldg, a->u, a->ldu, a->T, a->n); return 0;)

int ek_swiglu(struct ek_dev *d, float *out, int ldo, const float *g, int ldg, const float *u,
              int ldu, int T, int n)
{
	ENQUEUE(d, swiglu, out, ldo, g, ldg, u, ldu, T, n);
}

RUNNER(add, (float *x; const float *y; size_t n;), ek_add_cpu(a->x, a->y, a->n); return 0;)

int ek_add(struct ek_dev *d, float *x, const float *y, size_t n) { ENQUEUE(d, add, x, y, n); }

RUNNER(embed, (float *x; const uint16_t *table; const int *tokens; int T, hidden;),
       ek_embed_cpu(a->x, a->table, a->tokens, a->T, a->hidden); return 0;)

int ek_embed(struct ek_dev *d, float *x, const uint16_t *table, const int *tokens, int T, int hidden)
{
	ENQUEUE(d, embed, x, table, tokens, T, hidden);
}

RUNNER(rope, (float *q; int ldq; float *k; int ldk; const float *v; int ldv, T, nh, nkv, hd;
       const float *qn, *kn; float eps; const float *inv_freq; int rot; float attn_scale;
       const int *pos; void *kc, *vc; int kvtype, cap;),
       ek_qk_rope_kv_cpu(a->q, a->ldq, a->k, a->ldk, a->v, a->ldv, a->T, a->nh, a->nkv, a->hd,
                         a->qn, a->kn, a->eps, a->inv_freq, a->rot, a->attn_scale, a->pos, a->kc,
                         a->vc, a->kvtype, a->cap);
       return 0;)

int ek_qk_rope_kv(struct ek_dev *d, float *q, int ldq, float *k, int ldk, const float *v, int ldv,
                  int T, int nh, int nkv, int hd, const float *qn, const float *kn, float eps,
                  const float *inv_freq, int rot, float attn_scale, const int *pos, void *kc,
                  void *vc, int kvtype, int cap)
{
	ENQUEUE(d, rope, q, ldq, k, ldk, v, ldv, T, nh, nkv, hd, qn, kn, eps, inv_freq, rot,
	        attn_scale, pos, kc, vc, kvtype, cap);
}

/* the position is read when the op runs (a replayed graph sees the new one) */
RUNNER(attn, (float *out; int ldo; const float *q; int ldq; const float *g; int ldg, gate, T, nh,
       nkv, hd; const void *kc, *vc; int kvtype, cap; const int *pos; int window, max_keys;
       void *work;),
       /* the engine must give the cache room for every key of the batch, and
        * max_keys must cover the most keys a token sees */
       int p0 = *a->pos, pl = p0 + a->T - 1, w = a->window;
       int lo0 = w > 0 && p0 - w + 1 > 0 ? p0 - w + 1 : 0;
       int lol = w > 0 && pl - w + 1 > 0 ? pl - w + 1 : 0;
       if (pl - lo0 + 1 > a->cap || pl - lol + 1 > a->max_keys)
	       return -EINVAL;
       return ek_attn_cpu(a->out, a->ldo, a->q, a->ldq, a->g, a->ldg, a->gate, a->T, a->nh, a->nkv,
                          a->hd, a->kc, a->vc, a->kvtype, a->cap, a->pos, a->window, a->max_keys,
                          a->work);)

int ek_attn(struct ek_dev *d, float *out, int ldo, const float *q, int ldq, const float *g,
            int ldg, int gate, int T, int nh, int nkv, int hd, const void *kc, const void *vc,
            int kvtype, int cap, const int *pos, int window, int max_keys, void *work)
{
	ENQUEUE(d, attn, out, ldo, q, ldq, g, ldg, gate, T, nh, nkv, hd, kc, vc, kvtype, cap, pos,
	        window, max_keys, work);
}

/* ------------------------------------------------------------- the test */

#define NGEN 32

static int greedy(const struct lg_model *m, struct lg_state *s, struct lgc *g, const int *p,
                  int n, int *out, float *logits)
{
	struct rq_err err = {0};
	int V = m->cfg.vocab;
	int rc = s ? lg_forward(s, p, n, logits, 1, &err) : lgc_forward(g, p, n, logits, 1, &err);
	for (int i = 0; i < NGEN && !rc; i++) {
		out[i] = lg_argmax(logits + (size_t)i * V, V);
		float *l = logits + (size_t)(i + 1) * V;
		rc = s ? lg_forward(s, &out[i], 1, l, 1, &err) : lgc_forward(g, &out[i], 1, l, 1, &err);
	}
	if (rc)
		printf("# %s: %s\n", s ? "cpu" : "emulated gpu", err.msg);
	return rc;
}

static double worst_rel(const float *a, const float *b, int rows, int V)
{
	double w = 0;
	for (int r = 0; r < rows; r++) {
		double mx = 0, d = 0;
		for (int i = 0; i < V; i++) {
			mx = fmax(mx, fabs(b[(size_t)r * V + i]));
			d = fmax(d, fabs(a[(size_t)r * V + i] - b[(size_t)r * V + i]));
		}
		w = fmax(w, d / fmax(mx, 1e-20));
	}
	return w;
}

static void run_case(const struct lg_model *m, const char *name, int n, const char *kv, int gemv,
                     int batch, double tol)
{
	int V = m->cfg.vocab, p[64], tc[NGEN], tg[NGEN];
	for (int i = 0; i < n; i++)
		p[i] = (i * 37 + 11) % V;
	float *lc = malloc(sizeof(float) * (NGEN + 1) * V), *lg = malloc(sizeof(float) * (NGEN + 1) * V);
	struct lg_state *s = NULL;
	struct lgc *g = NULL;
	struct rq_err err = {0};
	struct lgc_opts o = {.max_ctx = n + NGEN + 1, .kv = kv, .gemv_prefill = gemv, .max_batch = batch};
	int rc = lg_state_create(m, n + NGEN + 1, 64, NULL, &s, &err);
	if (!rc)
		rc = greedy(m, s, NULL, p, n, tc, lc);
	if (!rc && (rc = lgc_create(m, &o, &g, &err)))
		printf("# lgc_create: %s\n", err.msg);
	emul_runs = emul_tainted_runs = 0;
	if (!rc)
		rc = greedy(m, NULL, g, p, n, tg, lg);
	int runs = emul_runs;
	int same = 0;
	while (!rc && same < NGEN && tg[same] == tc[same])
		same++;
	/* logits compared while both decode the same sequence (through the step
	 * that picked differently); a different pick must be a near tie there */
	double w = rc ? 1 : worst_rel(lg, lc, same + 1, V), gap = 0, mx = 0;
	if (!rc && same < NGEN) {
		const float *l = lc + (size_t)same * V;
		for (int i = 0; i < V; i++)
			mx = fmax(mx, fabs(l[i]));
		gap = (l[tc[same]] - l[tg[same]]) / mx;
	}
	int need_all = !strcmp(kv, "f32");
	/* NGEN decode steps: WARM (2) direct ones, then the capture step (which
	 * launches its graph at once) and every later step replay the graph */
	TAP_OK(!rc && w <= tol && (same == NGEN || (!need_all && gap <= 2 * tol)) &&
	       runs == NGEN - 2 && !emul_tainted_runs,
	       "%s, %d-token prompt, %s KV, %s, batch %d: %d/%d greedy tokens == CPU engine%s, logits "
	       "within %.0e x max until then (worst %.2e), %d graph launches", name, n, kv,
	       gemv ? "GEMV only" : "GEMM prefill", batch, same, NGEN,
	       same < NGEN ? " (then a near tie)" : "", tol, w, runs);
	if (same < NGEN)
		printf("#   at step %d the CPU's pick leads the GPU's by %.2e x max|logit|\n", same, gap);
	lgc_free(g);
	lg_state_free(s);
	free(lc);
	free(lg);
}

/* A decode whose capture step fails (fail_op > 0: the fail_op-th op of the
 * capture fails and the capture stays valid; -1: its last op, the copy of
 * the logits, as counted in the last capture; 0: the end of the capture
 * fails): that lgc_forward returns the error and leaves the position; the
 * step repeated and the rest of the decode give the CPU engine's tokens and
 * logits, and no graph from the failed capture is ever launched. */
static void run_capture_fault(const struct lg_model *m, const char *name, int fail_op, double tol)
{
	if (fail_op < 0)
		fail_op = emul_last_ops;
	int V = m->cfg.vocab, n = 12, p[12], tc[NGEN], tg[NGEN];
	for (int i = 0; i < n; i++)
		p[i] = (i * 37 + 11) % V;
	float *lc = malloc(sizeof(float) * (NGEN + 1) * V), *lg = malloc(sizeof(float) * (NGEN + 1) * V);
	struct lg_state *s = NULL;
	struct lgc *g = NULL;
	struct rq_err err = {0};
	struct lgc_opts o = {.max_ctx = n + NGEN + 1, .kv = "f32", .gemv_prefill = 1, .max_batch = 256};
	int rc = lg_state_create(m, n + NGEN + 1, 64, NULL, &s, &err);
	if (!rc)
		rc = greedy(m, s, NULL, p, n, tc, lc);
	if (!rc && (rc = lgc_create(m, &o, &g, &err)))
		printf("# lgc_create: %s\n", err.msg);
	if (!rc)
		rc = lgc_forward(g, p, n, lg, 1, &err);
	emul_graphs = emul_runs = emul_tainted_runs = 0;
	emul_fail_op = fail_op;
	emul_fail_end = !fail_op;
	int fails = 0, fail_kept_pos = 1;
	for (int i = 0; i < NGEN && !rc; i++) {
		tg[i] = lg_argmax(lg + (size_t)i * V, V);
		int pos = lgc_pos(g);
		rc = lgc_forward(g, &tg[i], 1, lg + (size_t)(i + 1) * V, 1, &err);
		if (rc && fails++ == 0) {  /* the failed capture: repeat the step once */
			printf("# step %d failed as injected: %s\n", i, err.msg);
			fail_kept_pos = lgc_pos(g) == pos;
			rc = lgc_forward(g, &tg[i], 1, lg + (size_t)(i + 1) * V, 1, &err);
		}
		if (rc)
			printf("# emulated gpu, step %d: %s\n", i, err.msg);
	}
	int same = 0;
	while (!rc && same < NGEN && tg[same] == tc[same])
		same++;
	double w = rc ? 1 : worst_rel(lg, lc, NGEN + 1, V);
	TAP_OK(!rc && fails == 1 && fail_kept_pos && !emul_fail_op && !emul_fail_end &&
	       emul_tainted_runs == 0 && same == NGEN && w <= tol,
	       "%s: capture failing at %s%.0d: the step fails (%d failure%s, position %s), then %d/%d "
	       "greedy tokens == CPU engine, logits within %.0e x max (worst %.2e); graphs: %d "
	       "instantiated, %d launched, %d launches of a graph from the failed capture", name,
	       fail_op ? "op " : "its end", fail_op, fails, fails == 1 ? "" : "s",
	       fail_kept_pos ? "kept" : "moved", same, NGEN, tol, w, emul_graphs, emul_runs,
	       emul_tainted_runs);
	emul_fail_op = emul_fail_end = 0;
	lgc_free(g);
	lg_state_free(s);
	free(lc);
	free(lg);
}

/* logits of the last n_out positions of a prompt split over batches */
static void run_tail(const struct lg_model *m, const char *name, double tol)
{
	int V = m->cfg.vocab, n = 37, n_out = 21, p[37];
	for (int i = 0; i < n; i++)
		p[i] = (i * 53 + 5) % V;
	float *lc = malloc(sizeof(float) * n_out * V), *lg = malloc(sizeof(float) * n_out * V);
	struct lg_state *s = NULL;
	struct lgc *g = NULL;
	struct rq_err err = {0};
	struct lgc_opts o = {.max_ctx = 40, .kv = "f32", .max_batch = 20};
	int rc = lg_state_create(m, 40, 64, NULL, &s, &err) || lg_forward(s, p, n, lc, n_out, &err) ||
	         lgc_create(m, &o, &g, &err) || lgc_forward(g, p, n, lg, n_out, &err);
	double w = rc ? 1 : worst_rel(lg, lc, n_out, V);
	TAP_OK(!rc && w <= tol, "%s: logits of the last %d of %d positions over batches of 20 "
	       "and 17 within %.0e x max (worst %.2e)%s%s", name, n_out, n, tol, w,
	       rc ? ": " : "", rc ? err.msg : "");
	if (!rc) {
		int one = 1;
		rc = lgc_forward(g, p, 4, NULL, 0, &err);
		TAP_OK(rc == -ENOSPC, "%s: past the context: -ENOSPC (%s)", name, err.msg);
		lgc_reset(g);
		int bad = V;
		rc = lgc_forward(g, &bad, 1, lg, 1, &err);
		TAP_OK(rc == -EINVAL && lgc_pos(g) == 0, "%s: token %d refused (%s)", name, bad, err.msg);
		rc = lgc_forward(g, &one, 1, lg, 1, &err);
		TAP_OK(rc == 0 && lgc_pos(g) == 1, "%s: after reset, position 1", name);
	}
	lgc_free(g);
	lg_state_free(s);
	free(lc);
	free(lg);
}

static void check_model(const char *rq, const char *dir, const char *flags, const char *name,
                        double tol)
{
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "'%s' mkckpt '%s' %s >/dev/null", rq, dir, flags);
	if (system(cmd)) {
		TAP_OK(0, "%s: mkckpt failed (%s)", name, cmd);
		return;
	}
	struct rq_err err = {0};
	struct lg_model *m;
	if (lg_model_open(dir, &m, &err)) {
		TAP_OK(0, "%s: %s", name, err.msg);
		return;
	}
	run_case(m, name, 12, "f32", 1, 256, tol);
	run_case(m, name, 12, "f32", 1, 5, tol);
	run_case(m, name, 40, "f32", 0, 256, tol);
	run_case(m, name, 12, "bf16", 1, 5, 2e-2);
	run_tail(m, name, tol);
	run_capture_fault(m, name, 1, tol);
	run_capture_fault(m, name, 5, tol);
	run_capture_fault(m, name, -1, tol);
	run_capture_fault(m, name, 0, tol);
	lg_model_close(m);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_ek_emul REQUANTFS\n");
		return 2;
	}
	char tmp[] = "/tmp/rq-test-ek-emul-XXXXXX", dir[600], cmd[700];
	if (!mkdtemp(tmp))
		TAP_SKIP_ALL("cannot create a temporary directory");
	snprintf(dir, sizeof dir, "%s/nvfp4", tmp);
	check_model(argv[1], dir, "--layers 8 --bf16-layers 6-7", "tiny nvfp4", 1e-4);
	snprintf(dir, sizeof dir, "%s/dense", tmp);
	check_model(argv[1], dir, "--layers 6 --dense", "tiny bf16", 1e-4);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
	if (system(cmd))
		printf("# could not remove %s\n", tmp);
	return tap_done();
}
