/* qconfig.c — config.json's quantization_config for a scheme, edited as text
 * (qconfig.h). The JSON of a scheme is what llm-compressor 0.14.0.1
 * model_free_ptq writes with compressed-tensors 0.19.0 (save_utils.py
 * update_config; qconfig_json.c has the table):
 *
 *   {"config_groups": {NAME: {"format", "input_activations",
 *                             "output_activations": null, "targets", "weights"}},
 *    "format", "global_compression_ratio": null, "ignore", "kv_cache_scheme": null,
 *    "quant_method": "compressed-tensors", "quantization_status": "compressed",
 *    "transform_config": {}, "version": "0.19.0"}
 *
 * keys sorted (it json.dump's with sort_keys=True), no "sparsity_config".
 * NAME is the preset ("NVFP4A16", "FP8_DYNAMIC", "W8A16", "W4A16") when the
 * targets are exactly ["Linear"] (model_free_ptq(scheme="W4A16") names its
 * group after the preset string), else "config_group_0" (what it names a
 * QuantizationScheme object, the only way to give it other targets).
 *
 * An existing compressed-tensors quantization_config gets one more group,
 * named as QuantizationConfig.merge names it (find_unique_name: the preset,
 * else PRESET_1, PRESET_2, ...; so not "group_N"), and "format" as merge sets
 * it (one format over all groups: that one, else "mixed-precision"; a group
 * without its own "format" inherits the global one, so when such a group
 * exists and formats would differ we refuse: "mixed-precision" would leave
 * it without a format). "version", "sparsity_config", "kv_cache_scheme" and
 * every other member stay as written (merge would drop sparsity_config and
 * rewrite version). We differ from merge on purpose where merge's result
 * does not load: merge keeps the ignore entries that excluded the modules
 * now quantized (vLLM would load them as unquantized) and its new group
 * targets "Linear", the same string as the existing groups' target.
 *
 * How vLLM (compressed_tensors.py get_scheme_dict, utils.py) picks a layer's
 * group: (0) a layer matching an ignore entry (exact name, or re.match for
 * "re:"; a fused qkv_proj/gate_up_proj checks its shards) is unquantized;
 * (1) else the FIRST target, over all groups in order (collected in a dict,
 * so a target string repeated in a later group replaces the earlier one),
 * equal to the layer name or re.match'ing it; (2) else the first target
 * contained in the layer's class name ("Linear" in "QKVParallelLinear");
 * (3) else a fused layer whose shard names all match. A FusedMoE layer asks
 * for <layer>.0.gate_proj, .0.up_proj, .0.down_proj by name.
 * compressed-tensors itself (match_targets) ranks exact name > regex > class
 * name and takes the first. So name targets beat the existing groups' class
 * targets ("Linear"), and the new group's targets are names, never classes:
 *   - the dropped ignore entries that match a newly quantized module (the
 *     caller drops only entries that match nothing but newly quantized
 *     modules, so they select exactly those; Laguna's
 *     re:^model\.layers\.4[0-7]\.mlp\.experts(\..*)?$ becomes the target);
 *   - the exact names of the newly quantized modules no dropped entry matches;
 *   - plus, for q_proj/k_proj/v_proj and gate_proj/up_proj outside routed
 *     experts, the name of the layer vLLM fuses them into (...qkv_proj,
 *     ...gate_up_proj) unless a chosen target matches it already: step (1)
 *     sees only the fused name, and step (2) would give the fused layer the
 *     existing "Linear" group's scheme.
 * Refused, so that no module can match two groups: a newly quantized module
 * (or its fused name) still matched by a remaining ignore entry or by an
 * existing group's target, and a new target equal to an existing one. */
#include "plan/qconfig.h"
#include "plan/qconfig_int.h"
#include "plan/rules.h"
#include "base/err.h"
#include "st/jcheck.h"
#include "base/grow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A list of strings (owned). */
struct strv {
	char **v;
	size_t n, cap;
};

static void strv_free(struct strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof *s);
}

static int strv_has(const struct strv *s, const char *x)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->v[i], x))
			return 1;
	return 0;
}

static int strv_push(struct strv *s, const char *x)
{
	if (strv_has(s, x))
		return 0;
	if (RQ_GROW(s->v, s->n, s->cap, 16))
		return -ENOMEM;
	if (!(s->v[s->n] = strdup(x)))
		return -ENOMEM;
	s->n++;
	return 0;
}

