/* plan_rule.c — the Laguna fix's --rule-scheme (issue 21 item 6): what the
 * modules of the dropped ignore rule become, and the config.json that says so.
 *
 * nvfp4 (the default) is today's fix, bytes unchanged: NVFP4 weights with
 * CALIB's input_global_scale, the rule dropped so that the checkpoint's own
 * NVFP4 group (targets "Linear") covers them. nvfp4a16 and fp8-dynamic
 * quantize the same modules with that data-free scheme (weights as
 * llm-compressor writes them; nvfp4a16 keeps the fix's recipe and gate/up
 * pairing, so its weight bytes are the default's) and need a config group
 * of their own, appended by qconfig.c (named NVFP4A16 / FP8_DYNAMIC, "format"
 * mixed-precision when it differs from the other groups'), the rule removed
 * from the ignore list as before.
 *
 * The group's targets: vLLM (compressed_tensors.py get_scheme_dict,
 * find_matched_target) gives a layer the FIRST target, over all groups in
 * order, equal to its name or re.match'ing it, before any class-name target
 * such as the existing group's "Linear"; a FusedMoE layer asks by the names
 * <layer>.experts.0.gate_proj, .0.up_proj, .0.down_proj
 * (compressed_tensors_moe.py get_moe_method) and all three must agree. So
 * each layer gets one anchored regex over its experts' projections:
 *     re:^model\.layers\.40\.mlp\.experts\.[0-9]+\.(down_proj|gate_proj|up_proj)$
 * (the last numeric name component generalized; every other character
 * literal). A regex is used only when every SRC module it matches is one of
 * the rule's modules; otherwise that layer's modules are listed by name. */
#include "plan/plan_int.h"
#include "plan/qconfig.h"
#include "plan/rules.h"
#include "base/err.h"
#include "base/grow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The name component that is all digits and last: [*b, *e) in m, or 0. */
static int last_number(const char *m, size_t *b, size_t *e)
{
	int found = 0;
	for (size_t i = 0; m[i];) {
		size_t j = i;
		while (m[j] && m[j] != '.')
			j++;
		int num = j > i;
		for (size_t k = i; k < j; k++)
			num &= m[k] >= '0' && m[k] <= '9';
		if (num && i > 0 && m[j] == '.') {   /* <prefix>.<n>.<suffix> */
			*b = i;
			*e = j;
			found = 1;
		}
		i = m[j] ? j + 1 : j;
	}
	return found;
}

/* Appends s[0..n) to out with Python re's special characters escaped. */
static int put_escaped(char **out, size_t *len, size_t *cap, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (RQ_GROW(*out, *len, *cap, 64) || RQ_GROW(*out, *len + 1, *cap, 64))
			return -ENOMEM;
		if (strchr(".^$*+?()[]{}|\\", s[i]))
			(*out)[(*len)++] = '\\';
		(*out)[(*len)++] = s[i];
	}
	return 0;
}

