/* forward_cuda_load.c — the CUDA engine's memory plan and weight upload.
 *
 * One walk over the model (lgc_layout) serves both: dry, it only adds up the
 * device bytes each tensor will take in the engine layout (the plan); for
 * real, it allocates them and uploads. Uploads go through LGC_SLOTS pinned
 * host slots of 64 MiB used in turn: the host copies a piece of the mapped
 * checkpoint into a slot once the slot's event says the previous DMA out of
 * it finished, queues the DMA, records the event — so reading the mapping
 * overlaps the copies. NVFP4, FP8 and INT tensors land in a device staging
 * buffer of the slot and are repacked from there into place
 * (ek_nvfp4_repack, ek_wq_repack: codes and scales as the checkpoint has
 * them, in two pieces staged together). Small
 * pieces (norms, biases, global scales, RoPE tables) share 4 MiB chunks.
 * A linear whose data pointer is NULL (a synthetic model, for benchmarks) is
 * filled on the device with deterministic random values instead. */
#include "engine/model/forward_cuda_int.h"
#include "base/err.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL_CHUNK ((size_t)4 << 20)

static size_t al(size_t n)
{
	return (n + 255) & ~(size_t)255;
}

void *lgc_dalloc(struct lgc *g, size_t bytes)
{
	if (g->nallocs == g->capallocs) {
		int nc = g->capallocs ? 2 * g->capallocs : 256;
		void **na = realloc(g->allocs, sizeof(void *) * nc);
		if (!na)
			return NULL;
		g->allocs = na;
		g->capallocs = nc;
	}
	void *p = ek_alloc(g->d, bytes);
	if (p)
		g->allocs[g->nallocs++] = p;
	return p;
}

struct upl {
	struct lgc *g;
	int dry;
	size_t wbytes, kvbytes, small_left;
	uint8_t *small;            /* bump pointer into the current small chunk */
	uint8_t *slot[LGC_SLOTS];  /* pinned */
	uint8_t *draw[LGC_SLOTS];  /* device staging (NVFP4 raw) */
	int next;
	size_t moved;
	unsigned long long seed;
	struct rq_err *err;
};

static int fail(struct upl *u, int rc, const char *what)
{
	return rq_errf(u->err, rc, "CUDA engine: %s: %s", what, u->g->d ? ek_error(u->g->d) : "");
}

/* Device memory for weights (counted in the plan's weights). */
static void *walloc(struct upl *u, size_t n)
{
	u->wbytes += al(n);
	if (u->dry)
		return (void *)(uintptr_t)256;
	void *p = lgc_dalloc(u->g, al(n));
	if (!p)
		fail(u, -ENOMEM, "device allocation");
	return p;
}

static void *salloc(struct upl *u, size_t n)
{
	n = al(n);
	if (n > u->small_left) {
		u->small = walloc(u, SMALL_CHUNK > n ? SMALL_CHUNK : n);
		if (!u->small)
			return NULL;
		u->small_left = SMALL_CHUNK > n ? SMALL_CHUNK : n;
	}
	void *p = u->small;
	u->small += n;
	u->small_left -= n;
	return p;
}

/* host bytes → device, through the pinned slots */
static int put(struct upl *u, void *dst, const void *src, size_t n)
{
	struct ek_dev *d = u->g->d;
	u->moved += n;
	if (u->dry)
		return 0;
	for (size_t o = 0; o < n;) {
		size_t c = n - o < LGC_SLOT_BYTES ? n - o : LGC_SLOT_BYTES;
		int k = u->next;
		u->next = (k + 1) % LGC_SLOTS;
		if (ek_wait_mark(d, k))
			return fail(u, -EIO, "staging");
		memcpy(u->slot[k], (const uint8_t *)src + o, c);
		if (ek_h2d(d, (uint8_t *)dst + o, u->slot[k], c) || ek_mark(d, k))
			return fail(u, -EIO, "upload");
		o += c;
	}
	return 0;
}

static float *put_floats(struct upl *u, const float *src, size_t n)
{
	float *p = salloc(u, n * sizeof(float));
	if (!p || put(u, p, src, n * sizeof(float)))
		return NULL;
	return p;
}