/* The layer vLLM fuses module m into (written to out), or 0 if none: the
 * standard packed_modules_mapping (qkv_proj, gate_up_proj); routed experts
 * (".experts.N.") are a FusedMoE that vLLM looks up by the unfused names. */
static int fused_name(const char *m, char *out, size_t cap)
{
	const char *dot = strrchr(m, '.');
	if (!dot || strstr(m, ".experts."))
		return 0;
	const char *last = dot + 1, *to;
	if (!strcmp(last, "q_proj") || !strcmp(last, "k_proj") || !strcmp(last, "v_proj"))
		to = "qkv_proj";
	else if (!strcmp(last, "gate_proj") || !strcmp(last, "up_proj"))
		to = "gate_up_proj";
	else
		return 0;
	return snprintf(out, cap, "%.*s.%s", (int)(dot - m), m, to) < (int)cap;
}

static int strings_of(const cJSON *arr, struct strv *out)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, arr) {
		if (!cJSON_IsString(c))
			return -EPROTO;
		if (RQ_GROW(out->v, out->n, out->cap, 16) || !(out->v[out->n] = strdup(c->valuestring)))
			return -ENOMEM;
		out->n++;
	}
	return 0;
}

static int is_empty_or_null(const cJSON *v)
{
	return !v || cJSON_IsNull(v) || ((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child);
}

/* What an existing quantization_config holds that the edit needs. */
struct existing {
	struct strv drop;          /* the dropped ignore entries */
	struct strv keep;          /* the remaining ignore entries */
	struct strv old_targets;   /* every target of every existing group */
	struct strv old_group;     /* [old_targets.n] the group each comes from */
	int formats_differ;        /* the new group's format differs from a group's format */
	int formatless;            /* some group has no "format" of its own */
};

static void existing_free(struct existing *x)
{
	strv_free(&x->drop);
	strv_free(&x->keep);
	strv_free(&x->old_targets);
	strv_free(&x->old_group);
}

static int read_existing(const cJSON *qc, const struct rq_qconfig_edit *e, struct existing *x,
                         struct rq_err *err)
{
	const cJSON *qm = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
	if (!cJSON_IsString(qm) || strcmp(qm->valuestring, "compressed-tensors"))
		return rq_errf(err, -EPROTO, "config.json: quantization_config.quant_method is %s%s%s, "
		               "not \"compressed-tensors\": --scheme can only extend a compressed-tensors "
		               "checkpoint; start from the BF16 release of this model",
		               cJSON_IsString(qm) ? "\"" : "", cJSON_IsString(qm) ? qm->valuestring :
		               "missing", cJSON_IsString(qm) ? "\"" : "");
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(qc, "quantization_status");
	if (cJSON_IsString(st) && strcmp(st->valuestring, "compressed"))
		return rq_errf(err, -EPROTO, "config.json: quantization_config.quantization_status is "
		               "\"%s\", not \"compressed\": only compressed checkpoints can be extended",
		               st->valuestring);
	static const char *const refused[] = {"sparsity_config", "transform_config"};
	for (size_t i = 0; i < 2; i++)
		if (!is_empty_or_null(cJSON_GetObjectItemCaseSensitive(qc, refused[i])))
			return rq_errf(err, -EPROTO, "config.json: quantization_config.%s is not empty: "
			               "requantfs cannot tell which modules it applies to, so it cannot add "
			               "a group safely", refused[i]);
	const cJSON *groups = cJSON_GetObjectItemCaseSensitive(qc, "config_groups");
	if (!cJSON_IsObject(groups))
		return rq_errf(err, -EPROTO, "config.json: quantization_config.config_groups is not an "
		               "object; cannot add a group to it");
	const cJSON *gf = cJSON_GetObjectItemCaseSensitive(qc, "format");
	const char *global = cJSON_IsString(gf) ? gf->valuestring : NULL;
	const char *mine = rq_scheme_format(e->scheme);
	const cJSON *g;
	int rc;
	cJSON_ArrayForEach(g, groups) {
		const cJSON *t = cJSON_IsArray(g) ? g : cJSON_GetObjectItemCaseSensitive(g, "targets");
		const cJSON *f = cJSON_IsObject(g) ? cJSON_GetObjectItemCaseSensitive(g, "format") : NULL;
		if (!cJSON_IsArray(t))
			return rq_errf(err, -EPROTO, "config.json: quantization_config.config_groups.%s has "
			               "no targets list; cannot tell which modules it covers", g->string);
		size_t before = x->old_targets.n;
		if ((rc = strings_of(t, &x->old_targets)))
			return rc == -ENOMEM ? rc : rq_errf(err, rc, "config.json: config_groups.%s.targets "
			                                    "holds a non-string", g->string);
		for (size_t i = before; i < x->old_targets.n; i++) {
			if (RQ_GROW(x->old_group.v, x->old_group.n, x->old_group.cap, 16) ||
			    !(x->old_group.v[x->old_group.n] = strdup(g->string)))
				return -ENOMEM;
			x->old_group.n++;
		}
		const char *fmt = cJSON_IsString(f) ? f->valuestring : global;
		if (!cJSON_IsString(f))
			x->formatless = 1;
		if (!fmt || strcmp(fmt, mine))
			x->formats_differ = 1;
	}
	const cJSON *ig = cJSON_GetObjectItemCaseSensitive(qc, "ignore");
	size_t nig = cJSON_IsArray(ig) ? (size_t)cJSON_GetArraySize(ig) : 0;
	if (ig && !cJSON_IsArray(ig) && !cJSON_IsNull(ig))
		return rq_errf(err, -EPROTO, "config.json: quantization_config.ignore is not a list");
	for (size_t i = 0; i < e->ndrop; i++) {
		if (e->drop[i] >= nig)
			return rq_errf(err, -EINVAL, "config.json: quantization_config.ignore has %zu "
			               "entries; cannot drop entry %zu", nig, e->drop[i]);
		for (size_t j = 0; j < i; j++)
			if (e->drop[j] == e->drop[i])
				return rq_errf(err, -EINVAL, "config.json: ignore entry %zu dropped twice",
				               e->drop[i]);
	}
	for (size_t i = 0; i < nig; i++) {
		const cJSON *c = cJSON_GetArrayItem(ig, (int)i);
		if (!cJSON_IsString(c))
			return rq_errf(err, -EPROTO, "config.json: quantization_config.ignore[%zu] is not "
			               "a string", i);
		int dropped = 0;
		for (size_t j = 0; j < e->ndrop; j++)
			dropped |= e->drop[j] == i;
		struct strv *to = dropped ? &x->drop : &x->keep;
		if (RQ_GROW(to->v, to->n, to->cap, 16) || !(to->v[to->n] = strdup(c->valuestring)))
			return -ENOMEM;
		to->n++;
	}
	return 0;
}

/* 1 if name matches a dropped entry that is one of the new targets, 0 if
 * not, or a pattern's error. */
static int matched_by_used(const struct rq_rules *drop, const char *used, const char *name,
                           struct rq_err *err)
{
	for (size_t k = 0; k < drop->n; k++) {
		int m = used[k] ? rq_rule_match(drop, k, name, err) : 0;
		if (m)
			return m;
	}
	return 0;
}

/* The new group's targets (see the top of this file), checked. */
static int choose_targets(const struct rq_qconfig_edit *e, const struct existing *x,
                          struct strv *t, struct rq_err *err)
{
	struct rq_rules drop = {0}, keep = {0}, old = {0};
	struct rq_err ignored = {0};
	char *used = calloc(x->drop.n + 1, 1);       /* [drop.n] dropped entry becomes a target */
	char *named = calloc(e->nmodules + 1, 1);    /* [nmodules] module targeted by its name */
	int rc = used && named ? 0 : -ENOMEM;
	if (!rc && !e->nmodules)
		rc = rq_errf(err, -EINVAL, "config.json: no newly quantized module given for the new "
		             "quantization_config group");
	if (rc)
		goto out;
	/* a dropped entry that cannot be compiled here is only removed, never a target */
	int have_drop = x->drop.n &&
	                !rq_rules_init(&drop, (const char *const *)x->drop.v, x->drop.n, &ignored);
	for (size_t i = 0; i < e->nmodules; i++) {
		long k = -1;
		if (have_drop && (rc = rq_rules_first(&drop, e->modules[i], &k, err))) {
			rq_err_prefix(err, "config.json: quantization_config.ignore");
			goto out;
		}
		if (k >= 0)
			used[k] = 1;
		else
			named[i] = 1;
	}
	rc = rq_rules_init(&keep, (const char *const *)x->keep.v, x->keep.n, err);
	if (rc) {
		rq_err_prefix(err, "config.json: cannot check quantization_config.ignore");
		goto out;
	}
	rc = rq_rules_init(&old, (const char *const *)x->old_targets.v, x->old_targets.n, err);
	if (rc) {
		rq_err_prefix(err, "config.json: cannot check the targets of config_groups");
		goto out;
	}
	if (e->new_targets) {      /* given: only checked below */
		for (size_t k = 0; !rc && k < e->nnew_targets; k++)
			rc = strv_push(t, e->new_targets[k]);
		goto check;
	}
	for (size_t k = 0; !rc && k < x->drop.n; k++)
		if (used[k])
			rc = strv_push(t, x->drop.v[k]);
	for (size_t i = 0; !rc && i < e->nmodules; i++)
		if (named[i])
			rc = strv_push(t, e->modules[i]);
	for (size_t i = 0; !rc && i < e->nmodules; i++) {
		char f[1100];
		if (!fused_name(e->modules[i], f, sizeof f))
			continue;
		int m = have_drop ? matched_by_used(&drop, used, f, err) : 0;
		if (m < 0)
			rq_err_prefix(err, "config.json: quantization_config.ignore");
		rc = m < 0 ? m : m ? 0 : strv_push(t, f);
	}
check:
	if (rc)
		goto out;
	for (size_t i = 0; i < e->nmodules + t->n; i++) {
		const char *m = i < e->nmodules ? e->modules[i] : t->v[i - e->nmodules];
		if (i >= e->nmodules && !strncmp(m, "re:", 3))
			continue;            /* a dropped rule: its modules were checked above */
		long k;
		if ((rc = rq_rules_first(&keep, m, &k, err))) {
			rq_err_prefix(err, "config.json: quantization_config.ignore");
			goto out;
		}
		if (k >= 0) {
			rc = rq_errf(err, -EPROTO, "config.json: %s would still be excluded by "
			             "quantization_config.ignore entry \"%s\" (vLLM would load it as "
			             "unquantized); drop that entry too, or do not quantize %s",
			             m, keep.text[k], m);
			goto out;
		}
		if ((rc = rq_rules_first(&old, m, &k, err))) {
			rq_err_prefix(err, "config.json: the targets of config_groups");
			goto out;
		}
		if (k >= 0) {
			rc = rq_errf(err, -EPROTO, "config.json: %s is already targeted by "
			             "config_groups.%s (\"%s\"), which vLLM would apply instead of the new "
			             "group; cannot add a group for it safely", m, x->old_group.v[k],
			             old.text[k]);
			goto out;
		}
	}
	for (size_t i = 0; i < t->n; i++)
		if (strv_has(&x->old_targets, t->v[i])) {
			rc = rq_errf(err, -EPROTO, "config.json: the new group's target \"%s\" is already a "
			             "target of an existing group; cannot add a group safely", t->v[i]);
			goto out;
		}
out:
	free(used);
	free(named);
	rq_rules_free(&drop);
	rq_rules_free(&keep);
	rq_rules_free(&old);
	return rc;
}

/* compressed-tensors find_unique_name: name, else base_N counting on from a
 * trailing "_N" (base_0 -> base_1), else from 1. */
static void unique_name(char out[128], const char *name, const cJSON *groups)
{
	snprintf(out, 128, "%s", name);
	if (!cJSON_GetObjectItemCaseSensitive(groups, out))
		return;
	char base[100];
	snprintf(base, sizeof base, "%s", name);
	long c = 1;
	char *us = strrchr(base, '_');
	if (us && us > base && us[1] && strspn(us + 1, "0123456789") == strlen(us + 1)) {
		c = strtol(us + 1, NULL, 10) + 1;
		*us = 0;
	}
	for (;; c++) {
		snprintf(out, 128, "%s_%ld", base, c);
		if (!cJSON_GetObjectItemCaseSensitive(groups, out))
			return;
	}
}

/* Swaps *cur for the text just built in b. */
static void take(char **cur, size_t *len, struct jt_buf *b)
{
	free(*cur);
	*cur = b->p;
	*len = b->len;
	memset(b, 0, sizeof *b);
}

/* Index of quantization_config's value, or of its member `member`. */
static int locate(const char *s, size_t n, const char *member, size_t *at)
{
	size_t qc;
	int rc = jt_member(s, n, jt_ws(s, n, 0), "quantization_config", &qc);
	if (rc || !member) {
		*at = qc;
		return rc;
	}
	return jt_member(s, n, qc, member, at);
}

static int cmp_desc(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* The edits of an existing config: drop entries, format, the new group.
 * *want gets the quantization_config the result must parse to. */
static int extend(const char *cfg, size_t len, const cJSON *qc, const struct rq_qconfig_edit *e,
                  char **cur, size_t *cur_len, cJSON **want, struct rq_err *err)
{
	struct existing x = {0};
	struct strv t = {0};
	size_t *order = NULL;
	struct jt_buf b = {0};
	int rc = read_existing(qc, e, &x, err);
	if (!rc)
		rc = choose_targets(e, &x, &t, err);
	if (rc)
		goto out;
	const char *fmt = NULL;          /* new global "format", NULL: unchanged */
	if (x.formats_differ) {
		if (x.formatless) {
			rc = rq_errf(err, -EPROTO, "config.json: a config group without its own \"format\" "
			             "relies on quantization_config.format, which a %s group would make "
			             "\"mixed-precision\"; cannot add the group safely",
			             rq_scheme_format(e->scheme));
			goto out;
		}
		const cJSON *gf = cJSON_GetObjectItemCaseSensitive(qc, "format");
		if (!cJSON_IsString(gf)) {
			rc = rq_errf(err, -EPROTO, "config.json: quantization_config has no \"format\" to "
			             "set to \"mixed-precision\"");
			goto out;
		}
		if (strcmp(gf->valuestring, "mixed-precision"))
			fmt = "mixed-precision";
	}
	const cJSON *groups = cJSON_GetObjectItemCaseSensitive(qc, "config_groups");
	char name[128];
	unique_name(name, rq_scheme_preset(e->scheme), groups);
	cJSON *group = qc_group_json(e->scheme, e->observer, e->input_observer,
	                             (const char *const *)t.v, t.n);
	*want = cJSON_Duplicate(qc, 1);
	if (!group || !*want) {
		cJSON_Delete(group);
		rc = -ENOMEM;
		goto out;
	}
	/* the text edits, each on the result of the previous one */
	if (!(*cur = malloc(len + 1))) {
		rc = -ENOMEM;
		goto out_group;
	}
	memcpy(*cur, cfg, len);
	(*cur)[len] = 0;
	*cur_len = len;
	if (e->ndrop && !(order = malloc(e->ndrop * sizeof *order))) {
		rc = -ENOMEM;
		goto out_group;
	}
	if (e->ndrop) {
		memcpy(order, e->drop, e->ndrop * sizeof *order);
		qsort(order, e->ndrop, sizeof *order, cmp_desc);
	}
	cJSON *wig = cJSON_GetObjectItemCaseSensitive(*want, "ignore");
	for (size_t i = 0; i < e->ndrop; i++) {
		size_t ig;
		rc = locate(*cur, *cur_len, "ignore", &ig);
		if (!rc)
			rc = jt_cut_element(&b, *cur, *cur_len, ig, order[i]);
		if (rc)
			goto edit_failed;
		take(cur, cur_len, &b);
		cJSON_DeleteItemFromArray(wig, (int)order[i]);
	}
	if (fmt) {
		size_t q;
		rc = locate(*cur, *cur_len, NULL, &q);
		if (!rc)
			rc = qc_replace_value(&b, *cur, *cur_len, q, "format", "\"mixed-precision\"");
		if (rc)
			goto edit_failed;
		take(cur, cur_len, &b);
		cJSON_ReplaceItemInObjectCaseSensitive(*want, "format", cJSON_CreateString(fmt));
	}
	size_t gpos, q;
	rc = locate(*cur, *cur_len, "config_groups", &gpos);
	if (!rc)
		rc = locate(*cur, *cur_len, NULL, &q);
	if (!rc) {
		size_t s = jt_ws(*cur, *cur_len, q + 1);   /* pretty if quantization_config is */
		int pretty = memchr(*cur + q, '\n', s - q) != NULL;
		rc = qc_insert_member(&b, *cur, *cur_len, gpos, name, group, pretty);
	}
	if (rc)
		goto edit_failed;
	take(cur, cur_len, &b);
	cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(*want, "config_groups"), name, group);
	group = NULL;
	goto out_group;
edit_failed:
	if (rc == -EPROTO)
		rq_errf(err, rc, "config.json: cannot locate quantization_config's %s to edit",
		        fmt ? "format" : "ignore list or config_groups");
out_group:
	cJSON_Delete(group);
	if (rc) {
		free(*cur);
		*cur = NULL;
	}
out:
	free(b.p);
	free(order);
	strv_free(&t);
	existing_free(&x);
	return rc;
}

/* The edited text must parse, keep every other member of config.json as it
 * was and hold exactly the wanted quantization_config. */
static int self_check(const cJSON *doc, const char *text, size_t len, const cJSON *want,
                      struct rq_err *err)
{
	/* strict, as every reader of the presented file will be */
	cJSON *got = jc_parse(text, len, "config.json (as presented)", err);
	if (!got)
		return err ? err->code : -EPROTO;
	int ok = cJSON_IsObject(got) && want;
	const cJSON *m;
	int n_in = 0, n_out = cJSON_GetArraySize(got);
	cJSON_ArrayForEach(m, doc) {
		n_in++;
		if (ok && strcmp(m->string, "quantization_config"))
			ok = cJSON_Compare(m, cJSON_GetObjectItemCaseSensitive(got, m->string), 1);
	}
	if (!cJSON_GetObjectItemCaseSensitive(doc, "quantization_config"))
		n_in++;
	ok = ok && n_in == n_out &&
	     cJSON_Compare(want, cJSON_GetObjectItemCaseSensitive(got, "quantization_config"), 1);
	cJSON_Delete(got);
	return ok ? 0 : rq_errf(err, -EPROTO, "config.json: the edited text does not parse back to "
	                        "the intended JSON (a requantfs bug; please report it with this "
	                        "config.json)");
}

int rq_qconfig_rewrite(const char *cfg, size_t len, const struct rq_qconfig_edit *e,
                       char **out, size_t *out_len, struct rq_err *err)
{
	if (qc_preset_find(e->scheme))
		return rq_errf(err, -EINVAL, "config.json: scheme %s has no compressed-tensors preset "
		               "here (the Laguna fix edits config.json itself)",
		               rq_scheme_name(e->scheme));
	cJSON *doc = jc_parse(cfg, len, "config.json", err);
	if (!doc)
		return err ? err->code : -EPROTO;
	if (!cJSON_IsObject(doc)) {
		cJSON_Delete(doc);
		return rq_errf(err, -EPROTO, "config.json: not a JSON object; check the checkpoint's "
		               "config.json");
	}
	cJSON *qc = cJSON_GetObjectItemCaseSensitive(doc, "quantization_config");
	char *cur = NULL;
	size_t cur_len = 0;
	cJSON *want = NULL;
	int rc;
	if (qc) {
		rc = extend(cfg, len, qc, e, &cur, &cur_len, &want, err);
	} else if (e->ndrop) {
		rc = rq_errf(err, -EINVAL, "config.json has no quantization_config: there is no ignore "
		             "entry to drop");
	} else {
		static const char *const linear[] = {"Linear"};
		const char *const *t = e->ntargets ? e->targets : linear;
		size_t nt = e->ntargets ? e->ntargets : 1;
		/* oneshot (--scheme nvfp4) names its groups group_0, group_1, ... */
		const char *name = e->scheme == RQ_SCHEME_NVFP4_W4A4 ? "group_0"
		                   : nt == 1 && !strcmp(t[0], "Linear") ? rq_scheme_preset(e->scheme)
		                                                        : "config_group_0";
		struct jt_buf b = {0};
		want = qc_config_json(e->scheme, e->observer, e->input_observer, name, t, nt, e->ignore,
		                      e->nignore);
		size_t top = jt_ws(cfg, len, 0);
		rc = want ? qc_insert_member(&b, cfg, len, top, "quantization_config", want, 1) : -ENOMEM;
		if (rc == -EPROTO)
			rq_errf(err, rc, "config.json: cannot find the end of its top-level object");
		if (rc)
			free(b.p);
		else
			take(&cur, &cur_len, &b);
	}
	if (!rc)
		rc = self_check(doc, cur, cur_len, want, err);
	if (rc) {
		free(cur);
	} else {
		*out = cur;
		*out_len = cur_len;
	}
	cJSON_Delete(want);
	cJSON_Delete(doc);
	return rc;
}
