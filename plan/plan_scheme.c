/* plan_scheme.c — which modules a data-free scheme (--scheme nvfp4a16,
 * fp8-dynamic, w8a16, w4a16) quantizes, how they group into jobs, and which
 * ignore entries of an already quantized SRC go. The rules are
 * llm-compressor 0.14.0.1 model_free_ptq's (the decision is written out at
 * the top of plan.c), except that --scheme nvfp4 (W4A4) fuses as oneshot
 * does (fsets_oneshot) and adds calibration (plan_w4a4.c); the Laguna fix
 * (RQ_SCHEME_NVFP4) never comes here. */
#include "base/grow.h"
#include "plan/plan_int.h"
#include "plan/qconfig.h"
#include "plan/rules.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const default_targets[] = {"Linear"};
/* Without --ignore: lm_head (llm-compressor's default) and, unlike
 * model_free_ptq, the embedding and the MoE routers too, as every
 * llm-compressor example does: vLLM builds embeddings (VocabParallelEmbedding)
 * and most routers without a quantization method, so a checkpoint with those
 * quantized does not load. An explicit --ignore list replaces this one (pass
 * --ignore lm_head alone to reproduce model_free_ptq(ignore=["lm_head"])). */
static const char *const default_ignore[] = {"lm_head", "re:.*embed_tokens$", "re:.*\\.gate$"};

/* One tensor of SRC, for lookups by name across shards. */
struct tref {
	const char *name;
	int src;
	const struct st_tensor *t;
};

struct sel {
	struct tref *all;         /* [nall] every SRC tensor, sorted by name */
	size_t nall;
	struct rq_rules targets, ignore;
	int all_linear;           /* targets empty or naming "Linear": every module */
	const char *const *tg;    /* the lists as given (or the defaults) */
	size_t ntg;
	const char *const *ig;
	size_t nig;
};

static int cmp_tref(const void *a, const void *b)
{
	return strcmp(((const struct tref *)a)->name, ((const struct tref *)b)->name);
}

/* A name given as up to three pieces (no buffer, so no length limit),
 * compared with a whole name as strcmp would compare their concatenation. */
struct nkey {
	const char *part[3];
	size_t len[3];
};

static int cmp_nkey(const struct nkey *k, const char *name)
{
	const unsigned char *n = (const unsigned char *)name;
	for (int i = 0; i < 3; i++)
		for (size_t j = 0; j < k->len[i]; j++, n++) {
			unsigned char c = (unsigned char)k->part[i][j];
			if (c != *n)
				return c < *n ? -1 : 1;
		}
	return *n ? -1 : 0;
}

static struct nkey nkey3(const char *a, size_t alen, const char *b, const char *c)
{
	return (struct nkey){{a, b, c}, {alen, strlen(b), strlen(c)}};
}

static int cmp_tref_key(const void *k, const void *e)
{
	return cmp_nkey(k, ((const struct tref *)e)->name);
}

/* The SRC tensor named a[0..alen) b c, or NULL. */
static const struct tref *find_t(const struct sel *s, const char *a, size_t alen, const char *b,
                                 const char *c)
{
	struct nkey key = nkey3(a, alen, b, c);
	return s->nall ? bsearch(&key, s->all, s->nall, sizeof *s->all, cmp_tref_key) : NULL;
}

static int ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

/* The longest module name a scheme quantizes, in bytes: plan.c, plan_files.c
 * and qconfig.c build "<module>.<part>" names in 1100-byte buffers. */
#define MOD_NAME_MAX 1023

/* The module of a tensor named <module>.weight, into *buf (grown as needed,
 * so any length): 1, or 0 when the tensor is no .weight, or -ENOMEM. */
static int weight_module(const char *n, char **buf, size_t *cap)
{
	size_t l = strlen(n);
	if (!ends_with(n, ".weight"))
		return 0;
	if (l - 6 > *cap) {
		char *b = realloc(*buf, l - 6);
		if (!b)
			return -ENOMEM;
		*buf = b;
		*cap = l - 6;
	}
	memcpy(*buf, n, l - 7);
	(*buf)[l - 7] = 0;
	return 1;
}

/* 1 if an entry of r matches module, 0 if none, or a pattern's error. */
static int any_match(const struct rq_rules *r, const char *module, struct rq_err *err)
{
	long k;
	int rc = rq_rules_first(r, module, &k, err);
	return rc < 0 ? rc : k >= 0;
}

