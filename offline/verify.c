/* verify.c — byte comparison of two checkpoints, and recipe diagnosis.
 *
 * Two phases: first every comparison and diagnosis is planned (and each
 * tensor it will read declared to its checkpoint's reader, vread.h), then
 * they run: in the remote checkpoint's file order when one side is hf://
 * (so its reads coalesce into few large range requests; results are then
 * reported in that order), else in name order. */
#include "base/grow.h"
#include "offline/verify.h"
#include "offline/vread.h"
#include "plan/ckpt.h"
#include "plan/pyre.h"
#include "base/err.h"
#include "quant/quant.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ent {
	char *name;
	const struct st_tensor *t;
	int shard;
};

struct list {
	struct ent *e;
	size_t n, cap;
};

static int collect(void *ctx, const char *name, const struct st_tensor *t, int shard)
{
	struct list *l = ctx;
	if (RQ_GROW(l->e, l->n, l->cap, 1024))
		return -ENOMEM;
	l->e[l->n++] = (struct ent){.name = (char *)name, .t = t, .shard = shard};
	return 0;
}

static int cmp_ent(const void *a, const void *b)
{
	return strcmp(((const struct ent *)a)->name, ((const struct ent *)b)->name);
}

static const struct ent *lookup(const struct list *l, const char *name)
{
	struct ent key = {.name = (char *)name};
	return bsearch(&key, l->e, l->n, sizeof *l->e, cmp_ent);
}

static int compare_tensor(struct vread *a, const struct ent *x, struct vread *b,
                          const struct ent *y, uint64_t *ndiff, struct rq_err *err)
{
	/* buffers sized to the tensor (most are small), at most 16 MiB */
	uint64_t len = x->t->end - x->t->begin, n = 0;
	uint64_t chunk = len < (16 << 20) ? (len ? len : 1) : (16 << 20);
	uint8_t *p = malloc(chunk), *q = malloc(chunk);
	int rc = p && q ? 0 : -ENOMEM;
	for (uint64_t off = 0; off < len && !rc; off += chunk) {
		uint64_t l = len - off < chunk ? len - off : chunk;
		rc = vread_pread(a, x->shard, x->t, off, p, l, err);
		if (!rc)
			rc = vread_pread(b, y->shard, y->t, off, q, l, err);
		for (uint64_t i = 0; i < l && !rc; i++)
			n += p[i] != q[i];
	}
	free(p);
	free(q);
	*ndiff = n;
	return rc;
}

/* Reads a whole tensor into a new buffer. */
static int load(struct vread *c, const struct ent *e, uint8_t **out, struct rq_err *err)
{
	uint8_t *b = malloc(e->t->end - e->t->begin + 1);
	if (!b)
		return -ENOMEM;
	int rc = vread_pread(c, e->shard, e->t, 0, b, e->t->end - e->t->begin, err);
	if (rc) {
		free(b);
		return rc;
	}
	*out = b;
	return 0;
}

static int ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

/* 1 if --tensors (re.search) selects name or is not given, 0 if not, or
 * the pattern's error (a limit hit fails the verify). */
static int wanted(const struct rq_pyre *re, const char *name, struct rq_err *err)
{
	if (!re)
		return 1;
	int rc = rq_pyre_exec(re, name, err);
	if (rc < 0)
		rq_err_prefix(err, "--tensors");
	return rc;
}

/* One job (a module or a gate/up pair) of BF16 weights from `src` against
 * ref's NVFP4 tensors, for every recipe variant. */
