/* bench_engine_ops.c — `requantfs bench engine --device cuda --op NAME[,NAME]`:
 * one engine op at a time at Laguna S 2.1's shapes (read from the synthetic
 * config of tools/bench/bench_synth.c), as microseconds per call and GB/s of the
 * bytes the call must read and write, next to the device-to-device copy
 * bandwidth measured in the same run (read + write).
 *
 * Each measurement: n consecutive calls captured in one CUDA graph (PDL
 * edges when the device has them: ek_pdl), replayed `reps` times with events
 * around each replay; us = median replay / n. Weights are cold: the op
 * cycles through enough copies of its weights (or expert picks, or KV
 * caches) that the n = max(8, copies) calls of one replay touch at least
 * twice the L2 (at most 64 copies). Weights are filled on the device (BF16 uniform, NVFP4 bytes of
 * valid codes and scales, FP8/INT bytes of finite codes and small positive scales), so the
 * numbers are timing only. */
#include "tools/bench/bench_engine_ops.h"
#include "tools/bench/bench_synth.h"
#include "base/err.h"
#include "engine/model/model.h"
#include "kernels/ek.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K_CALLS 8                  /* calls per captured graph, at least */
#define MAX_COPIES 64

struct shapes {
	int H, V, hd, nkv, nh_s, nh_f, E, topk, I, S, window, gate_rows_s;
};

/* One op's device state; bytes = what one call must read + write. */
struct op {
	const char *name, *what;
	struct ek_w w[MAX_COPIES];
	int copies;
	float *x, *y, *xn, *nw, *logits, *wts, *bias, *q, *out;
	int *ids, *pos;
	void *work, *kc[MAX_COPIES], *vc[MAX_COPIES];
	struct ek_w eg, eu, ed;
	int picks;                 /* moe: sets of ids */
	int keys, cap, nh, window;
	double bytes;
	char shape[96];
};

static const char *const op_names[] = {
	"qkvg", "o", "lm_head", "moe", "router", "norm_gemv", "norm_gemv_unfused", "rmsnorm",
	"rsu", "rsu_norm", "lm_head_norm", "attn_sliding", "attn_full", "gemv_bf16", "gemv_nvfp4",
	"gemv_fp8", "gemv_int8", "gemv_int4",
};
static const char *const op_what[] = {
	"attention q|k|v|g of a sliding layer, one BF16 GEMV",
	"attention output, BF16 GEMV",
	"lm_head, BF16 GEMV",
	"routed experts at one token (top-k NVFP4 gate|up, down, combine)",
	"router GEMV (BF16) + top-k selection",
	"RMSNorm fused into the q|k|v|g GEMV (ek_gemv_norm)",
	"RMSNorm then the q|k|v|g GEMV (ek_rmsnorm + ek_gemv, the unfused pair)",
	"RMSNorm of one token",
	"router | shared gate | shared up, one BF16 GEMV",
	"RMSNorm fused into router | shared gate | shared up",
	"final RMSNorm fused into lm_head",
	"decode attention of a sliding layer at --pos (window keys)",
	"decode attention of a full layer at --pos (--ctx cache)",
	"the q|k|v|g GEMV's shape with BF16 weights (bench engine's per-format rows)",
	"the q|k|v|g GEMV's shape with NVFP4 weights (bench engine's per-format rows)",
	"the q|k|v|g GEMV's shape with FP8 weights, a scale per row (fp8-dynamic)",
	"the q|k|v|g GEMV's shape with INT8 weights, scales per 128 columns (w8a16)",
	"the q|k|v|g GEMV's shape with INT4 weights, scales per 128 columns (w4a16)",
};

/* The kind and scale grouping of a gemv_<format> op: the schemes' own
 * (fp8-dynamic per channel, w8a16 / w4a16 groups of 128). */