/* compressed-tensors match_quantizable_tensors, for a module's .weight:
 * 1 or 0, or a pattern's error (a limit hit refuses the plan). */
static int selected(const struct sel *s, const char *module, struct rq_err *err)
{
	if (ends_with(module, "norm"))
		return 0;
	int m = s->all_linear ? 1 : any_match(&s->targets, module, err);
	if (m <= 0) {
		if (m < 0)
			rq_err_prefix(err, "--targets");
		return m;
	}
	m = any_match(&s->ignore, module, err);
	if (m < 0)
		rq_err_prefix(err, "--ignore");
	return m < 0 ? m : !m;
}

/* Quantized already (compressed-tensors writes a weight_scale for every
 * scheme; NVFP4/int packs also a weight_packed): left exactly as it is. */
static int quantized_in_src(const struct sel *s, const char *module)
{
	size_t l = strlen(module);
	return find_t(s, module, l, ".weight_scale", "") || find_t(s, module, l, ".weight_packed", "");
}

static int src_dtype(enum st_dtype d, enum rq_src_dtype *out)
{
	switch (d) {
	case ST_BF16: *out = RQ_SRC_BF16; return 0;
	case ST_F16: *out = RQ_SRC_F16; return 0;
	case ST_F32: *out = RQ_SRC_F32; return 0;
	default: return -1;
	}
}

static int sel_init(struct sel *s, const struct rq_plan *p, const struct rq_plan_opts *o,
                    struct st_header **hdr, struct rq_err *err)
{
	s->tg = o->targets ? o->targets : default_targets;
	s->ntg = o->targets ? o->ntargets : 1;
	s->ig = o->ignore ? o->ignore : default_ignore;
	s->nig = o->ignore ? o->nignore : sizeof default_ignore / sizeof *default_ignore;
	s->all_linear = s->ntg == 0;
	for (size_t k = 0; k < s->ntg; k++)
		s->all_linear |= !strcmp(s->tg[k], "Linear");
	int rc = rq_rules_init(&s->targets, s->tg, s->ntg, err);
	if (rc) {
		rq_err_prefix(err, "--targets");
		return rc;
	}
	rc = rq_rules_init(&s->ignore, s->ig, s->nig, err);
	if (rc) {
		rq_err_prefix(err, "--ignore");
		return rc;
	}
	size_t n = 0, cap = 0;
	for (size_t f = 0; f < p->nsrcs; f++)
		for (size_t i = 0; hdr[f] && i < hdr[f]->n; i++) {
			if (RQ_GROW(s->all, n, cap, 1024))
				return -ENOMEM;
			s->all[n++] = (struct tref){hdr[f]->t[i].name, (int)f, &hdr[f]->t[i]};
		}
	s->nall = n;
	qsort(s->all, n, sizeof *s->all, cmp_tref);
	return 0;
}

static void sel_free(struct sel *s)
{
	free(s->all);
	rq_rules_free(&s->targets);
	rq_rules_free(&s->ignore);
}

/* model_free_ptq splits a 3-D gate_up_proj/down_proj into per-expert 2-D
 * weights (renaming them) before matching; requantfs does not yet. */
static int refuse_fused_experts(const struct rq_plan *p, const struct sel *s, struct rq_err *err)
{
	for (size_t i = 0; i < s->nall; i++) {
		const struct st_tensor *t = s->all[i].t;
		if (t->ndim == 3 && (strstr(t->name, "gate_up_proj") || strstr(t->name, "down_proj")))
			return rq_errf(err, -ENOTSUP, "SRC shard %s: %s is a 3-D fused-experts tensor "
			               "[%llu, %llu, %llu]; model_free_ptq splits these into per-expert "
			               "2-D weights, which requantfs does not do yet (use the Laguna "
			               "form without --scheme, or split the experts first)",
			               p->srcs[s->all[i].src].name, t->name, (unsigned long long)t->shape[0],
			               (unsigned long long)t->shape[1], (unsigned long long)t->shape[2]);
	}
	return 0;
}

