/* ek_emul.c — kernels/ek.h's GPU entry points emulated on the host (what
 * and why: ek_emul.h). Linked before the kernels library, these definitions
 * replace ek_stub.c / the CUDA objects in the executable. */
#include "tests/kernels/ek_emul.h"
#include "kernels/ek.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* ------------------------------------------------------- the emulation */

/* Stream capture is emulated: between ek_capture_begin and ek_capture_end
 * every op is recorded (its function and a copy of its arguments, pointers
 * included, as a CUDA graph node keeps them) instead of run; ek_graph_run
 * runs the recorded ops in order, reading memory as it is then (hstep, the
 * position in dstep). A synchronisation while capturing invalidates the
 * capture (ek_capture_end fails), as in CUDA.
 *
 * Hooks and counters: ek_emul.h. */
int emul_fail_op, emul_fail_end;
int emul_graphs, emul_runs, emul_tainted_runs;
int emul_last_ops;         /* ops of the last capture ended without a failure */
int emul_last_kernels;     /* ... of which kernels (not copies or memsets) */
static unsigned long long emul_launches_all;   /* kernels run or recorded, every device */
struct ek_dev *emul_last_dev;                  /* the device ek_open handed out last */
long emul_actq_calls, emul_moe_q_calls; /* input quantizations enqueued (W4A4 models) */
long emul_obs_calls;      /* observer reductions enqueued */
long emul_moe_a8_calls;   /* FP8-input expert calls enqueued */

typedef int (*emul_fn)(const void *args);

struct emul_node {
	emul_fn fn;
	void *args;
};