/* The engine kind of a Linear's weights (ek.h enum ek_wkind). */
static int ek_kind(const struct lg_linear *l)
{
	switch (l->kind) {
	case LG_W_NVFP4: return EK_NVFP4;
	case LG_W_FP8: return EK_FP8;
	case LG_W_INT: return l->bits == 4 ? EK_INT4 : EK_INT8;
	default: return EK_BF16;
	}
}

/* FP8 / INT: log2 of the scale group width (refuse_kind checked it is a
 * power of two >= 16 when there are several groups), EK_GSHIFT_ROW for one. */
static int gshift_of(const struct lg_linear *l)
{
	if (l->kind != LG_W_FP8 && l->kind != LG_W_INT)
		return EK_GSHIFT_ROW;
	if (l->groups <= 1)
		return EK_GSHIFT_ROW;
	int gw = l->cols / l->groups, s = 0;
	while ((1 << s) < gw)
		s++;
	return s;
}

static size_t lin_bytes(const struct lg_linear *l)
{
	return ek_w_bytes_g(ek_kind(l), l->rows, l->cols, gshift_of(l));
}

/* The checkpoint's bytes a repack reads: codes (a, na bytes) then scales (b,
 * nb); NULL a: synthetic. */
static void raw_parts(const struct lg_linear *l, const void **a, size_t *na, const void **b,
                      size_t *nb)
{
	if (l->kind == LG_W_NVFP4) {
		*a = l->packed;
		*na = (size_t)l->rows * l->cols / 2;
		*b = l->scales;
		*nb = (size_t)l->rows * l->cols / 16;
		return;
	}
	*a = l->kind == LG_W_FP8 ? (const void *)l->w8 : (const void *)l->qw;
	*na = (size_t)l->rows * (l->kind == LG_W_FP8 ? (size_t)l->cols : (size_t)l->words * 4);
	*b = l->qscale;
	*nb = (size_t)l->srows * l->groups * (l->sdtype == LG_S_F32 ? 4 : 2);
}

/* The repack of a staged raw copy (codes at raw, scales at raw + na) into dst. */
static int repack(struct upl *u, const struct lg_linear *l, const uint8_t *raw, size_t na,
                  uint8_t *dst)
{
	struct ek_dev *d = u->g->d;
	if (l->kind == LG_W_NVFP4)
		return ek_nvfp4_repack(d, raw, raw + na, l->rows, l->cols, dst);
	int sd = l->sdtype == LG_S_BF16 ? EK_S_BF16 : l->sdtype == LG_S_F16 ? EK_S_F16 : EK_S_F32;
	size_t ldc = l->kind == LG_W_FP8 ? (size_t)l->cols : (size_t)l->words * 4;
	return ek_wq_repack(d, ek_kind(l), raw, ldc, raw + na, sd, l->srows == 1 ? l->rows : 1,
	                    l->rows, l->cols, gshift_of(l), dst);
}

/* One matrix of a linear into dst (engine layout). */
static int put_linear(struct upl *u, uint8_t *dst, const struct lg_linear *l)
{
	struct ek_dev *d = u->g->d;
	size_t bytes = lin_bytes(l);
	const void *pa = NULL, *pb = NULL;
	size_t na = 0, nb = 0;
	if (l->kind != LG_W_BF16)
		raw_parts(l, &pa, &na, &pb, &nb);
	if (l->kind == LG_W_BF16 ? !l->w : !pa) {               /* synthetic */
		u->moved += bytes;
		if (u->dry)
			return 0;
		/* BF16 uniform; NVFP4 valid codes and scales; FP8/INT bytes whose codes
		 * are finite and whose scales read as small positive floats */
		int rc = l->kind == LG_W_BF16
		         ? ek_fill_bf16(d, (uint16_t *)dst, bytes / 2, 1.7f / sqrtf((float)l->cols), u->seed++)
		         : l->kind == LG_W_NVFP4 ? ek_fill_bytes(d, dst, bytes, 0x10, 0x5F, u->seed++)
		         : ek_fill_bytes(d, dst, bytes, 0x20, 0x3E, u->seed++);
		return rc ? fail(u, rc, "fill") : 0;
	}
	if (l->kind == LG_W_BF16)
		return put(u, dst, l->w, bytes);
	size_t pk = na, sc = nb;
	u->moved += pk + sc;
	if (u->dry)
		return 0;
	uint8_t *raw;
	int tmp = pk + sc > LGC_SLOT_BYTES;
	if (tmp) {
		raw = ek_alloc(d, pk + sc);
		if (!raw)
			return fail(u, -ENOMEM, "staging allocation");
		u->moved -= pk + sc;
		if (put(u, raw, pa, pk) || put(u, raw + pk, pb, sc))
			return -EIO;
	} else {
		int k = u->next;
		u->next = (k + 1) % LGC_SLOTS;
		if (ek_wait_mark(d, k))
			return fail(u, -EIO, "staging");
		memcpy(u->slot[k], pa, pk);
		memcpy(u->slot[k] + pk, pb, sc);
		raw = u->draw[k];
		if (ek_h2d(d, raw, u->slot[k], pk + sc))
			return fail(u, -EIO, "upload");
	}
	int rc = repack(u, l, raw, pk, dst);
	if (tmp) {
		int rs = ek_sync(d);
		ek_free(d, raw);
		rc = rc ? rc : rs;
	}
	if (rc)
		return fail(u, rc, "repack");
	/* the slot is free again once the copy out of it is done */
	return !tmp && ek_mark(d, (u->next + LGC_SLOTS - 1) % LGC_SLOTS) ? fail(u, -EIO, "event") : 0;
}

