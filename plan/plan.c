/* plan.c — decides the virtual checkpoint (SPEC.md §2) from SRC's headers.
 *
 * Two modes, chosen by opts->scheme:
 *
 * The Laguna fix (RQ_SCHEME_NVFP4, the default; unchanged bytes and cache
 * keys). Steps, in order: list SRC; parse config.json and its ignore list;
 * parse every shard header; collect Linear modules (BF16 `.weight` or NVFP4
 * `.weight_packed`); pick the rule to drop (given, or the one entry whose
 * matched modules are BF16 while the same role elsewhere is NVFP4); choose
 * the modules to requantize and refuse what SPEC §3 refuses; read their
 * calibration scales; pair gate/up into jobs; lay out the files (plan_files.c).
 * --rule-scheme nvfp4a16|fp8-dynamic makes those modules that scheme instead
 * (no calibration; a config group of its own: plan_rule.c).
 *
 * A data-free scheme (nvfp4a16, fp8-dynamic, w8a16, w4a16: plan_scheme.c),
 * following llm-compressor 0.14.0.1 model_free_ptq. The decision:
 *  - A module is quantized when SRC holds `<m>.weight`, m does not end in
 *    "norm", m is targeted (--targets empty or naming "Linear": every module;
 *    else an entry matches m, "re:PAT" as Python re.match, other entries
 *    exactly), no --ignore entry matches m (default --ignore lm_head; like
 *    model_free, embeddings and routers are chosen unless ignored), and m is
 *    not already quantized in SRC (no `<m>.weight_scale`, no
 *    `<m>.weight_packed`: such modules keep every byte). SRC's own
 *    quantization_config.ignore does not exempt a module (model_free does not
 *    read it).
 *  - Refused at plan time, naming SRC shard and tensor: a chosen weight that is
 *    not BF16/F16/F32, not 2-D, whose columns are not a multiple of the
 *    group, or whose dtype the scheme does not take (-ENOTSUP); any 3-D
 *    gate_up_proj/down_proj tensor (model_free splits those, we do not yet);
 *    a selection of no module; --calib or --drop-ignore with a scheme.
 *  - Jobs: one module each, except for the NVFP4 schemes, where model_free's
 *    fused sets (q/k/v under *attn|*attention, gate/up under *mlp, w1/w3,
 *    wq_a/wkv_a_with_mqa) share one global scale; MoE experts' gate/up are
 *    not fused (model_free's patterns need "mlp.gate_proj").
 *  - An SRC with a quantization_config: its groups stay; qconfig.c appends a
 *    group for the scheme. An ignore entry that matches a module quantized now
 *    is removed; one that matches both such a module and a module left in
 *    BF16/F16/F32 is refused (vLLM could load neither variant).
 *  - Files: like model_free, but each tensor stays in its SRC shard (model_free
 *    moves fused partners to the primary's shard), a shard holding no chosen
 *    module is byte-identical to SRC, and a rewritten shard keeps SRC's
 *    __metadata__ (model_free drops it); tensor bytes are the same.
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it (plan_int.h and the headers of plan/ declare
 * what crosses).
 *
 *   build     plan.c          rq_plan_build: SRC, config, headers; the Laguna
 *                             fix's choice of modules and jobs
 *   schemes   plan_scheme.c   a data-free scheme's modules, jobs and config
 *             plan_w4a4.c     W4A4: input_global_scale from calib, the ignore
 *                             list oneshot writes
 *             plan_rule.c     --rule-scheme: the fix's config group of its own
 *   files     plan_files.c    the virtual files as segment lists
 *   object    plan_obj.c      the plan: new, kept memory, module and file
 *                             lookups, free
 *   config    qconfig.c       quantization_config: groups, ignore entries
 *             qconfig_json.c  the edits of config.json's text
 *   rules     rules.c         ignore/target entries matched against names
 *             pyre.c          Python `re` patterns through PCRE2
 *             pyre_tr.c       a Python pattern translated to PCRE2
 *   source    ckpt.c          a checkpoint's tensors and calibration scales
 *             hub_cache.c     ORG/NAME[@REV] in the local hub cache
 *             srcread.c       SRC's small files and headers, local or through
 *                             a reader (remote SRC)
 *             srcdir.c        what SRC holds: its files, through hub links */