static int diagnose(struct vread *src, const struct list *sl, struct vread *ref,
                    const struct list *rl, char *const *mods, int nm, rq_verify_fn fn, void *ctx,
                    struct rq_vsummary *sum, struct rq_err *err)
{
	uint8_t *w[2] = {0}, *rp[2] = {0}, *rs[2] = {0}, *rg[2] = {0}, *op[2] = {0}, *os[2] = {0};
	struct rq_qmod qm[2];
	int rc = 0;
	char nm_buf[1100];
	for (int s = 0; s < nm && !rc; s++) {
		const char *suf[3] = {".weight_packed", ".weight_scale", ".weight_global_scale"};
		uint8_t **dst[3] = {&rp[s], &rs[s], &rg[s]};
		snprintf(nm_buf, sizeof nm_buf, "%s.weight", mods[s]);
		const struct ent *we = lookup(sl, nm_buf);
		rc = load(src, we, &w[s], err);
		for (int k = 0; k < 3 && !rc; k++) {
			snprintf(nm_buf, sizeof nm_buf, "%s%s", mods[s], suf[k]);
			const struct ent *re = lookup(rl, nm_buf);
			if (!re)
				rc = rq_errf(err, -ENOENT, "reference lacks %s", nm_buf);
			else
				rc = load(ref, re, dst[k], err);
		}
		uint64_t rows = we->t->shape[0], cols = we->t->shape[1];
		if (!rc && (we->t->dtype != ST_BF16 || we->t->ndim != 2 || !rows || !cols || cols % 16))
			rc = rq_errf(err, -EPROTO, "%s.weight %s; only 2-D BF16 weights with a multiple of 16 "
			             "columns are requantized", mods[s], we->t->dtype != ST_BF16
			             ? "is not BF16" : we->t->ndim != 2 ? "is not 2-D" : !rows || !cols
			             ? "is zero-sized" : "has a number of columns that is not a multiple of 16");
		op[s] = malloc(rows * cols / 2 + 1);
		os[s] = malloc(rows * cols / 16 + 1);
		if (!rc && (!op[s] || !os[s]))
			rc = -ENOMEM;
		qm[s] = (struct rq_qmod){.w = (const uint16_t *)w[s], .rows = rows, .cols = cols,
		                         .packed = op[s], .scales = os[s]};
	}
	unsigned variants = 0;
	uint64_t best = UINT64_MAX;
	for (int r = 0; r < RQ_RECIPE_COUNT && !rc; r++) {
		float gs;
		int bad;
		rc = rq_quantize_job((enum rq_recipe)r, qm, nm, &gs, &bad, NULL);
		if (rc == -EDOM)
			rc = rq_errf(err, rc, "%s.weight holds NaN or Inf", mods[bad]);
		uint64_t nd = 0;
		for (int s = 0; s < nm && !rc; s++) {
			uint64_t np = qm[s].rows * qm[s].cols / 2, ns = np / 8;
			for (uint64_t i = 0; i < np; i++)
				nd += op[s][i] != rp[s][i];
			for (uint64_t i = 0; i < ns; i++)
				nd += os[s][i] != rs[s][i];
			nd += memcmp(&gs, rg[s], 4) != 0;
		}
		if (!rc && nd == 0)
			variants |= 1u << r;
		if (nd < best)
			best = nd;
	}
	for (int s = 0; s < nm && !rc; s++) {
		struct rq_vresult res = {.kind = RQ_V_MODULE, .name = mods[s], .variants = variants,
		                         .best_ndiff = best};
		fn(ctx, &res);
		sum->modules++;
		sum->modules_reproduced += variants != 0;
		sum->variants_all &= variants;
	}
	for (int s = 0; s < 2; s++) {
		free(w[s]);
		free(rp[s]);
		free(rs[s]);
		free(rg[s]);
		free(op[s]);
		free(os[s]);
	}
	return rc;
}

static int open_one(const char *path, const struct rq_src_reader *rd, struct rq_ckpt **out,
                    struct rq_err *err)
{
	return rd ? rq_ckpt_open_reader(rd, out, err) : rq_ckpt_open(path, out, err);
}

int rq_verify(const char *dir, const char *ref, const char *source, const char *regex,
              rq_verify_fn fn, void *ctx, struct rq_vsummary *sum, struct rq_err *err)
{
	const struct rq_src_reader *none[3] = {NULL, NULL, NULL};
	return rq_verify_readers(dir, ref, source, none, regex, fn, ctx, sum, err);
}