/* A single linear as an ek_w (its own allocation; global scale in small). */
static int one(struct upl *u, const struct lg_linear *l, struct ek_w *w)
{
	int kind = ek_kind(l);
	size_t bytes = lin_bytes(l);
	*w = (struct ek_w){.kind = kind, .rows = l->rows, .cols = l->cols, .n = 1, .stride = bytes,
	                   .gshift = gshift_of(l)};
	uint8_t *p = walloc(u, bytes);
	if (!p || put_linear(u, p, l))
		return -1;
	w->data = p;
	if (kind == EK_NVFP4) {
		float gs = l->global_scale > 0 ? l->global_scale : 1000.0f;
		if (!(w->gs = put_floats(u, &gs, 1)))
			return -1;
	}
	return 0;
}

/* The biases of members mem[i] (output columns off[i]..) as one device
 * vector of width floats, zeros for members without one. */
static float *put_bias(struct upl *u, const struct lg_linear *const *mem, const int *off, int n,
                       int width)
{
	float *h = calloc(width, sizeof *h);
	if (!h) {
		fail(u, -ENOMEM, "bias staging");
		return NULL;
	}
	for (int i = 0; i < n; i++)
		if (mem[i]->bias)
			memcpy(h + off[i], mem[i]->bias, sizeof(float) * mem[i]->rows);
	float *p = put_floats(u, h, width);
	free(h);
	return p;
}

static struct lgc_aq aq_of(const struct lg_linear *l)
{
	return (struct lgc_aq){.act = (int)l->act, .gs = l->in_gs};
}

/* Members read the same input: fused into one BF16 matrix when all are BF16
 * (a BF16 Linear never quantizes its input). */
static int group(struct upl *u, const struct lg_linear *const *mem, int n, struct lgc_group *gr)
{
	int fuse = n > 1, rows = 0;
	memset(gr, 0, sizeof *gr);
	for (int i = 0; i < n; i++) {
		fuse &= mem[i]->kind == LG_W_BF16 && mem[i]->act == LG_A_NONE && mem[i]->cols == mem[0]->cols;
		gr->off[i] = rows;
		rows += mem[i]->rows;
	}
	gr->width = rows;
	if (!fuse) {
		gr->n = n;
		for (int i = 0; i < n; i++) {
			gr->aq[i] = aq_of(mem[i]);
			gr->any_aq |= mem[i]->act != LG_A_NONE;
			if (one(u, mem[i], &gr->w[i]))
				return -1;
		}
		return 0;
	}
	size_t bytes = (size_t)rows * mem[0]->cols * 2;
	uint8_t *p = walloc(u, bytes);
	if (!p)
		return -1;
	gr->n = 1;
	gr->off[0] = 0;
	gr->w[0] = (struct ek_w){.kind = EK_BF16, .rows = rows, .cols = mem[0]->cols, .n = 1,
	                         .stride = bytes, .data = p};
	for (int i = 0; i < n; i++)
		if (put_linear(u, p + (size_t)gr->off[i] * mem[0]->cols * 2, mem[i]))
			return -1;
	return 0;
}