#include "base/grow.h"
#include "plan/plan_int.h"
#include "plan/rules.h"
#include "plan/ckpt.h"
#include "st/jtext.h"
#include "st/jcheck.h"
#include "base/err.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A Linear module found in SRC. */
struct cand {
	char *name;               /* module name, without .weight */
	char *role;               /* name with numeric components replaced by '*' */
	int src;                  /* SRC file of its weight */
	const struct st_tensor *w;/* BF16 (or other) `.weight`, NULL if NVFP4 */
	int nvfp4;                /* has `.weight_packed` */
};

static int ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

/* Embeddings and norms are 2-D or 1-D `.weight`s that are not Linear layers. */
static int is_linear_name(const char *module)
{
	const char *last = strrchr(module, '.');
	last = last ? last + 1 : module;
	return !strstr(last, "norm") && !strstr(last, "embed") && strcmp(last, "wte") &&
	       strcmp(last, "wpe") && strcmp(last, "sink");
}

static char *role_of(const char *name)
{
	char *r = malloc(strlen(name) + 1), *o = r;
	if (!r)
		return NULL;
	for (const char *s = name; *s;) {
		const char *e = strchr(s, '.');
		size_t len = e ? (size_t)(e - s) : strlen(s);
		int num = len > 0;
		for (size_t i = 0; i < len; i++)
			num &= s[i] >= '0' && s[i] <= '9';
		if (num) {
			*o++ = '*';
		} else {
			memcpy(o, s, len);
			o += len;
		}
		s += len;
		if (*s == '.')
			*o++ = *s++;
	}
	*o = 0;
	return r;
}

static int cmp_cand(const void *a, const void *b)
{
	return strcmp(((const struct cand *)a)->name, ((const struct cand *)b)->name);
}

static int cmp_strp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static struct cand *find_cand(struct cand *c, size_t n, const char *name)
{
	struct cand key = {.name = (char *)name};
	return bsearch(&key, c, n, sizeof *c, cmp_cand);
}

/* Adds or updates the candidate called name. */
static int note_cand(struct cand **c, size_t *n, size_t *cap, const char *name, int src,
                     const struct st_tensor *w, int nvfp4)
{
	for (size_t i = *n; i-- > 0 && i + 8 > *n;)   /* recent ones: same shard neighbours */
		if (!strcmp((*c)[i].name, name)) {
			if (w) {
				(*c)[i].w = w;
				(*c)[i].src = src;
			}
			(*c)[i].nvfp4 |= nvfp4;
			return 0;
		}
	if (RQ_GROW(*c, *n, *cap, 1024))
		return -ENOMEM;
	struct cand *x = &(*c)[(*n)++];
	x->name = strdup(name);
	x->role = role_of(name);
	x->src = src;
	x->w = w;
	x->nvfp4 = nvfp4;
	return x->name && x->role ? 0 : -ENOMEM;
}

/* Merges duplicates left by note_cand's short look-back (sorted input). */
static void merge_cands(struct cand *c, size_t *n)
{
	size_t o = 0;
	for (size_t i = 0; i < *n; i++) {
		if (o && !strcmp(c[o - 1].name, c[i].name)) {
			if (c[i].w) {
				c[o - 1].w = c[i].w;
				c[o - 1].src = c[i].src;
			}
			c[o - 1].nvfp4 |= c[i].nvfp4;
			free(c[i].name);
			free(c[i].role);
			continue;
		}
		c[o++] = c[i];
	}
	*n = o;
}