/* One chosen module, checked against what the scheme can take. */
static int take_module(struct rq_plan *p, enum rq_scheme sc, const struct tref *r,
                       const char *module, struct rq_err *err)
{
	const struct st_tensor *w = r->t;
	const char *shard = p->srcs[r->src].name, *sn = rq_scheme_name(sc);
	enum rq_src_dtype dt;
	if (strlen(module) > MOD_NAME_MAX)      /* the name shortened: messages are 1 KiB */
		return rq_errf(err, -ENAMETOOLONG, "SRC shard %s: %.96s...%s: the module name is %zu "
		               "bytes; --scheme %s quantizes modules of at most %d bytes (add "
		               "'re:.{%d}' to --ignore to leave such modules as they are)", shard,
		               w->name, w->name + strlen(w->name) - 48, strlen(module), sn,
		               MOD_NAME_MAX, MOD_NAME_MAX + 1);
	if (src_dtype(w->dtype, &dt))
		return rq_errf(err, -EPROTO, "SRC shard %s: %s is %s; --scheme %s quantizes only BF16, "
		               "F16 or F32 weights (add '%s' to --ignore to leave it as it is)", shard,
		               w->name, st_dtype_name(w->dtype), sn, module);
	if (p->observer != RQ_OBSERVER_MINMAX && rq_observer_ok(sc, p->mod_recipe, dt, p->observer))
		return rq_errf(err, -ENOTSUP, "SRC shard %s: %s is %s; --observer %s searches BF16 "
		               "weights only, as llm-compressor computes it (add '%s' to --ignore, or use "
		               "--observer minmax)", shard, w->name, st_dtype_name(w->dtype),
		               rq_observer_name(p->observer), module);
	if (w->ndim != 2)
		return rq_errf(err, -EPROTO, "SRC shard %s: %s has %d dimensions; --scheme %s quantizes "
		               "2-D Linear weights only, as model_free_ptq does (add '%s' to --ignore)",
		               shard, w->name, w->ndim, sn, module);
	struct rq_module m = {.src = r->src, .rows = w->shape[0], .cols = w->shape[1], .dtype = dt,
	                      .job = -1};
	/* rq_scheme_layout answers -EINVAL for each of these: give the true reason */
	if (!m.rows || !m.cols)
		return rq_errf(err, -EPROTO, "SRC shard %s: %s is [%llu, %llu], zero-sized: it has no "
		               "elements to quantize (add '%s' to --ignore, or fix the checkpoint)",
		               shard, w->name, (unsigned long long)m.rows, (unsigned long long)m.cols,
		               module);
	if (m.rows > (1ull << 31) || m.cols > (1ull << 31))
		return rq_errf(err, -EPROTO, "SRC shard %s: %s is [%llu, %llu]; --scheme %s quantizes "
		               "weights of at most 2^31 rows and columns (add '%s' to --ignore)", shard,
		               w->name, (unsigned long long)m.rows, (unsigned long long)m.cols, sn, module);
	int rc = rq_scheme_layout(sc, dt, m.rows, m.cols, m.t, &m.nt, &m.out_size);
	if (rc == -EINVAL)
		return rq_errf(err, -EPROTO, "SRC shard %s: %s is [%llu, %llu]; --scheme %s needs the "
		               "input columns to be a multiple of its group size %u (add '%s' to "
		               "--ignore)", shard, w->name, (unsigned long long)m.rows,
		               (unsigned long long)m.cols, sn, rq_scheme_group(sc), module);
	if (rc == -ENOTSUP)
		return rq_errf(err, -ENOTSUP, "SRC shard %s: %s is %s; --scheme %s does not take %s "
		               "weights in this build (add '%s' to --ignore)", shard, w->name,
		               st_dtype_name(w->dtype), sn, st_dtype_name(w->dtype), module);
	if (rc)
		return rq_errf(err, rc, "SRC shard %s: %s: %s", shard, w->name, strerror(-rc));
	m.w_off = 0;   /* set by the caller, who has the header */
	if (!(m.name = strdup(module)))
		return -ENOMEM;
	p->mods[p->nmods++] = m;
	return 0;
}

static int cmp_mod(const void *a, const void *b)
{
	return strcmp(((const struct rq_module *)a)->name, ((const struct rq_module *)b)->name);
}

static int cmp_mod_key(const void *k, const void *e)
{
	return cmp_nkey(k, ((const struct rq_module *)e)->name);
}

/* The chosen module named a[0..alen) b c, or -1. */
static long find_mod(const struct rq_plan *p, const char *a, size_t alen, const char *b,
                     const char *c)
{
	struct nkey key = nkey3(a, alen, b, c);
	struct rq_module *m = bsearch(&key, p->mods, p->nmods, sizeof *p->mods, cmp_mod_key);
	return m ? m - p->mods : -1;
}