/* The routed experts of a layer as one set (one kind, one scale grouping). */
static int experts(struct upl *u, const struct lg_linear *e, int E, struct ek_w *w)
{
	int kind = ek_kind(&e[0]), gsh = gshift_of(&e[0]);
	for (int i = 1; i < E; i++)
		if (ek_kind(&e[i]) != kind || gshift_of(&e[i]) != gsh || e[i].rows != e[0].rows ||
		    e[i].cols != e[0].cols)
			return rq_errf(u->err, -ENOTSUP, "CUDA engine: routed experts of one layer mix weight "
			               "formats (expert %d differs from expert 0 in kind or scale groups); "
			               "pass --device cpu", i);
	size_t one_b = al(lin_bytes(&e[0]));
	*w = (struct ek_w){.kind = kind, .rows = e[0].rows, .cols = e[0].cols, .n = E, .stride = one_b,
	                   .gshift = gsh};
	uint8_t *p = walloc(u, one_b * E);
	if (!p)
		return -1;
	w->data = p;
	for (int i = 0; i < E; i++)
		if (put_linear(u, p + one_b * i, &e[i]))
			return -1;
	if (kind == EK_NVFP4) {
		float *gs = malloc(sizeof(float) * E);
		if (!gs)
			return rq_errf(u->err, -ENOMEM, "out of memory");
		for (int i = 0; i < E; i++)
			gs[i] = e[i].global_scale > 0 ? e[i].global_scale : 1000.0f;
		w->gs = put_floats(u, gs, E);
		free(gs);
		if (!w->gs)
			return -1;
	}
	return 0;
}

static void *kvalloc(struct upl *u, size_t n)
{
	u->kvbytes += al(n);
	if (u->dry)
		return (void *)(uintptr_t)256;
	void *p = lgc_dalloc(u->g, al(n));
	if (!p)
		fail(u, -ENOMEM, "KV cache allocation");
	return p;
}

int lgc_xq_width(const struct lg_model *m)
{
	const struct lg_config *c = &m->cfg;
	int w = c->hidden, cand[] = {c->n_heads_max * c->head_dim, c->inter, c->shared_inter};
	for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
		w = cand[i] > w ? cand[i] : w;
	return w;
}

size_t lgc_act_bytes(const struct lg_model *m, int B, int max_ctx)
{
	const struct lg_config *c = &m->cfg;
	size_t H = c->hidden, hd = c->head_dim, K = c->top_k > 0 ? c->top_k : 1, qkvg = 0, maxc = H;
	for (int i = 0; i < c->n_layers; i++) {
		size_t nh = m->layers[i].n_heads, gd = c->gate == LG_GATE_NONE ? 0
		          : c->gate == LG_GATE_PER_HEAD ? nh : nh * hd;
		size_t w = nh * hd + 2 * (size_t)c->n_kv_heads * hd + gd;
		qkvg = w > qkvg ? w : qkvg;
	}
	size_t qd = (size_t)c->n_heads_max * hd, I = c->inter, S = c->shared_inter, E = c->n_experts;
	maxc = qd > maxc ? qd : maxc;
	maxc = I > maxc ? I : maxc;
	size_t b = 0;
	b += al(2 * B * H * 4) + al(B * qkvg * 4) + al(B * qd * 4) + al(B * 2 * I * 4);
	b += al(B * (I > S ? I : S) * 4) + al(B * (E + 2 * S + 1) * 4) + 2 * al(B * K * 4);
	b += al((size_t)LGC_LOGIT_ROWS * c->vocab * 4) + al((1 + (size_t)B) * 4);
	if (c->n_experts > 0)
		b += al(ek_moe_work_bytes(B, (int)K, c->moe_inter, c->hidden));
	b += al(ek_attn_work_bytes(B < EK_GEMV_MAX_T ? B : EK_GEMV_MAX_T, c->n_heads_max, c->head_dim,
	                           max_ctx));
	b += (size_t)B * maxc * 2 * 5 / 4 + ((size_t)32 << 20);   /* GEMM scratch, cuBLAS */
	if (m->n_act)   /* lgc.xq: one product's quantized input */
		b += al((size_t)B * lgc_xq_width(m) * 4);
	return b;
}