static int pick_rule(const struct rq_plan_opts *o, const struct rq_rules *rules,
                     struct cand *c, size_t nc, size_t *rule, struct rq_err *err)
{
	if (o->drop_rule) {
		for (size_t k = 0; k < rules->n; k++)
			if (!strcmp(rules->text[k], o->drop_rule)) {
				*rule = k;
				return 0;
			}
		rq_errf(err, -EINVAL, "--drop-ignore '%s' is not an entry of "
		        "quantization_config.ignore in SRC config.json; the entries are:", o->drop_rule);
		for (size_t k = 0; k < rules->n; k++)   /* one line each, the entries escaped */
			rq_err_append(err, "\n  %s", rules->text[k]);
		return -EINVAL;
	}
	/* roles stored as NVFP4 somewhere */
	char **roles = malloc((nc ? nc : 1) * sizeof *roles);
	if (!roles)
		return -ENOMEM;
	size_t nr = 0;
	for (size_t i = 0; i < nc; i++)
		if (c[i].nvfp4)
			roles[nr++] = c[i].role;
	qsort(roles, nr, sizeof *roles, cmp_strp);
	size_t found[64], nf = 0;
	for (size_t k = 0; k < rules->n; k++) {
		size_t bf16_role_nvfp4 = 0, nvfp4 = 0;
		for (size_t i = 0; i < nc; i++) {
			int m = rq_rule_match(rules, k, c[i].name, err);
			if (m < 0) {
				free(roles);
				return m;
			}
			if (!m)
				continue;
			if (c[i].nvfp4)
				nvfp4++;
			else if (c[i].w && bsearch(&c[i].role, roles, nr, sizeof *roles, cmp_strp))
				bf16_role_nvfp4++;
		}
		if (bf16_role_nvfp4 && !nvfp4 && nf < 64)
			found[nf++] = k;
	}
	free(roles);
	if (nf == 1) {
		*rule = found[0];
		return 0;
	}
	if (nf == 0)
		return rq_errf(err, -ENOENT, "no entry of quantization_config.ignore in SRC config.json "
		               "leaves in BF16 modules that are NVFP4 in other layers; nothing to "
		               "requantize (name the rule with --drop-ignore if you know it)");
	rq_errf(err, -EINVAL, "%zu ignore entries could be the one to drop; choose with "
	        "--drop-ignore RULE:", nf);
	for (size_t i = 0; i < nf; i++)
		rq_err_append(err, "\n  %s", rules->text[found[i]]);
	return -EINVAL;
}

static int choose_modules(struct rq_plan *p, const struct rq_rules *rules, size_t rule,
                          struct cand *c, size_t nc, struct rq_err *err)
{
	p->mods = calloc(nc ? nc : 1, sizeof *p->mods);
	if (!p->mods)
		return -ENOMEM;
	for (size_t i = 0; i < nc; i++) {
		if (!c[i].w || c[i].nvfp4)
			continue;
		int hit = rq_rule_match(rules, rule, c[i].name, err);
		for (size_t k = 0; k < rules->n && hit == 1; k++)
			if (k != rule) {
				int other = rq_rule_match(rules, k, c[i].name, err);
				hit = other < 0 ? other : !other;
			}
		if (hit < 0) {
			rq_err_prefix(err, "%s/config.json: quantization_config.ignore", p->src_dir);
			return hit;
		}
		if (!hit)
			continue;
		const struct st_tensor *w = c[i].w;
		if (w->dtype != ST_BF16)
			return rq_errf(err, -EPROTO, "SRC shard %s: %s.weight is %s; only BF16 weights "
			               "can be requantized", p->srcs[c[i].src].name, c[i].name,
			               st_dtype_name(w->dtype));
		if (!w->shape[0] || !w->shape[1])   /* 0 % 16 == 0: say what is wrong */
			return rq_errf(err, -EPROTO, "SRC shard %s: %s.weight is [%llu, %llu], zero-sized: "
			               "it has no elements to requantize", p->srcs[c[i].src].name, c[i].name,
			               (unsigned long long)w->shape[0], (unsigned long long)w->shape[1]);
		if (w->shape[0] > (1ull << 31) || w->shape[1] > (1ull << 31))
			return rq_errf(err, -EPROTO, "SRC shard %s: %s.weight is [%llu, %llu]; NVFP4 "
			               "requantization takes at most 2^31 rows and columns",
			               p->srcs[c[i].src].name, c[i].name, (unsigned long long)w->shape[0],
			               (unsigned long long)w->shape[1]);
		if (w->shape[1] % 16)
			return rq_errf(err, -EPROTO, "SRC shard %s: %s.weight has %llu input columns, not a "
			               "multiple of 16 (the NVFP4 group size)", p->srcs[c[i].src].name,
			               c[i].name, (unsigned long long)w->shape[1]);
		struct rq_module *m = &p->mods[p->nmods++];
		m->name = strdup(c[i].name);
		if (!m->name)
			return -ENOMEM;
		m->src = c[i].src;
		m->rows = w->shape[0];
		m->cols = w->shape[1];
		m->dtype = RQ_SRC_BF16;
		m->job = -1;
		int rc = rq_scheme_layout(p->mod_scheme, RQ_SRC_BF16, m->rows, m->cols, m->t, &m->nt,
		                          &m->out_size);
		if (rc)
			return rq_errf(err, rc, "SRC shard %s: %s.weight [%llu, %llu] cannot be laid out "
			               "as %s", p->srcs[c[i].src].name, c[i].name,
			               (unsigned long long)m->rows, (unsigned long long)m->cols,
			               rq_scheme_name(p->mod_scheme));
	}
	if (!p->nmods)
		return rq_errf(err, -ENOENT, "%s/config.json: the ignore entry '%s' matches no BF16 "
		               "Linear weight in SRC; nothing to requantize", p->src_dir,
		               rules->text[rule]);
	rq_plan_sort_mods(p);
	return 0;
}