static int choose(struct rq_plan *p, const struct rq_plan_opts *o, const struct sel *s,
                  struct st_header **hdr, struct rq_err *err)
{
	p->mods = calloc(s->nall ? s->nall : 1, sizeof *p->mods);
	if (!p->mods)
		return -ENOMEM;
	char *mod = NULL;
	size_t cap = 0;
	int rc = 0;
	for (size_t i = 0; i < s->nall && rc >= 0; i++) {
		rc = weight_module(s->all[i].name, &mod, &cap);
		if (rc > 0)
			rc = selected(s, mod, err);
		if (rc <= 0 || quantized_in_src(s, mod))
			continue;
		rc = take_module(p, o->scheme, &s->all[i], mod, err);
		if (rc)
			break;
		const struct st_header *h = hdr[s->all[i].src];
		p->mods[p->nmods - 1].w_off = h->data_start + s->all[i].t->begin;
	}
	free(mod);
	if (rc < 0)
		return rc;
	if (!p->nmods) {
		char tl[512] = "", il[512] = "";
		for (size_t k = 0; k < s->ntg; k++)
			snprintf(tl + strlen(tl), sizeof tl - strlen(tl), "%s%s", k ? " " : "", s->tg[k]);
		for (size_t k = 0; k < s->nig; k++)
			snprintf(il + strlen(il), sizeof il - strlen(il), "%s%s", k ? " " : "", s->ig[k]);
		return rq_errf(err, -ENOENT, "SRC %s: --targets/--ignore select no module to quantize "
		               "with --scheme %s (targets: %s; ignore: %s; modules already quantized "
		               "and *norm modules are never chosen)", p->src_dir,
		               rq_scheme_name(o->scheme), tl[0] ? tl : "(none)", il[0] ? il : "(none)");
	}
	qsort(p->mods, p->nmods, sizeof *p->mods, cmp_mod);
	return 0;
}

/* ---- jobs: model_free_ptq's fused sets --------------------------------
 *
 * For the NVFP4 schemes a fused set shares one global scale. A set is
 * named by the sets of llmcompressor/entrypoints/model_free/microscale.py:
 *   <P>.q_proj, <P>.k_proj, <P>.v_proj    where <P> ends in attn or attention
 *   <P>.wq_a, <P>.wkv_a_with_mqa          where <P> ends in attn or attention
 *   <P>.gate_proj, <P>.up_proj            where <P> ends in mlp (so MoE
 *                                         experts' gate/up are NOT fused)
 *   <X>w1, <X>w3
 * A set counts only when every member's .weight exists in SRC (model_free
 * refuses a missing partner); its chosen members form one job. */
struct fset {
	const char *parent_end[2];     /* what <P>'s last characters must be, NULL = anything */
	const char *member[3];         /* suffixes; member[0] is the primary */
	int nmember;
	int dot;                       /* members are ".<m>" after <P> (else glued: <X>w1) */
};

static const struct fset fsets[] = {
	{{"attn", "attention"}, {"q_proj", "k_proj", "v_proj"}, 3, 1},
	{{"attn", "attention"}, {"wq_a", "wkv_a_with_mqa"}, 2, 1},
	{{"mlp", NULL}, {"gate_proj", "up_proj"}, 2, 1},
	{{NULL, NULL}, {"w1", "w3"}, 2, 0},
	{{NULL, NULL}, {NULL}, 0, 0},
};

/* --scheme nvfp4 (W4A4) follows oneshot, not model_free_ptq: llmcompressor
 * 0.14.0.1 observers/helpers.py fuse_weight_observers links the weight
 * observers of every module that has ALL the attributes of a group of
 * FUSED_LAYER_NAMES, whatever the parent's name: so <P>.gate_proj/<P>.up_proj
 * of routed experts fuse too (oneshot's qwen2_moe output: experts.N.gate_proj
 * and .up_proj share weight_global_scale), and w1/w3 are <P>.w1, <P>.w3.
 * Input activations are NOT fused there (only weight observers are linked):
 * each module's input_global_scale is its own calibration value (q/k/v and
 * gate/up read the same input, so calibration gives them equal values). */
static const struct fset fsets_oneshot[] = {
	{{NULL, NULL}, {"gate_proj", "up_proj"}, 2, 1},
	{{NULL, NULL}, {"q_proj", "k_proj", "v_proj"}, 3, 1},
	{{NULL, NULL}, {"q_a_proj", "kv_a_proj_with_mqa"}, 2, 1},
	{{NULL, NULL}, {"w1", "w3"}, 2, 1},
	{{NULL, NULL}, {NULL}, 0, 0},
};