static void fmt_kind(const char *fmt, int *kind, int *gshift)
{
	*gshift = EK_GSHIFT_ROW;
	*kind = !strcmp(fmt, "bf16") ? EK_BF16 : !strcmp(fmt, "nvfp4") ? EK_NVFP4
	      : !strcmp(fmt, "fp8") ? EK_FP8 : !strcmp(fmt, "int8") ? EK_INT8 : EK_INT4;
	if (*kind == EK_INT8 || *kind == EK_INT4)
		*gshift = 7;
}
#define N_OPS ((int)(sizeof op_names / sizeof op_names[0]))

void bench_engine_list_ops(FILE *f)
{
	for (int i = 0; i < N_OPS; i++)
		fprintf(f, "%s\t%s\n", op_names[i], op_what[i]);
}

static int get_shapes(struct shapes *s, struct rq_err *err)
{
	static char cfg[32768];
	struct lg_model *m = NULL;
	bench_laguna_config(cfg, sizeof cfg, 4, 256);
	int rc = bench_synth_model(cfg, 1, &m, err);
	if (rc)
		return rc;
	const struct lg_config *c = &m->cfg;
	*s = (struct shapes){.H = c->hidden, .V = c->vocab, .hd = c->head_dim, .nkv = c->n_kv_heads,
	                     .E = c->n_experts, .topk = c->top_k, .I = c->moe_inter,
	                     .S = c->shared_inter, .window = c->sliding_window};
	for (int i = 0; i < c->n_layers; i++) {
		if (m->layers[i].type == LG_SLIDING)
			s->nh_s = m->layers[i].n_heads;
		else
			s->nh_f = m->layers[i].n_heads;
	}
	s->gate_rows_s = c->gate == LG_GATE_PER_ELEMENT ? s->nh_s * s->hd : s->nh_s;
	bench_synth_free(m);
	return 0;
}

/* Device memory of the op being measured, freed after it (bfree_all). */
static void *g_mem[512];
static int g_nmem;

static void *balloc(struct ek_dev *d, size_t n)
{
	if (g_nmem == (int)(sizeof g_mem / sizeof g_mem[0]))
		return NULL;
	void *p = ek_alloc(d, n);
	if (p)
		g_mem[g_nmem++] = p;
	return p;
}

static void bfree_all(struct ek_dev *d)
{
	ek_sync(d);
	while (g_nmem > 0)
		ek_free(d, g_mem[--g_nmem]);
}

static int fail(struct ek_dev *d, struct rq_err *err, const char *what)
{
	return rq_errf(err, -EIO, "bench engine --op: %s: %s", what, ek_error(d));
}

/* n finite positive floats (every byte in [0x20, 0x3E]: 2^-63 .. 0.25);
 * values do not matter for timing, only that nothing is NaN. */
static float *dfloats(struct ek_dev *d, size_t n, uint64_t seed)
{
	float *p = balloc(d, n * sizeof(float));
	if (p && ek_fill_bytes(d, (uint8_t *)p, n * sizeof(float), 0x20, 0x3E, seed))
		return NULL;
	return p;
}

/* Copies of a [rows][cols] weight (kind; FP8/INT: scale groups 2^gshift)
 * so that they span >= 2 · L2. */
static int weights_g(struct ek_dev *d, struct op *o, int kind, int gshift, int rows, int cols,
                     size_t l2, int copies_max, uint64_t seed)
{
	size_t one = ek_w_bytes_g(kind, rows, cols, gshift);
	int c = (int)((2 * l2 + one - 1) / one);
	c = c < 1 ? 1 : c > copies_max ? copies_max : c;
	for (int i = 0; i < c; i++) {
		uint8_t *p = balloc(d, one + 64);
		if (!p)
			return -ENOMEM;
		float *gs = (float *)(p + one);
		int rc = kind == EK_BF16 ? ek_fill_bf16(d, (uint16_t *)p, one / 2, 0.02f, seed + i)
		         : kind == EK_NVFP4 ? ek_fill_bytes(d, p, one, 0x20, 0x3F, seed + i)
		         : ek_fill_bytes(d, p, one, 0x20, 0x3E, seed + i);   /* finite codes, scales */
		float g = 1000.0f;
		if (rc || (kind == EK_NVFP4 && ek_h2d(d, gs, &g, sizeof g)) || ek_sync(d))
			return -EIO;
		o->w[i] = (struct ek_w){.kind = kind, .rows = rows, .cols = cols, .n = 1, .stride = one,
		                        .data = p, .gs = kind == EK_NVFP4 ? gs : NULL, .gshift = gshift};
	}
	o->copies = c;
	return 0;
}