static int make_jobs(struct rq_plan *p)
{
	p->jobs = calloc(p->nmods, sizeof *p->jobs);
	if (!p->jobs)
		return -ENOMEM;
	for (size_t i = 0; i < p->nmods; i++) {
		struct rq_module *m = &p->mods[i];
		if (m->job >= 0)
			continue;
		struct rq_job *j = &p->jobs[p->njobs];
		j->nmod = 1;
		j->mod[0] = (int)i;
		if (rq_scheme_shares_scale(p->mod_scheme) && ends_with(m->name, ".gate_proj")) {
			char up[1024];
			snprintf(up, sizeof up, "%.*s.up_proj", (int)(strlen(m->name) - 10), m->name);
			long u = rq_plan_find_mod(p, up);
			if (u >= 0 && p->mods[u].cols == m->cols) {
				j->nmod = 2;
				j->mod[1] = (int)u;
			}
		}
		uint64_t off = 0;
		for (int s = 0; s < j->nmod; s++) {
			struct rq_module *x = &p->mods[j->mod[s]];
			x->job = (int)p->njobs;
			x->slot = s;
			j->mod_off[s] = off;
			off += x->out_size;   /* packed | scales | global scale, as before */
			j->in_size += x->rows * x->cols * 2;
		}
		j->out_size = off;
		p->njobs++;
	}
	return 0;
}

static int calibrate(struct rq_plan *p, const char *calib, struct rq_err *err)
{
	if (!calib)
		return rq_errf(err, -EINVAL, "no calibration given: pass --calib with the 2026-07-22 "
		               "checkpoint directory or a file from `requantfs calib extract`");
	char **names = malloc(p->nmods * sizeof *names);
	uint32_t *bits = malloc(p->nmods * sizeof *bits);
	int rc = -ENOMEM;
	if (names && bits) {
		for (size_t i = 0; i < p->nmods; i++)
			names[i] = p->mods[i].name;
		rc = rq_calib_lookup(calib, names, p->nmods, bits, err);
		for (size_t i = 0; !rc && i < p->nmods; i++)
			p->mods[i].input_gs_bits = bits[i];
	}
	free(names);
	free(bits);
	return rc;
}