/* W4A4 routed experts (every expert NVFP4 with NVFP4 inputs; check_kinds
 * refused a mix): their input global scales as two device vectors for
 * ek_moe_q, gate/up's (one per expert, fused by the loader) and down's.
 * FP8-input experts (FP8_DYNAMIC) need none: ea8 selects ek_moe_a8. */
static int expert_scales(struct upl *u, const struct lg_layer *L, int E, struct lgc_layer *D)
{
	D->ea8 = L->eg[0].act == LG_A_FP8_TOKEN;
	if (L->eg[0].act != LG_A_NVFP4)
		return 0;
	float *h = malloc(sizeof *h * 2 * (size_t)E);
	if (!h)
		return fail(u, -ENOMEM, "expert scale staging");
	for (int e = 0; e < E; e++) {
		h[e] = L->eg[e].in_gs;
		h[E + e] = L->ed[e].in_gs;
	}
	D->egs_gu = put_floats(u, h, E);
	D->egs_dn = put_floats(u, h + E, E);
	free(h);
	return D->egs_gu && D->egs_dn ? 0 : -1;
}

/* What the kernels cannot take of an FP8 or INT Linear (NULL: they take it):
 * INT asymmetric (zero points) or of a width other than 4 and 8 bits, scale
 * groups that are not one per row nor power-of-two runs of >= 16 columns. */
static const char *wq_unsupported(const struct lg_linear *l, char *why, size_t len)
{
	if (l->kind == LG_W_INT && l->qzero)
		return "asymmetric INT weights (pack-quantized with weight_zero_point)";
	if (l->kind == LG_W_INT && l->bits != 4 && l->bits != 8) {
		snprintf(why, len, "INT%d weights (the CUDA kernels take 4 and 8 bits)", l->bits);
		return why;
	}
	int gw = l->groups > 1 ? l->cols / l->groups : 0;
	if (gw && (gw < 16 || (gw & (gw - 1)))) {
		snprintf(why, len, "%s weights in scale groups of %d columns (the CUDA kernels take one "
		         "scale per row or power-of-two groups of at least 16)", l->kind == LG_W_FP8 ?
		         "FP8" : "INT", gw);
		return why;
	}
	return NULL;
}

/* The kernels read BF16, NVFP4 (NVFP4A16 is the same tensors), FP8 and
 * symmetric INT8/INT4 (wq_unsupported); F16/F32 Linears and the INT forms
 * they do not take are refused by name before any device work rather than
 * read as another kind. */
static int refuse_kind(const struct lg_linear *l, int layer, const char *what, int e,
                       struct rq_err *err)
{
	char why[160];
	const char *no = NULL;
	if (l->kind == LG_W_BF16 || l->kind == LG_W_NVFP4)
		return 0;
	if ((l->kind == LG_W_FP8 || l->kind == LG_W_INT) && !(no = wq_unsupported(l, why, sizeof why)))
		return 0;
	char where[96];
	if (layer < 0)
		snprintf(where, sizeof where, "%s", what);
	else if (e < 0)
		snprintf(where, sizeof where, "model.layers.%d.%s", layer, what);
	else
		snprintf(where, sizeof where, "model.layers.%d.mlp.experts.%d.%s", layer, e, what);
	if (no)
		return rq_errf(err, -ENOTSUP, "CUDA engine: %s has %s; it runs on the CPU engine: pass "
		               "--device cpu (or serve the checkpoint with vLLM)", where, no);
	return rq_errf(err, -ENOTSUP, "CUDA engine: %s has %s weights, which run on the CPU engine: "
	               "pass --device cpu (or serve the checkpoint with vLLM)", where,
	               l->kind == LG_W_F16 ? "F16" : "F32");
}

/* The CUDA kernels compute every family's block (q/k norms or none,
 * biases, the sigmoid or softmax router, the shared-expert gate); what they
 * do not follow (rope_type dynamic past max_position_embeddings) runs on the
 * CPU engine, refused here by name before any device work. */
static int check_family(const struct lg_model *m, struct rq_err *err)
{
	const struct lg_config *c = &m->cfg;
	const struct lg_arch *a = c->arch;
	const char *what = NULL;
	for (int t = 0; !what && t < 2; t++)
		if (c->rope[t].exact_ctx)
			what = "rope_type dynamic";
	if (!what)
		return 0;
	return rq_errf(err, -ENOTSUP, "CUDA engine: model_type %s uses %s, which the CUDA engine does "
	               "not follow: pass --device cpu", a->model_type, what);
}