static int weights(struct ek_dev *d, struct op *o, int kind, int rows, int cols, size_t l2,
                   int copies_max, uint64_t seed)
{
	return weights_g(d, o, kind, EK_GSHIFT_ROW, rows, cols, l2, copies_max, seed);
}

/* NVFP4 expert set of n matrices [rows][cols], one allocation. */
static int experts(struct ek_dev *d, struct ek_w *w, int n, int rows, int cols, uint64_t seed)
{
	size_t one = ek_w_bytes(EK_NVFP4, rows, cols), all = one * n;
	uint8_t *p = balloc(d, all + sizeof(float) * n);
	if (!p)
		return -ENOMEM;
	float *gs = (float *)(p + all), *h = malloc(sizeof(float) * n);
	if (!h)
		return -ENOMEM;
	for (int i = 0; i < n; i++)
		h[i] = 1000.0f;
	int rc = ek_fill_bytes(d, p, all, 0x20, 0x3F, seed) || ek_h2d(d, gs, h, sizeof(float) * n) ||
	         ek_sync(d);
	free(h);
	*w = (struct ek_w){.kind = EK_NVFP4, .rows = rows, .cols = cols, .n = n, .stride = one,
	                   .data = p, .gs = gs};
	return rc ? -EIO : 0;
}