/* Every shard the SRC index names must be there, before anything else. */
static int check_index(const struct rq_plan *p, struct rq_err *err)
{
	char *text;
	size_t len;
	const struct rq_srcfile *sf = rq_src_find(p, "model.safetensors.index.json");
	if (!sf)
		return 0;
	const char *path = sf->path;
	int rc = rq_src_whole(p, sf, &text, &len, err);
	if (rc)
		return rc;
	cJSON *wm, *j = jt_index_parse(text, len, path, &wm, err);
	if (!j)
		return err ? err->code : -EPROTO;
	for (cJSON *e = wm->child; e && !rc; e = e->next) {
		const char *v = cJSON_IsString(e) ? e->valuestring : NULL;
		if (!v || !*v || strchr(v, '/') || !strcmp(v, ".") || !strcmp(v, "..")) {
			rc = rq_errf(err, -EPROTO, "SRC %s maps %s to %s%s%s, which is not a file name "
			             "inside SRC; the index may name only files of its own directory",
			             path, e->string ? e->string : "?", v ? "\"" : "", v ? v : "a non-string",
			             v ? "\"" : "");
			break;
		}
		int found = rq_src_find(p, v) != NULL;
		if (!found)
			rc = rq_errf(err, -ENOENT, "SRC shard %s (holding %s, named by "
			             "model.safetensors.index.json) is missing from %s; re-download it",
			             cJSON_IsString(e) ? e->valuestring : "?", e->string, p->src_dir);
	}
	/* A tensor named twice: a loader would take one of the two, the plan
	 * rewrites one: refuse rather than guess. */
	size_t nk = 0;
	for (cJSON *e = wm->child; e; e = e->next)
		nk++;
	const char **keys = !rc && nk ? malloc(nk * sizeof *keys) : NULL;
	if (!rc && nk && !keys)
		rc = -ENOMEM;
	if (keys) {
		size_t k = 0;
		for (cJSON *e = wm->child; e; e = e->next)
			keys[k++] = e->string ? e->string : "";
		qsort(keys, nk, sizeof *keys, cmp_strp);
		for (k = 1; k < nk && !rc; k++)
			if (!strcmp(keys[k - 1], keys[k]))
				rc = rq_errf(err, -EPROTO, "SRC %s names tensor %s twice in its weight_map; "
				             "fix or re-download the index", path, keys[k]);
		free(keys);
	}
	cJSON_Delete(j);
	return rc;
}

/* What rq_plan_build holds while it works; build_free releases it. */
struct build {
	char path[4096];          /* SRC's config.json, for messages */
	char *config;             /* its bytes [config_len] */
	size_t config_len;
	cJSON *cfg;               /* parsed */
	struct rq_rules rules;    /* its quantization_config.ignore */
	struct st_header **hdr;   /* [p->nsrcs] shard headers, NULL for other files */
	struct cand *c;           /* [nc] of cap: Linear modules seen in the shards */
	size_t nc, cap;
	int has_qc;               /* a scheme: config.json has a quantization_config */
	char *new_config;         /* the virtual config.json [new_len], handed to the layout */
	size_t new_len;
};

static void build_free(struct build *b, size_t nsrcs)
{
	for (size_t i = 0; i < b->nc; i++) {
		free(b->c[i].name);
		free(b->c[i].role);
	}
	free(b->c);
	if (b->hdr)
		for (size_t s = 0; s < nsrcs; s++)
			st_header_free(b->hdr[s]);
	free(b->hdr);
	rq_rules_free(&b->rules);
	cJSON_Delete(b->cfg);
	free(b->config);
	free(b->new_config);
}

/* The ignore list's strings, as rules. */
static int read_rules(struct build *b, const cJSON *ign, struct rq_err *err)
{
	size_t nign = cJSON_GetArraySize(ign);
	const char **ent = calloc(nign + 1, sizeof *ent);
	if (!ent)
		return -ENOMEM;
	size_t k = 0;
	for (const cJSON *e = ign->child; e; e = e->next, k++) {
		if (!cJSON_IsString(e)) {
			free(ent);
			return rq_errf(err, -EPROTO, "%s: quantization_config.ignore[%zu] is not a string",
			               b->path, k);
		}
		ent[k] = e->valuestring;
	}
	int rc = rq_rules_init(&b->rules, ent, nign, err);
	free(ent);
	if (rc)
		rq_err_prefix(err, "%s", b->path);
	return rc;
}