struct ek_dev {
	int pdl;                   /* ek_pdl's mode: 2 (launches and graphs) unless EK_PDL=0 */
	int cap_pdl;               /* the capture under way records PDL launches */
	int kernels;               /* kernels enqueued during this capture */
	unsigned long long launches;
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
static int r_copy(const void *p);
static int r_set(const void *p);

static int emul_op(struct ek_dev *d, emul_fn fn, const void *args, size_t bytes)
{
	int kernel = fn != r_copy && fn != r_set;
	if (kernel) {
		d->launches++;
		emul_launches_all++;
	}
	if (!d->capturing)
		return fn(args);
	d->kernels += kernel;
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
	if (!*out)
		return -ENOMEM;
	const char *e = getenv("EK_PDL");
	(*out)->pdl = e && !strcmp(e, "0") ? 0 : 2;
	emul_last_dev = *out;
	return 0;
}

int ek_pdl(const struct ek_dev *d) { return d ? d->pdl : 0; }
const char *ek_pdl_status(const struct ek_dev *d) { return d && d->pdl ? "on" : "off"; }
unsigned long long ek_launches(const struct ek_dev *d) { return d ? d->launches : emul_launches_all; }

int ek_set_pdl(struct ek_dev *d, int mode)
{
	if (mode < 0 || mode > 2)
		return -EINVAL;
	d->pdl = mode;
	return 0;
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
	d->cap_pdl = d->pdl == 2;
	d->invalid = d->failed = d->ops = d->kernels = 0;
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
		if (d->cap_pdl && d->pdl == 2)   /* as ek_rt.cu: no PDL in later captures */
			d->pdl = 1;
	} else {
		g->nodes = d->nodes;
		g->n = d->n;
		g->tainted = d->failed;
		emul_graphs++;
		if (!d->failed) {
			emul_last_ops = d->n;
			emul_last_kernels = d->kernels;
		}
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

int ek_wq_repack(struct ek_dev *d, int kind, const uint8_t *codes, size_t ldc,
                 const void *scales, int sdtype, int srb, int rows, int cols, int gshift,
                 uint8_t *out)
{
	return ek_wq_repack_cpu(kind, codes, ldc, scales, sdtype, srb, rows, cols, gshift, out);
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

/* the fused op: the RMSNorm twin's values (into xn when given), then the
 * product on them, as ek_gemv_norm computes them */
RUNNER(mvnorm, (struct ek_w W; const float *x; int ldx; const float *nw; float eps; float *xn;
       int ldxn; float *y; int ldy, T, acc;),
       float *t = a->xn ? a->xn : malloc(sizeof(float) * (size_t)a->T * a->W.cols);
       int ld = a->xn ? a->ldxn : a->W.cols;
       if (!t)
	       return -ENOMEM;
       ek_rmsnorm_cpu(t, ld, a->x, a->ldx, a->nw, a->T, a->W.cols, a->eps);
       exact_mv(&a->W, 0, t, ld, a->y, a->ldy, a->T, a->acc);
       if (!a->xn)
	       free(t);
       return 0;)

int ek_gemv_norm(struct ek_dev *d, const struct ek_w *W, const float *x, int ldx,
                 const float *nw, float eps, float *xn, int ldxn, float *y, int ldy, int T,
                 int acc)
{
	if (T < 1 || T > EK_GEMV_NORM_MAX_T || ldx < W->cols || ldy < W->rows || !nw ||
	    (xn && ldxn < W->cols) || (xn && xn == x))
		return -EINVAL;
	ENQUEUE(d, mvnorm, *W, x, ldx, nw, eps, xn, ldxn, y, ldy, T, acc);
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

RUNNER(route_sm, (const float *logits; int ldl; int E, k, norm; int *ids; float *wts; int T;),
       ek_route_softmax_cpu(a->logits, a->ldl, a->E, a->k, a->norm, a->ids, a->wts, a->T);
       return 0;)

int ek_route_softmax(struct ek_dev *d, const float *logits, int ldl, int E, int k, int norm,
                     int *ids, float *wts, int T)
{
	ENQUEUE(d, route_sm, logits, ldl, E, k, norm, ids, wts, T);
}

RUNNER(bias, (float *y; int ldy; const float *b; int T, n;),
       ek_bias_cpu(a->y, a->ldy, a->b, a->T, a->n); return 0;)

int ek_bias(struct ek_dev *d, float *y, int ldy, const float *b, int T, int n)
{
	ENQUEUE(d, bias, y, ldy, b, T, n);
}

RUNNER(sigscale, (float *h; int ldh; const float *g; int ldg, T, n;),
       ek_sigmoid_scale_cpu(a->h, a->ldh, a->g, a->ldg, a->T, a->n); return 0;)

int ek_sigmoid_scale(struct ek_dev *d, float *h, int ldh, const float *g, int ldg, int T, int n)
{
	ENQUEUE(d, sigscale, h, ldh, g, ldg, T, n);
}

/* gs_gu / gs_dn (ek_moe_q): each expert's inputs quantized first, NULL: none;
 * a8 (ek_moe_a8): FP8 per token instead */
static int moe_now(const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
                   const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
                   float *out, int ldo, int T, int acc, const float *gs_gu, const float *gs_dn,
                   float *obs_dn, int obs_stride, int a8)
{
	int I = G->rows, H = D->rows;
	float *g = malloc(sizeof(float) * (3 * (size_t)I + 2 * (size_t)H)), *u = g + I, *h = u + I,
	      *dd = h + I, *xq = dd + H;
	for (int t = 0; t < T; t++) {
		float *o = out + (size_t)t * ldo;
		for (int r = 0; !acc && r < H; r++)
			o[r] = 0;
		for (int j = 0; j < k; j++) {
			int e = ids[(size_t)t * k + j];
			const float *xt = x + (size_t)t * ldx;
			if (gs_gu) {
				ek_actq_nvfp4_cpu(xt, ldx, xq, H, 1, H, gs_gu[e]);
				xt = xq;
			} else if (a8) {
				ek_actq_fp8_cpu(xt, ldx, xq, H, 1, H);
				xt = xq;
			}
			exact_mv(G, e, xt, ldx, g, I, 1, 0);
			exact_mv(U, e, xt, ldx, u, I, 1, 0);
			ek_swiglu_cpu(h, I, g, I, u, I, 1, I);
			if (obs_dn)
				ek_obs_rows_cpu(h, I, NULL, 1, 1, I, &e, G->n, obs_dn, NULL, obs_stride);
			if (gs_dn)
				ek_actq_nvfp4_cpu(h, I, h, I, 1, I, gs_dn[e]);
			else if (a8)
				ek_actq_fp8_cpu(h, I, h, I, 1, I);
			exact_mv(D, e, h, I, dd, H, 1, 0);
			for (int r = 0; r < H; r++)
				o[r] += scale * wts[(size_t)t * k + j] * dd[r];
		}
	}
	free(g);
	return 0;
}

RUNNER(moe, (struct ek_w G, U, D; const int *ids; const float *wts; int k; float scale;
       const float *x; int ldx; float *out; int ldo, T, acc; const float *gs_gu, *gs_dn;
       float *obs_dn; int obs_stride, a8;),
       return moe_now(&a->G, &a->U, &a->D, a->ids, a->wts, a->k, a->scale, a->x, a->ldx, a->out,
                      a->ldo, a->T, a->acc, a->gs_gu, a->gs_dn, a->obs_dn, a->obs_stride, a->a8);)

int ek_moe(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
           const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
           float *out, int ldo, int T, int acc, void *work)
{
	if (!work)
		return -EINVAL;
	ENQUEUE(d, moe, *G, *U, *D, ids, wts, k, scale, x, ldx, out, ldo, T, acc, NULL, NULL, NULL, 0, 0);
}

int ek_moe_q(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
             const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
             float *out, int ldo, int T, int acc, void *work, const float *gs_gu,
             const float *gs_dn)
{
	if (!work || !gs_gu || !gs_dn)
		return -EINVAL;
	emul_moe_q_calls++;
	ENQUEUE(d, moe, *G, *U, *D, ids, wts, k, scale, x, ldx, out, ldo, T, acc, gs_gu, gs_dn, NULL, 0, 0);
}

int ek_moe_obs(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
               const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
               float *out, int ldo, int T, int acc, void *work, const float *gs_gu,
               const float *gs_dn, float *obs_dn, int obs_stride)
{
	if (!work || !obs_dn || obs_stride < 1 || (gs_gu && !gs_dn))
		return -EINVAL;
	emul_obs_calls++;
	emul_moe_q_calls += gs_gu != NULL;
	ENQUEUE(d, moe, *G, *U, *D, ids, wts, k, scale, x, ldx, out, ldo, T, acc, gs_gu, gs_dn, obs_dn,
	        obs_stride, 0);
}

int ek_moe_a8(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
              const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
              float *out, int ldo, int T, int acc, void *work, float *obs_dn, int obs_stride)
{
	if (!work || (obs_dn && obs_stride < 1))
		return -EINVAL;
	emul_obs_calls += obs_dn != NULL;
	emul_moe_a8_calls++;
	ENQUEUE(d, moe, *G, *U, *D, ids, wts, k, scale, x, ldx, out, ldo, T, acc, NULL, NULL, obs_dn,
	        obs_stride, 1);
}

/* the observer's reductions: the twins (the maxima are exact, any order) */
RUNNER(obs_amax, (const float *x; int ldx, T, cols; float *amax;),
       ek_obs_amax_cpu(a->x, a->ldx, a->T, a->cols, a->amax); return 0;)

int ek_obs_amax(struct ek_dev *d, const float *x, int ldx, int T, int cols, float *amax)
{
	if (T < 0 || cols < 0 || (T && ldx < cols) || !amax)
		return -EINVAL;
	emul_obs_calls++;
	ENQUEUE(d, obs_amax, x, ldx, T, cols, amax);
}

RUNNER(obs_rows, (const float *x; int ldx; const int *rowmap; int xdiv, S, cols; const int *ids;
       int E; float *amax; unsigned *cnt; int stride;),
       ek_obs_rows_cpu(a->x, a->ldx, a->rowmap, a->xdiv, a->S, a->cols, a->ids, a->E, a->amax,
                       a->cnt, a->stride);
       return 0;)

int ek_obs_rows(struct ek_dev *d, const float *x, int ldx, const int *rowmap, int xdiv, int S,
                int cols, const int *ids, int E, float *amax, unsigned *cnt, int stride)
{
	if (S < 0 || cols < 0 || xdiv < 1 || E < 1 || stride < 1 || !ids || !amax ||
	    (S && ldx < cols))
		return -EINVAL;
	emul_obs_calls++;
	ENQUEUE(d, obs_rows, x, ldx, rowmap, xdiv, S, cols, ids, E, amax, cnt, stride);
}

RUNNER(actq, (const float *x; int ldx; float *y; int ldy, T, cols, act; float gs;),
       if (a->act == 1) ek_actq_nvfp4_cpu(a->x, a->ldx, a->y, a->ldy, a->T, a->cols, a->gs);
       else ek_actq_fp8_cpu(a->x, a->ldx, a->y, a->ldy, a->T, a->cols);
       return 0;)

int ek_actq_nvfp4(struct ek_dev *d, const float *x, int ldx, float *y, int ldy, int T, int cols,
                  float gs)
{
	if (cols % 16 || !(gs > 0))
		return -EINVAL;
	emul_actq_calls++;
	ENQUEUE(d, actq, x, ldx, y, ldy, T, cols, 1, gs);
}

int ek_actq_fp8(struct ek_dev *d, const float *x, int ldx, float *y, int ldy, int T, int cols)
{
	emul_actq_calls++;
	ENQUEUE(d, actq, x, ldx, y, ldy, T, cols, 2, 0.0f);
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