/* A planned comparison (x in DIR, y in REF) or diagnosis (a module, or a
 * gate/up pair, BF16 in src and NVFP4 in REF). */
struct pair {
	const struct ent *x, *y;
	int shape_mismatch;
	int key_shard;             /* where the coalesced side reads it: the order */
	uint64_t key_off;
};

struct mjob {
	int pass;                  /* 0: BF16 in DIR, 1: in --source */
	char *mods[2];
	int nm;
	int key_shard;
	uint64_t key_off;
};

static int cmp_key(int sa, uint64_t oa, int sb, uint64_t ob)
{
	if (sa != sb)
		return sa < sb ? -1 : 1;
	return oa < ob ? -1 : oa > ob;
}

static int cmp_pair(const void *a, const void *b)
{
	const struct pair *p = a, *q = b;
	int c = cmp_key(p->key_shard, p->key_off, q->key_shard, q->key_off);
	return c ? c : strcmp(p->x->name, q->x->name);
}

static int cmp_mjob(const void *a, const void *b)
{
	const struct mjob *p = a, *q = b;
	int c = cmp_key(p->key_shard, p->key_off, q->key_shard, q->key_off);
	return c ? c : p->pass != q->pass ? p->pass - q->pass : strcmp(p->mods[0], q->mods[0]);
}

struct plan {
	struct pair *p;
	size_t np, capp;
	struct mjob *m;
	size_t nmj, capm;
};

static void plan_free(struct plan *pl)
{
	for (size_t i = 0; i < pl->nmj; i++) {
		free(pl->m[i].mods[0]);
		free(pl->m[i].mods[1]);
	}
	free(pl->m);
	free(pl->p);
}

static int need(struct vread *v, const struct ent *e)
{
	return e ? vread_need(v, e->shard, e->t) : 0;
}

/* Plans one diagnosis (mods[0..nm)) and declares what it reads. Its place
 * in the order (the pairs' order): its REF packed tensor when order is
 * 'r', its BF16 weight when 'd' and it is DIR's (pass 0) or 's' and it is
 * the source's; else after everything. */
static int plan_module(struct plan *pl, int pass, char *const *mods, int nm,
                       const struct list *sl, struct vread *vs, const struct list *rl,
                       struct vread *vr, char order)
{
	if (RQ_GROW(pl->m, pl->nmj, pl->capm, 256))
		return -ENOMEM;
	struct mjob *j = &pl->m[pl->nmj++];   /* (freed by plan_free, even half made) */
	*j = (struct mjob){.pass = pass, .nm = nm, .key_shard = INT_MAX};
	int rc = 0;
	char nm_buf[1100];
	for (int s = 0; s < nm && !rc; s++) {
		if (!(j->mods[s] = strdup(mods[s])))
			rc = -ENOMEM;
		snprintf(nm_buf, sizeof nm_buf, "%s.weight", mods[s]);
		const struct ent *we = lookup(sl, nm_buf);
		if (!rc)
			rc = need(vs, we);
		if (s == 0 && we && ((order == 'd' && pass == 0) || (order == 's' && pass == 1))) {
			j->key_shard = we->shard;
			j->key_off = we->t->begin;
		}
		const char *suf[3] = {".weight_packed", ".weight_scale", ".weight_global_scale"};
		for (int k = 0; k < 3 && !rc; k++) {
			snprintf(nm_buf, sizeof nm_buf, "%s%s", mods[s], suf[k]);
			const struct ent *re = lookup(rl, nm_buf);
			rc = need(vr, re);
			if (s == 0 && k == 0 && re && order == 'r') {
				j->key_shard = re->shard;
				j->key_off = re->t->begin;
			}
		}
	}
	return rc;
}