/* SRC's config.json: its bytes, its JSON, its quantization_config.ignore. */
static int read_config(const struct rq_plan *p, const char *src, struct build *b,
                       struct rq_err *err)
{
	int laguna = p->scheme == RQ_SCHEME_NVFP4;
	snprintf(b->path, sizeof b->path, "%s/config.json", p->src_dir);
	const struct rq_srcfile *cf = rq_src_find(p, "config.json");
	int rc = cf ? rq_src_whole(p, cf, &b->config, &b->config_len, err) : -ENOENT;
	if (rc && cf)
		return rc;
	if (rc)
		return rq_errf(err, rc, "SRC %s has no readable config.json (%s); is it a checkpoint "
		               "directory?", src, strerror(-rc));
	/* strict: the config we present must mean to Python what it means to us */
	b->cfg = jc_parse(b->config, b->config_len, b->path, err);
	if (!b->cfg)
		return err ? err->code : -EPROTO;
	const cJSON *qc = cJSON_GetObjectItemCaseSensitive(b->cfg, "quantization_config");
	const cJSON *ign = qc ? cJSON_GetObjectItemCaseSensitive(qc, "ignore") : NULL;
	if (!laguna) {         /* a data-free scheme: a quantization_config is optional */
		b->has_qc = qc != NULL;
		return cJSON_IsArray(ign) ? read_rules(b, ign, err) : 0;
	}
	if (!cJSON_IsObject(qc) || !cJSON_IsArray(ign))
		return rq_errf(err, -ENOENT, "%s has no quantization_config.ignore list; this is not a "
		               "compressed-tensors checkpoint with BF16 exemptions", b->path);
	return read_rules(b, ign, err);
}

/* Every shard's header; its Linear modules become candidates, sorted by
 * name, a module's .weight and .weight_packed merged. */
static int scan_shards(const struct rq_plan *p, struct build *b, struct rq_err *err)
{
	b->hdr = calloc(p->nsrcs, sizeof *b->hdr);
	if (!b->hdr)
		return -ENOMEM;
	for (size_t s = 0; s < p->nsrcs; s++) {
		if (!ends_with(p->srcs[s].name, ".safetensors"))
			continue;
		int rc = rq_src_header(p, &p->srcs[s], &b->hdr[s], err);
		if (rc) {
			rq_err_prefix(err, "SRC shard %s", p->srcs[s].name);
			return rc;
		}
		for (size_t i = 0; i < b->hdr[s]->n; i++) {
			const struct st_tensor *t = &b->hdr[s]->t[i];
			char mod[1024];
			size_t l = strlen(t->name);
			if (ends_with(t->name, ".weight") && t->ndim == 2 && l - 7 < sizeof mod) {
				snprintf(mod, sizeof mod, "%.*s", (int)(l - 7), t->name);
				if (is_linear_name(mod))
					rc = note_cand(&b->c, &b->nc, &b->cap, mod, (int)s, t, 0);
			} else if (ends_with(t->name, ".weight_packed") && l - 14 < sizeof mod) {
				snprintf(mod, sizeof mod, "%.*s", (int)(l - 14), t->name);
				rc = note_cand(&b->c, &b->nc, &b->cap, mod, (int)s, NULL, 1);
			}
			if (rc)
				return rc;
		}
	}
	qsort(b->c, b->nc, sizeof *b->c, cmp_cand);
	merge_cands(b->c, &b->nc);
	(void)find_cand;
	return 0;
}

/* Each chosen module's .weight: its absolute offset in its SRC file. */
static void locate_weights(struct rq_plan *p, struct st_header **hdr)
{
	for (size_t i = 0; i < p->nmods; i++) {
		struct rq_module *m = &p->mods[i];
		char wn[1100];
		snprintf(wn, sizeof wn, "%s.weight", m->name);
		long t = st_find(hdr[m->src], wn);
		m->w_off = hdr[m->src]->data_start + hdr[m->src]->t[t].begin;
	}
}