static int check_kinds(const struct lg_model *m, struct rq_err *err)
{
	const struct lg_config *c = &m->cfg;
	int rc;
	if ((rc = refuse_kind(&m->lm_head, -1, "lm_head", -1, err)))
		return rc;
	for (int i = 0; i < c->n_layers; i++) {
		const struct lg_layer *L = &m->layers[i];
		const struct { const struct lg_linear *l; const char *n; int on; } d[] = {
			{&L->q, "self_attn.q_proj", 1}, {&L->k, "self_attn.k_proj", 1},
			{&L->v, "self_attn.v_proj", 1}, {&L->o, "self_attn.o_proj", 1},
			{&L->g, "self_attn.g_proj", c->gate != LG_GATE_NONE},
			{&L->gate, "mlp.gate_proj", !L->moe}, {&L->up, "mlp.up_proj", !L->moe},
			{&L->down, "mlp.down_proj", !L->moe}, {&L->router, "mlp.gate", L->moe},
			{&L->sg, "mlp.shared_expert.gate_proj", L->moe && c->shared_inter > 0},
			{&L->su, "mlp.shared_expert.up_proj", L->moe && c->shared_inter > 0},
			{&L->sd, "mlp.shared_expert.down_proj", L->moe && c->shared_inter > 0},
		};
		for (size_t k = 0; k < sizeof d / sizeof d[0]; k++)
			if (d[k].on && (rc = refuse_kind(d[k].l, i, d[k].n, -1, err)))
				return rc;
		for (int e = 0; L->moe && e < c->n_experts; e++)
			if ((rc = refuse_kind(&L->eg[e], i, "gate_proj", e, err)) ||
			    (rc = refuse_kind(&L->eu[e], i, "up_proj", e, err)) ||
			    (rc = refuse_kind(&L->ed[e], i, "down_proj", e, err)))
				return rc;
		/* ek_moe_q (NVFP4) and ek_moe_a8 (FP8 per token) quantize every expert's
		 * gate/up and down inputs the same way, or none */
		int aq = L->moe ? L->eg[0].act : 0;
		for (int e = 0; L->moe && e < c->n_experts; e++) {
			const struct lg_linear *x[3] = {&L->eg[e], &L->eu[e], &L->ed[e]};
			for (int j = 0; j < 3; j++)
				if ((int)x[j]->act != aq)
					return rq_errf(err, -ENOTSUP, "CUDA engine: the routed experts of layer %d "
					               "quantize their inputs in different ways (expert %d); it runs "
					               "on the CPU engine: pass --device cpu", i, e);
		}
	}
	if (m->embed_q.kind != LG_W_BF16)   /* ek_embed reads a BF16 table */
		return m->embed_q.kind == LG_W_F16 || m->embed_q.kind == LG_W_F32
		    ? rq_errf(err, -ENOTSUP, "CUDA engine: model.embed_tokens is %s, not BF16; it runs on "
		              "the CPU engine: pass --device cpu", m->embed_q.kind == LG_W_F16 ? "F16" : "F32")
		    : rq_errf(err, -ENOTSUP, "CUDA engine: model.embed_tokens is quantized; a quantized "
		              "embedding runs on the CPU engine: pass --device cpu (or keep the "
		              "embedding BF16: ignore it when quantizing)");
	return 0;
}