static int add_job(struct rq_plan *p, const int *mods, int n)
{
	struct rq_job *j = &p->jobs[p->njobs];
	uint64_t off = 0;
	j->nmod = n;
	for (int s = 0; s < n; s++) {
		struct rq_module *x = &p->mods[mods[s]];
		x->job = (int)p->njobs;
		x->slot = s;
		j->mod[s] = mods[s];
		j->mod_off[s] = off;
		off += x->out_size;
		j->in_size += rq_mod_in_bytes(x);
	}
	j->out_size = off;
	p->njobs++;
	return 0;
}

/* The chosen members of the fused set whose primary module is `primary`
 * (chosen or not), or 0 when primary heads no complete set. */
static int set_of(const struct rq_plan *p, const struct sel *s, const struct fset *sets,
                  const char *primary, int *mods)
{
	for (size_t f = 0; sets[f].nmember; f++) {
		const struct fset *fs = &sets[f];
		size_t pl = strlen(primary), ml = strlen(fs->member[0]) + (size_t)fs->dot;
		if (pl <= ml || strcmp(primary + pl - strlen(fs->member[0]), fs->member[0]) ||
		    (fs->dot && primary[pl - ml] != '.'))
			continue;
		size_t plen = pl - ml;                /* <P> (or <X>) */
		if (fs->parent_end[0]) {
			int ok = 0;
			for (int e = 0; e < 2 && fs->parent_end[e]; e++) {
				size_t el = strlen(fs->parent_end[e]);
				ok |= plen >= el && !strncmp(primary + plen - el, fs->parent_end[e], el);
			}
			if (!ok)
				continue;
		}
		int n = 0, complete = 1;
		for (int k = 0; k < fs->nmember && complete; k++) {
			/* <P>.<member> (glued: <X><member>) and its .weight */
			char mw[64];
			snprintf(mw, sizeof mw, "%s%s.weight", fs->dot ? "." : "", fs->member[k]);
			complete = find_t(s, primary, plen, mw, "") != NULL;
			long mi = complete ? find_mod(p, primary, plen, fs->dot ? "." : "",
			                              fs->member[k]) : -1;
			if (mi >= 0 && p->mods[mi].job < 0)
				mods[n++] = (int)mi;
		}
		return complete ? n : 0;
	}
	return 0;
}

static int make_jobs(struct rq_plan *p, const struct sel *s, enum rq_scheme sc)
{
	p->jobs = calloc(p->nmods, sizeof *p->jobs);
	if (!p->jobs)
		return -ENOMEM;
	char *mod = NULL;
	size_t cap = 0;
	int rc = 0;
	for (size_t i = 0; rq_scheme_shares_scale(sc) && i < s->nall && rc >= 0; i++) {
		rc = weight_module(s->all[i].name, &mod, &cap);
		const struct fset *sets = sc == RQ_SCHEME_NVFP4_W4A4 ? fsets_oneshot : fsets;
		int mods[RQ_JOB_MAX_MODS], k = rc > 0 ? set_of(p, s, sets, mod, mods) : 0;
		if (k > 0)
			add_job(p, mods, k);
	}
	free(mod);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < p->nmods; i++)
		if (p->mods[i].job < 0) {
			int one = (int)i;
			add_job(p, &one, 1);
		}
	return 0;
}

/* ---- the ignore entries of an already quantized SRC ------------------- */

/* Entries matching a newly quantized module are removed (else vLLM would
 * skip those modules). An entry that also matches a module left in
 * BF16/F16/F32 is refused: with it vLLM skips the new ones, without it vLLM
 * expects the unquantized ones quantized. */