/* --observer: what the jobs' scheme and recipe take on BF16 weights (a module of
 * another dtype is refused where it is chosen, plan_scheme.c). */
static int check_observer(const struct rq_plan_opts *o, enum rq_scheme ms, enum rq_recipe mr,
                          struct rq_err *err)
{
	if ((unsigned)o->observer >= RQ_OBSERVER_COUNT)
		return rq_errf(err, -EINVAL, "unknown observer %d", (int)o->observer);
	if (!rq_observer_ok(ms, mr, RQ_SRC_BF16, o->observer))
		return 0;
	const char *what = o->scheme != RQ_SCHEME_NVFP4 ? "--scheme"
	                 : o->rule_scheme != RQ_SCHEME_NVFP4 ? "--rule-scheme" : "the Laguna fix's";
	if (ms == RQ_SCHEME_NVFP4)
		return rq_errf(err, -ENOTSUP, "--observer %s does not apply to the Laguna fix's own "
		               "NVFP4 (its fp32 recipe, which llm-compressor does not compute); use "
		               "--observer minmax, or --rule-scheme nvfp4a16 --recipe bf16 or "
		               "--rule-scheme fp8-dynamic", rq_observer_name(o->observer));
	return rq_errf(err, -ENOTSUP, "--observer %s does not apply to %s %s with --recipe %s: the "
	               "MSE observers are llm-compressor's arithmetic on BF16 (use --recipe bf16, "
	               "or --observer minmax)", rq_observer_name(o->observer), what,
	               rq_scheme_name(ms), rq_recipe_name(mr));
}

/* The options a scheme refuses or defaults, before anything is read. */
static int check_opts(const struct rq_plan_opts *o, struct rq_err *err)
{
	if ((unsigned)o->scheme >= RQ_SCHEME_COUNT)
		return rq_errf(err, -EINVAL, "unknown scheme %d", (int)o->scheme);
	if (!rq_scheme_recipe_ok(o->scheme, o->recipe))
		return rq_errf(err, -EINVAL, "--recipe %s does not apply to --scheme %s (its "
		               "arithmetic is torch's on the source dtype; use --recipe %s or leave "
		               "--recipe out)", rq_recipe_name(o->recipe), rq_scheme_name(o->scheme),
		               rq_recipe_name(rq_scheme_default_recipe(o->scheme)));
	if (o->scheme == RQ_SCHEME_NVFP4) {
		if (o->targets || o->ignore)
			return rq_errf(err, -EINVAL, "--targets and --ignore choose modules for a "
			               "--scheme; the Laguna fix (no --scheme) requantizes what its "
			               "dropped ignore rule matched");
		if (o->rule_scheme != RQ_SCHEME_NVFP4 && o->rule_scheme != RQ_SCHEME_NVFP4A16 &&
		    o->rule_scheme != RQ_SCHEME_FP8_DYNAMIC)
			return rq_errf(err, -EINVAL, "--rule-scheme %s: the dropped rule's modules can "
			               "be nvfp4, nvfp4a16 or fp8-dynamic (vLLM's MoE layers take no "
			               "other of these schemes)", rq_scheme_name(o->rule_scheme));
		return check_observer(o, o->rule_scheme, o->rule_scheme == RQ_SCHEME_FP8_DYNAMIC ?
		                      RQ_RECIPE_BF16 : o->recipe, err);
	}
	if (o->rule_scheme != RQ_SCHEME_NVFP4)
		return rq_errf(err, -EINVAL, "--rule-scheme applies only to the Laguna fix (no "
		               "--scheme): it chooses what the dropped ignore rule's modules become");
	if (o->scheme == RQ_SCHEME_NVFP4_W4A4 && !o->calib)
		return rq_errf(err, -EINVAL, "--scheme nvfp4 quantizes activations with static "
		               "scales and needs --calib FILE: run `requantfs calib run %s --text FILE "
		               "-o calib.safetensors` first", o->src ? o->src : "SRC");
	if (o->calib && o->scheme != RQ_SCHEME_NVFP4_W4A4)
		return rq_errf(err, -EINVAL, "--calib applies only to the Laguna fix (no --scheme) and "
		               "--scheme nvfp4: "
		               "--scheme %s is data-free and has no activation scales to copy",
		               rq_scheme_name(o->scheme));
	if (o->drop_rule)
		return rq_errf(err, -EINVAL, "--drop-ignore applies only to the Laguna fix; with "
		               "--scheme %s the ignore entries that match newly quantized modules "
		               "are removed for you", rq_scheme_name(o->scheme));
	return check_observer(o, o->scheme, o->recipe, err);
}