static int run_pair(const struct pair *p, struct vread *va, struct vread *vb, rq_verify_fn fn,
                    void *ctx, struct rq_vsummary *sum, struct rq_err *err)
{
	struct rq_vresult r = {.kind = RQ_V_TENSOR, .name = p->x->name,
	                       .bytes = p->x->t->end - p->x->t->begin,
	                       .shape_mismatch = p->shape_mismatch};
	if (!r.shape_mismatch) {
		int rc = compare_tensor(va, p->x, vb, p->y, &r.ndiff, err);
		if (rc)
			return rc;
	}
	sum->compared++;
	if (r.shape_mismatch || r.ndiff)
		sum->differ++;
	else
		sum->equal++;
	fn(ctx, &r);
	return 0;
}

int rq_verify_readers(const char *dir, const char *ref, const char *source,
                      const struct rq_src_reader *const rd[3], const char *regex,
                      rq_verify_fn fn, void *ctx, struct rq_vsummary *sum, struct rq_err *err)
{
	struct rq_ckpt *a = NULL, *b = NULL, *s = NULL;
	struct vread *va = NULL, *vb = NULL, *vs = NULL;
	struct list la = {0}, lb = {0}, ls = {0};
	struct plan pl = {0};
	struct rq_pyre *re = NULL;
	int rc;
	memset(sum, 0, sizeof *sum);
	sum->variants_all = (1u << RQ_RECIPE_COUNT) - 1;
	if (regex && (rc = rq_pyre_compile(&re, regex, RQ_PYRE_SEARCH, NULL, err))) {
		rq_err_prefix(err, "--tensors");
		return rc;
	}
	rc = open_one(dir, rd[0], &a, err);
	if (!rc)
		rc = open_one(ref, rd[1], &b, err);
	if (!rc && (source || rd[2]))
		rc = open_one(source, rd[2], &s, err);
	if (!rc)
		rc = rq_ckpt_each(a, collect, &la, err);
	if (!rc)
		rc = rq_ckpt_each(b, collect, &lb, err);
	if (!rc && s)
		rc = rq_ckpt_each(s, collect, &ls, err);
	if (!rc && ((rc = vread_open(a, rd[0] != NULL, &va)) ||
	            (rc = vread_open(b, rd[1] != NULL, &vb)) ||
	            (s && (rc = vread_open(s, rd[2] != NULL, &vs)))))
		rc = rq_errf(err, rc, "out of memory");
	if (rc)
		goto out;
	if (la.n)             /* qsort(NULL, 0) is undefined */
		qsort(la.e, la.n, sizeof *la.e, cmp_ent);
	if (lb.n)
		qsort(lb.e, lb.n, sizeof *lb.e, cmp_ent);
	if (ls.n)
		qsort(ls.e, ls.n, sizeof *ls.e, cmp_ent);
	/* The order things run in: a remote side's file order (REF's first:
	 * the diagnoses read it too), so its reads coalesce; else names. */
	char order = rd[1] ? 'r' : rd[0] ? 'd' : rd[2] ? 's' : 0;
	/* plan: the tensors both have */
	for (size_t i = 0; i < la.n && !rc; i++) {
		const struct ent *x = &la.e[i];
		if ((rc = wanted(re, x->name, err)) <= 0)
			continue;
		rc = 0;
		const struct ent *y = lookup(&lb, x->name);
		if (!y) {
			sum->only_dir++;
			continue;
		}
		if (RQ_GROW(pl.p, pl.np, pl.capp, 1024)) {
			rc = -ENOMEM;
			break;
		}
		struct pair *p = &pl.p[pl.np++];
		*p = (struct pair){.x = x, .y = y};
		p->shape_mismatch = x->t->dtype != y->t->dtype || x->t->ndim != y->t->ndim ||
		                    memcmp(x->t->shape, y->t->shape,
		                           x->t->ndim * sizeof x->t->shape[0]);
		const struct ent *k = order == 'r' ? y : x;
		p->key_shard = order == 'r' || order == 'd' ? k->shard : 0;
		p->key_off = order == 'r' || order == 'd' ? k->t->begin : 0;
		if (!p->shape_mismatch && ((rc = need(va, x)) || (rc = need(vb, y))))
			break;
	}
	for (size_t i = 0; i < lb.n && !rc; i++) {
		int w = wanted(re, lb.e[i].name, err);
		if (w < 0)
			rc = w;
		else if (w && !lookup(&la, lb.e[i].name))
			sum->only_ref++;
	}
	/* plan: recipe diagnosis of modules BF16 in dir (or source) and NVFP4 in ref */
	for (int pass = 0; pass < 2 && !rc; pass++) {
		struct list *sl = pass == 0 ? &la : &ls;
		struct vread *vsrc = pass == 0 ? va : vs;
		if (!vsrc)
			continue;
		for (size_t i = 0; i < lb.n && !rc; i++) {
			const char *n = lb.e[i].name;
			if (!ends_with(n, ".weight_packed"))
				continue;
			char mod[2][1024], w[1100];
			snprintf(mod[0], sizeof mod[0], "%.*s", (int)(strlen(n) - 14), n);
			int wn = wanted(re, n, err);
			if (wn <= 0) {
				rc = wn;
				continue;
			}
			snprintf(w, sizeof w, "%s.weight", mod[0]);
			if (!lookup(sl, w) || (pass == 1 && lookup(&la, w)))
				continue;
			if (ends_with(mod[0], ".up_proj")) {   /* done with its gate */
				char g[1100];
				snprintf(g, sizeof g, "%.*s.gate_proj.weight", (int)(strlen(mod[0]) - 8), mod[0]);
				if (lookup(sl, g))
					continue;
			}
			int nm = 1;
			if (ends_with(mod[0], ".gate_proj")) {
				snprintf(mod[1], sizeof mod[1], "%.*s.up_proj", (int)(strlen(mod[0]) - 10),
				         mod[0]);
				snprintf(w, sizeof w, "%s.weight", mod[1]);
				char wp[1100];
				snprintf(wp, sizeof wp, "%s.weight_packed", mod[1]);
				nm = lookup(sl, w) && lookup(&lb, wp) ? 2 : 1;
			}
			char *mods[2] = {mod[0], nm == 2 ? mod[1] : NULL};
			rc = plan_module(&pl, pass, mods, nm, sl, vsrc, &lb, vb, order);
		}
	}
	/* run: comparisons and diagnoses merged in that order (stable: names
	 * break ties, and keep the order when nothing is remote) */
	if (!rc && order && pl.np)
		qsort(pl.p, pl.np, sizeof *pl.p, cmp_pair);
	if (!rc && order && pl.nmj)
		qsort(pl.m, pl.nmj, sizeof *pl.m, cmp_mjob);
	for (size_t i = 0, j = 0; !rc && (i < pl.np || j < pl.nmj);) {
		const struct pair *p = i < pl.np ? &pl.p[i] : NULL;
		const struct mjob *m = j < pl.nmj ? &pl.m[j] : NULL;
		if (p && (!m || !order ||
		          cmp_key(p->key_shard, p->key_off, m->key_shard, m->key_off) <= 0)) {
			rc = run_pair(p, va, vb, fn, ctx, sum, err);
			i++;
		} else {
			rc = diagnose(m->pass ? vs : va, m->pass ? &ls : &la, vb, &lb, m->mods, m->nm,
			              fn, ctx, sum, err);
			j++;
		}
	}
	if (!sum->modules)
		sum->variants_all = 0;
	for (int i = 0; i < 3; i++)
		vread_stats(i == 0 ? va : i == 1 ? vb : vs, &sum->requests[i], &sum->fetched[i]);
out:
	plan_free(&pl);
	rq_pyre_free(re);
	free(la.e);
	free(lb.e);
	free(ls.e);
	vread_close(va);
	vread_close(vb);
	vread_close(vs);
	rq_ckpt_close(a);
	rq_ckpt_close(b);
	rq_ckpt_close(s);
	return rc;
}