static int choose_drops(struct rq_plan *p, const struct sel *s, const struct rq_rules *ign,
                        const char *cfg_path, size_t **drop, size_t *ndrop, struct rq_err *err)
{
	*drop = calloc(ign->n + 1, sizeof **drop);
	p->dropped = calloc(ign->n + 1, sizeof *p->dropped);
	if (!*drop || !p->dropped)
		return -ENOMEM;
	*ndrop = 0;
	char *mod = NULL;
	size_t cap = 0;
	int rc = 0;
	for (size_t k = 0; k < ign->n && !rc; k++) {
		const char *newly = NULL;
		for (size_t i = 0; i < p->nmods && !newly && !rc; i++) {
			int m = rq_rule_match(ign, k, p->mods[i].name, err);
			if (m < 0) {
				rc = m;
				rq_err_prefix(err, "%s: quantization_config.ignore", cfg_path);
			} else if (m) {
				newly = p->mods[i].name;
			}
		}
		if (rc)
			break;
		if (!newly)
			continue;
		for (size_t i = 0; i < s->nall && !rc; i++) {
			enum rq_src_dtype dt;
			if (s->all[i].t->ndim != 2 || src_dtype(s->all[i].t->dtype, &dt))
				continue;
			int w = weight_module(s->all[i].name, &mod, &cap);
			if (w < 0) {
				rc = w;
				break;
			}
			if (!w || ends_with(mod, "norm") || find_mod(p, mod, strlen(mod), "", "") >= 0 ||
			    quantized_in_src(s, mod))
				continue;
			int m = rq_rule_match(ign, k, mod, err);
			if (m <= 0) {
				if (m < 0) {
					rc = m;
					rq_err_prefix(err, "%s: quantization_config.ignore", cfg_path);
				}
				continue;
			}
			rc = rq_errf(err, -EINVAL, "%s: quantization_config.ignore entry '%s' matches "
			             "%s, which --scheme %s quantizes, and %s, which it leaves as it is; "
			             "vLLM could not load either way: add '%s' to --ignore, or "
			             "narrow --targets/--ignore so that the entry's modules are all "
			             "quantized or all left alone", cfg_path, ign->text[k], newly,
			             rq_scheme_name(p->scheme), mod, ign->text[k]);
		}
		if (rc)
			break;
		(*drop)[(*ndrop)++] = k;
		if (!(p->dropped[p->ndropped] = strdup(ign->text[k])))
			rc = -ENOMEM;
		else
			p->ndropped++;
	}
	free(mod);
	return rc;
}

/* The input_activations observer W4A4's config names: the calibration file's
 * calib_observer when it is one `calib run --observer` writes (the name oneshot dumps for
 * that observer), else NULL (the preset's static_minmax; a file that does not say). */
static const char *input_observer(const struct rq_plan *p)
{
	static const char *const known[] = {"static_minmax", "minmax", "mse"};
	for (size_t i = 0; p->calib_observer && i < sizeof known / sizeof *known; i++)
		if (!strcmp(p->calib_observer, known[i]))
			return known[i];
	return NULL;
}

int rq_plan_scheme(struct rq_plan *p, const struct rq_plan_opts *o, const struct rq_rules *ign,
                   struct st_header **hdr, const char *config, size_t config_len,
                   const char *cfg_path, char **new_config, size_t *new_len,
                   struct rq_err *err)
{
	struct sel s = {0};
	size_t *drop = NULL, ndrop = 0, nign = 0;
	const char **names = NULL;
	char **w4_ign = NULL;          /* --scheme nvfp4: oneshot's ignore list */
	int w4a4 = o->scheme == RQ_SCHEME_NVFP4_W4A4;
	int rc = sel_init(&s, p, o, hdr, err);
	if (!rc)
		rc = refuse_fused_experts(p, &s, err);
	if (!rc)
		rc = choose(p, o, &s, hdr, err);
	if (!rc)
		rc = make_jobs(p, &s, o->scheme);
	if (!rc && w4a4)
		rc = rq_plan_w4a4_calib(p, o->calib, err);
	if (!rc && w4a4 && !ign)
		rc = rq_plan_w4a4_ignore(p, hdr, &w4_ign, &nign);
	if (!rc && ign)
		rc = choose_drops(p, &s, ign, cfg_path, &drop, &ndrop, err);
	if (!rc && !(names = malloc(p->nmods * sizeof *names)))
		rc = -ENOMEM;
	if (!rc) {
		for (size_t i = 0; i < p->nmods; i++)
			names[i] = p->mods[i].name;
		struct rq_qconfig_edit e = {.scheme = o->scheme, .observer = p->observer,
		                            .input_observer = w4a4 ? input_observer(p) : NULL,
		                            .targets = s.tg, .ntargets = s.ntg,
		                            .ignore = s.ig, .nignore = s.nig, .drop = drop,
		                            .ndrop = ndrop, .modules = names, .nmodules = p->nmods};
		if (w4_ign) {
			e.ignore = (const char *const *)w4_ign;
			e.nignore = nign;
		}
		rc = rq_qconfig_rewrite(config, config_len, &e, new_config, new_len, err);
	}
	for (size_t i = 0; i < nign; i++)
		free(w4_ign[i]);
	free(w4_ign);
	free(names);
	free(drop);
	sel_free(&s);
	return rc;
}