/* The Laguna fix: the dropped rule's modules, calibrated, gate/up paired. */
static int plan_laguna(struct rq_plan *p, const struct rq_plan_opts *o, struct build *b,
                       struct rq_err *err)
{
	size_t rule = 0;
	int rc = pick_rule(o, &b->rules, b->c, b->nc, &rule, err);
	if (rc) {
		rq_err_prefix(err, "%s", b->path);
		return rc;
	}
	if (!(p->dropped_rule = strdup(b->rules.text[rule])))
		return -ENOMEM;
	rc = choose_modules(p, &b->rules, rule, b->c, b->nc, err);
	if (rc)
		return rc;
	locate_weights(p, b->hdr);
	/* only NVFP4 (W4A4) carries input scales; --rule-scheme nvfp4a16 and fp8-dynamic
	 * need no CALIB, and plan's figures for the other choices read none */
	if (p->mod_scheme == RQ_SCHEME_NVFP4 && !o->no_scales)
		rc = calibrate(p, o->calib, err);
	if (!rc)
		rc = make_jobs(p);
	if (!rc && p->mod_scheme == RQ_SCHEME_NVFP4)
		rc = rq_plan_laguna_config(b->config, b->config_len, rule, &b->new_config,
		                           &b->new_len, err);
	else if (!rc)
		rc = rq_plan_rule_config(p, b->config, b->config_len, rule, b->hdr, &b->new_config,
		                         &b->new_len, err);
	return rc;
}

int rq_plan_build(const struct rq_plan_opts *o, struct rq_plan **out, struct rq_err *err)
{
	int rc = check_opts(o, err);
	if (rc)
		return rc;
	struct rq_plan *p = rq_plan_new();
	struct build *b = calloc(1, sizeof *b);
	if (!p || !b) {
		rq_plan_free(p);
		free(b);
		return -ENOMEM;
	}
	p->recipe = o->recipe;
	p->scheme = o->scheme;
	p->mod_scheme = o->scheme == RQ_SCHEME_NVFP4 ? o->rule_scheme : o->scheme;
	p->mod_recipe = p->mod_scheme == RQ_SCHEME_FP8_DYNAMIC ? RQ_RECIPE_BF16 : o->recipe;
	p->observer = o->observer;
	rc = o->reader ? rq_src_scan_reader(p, o->reader, err) : rq_src_scan(p, o->src, err);
	if (!rc)
		rc = check_index(p, err);
	if (!rc)
		rc = read_config(p, o->src, b, err);
	if (!rc)
		rc = scan_shards(p, b, err);
	if (rc)
		goto out;
	if (o->scheme == RQ_SCHEME_NVFP4)
		rc = plan_laguna(p, o, b, err);
	else
		rc = rq_plan_scheme(p, o, b->rules.n || b->has_qc ? &b->rules : NULL, b->hdr,
		                    b->config, b->config_len, b->path, &b->new_config, &b->new_len,
		                    err);
	if (!rc) {
		rc = rq_plan_layout(p, b->new_config, b->new_len, b->hdr, err);
		b->new_config = NULL;     /* the layout owns it now, even on failure */
	}
out:
	build_free(b, p->nsrcs);
	free(b);
	if (rc) {
		rq_plan_free(p);
		return rc;
	}
	*out = p;
	return 0;
}