static int setup(struct ek_dev *d, struct op *o, const struct shapes *s, int pos, int ctx,
                 size_t l2, struct rq_err *err)
{
	int H = s->H, rc = 0, qkvg = s->nh_s * s->hd + 2 * s->nkv * s->hd + s->gate_rows_s;
	int rsu = s->E + 2 * s->S;
	const char *n = o->name;
	o->x = dfloats(d, (size_t)H * 16, 1);
	o->xn = balloc(d, sizeof(float) * H * 16);
	o->nw = dfloats(d, H, 2);
	o->y = balloc(d, sizeof(float) * (size_t)(s->V > 65536 ? s->V : 65536) * 1);
	if (!o->x || !o->xn || !o->nw || !o->y)
		return fail(d, err, "activations");
	double act = 4.0 * H;      /* x read */
	if (!strcmp(n, "qkvg") || !strcmp(n, "norm_gemv") || !strcmp(n, "norm_gemv_unfused")) {
		rc = weights(d, o, EK_BF16, qkvg, H, l2, MAX_COPIES, 10);
		o->bytes = (double)o->w[0].stride + act + 4.0 * qkvg;
		if (strcmp(n, "qkvg"))   /* + norm weights, xn written (unfused: and read back) */
			o->bytes += 4.0 * H + 4.0 * H + (!strcmp(n, "norm_gemv_unfused") ? 8.0 * H : 0);
		snprintf(o->shape, sizeof o->shape, "%d->%d (%d*%d+2*%d*%d+%d) bf16", H, qkvg, s->nh_s,
		         s->hd, s->nkv, s->hd, s->gate_rows_s);
	} else if (!strncmp(n, "gemv_", 5)) {
		int kind, gsh;
		fmt_kind(n + 5, &kind, &gsh);
		rc = weights_g(d, o, kind, gsh, qkvg, H, l2, MAX_COPIES, 15);
		o->bytes = (double)ek_w_bytes_g(kind, qkvg, H, gsh) + act + 4.0 * qkvg;
		snprintf(o->shape, sizeof o->shape, "%d->%d %s", H, qkvg, n + 5);
	} else if (!strcmp(n, "o")) {
		rc = weights(d, o, EK_BF16, H, s->nh_s * s->hd, l2, MAX_COPIES, 20);
		o->x = dfloats(d, (size_t)s->nh_s * s->hd, 3);
		o->bytes = (double)o->w[0].stride + 4.0 * s->nh_s * s->hd + 4.0 * H;
		snprintf(o->shape, sizeof o->shape, "%d->%d bf16", s->nh_s * s->hd, H);
	} else if (!strcmp(n, "lm_head") || !strcmp(n, "lm_head_norm")) {
		rc = weights(d, o, EK_BF16, s->V, H, l2, MAX_COPIES, 30);
		o->bytes = (double)o->w[0].stride + act + 4.0 * s->V + (n[7] ? 8.0 * H : 0);
		snprintf(o->shape, sizeof o->shape, "%d->%d bf16", H, s->V);
	} else if (!strcmp(n, "rsu") || !strcmp(n, "rsu_norm")) {
		rc = weights(d, o, EK_BF16, rsu, H, l2, MAX_COPIES, 40);
		o->bytes = (double)o->w[0].stride + act + 4.0 * rsu + (n[3] ? 8.0 * H : 0);
		snprintf(o->shape, sizeof o->shape, "%d->%d (%d+2*%d) bf16", H, rsu, s->E, s->S);
	} else if (!strcmp(n, "router")) {
		rc = weights(d, o, EK_BF16, s->E, H, l2, MAX_COPIES, 50);
		o->bias = dfloats(d, s->E, 4);
		o->ids = balloc(d, sizeof(int) * s->topk);
		o->wts = balloc(d, sizeof(float) * s->topk);
		o->bytes = (double)o->w[0].stride + act + 4.0 * s->E * 3 + 8.0 * s->topk;
		snprintf(o->shape, sizeof o->shape, "%d->%d bf16, top-%d", H, s->E, s->topk);
	} else if (!strcmp(n, "rmsnorm")) {
		o->bytes = 12.0 * H;
		snprintf(o->shape, sizeof o->shape, "%d fp32", H);
	} else if (!strcmp(n, "moe")) {
		int k = s->topk;
		if ((rc = experts(d, &o->eg, s->E, s->I, H, 60)) || (rc = experts(d, &o->eu, s->E, s->I, H, 61)) ||
		    (rc = experts(d, &o->ed, s->E, H, s->I, 62)))
			return fail(d, err, "expert weights");
		/* 16 sets of k picks spread over the experts (16 · k · 5 MB: cold) */
		o->picks = 16;
		int *h = malloc(sizeof(int) * k * o->picks);
		float *hw = malloc(sizeof(float) * k * o->picks);
		for (int p = 0; p < o->picks; p++)
			for (int j = 0; j < k; j++) {
				h[p * k + j] = (p * 97 + j * 38) % s->E;   /* (a repeat would be harmless) */
				hw[p * k + j] = 1.0f / k;
			}
		o->ids = balloc(d, sizeof(int) * k * o->picks);
		o->wts = balloc(d, sizeof(float) * k * o->picks);
		size_t wb = ek_moe_work_bytes(1, k, s->I, H);
		o->work = balloc(d, wb);
		rc = !o->ids || !o->wts || !o->work || ek_h2d(d, o->ids, h, sizeof(int) * k * o->picks) ||
		     ek_h2d(d, o->wts, hw, sizeof(float) * k * o->picks) || ek_memset(d, o->work, 0, wb) ||
		     ek_sync(d);
		free(h);
		free(hw);
		o->bytes = (double)k * (2.0 * o->eg.stride + o->ed.stride) + act + 8.0 * H;
		snprintf(o->shape, sizeof o->shape, "%d experts, top-%d, %d->2x%d->%d nvfp4", s->E, k, H,
		         s->I, H);
	} else if (!strncmp(n, "attn_", 5)) {
		int full = !strcmp(n, "attn_full");
		o->nh = full ? s->nh_f : s->nh_s;
		o->window = full ? 0 : s->window;
		o->cap = full ? ctx : s->window;
		if (pos < 0 || pos >= ctx)
			return rq_errf(err, -EINVAL, "bench engine --op %s: --pos %d outside --ctx %d", n, pos,
			               ctx);
		o->keys = full ? pos + 1 : (pos + 1 < s->window ? pos + 1 : s->window);
		size_t kvb = ek_kv_bytes(EK_KV_BF16, o->cap, s->nkv, s->hd);
		int c = (int)((2 * l2 + 2 * kvb - 1) / (2 * kvb));
		o->copies = c < 1 ? 1 : c > MAX_COPIES ? MAX_COPIES : c;
		for (int i = 0; i < o->copies && !rc; i++) {
			o->kc[i] = balloc(d, kvb);
			o->vc[i] = balloc(d, kvb);
			rc = !o->kc[i] || !o->vc[i] || ek_fill_bf16(d, o->kc[i], kvb / 2, 1.0f, 70 + i) ||
			     ek_fill_bf16(d, o->vc[i], kvb / 2, 1.0f, 90 + i);
		}
		o->q = dfloats(d, (size_t)o->nh * s->hd + o->nh, 5);
		o->out = balloc(d, sizeof(float) * o->nh * s->hd);
		o->pos = balloc(d, sizeof(int));
		size_t ab = ek_attn_work_bytes(1, o->nh, s->hd, full ? ctx : s->window);
		o->work = balloc(d, ab);
		rc = rc || !o->q || !o->out || !o->pos || !o->work || ek_h2d(d, o->pos, &pos, sizeof pos) ||
		     ek_memset(d, o->work, 0, ab) || ek_sync(d);
		o->bytes = 2.0 * o->keys * s->nkv * s->hd * 2 + 8.0 * o->nh * s->hd + 4.0 * o->nh;
		snprintf(o->shape, sizeof o->shape, "%d heads / %d kv x %d, %d keys at position %d, bf16 KV",
		         o->nh, s->nkv, s->hd, o->keys, pos);
	} else {
		return rq_errf(err, -EINVAL, "bench engine --op: unknown op '%s' (--list-ops)", n);
	}
	if (rc)
		return rc == -EINVAL ? rc : fail(d, err, "weights");
	return 0;
}