int lgc_layout(struct lgc *g, int dry, struct rq_err *err)
{
	int krc = check_family(g->m, err);
	if (!krc)
		krc = check_kinds(g->m, err);
	if (krc)
		return krc;
	const struct lg_model *m = g->m;
	const struct lg_config *c = &m->cfg;
	struct upl u = {.g = g, .dry = dry, .seed = g->o.seed ? g->o.seed : 1, .err = err};
	int rc = -1, H = c->hidden;
	if (!dry) {
		for (int k = 0; k < LGC_SLOTS; k++) {
			u.slot[k] = ek_host_alloc(g->d, LGC_SLOT_BYTES);
			u.draw[k] = ek_alloc(g->d, LGC_SLOT_BYTES);
			if (!u.slot[k] || !u.draw[k]) {
				fail(&u, -ENOMEM, "staging buffers");
				goto out;
			}
		}
	}
	/* embedding, final norm, lm_head (the embedding when tied) */
	struct lg_linear emb = {.kind = LG_W_BF16, .rows = c->vocab, .cols = H, .w = m->embed};
	struct ek_w ew;
	if (one(&u, &emb, &ew))
		goto out;
	g->embed = (uint16_t *)ew.data;
	if (!(g->final_norm = put_floats(&u, m->final_norm, H)))
		goto out;
	if (m->lm_head.kind == LG_W_BF16 && m->lm_head.w && m->lm_head.w == m->embed)
		g->lm_head = ew;
	else if (one(&u, &m->lm_head, &g->lm_head))
		goto out;
	g->aq_head = aq_of(&m->lm_head);
	for (int t = 0; t < 2; t++)
		if (!(g->inv_freq[t] = put_floats(&u, c->rope[t].inv_freq, c->rope[t].rot_dim / 2 + 1)))
			goto out;

	for (int li = 0; li < c->n_layers; li++) {
		const struct lg_layer *L = &m->layers[li];
		struct lgc_layer *D = &g->L[li];
		int hd = c->head_dim, nkv = c->n_kv_heads;
		D->type = L->type;
		D->nh = L->n_heads;
		D->moe = L->moe;
		if (!(D->attn_norm = put_floats(&u, L->attn_norm, H)) ||
		    !(D->mlp_norm = put_floats(&u, L->mlp_norm, H)) ||
		    (L->q_norm && !(D->q_norm = put_floats(&u, L->q_norm, hd))) ||
		    (L->k_norm && !(D->k_norm = put_floats(&u, L->k_norm, hd))))
			goto out;
		const struct lg_linear *att[4] = {&L->q, &L->k, &L->v, &L->g};
		if (group(&u, att, c->gate != LG_GATE_NONE ? 4 : 3, &D->qkvg))
			goto out;
		D->qo = 0;
		D->ko = L->q.rows;
		D->vo = D->ko + L->k.rows;
		D->go = D->vo + L->v.rows;
		if (one(&u, &L->o, &D->o))
			goto out;
		D->aq_o = aq_of(&L->o);
		/* biases: one vector per group, zeros where a member has none */
		const struct lg_linear *qkv[3] = {&L->q, &L->k, &L->v};
		int qoff[3] = {D->qo, D->ko, D->vo};
		if ((L->q.bias && !(D->qkvg_b = put_bias(&u, qkv, qoff, 3, D->qkvg.width))) ||
		    (L->o.bias && !(D->o_b = put_floats(&u, L->o.bias, H))))
			goto out;
		D->sgo = -1;
		if (!L->moe) {
			const struct lg_linear *gu[2] = {&L->gate, &L->up};
			if (group(&u, gu, 2, &D->gu) || one(&u, &L->down, &D->down))
				goto out;
			D->aq_down = aq_of(&L->down);
			int goff[2] = {D->gu.off[0], D->gu.off[0] + L->gate.rows};
			if ((L->gate.bias && !(D->gu_b = put_bias(&u, gu, goff, 2, D->gu.width))) ||
			    (L->down.bias && !(D->down_b = put_floats(&u, L->down.bias, H))))
				goto out;
		} else {
			const struct lg_linear *rsu[4] = {&L->router, &L->sg, &L->su, &L->sgate};
			int sgate = c->shared_inter > 0 && c->arch->shared_gate;
			if (group(&u, rsu, c->shared_inter > 0 ? 3 + sgate : 1, &D->rsu))
				goto out;
			if (sgate)
				D->sgo = c->n_experts + 2 * c->shared_inter;
			if (c->shared_inter > 0 && one(&u, &L->sd, &D->sd))
				goto out;
			if (!(D->bias = put_floats(&u, L->bias, c->n_experts)) ||
			    experts(&u, L->eg, c->n_experts, &D->eg) || experts(&u, L->eu, c->n_experts, &D->eu) ||
			    experts(&u, L->ed, c->n_experts, &D->ed) || expert_scales(&u, L, c->n_experts, D))
				goto out;
			D->aq_sd = aq_of(&L->sd);
		}
		long cap = g->o.max_ctx;
		if (L->type == LG_SLIDING && (long)c->sliding_window + g->B - 1 < cap)
			cap = (long)c->sliding_window + g->B - 1;
		D->cap = (int)cap;
		size_t kvb = ek_kv_bytes(g->kv_type, D->cap, nkv, hd);
		if (!(D->kc = kvalloc(&u, kvb)) || !(D->vc = kvalloc(&u, kvb)))
			goto out;
	}
	if (!dry && (rc = ek_sync(g->d))) {
		fail(&u, rc, "upload");
		goto out;
	}
	rc = 0;
out:
	g->plan.weights = u.wbytes;
	g->plan.kv = u.kvbytes;
	g->plan.staging = dry || !rc ? (size_t)LGC_SLOTS * LGC_SLOT_BYTES : 0;
	g->st.upload_bytes = u.moved;
	for (int k = 0; k < LGC_SLOTS; k++) {
		ek_host_free(g->d, u.slot[k]);
		ek_free(g->d, u.draw[k]);
	}
	if (rc == -1)
		rc = err && err->code ? err->code : -EIO;
	return rc;
}