static int put_str(char **out, size_t *len, size_t *cap, const char *s)
{
	size_t n = strlen(s);
	for (size_t i = 0; i < n; i++) {
		if (RQ_GROW(*out, *len, *cap, 64))
			return -ENOMEM;
		(*out)[(*len)++] = s[i];
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

struct strs {
	char **v;
	size_t n, cap;
};

static int strs_add(struct strs *s, char *x)   /* takes x */
{
	if (!x || RQ_GROW(s->v, s->n, s->cap, 16)) {
		free(x);
		return -ENOMEM;
	}
	s->v[s->n++] = x;
	return 0;
}

static void strs_free(struct strs *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof *s);
}

/* The regex target of the modules sharing prefix m[0..pl) (pl = 0: none). */
static char *layer_regex(const struct rq_plan *p, const char *m, size_t pl)
{
	struct strs suf = {0};
	char *out = NULL;
	size_t len = 0, cap = 0;
	int rc = 0;
	for (size_t i = 0; i < p->nmods && !rc; i++) {
		size_t b = 0, e = 0;
		const char *x = p->mods[i].name;
		if (!last_number(x, &b, &e) || b - 1 != pl || strncmp(x, m, pl))
			continue;
		int dup = 0;
		for (size_t k = 0; k < suf.n && !dup; k++)
			dup = !strcmp(suf.v[k], x + e + 1);
		if (!dup)
			rc = strs_add(&suf, strdup(x + e + 1));
	}
	if (!rc && suf.n)
		qsort(suf.v, suf.n, sizeof *suf.v, cmp_str);
	rc = rc ? rc : put_str(&out, &len, &cap, "re:^");
	rc = rc ? rc : put_escaped(&out, &len, &cap, m, pl);
	rc = rc ? rc : put_str(&out, &len, &cap, "\\.[0-9]+\\.");
	if (!rc && suf.n > 1)
		rc = put_str(&out, &len, &cap, "(");
	for (size_t k = 0; k < suf.n && !rc; k++) {
		if (k)
			rc = put_str(&out, &len, &cap, "|");
		if (!rc)
			rc = put_escaped(&out, &len, &cap, suf.v[k], strlen(suf.v[k]));
	}
	if (!rc && suf.n > 1)
		rc = put_str(&out, &len, &cap, ")");
	rc = rc ? rc : put_str(&out, &len, &cap, "$");
	if (!rc && !(rc = RQ_GROW(out, len, cap, 64)))
		out[len] = 0;
	strs_free(&suf);
	if (rc) {
		free(out);
		return NULL;
	}
	return out;
}

/* 1 when regex target t matches only rule modules among SRC's modules (each
 * tensor's name without its last component), 0 if not, or -errno. */
static int regex_exact(const struct rq_plan *p, struct st_header **hdr, const char *t,
                       struct rq_err *err)
{
	struct rq_rules r = {0};
	int rc = rq_rules_init(&r, &t, 1, err);
	for (size_t f = 0; f < p->nsrcs && !rc; f++)
		for (size_t i = 0; hdr[f] && i < hdr[f]->n && !rc; i++) {
			char mod[1100];
			const char *n = hdr[f]->t[i].name, *dot = strrchr(n, '.');
			if (!dot || (size_t)(dot - n) >= sizeof mod)
				continue;
			memcpy(mod, n, (size_t)(dot - n));
			mod[dot - n] = 0;
			int m = rq_rule_match(&r, 0, mod, err);
			if (m < 0)
				rc = m;
			else if (m && rq_plan_find_mod(p, mod) < 0)
				rc = 1;
		}
	rq_rules_free(&r);
	return rc < 0 ? rc : !rc;
}

/* 1 when s holds the string m[0..pl). */
static int has_prefix(const struct strs *s, const char *m, size_t pl)
{
	for (size_t k = 0; k < s->n; k++)
		if (!strncmp(s->v[k], m, pl) && !s->v[k][pl])
			return 1;
	return 0;
}

/* The group's targets: a regex per layer, or the names when one cannot be
 * exact. Each layer's regex is built and checked once. */
static int rule_targets(const struct rq_plan *p, struct st_header **hdr, struct strs *t,
                        struct rq_err *err)
{
	struct strs done = {0}, named = {0};   /* layer prefixes seen; those listed by name */
	int rc = 0;
	for (size_t i = 0; i < p->nmods && !rc; i++) {
		const char *m = p->mods[i].name;
		size_t b = 0, e = 0;
		if (last_number(m, &b, &e) && !has_prefix(&done, m, b - 1)) {
			if ((rc = strs_add(&done, strndup(m, b - 1))))
				break;
			char *re = layer_regex(p, m, b - 1);
			int exact = re ? regex_exact(p, hdr, re, err) : -ENOMEM;
			if (exact > 0) {
				rc = strs_add(t, re);
				continue;
			}
			free(re);
			rc = exact < 0 ? exact : strs_add(&named, strndup(m, b - 1));
			if (rc)
				break;
		} else if (b && !has_prefix(&named, m, b - 1)) {
			continue;               /* its layer's regex covers it */
		}
		rc = strs_add(t, strdup(m));   /* by name */
	}
	strs_free(&done);
	strs_free(&named);
	return rc;
}

int rq_plan_rule_config(const struct rq_plan *p, const char *cfg, size_t n, size_t rule,
                        struct st_header **hdr, char **out, size_t *out_len,
                        struct rq_err *err)
{
	struct strs t = {0};
	const char **names = malloc((p->nmods ? p->nmods : 1) * sizeof *names);
	int rc = names ? rule_targets(p, hdr, &t, err) : -ENOMEM;
	if (!rc) {
		for (size_t i = 0; i < p->nmods; i++)
			names[i] = p->mods[i].name;
		struct rq_qconfig_edit e = {.scheme = p->mod_scheme, .observer = p->observer,
		                            .drop = &rule, .ndrop = 1,
		                            .modules = names, .nmodules = p->nmods,
		                            .new_targets = (const char *const *)t.v,
		                            .nnew_targets = t.n};
		rc = rq_qconfig_rewrite(cfg, n, &e, out, out_len, err);
		if (rc)
			rq_err_prefix(err, "--rule-scheme %s", rq_scheme_name(p->mod_scheme));
	}
	free(names);
	strs_free(&t);
	return rc;
}