/* Call number i of op o. */
static int call(struct ek_dev *d, struct op *o, const struct shapes *s, int i)
{
	const char *n = o->name;
	int H = s->H, c = o->copies > 0 ? i % o->copies : 0;
	const struct ek_w *w = &o->w[c];
	if (!strcmp(n, "qkvg") || !strcmp(n, "o") || !strcmp(n, "lm_head") || !strcmp(n, "rsu") ||
	    !strncmp(n, "gemv_", 5))
		return ek_gemv(d, w, o->x, w->cols, o->y, w->rows, 1, 0);
	if (!strcmp(n, "norm_gemv") || !strcmp(n, "rsu_norm") || !strcmp(n, "lm_head_norm"))
		return ek_gemv_norm(d, w, o->x, H, o->nw, 1e-6f, o->xn, H, o->y, w->rows, 1, 0);
	if (!strcmp(n, "norm_gemv_unfused")) {
		int rc = ek_rmsnorm(d, o->xn, H, o->x, H, o->nw, 1, H, 1e-6f);
		return rc ? rc : ek_gemv(d, w, o->xn, H, o->y, w->rows, 1, 0);
	}
	if (!strcmp(n, "rmsnorm"))
		return ek_rmsnorm(d, o->xn, H, o->x, H, o->nw, 1, H, 1e-6f);
	if (!strcmp(n, "router")) {
		int rc = ek_gemv(d, w, o->x, H, o->y, s->E, 1, 0);
		return rc ? rc : ek_route(d, o->y, s->E, o->bias, s->E, s->topk, 1, 0.0f, o->ids, o->wts, 1);
	}
	if (!strcmp(n, "moe")) {
		int p = i % o->picks, k = s->topk;
		return ek_moe(d, &o->eg, &o->eu, &o->ed, o->ids + p * k, o->wts + p * k, k, 2.5f, o->x, H,
		              o->y, H, 1, 0, o->work);
	}
	return ek_attn(d, o->out, o->nh * s->hd, o->q, o->nh * s->hd, o->q + o->nh * s->hd, o->nh, 1, 1,
	               o->nh, s->nkv, s->hd, o->kc[c], o->vc[c], EK_KV_BF16, o->cap, o->pos, o->window,
	               o->window ? o->window : o->cap, o->work);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Device `device` opened, its info, and its device->device copy bandwidth
 * (GB/s, read + write) measured now: the baseline of every figure here. */
static int open_measured(int device, const char *who, struct ek_dev **dp, struct ek_info *inf,
                         double *d2d, struct rq_err *err)
{
	char msg[512];
	double h2d = 0;
	int rc = ek_open(device, dp, msg, sizeof msg);
	if (rc)
		return rq_errf(err, rc, "%s: %s", who, msg);
	if ((rc = ek_info(*dp, inf)) || (rc = ek_copy_bw(*dp, (size_t)1 << 30, 5, d2d, &h2d))) {
		rc = fail(*dp, err, "copy bandwidth");
		ek_close(*dp);
		*dp = NULL;
		return rc;
	}
	*d2d /= 1e9;
	return 0;
}

/* us per call: every copy once (at least K_CALLS calls) in one graph,
 * median of reps replays. */
static int time_op(struct ek_dev *d, struct op *o, const struct shapes *s, int reps, double *us,
                   struct rq_err *err)
{
	struct ek_graph *g = NULL;
	int rc = 0, n = o->copies > K_CALLS ? o->copies : K_CALLS;
	if (o->picks > n)
		n = o->picks;
	for (int i = 0; i < 2 && !rc; i++)           /* warm: scratch grown, modules loaded */
		rc = call(d, o, s, i);
	if (rc || (rc = ek_sync(d)) || (rc = ek_capture_begin(d)))
		return fail(d, err, o->name);
	for (int i = 0; i < n && !rc; i++)
		rc = call(d, o, s, i);
	int rc2 = ek_capture_end(d, &g);
	if (rc || rc2)
		return fail(d, err, "capture");
	double *t = malloc(sizeof(double) * reps);
	if (!t) {
		ek_graph_free(g);
		return rq_errf(err, -ENOMEM, "out of memory");
	}
	rc = ek_graph_run(d, g) || ek_sync(d);
	for (int r = 0; r < reps && !rc; r++)
		rc = ek_time_begin(d) || ek_graph_run(d, g) || ek_time_end(d, &t[r]);
	if (!rc) {
		qsort(t, reps, sizeof *t, cmp_d);
		*us = t[reps / 2] / n * 1e6;
	}
	free(t);
	ek_graph_free(g);
	return rc ? fail(d, err, "timing") : 0;
}

int bench_engine_ops(int device, const char *names, int pos, int ctx, int reps, int json,
                     struct rq_err *err)
{
	char list[1024];
	snprintf(list, sizeof list, "%s", names);
	for (char *save = NULL, *n = strtok_r(list, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
		int known = 0;
		for (int i = 0; i < N_OPS; i++)
			known |= !strcmp(n, op_names[i]);
		if (!known)
			return rq_errf(err, -EINVAL, "bench engine --op: unknown op '%s' (--list-ops)", n);
	}
	struct shapes s;
	int rc = get_shapes(&s, err);
	if (rc)
		return rc;
	struct ek_dev *d = NULL;
	struct ek_info inf;
	double d2d = 0;
	if ((rc = open_measured(device, "bench engine --op", &d, &inf, &d2d, err)))
		return rc;
	if (!json)
		printf("bench engine --op on %s (PDL: %s): device->device copy %.0f GB/s (read + write)\n",
		       inf.name, ek_pdl_status(d), d2d);
	snprintf(list, sizeof list, "%s", names);
	for (char *save = NULL, *n = strtok_r(list, ",", &save); n && !rc;
	     n = strtok_r(NULL, ",", &save)) {
		struct op o;
		memset(&o, 0, sizeof o);
		o.name = n;
		double us = 0;
		if (!(rc = setup(d, &o, &s, pos, ctx, inf.l2_bytes, err)))
			rc = time_op(d, &o, &s, reps, &us, err);
		if (!rc) {
			double gbs = o.bytes / (us * 1e-6) / 1e9;
			if (json)
				printf("{\"op\":\"%s\",\"shape\":\"%s\",\"us\":%.3f,\"bytes\":%.0f,\"gbs\":%.1f,"
				       "\"d2d_gbs\":%.1f,\"ratio\":%.3f,\"pdl\":%d,\"copies\":%d}\n", n, o.shape, us,
				       o.bytes, gbs, d2d, gbs / d2d, ek_pdl(d), o.copies);
			else
				printf("op %-18s %-44s %9.2f us %8.1f GB/s  %5.1f%% of the copy (%d cold copies)\n",
				       n, o.shape, us, gbs, 100 * gbs / d2d, o.copies);
			fflush(stdout);
		}
		bfree_all(d);
	}
	ek_close(d);
	return rc;
}

/* Decode's weight GB/s per weight format of the CUDA engine: one GEMV shape
 * (the q|k|v|g projection), T = 1, cold weights, against the copy bandwidth
 * measured here: BF16, NVFP4 (NVFP4A16 is the same tensors), FP8 (a scale
 * per row, as fp8-dynamic), INT8 and INT4 (scales per 128 columns, as
 * w8a16 / w4a16). Weight bytes are the engine layout's (scales included). */
int bench_engine_formats(int device, int reps, struct rq_err *err)
{
	static const char *const fmt[] = {"gemv_bf16", "gemv_nvfp4", "gemv_fp8", "gemv_int8",
	                                  "gemv_int4"};
	struct shapes s;
	int rc = get_shapes(&s, err);
	if (rc)
		return rc;
	struct ek_dev *d = NULL;
	struct ek_info inf;
	double d2d = 0;
	if ((rc = open_measured(device, "bench engine, per-format GEMVs", &d, &inf, &d2d, err)))
		return rc;
	printf("decode GEMV per weight format (T = 1, cold weights, median of %d graph replays; "
	       "device->device copy %.0f GB/s, read + write, this run):\n", reps, d2d);
	for (size_t i = 0; i < sizeof fmt / sizeof fmt[0] && !rc; i++) {
		struct op o;
		memset(&o, 0, sizeof o);
		o.name = fmt[i];
		double us = 0;
		if (!(rc = setup(d, &o, &s, 0, 1, inf.l2_bytes, err)))
			rc = time_op(d, &o, &s, reps, &us, err);
		if (!rc) {
			double wb = (double)ek_w_bytes_g(o.w[0].kind, o.w[0].rows, o.w[0].cols, o.w[0].gshift);
			double gbs = wb / (us * 1e-6) / 1e9;
			printf("format %-6s [%d x %d]: %.2f MB of weights per call, %.2f us, %.0f GB/s of "
			       "weights, %.1f%% of the copy (%.0f GB/s)\n", fmt[i] + 5, o.w[0].rows,
			       o.w[0].cols, wb / 1e6, us, gbs, 100 * gbs / d2d, d2d);
			fflush(stdout);
		}
		bfree_all(d);
	}
	ek_close(d);
	return rc;
}