int lgc_kv_parse(const char *s)
{
	if (!s || !strcmp(s, "bf16"))
		return EK_KV_BF16;
	if (!strcmp(s, "f32"))
		return EK_KV_F32;
	if (!strcmp(s, "fp8"))
		return EK_KV_FP8;
	return -1;
}

int lgc_plan_make(const struct lg_model *m, const struct lgc_opts *o, struct lgc_plan *p,
                  struct rq_err *err)
{
	struct lgc g = {.m = m, .o = *o};
	const struct lg_config *c = &m->cfg;
	if (o->max_ctx < 1)
		return rq_errf(err, -EINVAL, "context length %d < 1", o->max_ctx);
	if ((g.kv_type = lgc_kv_parse(o->kv)) < 0)
		return rq_errf(err, -EINVAL, "unknown KV cache type '%s' (bf16, f32, fp8)", o->kv);
	g.B = o->max_batch > 0 ? o->max_batch : 256;
	if (o->gemv_prefill && g.B > EK_GEMV_MAX_T)
		g.B = EK_GEMV_MAX_T;
	if (g.B > o->max_ctx)
		g.B = o->max_ctx;
	struct lgc_layer *L = calloc(c->n_layers, sizeof *L);
	if (!L)
		return rq_errf(err, -ENOMEM, "out of memory");
	g.L = L;
	int rc = lgc_layout(&g, 1, err);
	free(L);
	if (rc)
		return rc;
	memset(p, 0, sizeof *p);
	p->weights = g.plan.weights;
	p->kv = g.plan.kv;
	p->staging = g.plan.staging;
	p->act = lgc_act_bytes(m, g.B, o->max_ctx);
	p->total = p->weights + p->kv + p->act + p->staging;
	for (int i = 0; i < c->n_layers; i++)
		if (m->layers[i].type == LG_FULL)
			p->kv_per_pos += 2 * ek_kv_bytes(g.kv_type, 1, c->n_kv_heads, c->head_dim);
	p->budget = o->mem_limit;
	p->max_ctx = o->max_ctx;
	p->batch = g.B;
	p->kv_type = g.kv_type;
	p->layers = c->n_layers;
	return 0;
}

void lgc_plan_text(const struct lgc_plan *p, char *buf, size_t len)
{
	static const char *kv[] = {"f32", "bf16", "fp8"};
	double G = 1e9;
	int n = snprintf(buf, len,
	    "memory plan%s%s: weights %.2f GB, KV cache %.2f GB (%s, %d positions, %.1f KiB per "
	    "position on full layers), activations %.2f GB (batch %d), upload staging %.2f GB; "
	    "total %.2f GB", p->device[0] ? " on " : "", p->device, p->weights / G, p->kv / G,
	    kv[p->kv_type], p->max_ctx, p->kv_per_pos / 1024.0, p->act / G, p->batch, p->staging / G,
	    p->total / G);
	if (n < 0 || (size_t)n >= len)
		return;
	if (p->budget)
		snprintf(buf + n, len - n, " of %.2f GB available%s%s", p->budget / G,
		         p->dev_total ? " on the device" : " (--gpu-mem)",
		         p->total <= p->budget ? ": fits" : ": DOES NOT FIT");
}
