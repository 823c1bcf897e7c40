/* test_qconfig.c — config.json's quantization_config for a scheme
 * (plan/qconfig.h): inserted into a plain config equal to what llm-compressor
 * model_free_ptq writes (golden dumps in tests/data/qconfig_golden/, made by
 * tools/golden/gen_qconfig_golden.py), in the file's own style, every other byte
 * kept; an existing compressed-tensors config extended by one group with
 * the dropped ignore entries removed; refusals; --scheme nvfp4 (W4A4) against
 * oneshot's saved config (tests/data/w4a4_golden.json). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                /* memmem */
#endif
#include "tests/tap.h"
#include "base/err.h"
#include "plan/qconfig.h"
#include "quant/observer.h"
#include "quant/scheme.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *rel, size_t *len)
{
	const char *root = getenv("RQ_SOURCE_ROOT");
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", root ? root : ".", rel);
	return tap_slurp(path, len);
}

static cJSON *golden(const char *prefix, enum rq_scheme s)
{
	char rel[256];
	size_t n;
	snprintf(rel, sizeof rel, "tests/data/qconfig_golden/%s%s.json", prefix, rq_scheme_name(s));
	char *t = slurp(rel, &n);
	cJSON *j = t ? cJSON_ParseWithLength(t, n) : NULL;
	free(t);
	return j;
}

static const enum rq_scheme schemes[] = {RQ_SCHEME_NVFP4A16, RQ_SCHEME_FP8_DYNAMIC,
                                         RQ_SCHEME_W8A16, RQ_SCHEME_W4A16};
static const char *const lm_head[] = {"lm_head"};

static int rewrite(const char *cfg, const struct rq_qconfig_edit *e, char **out, size_t *n,
                   struct rq_err *err)
{
	memset(err, 0, sizeof *err);
	*out = NULL;
	return rq_qconfig_rewrite(cfg, strlen(cfg), e, out, n, err);
}

/* out == in with `ins` inserted at the end of the last top-level value. */
static int kept_around(const char *in, const char *out, size_t at)
{
	size_t n = strlen(in), m = strlen(out);
	return m > n && !memcmp(in, out, at) && !memcmp(in + at, out + m - (n - at), n - at);
}

static void test_plain_golden(void)
{
	size_t n;
	char *cfg = slurp("tests/data/qconfig_golden/laguna-08-01.config.json", &n);
	TAP_OK(cfg != NULL, "read the Laguna config (RQ_SOURCE_ROOT)");
	if (!cfg)
		return;
	/* the plain form: the same file without quantization_config (mkckpt --dense) */
	char *q = strstr(cfg, ",\n  \"quantization_config\"");
	char *end = q ? strstr(q, "\n  },\n") : NULL;
	TAP_OK(q && end, "found quantization_config in the Laguna config");
	if (!q || !end) {
		free(cfg);
		return;
	}
	memmove(q, end + 4, strlen(end + 4) + 1);
	for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
		struct rq_qconfig_edit e = {.scheme = schemes[i], .ignore = lm_head, .nignore = 1};
		struct rq_err err;
		char *out;
		size_t on;
		int rc = rewrite(cfg, &e, &out, &on, &err);
		TAP_OK(rc == 0, "%s: plain config rewritten (%s)", rq_scheme_name(schemes[i]), err.msg);
		if (rc)
			continue;
		cJSON *doc = cJSON_Parse(out), *g = golden("", schemes[i]);
		TAP_OK(g != NULL, "%s: golden dump read", rq_scheme_name(schemes[i]));
		TAP_OK(doc && cJSON_Compare(cJSON_GetObjectItem(doc, "quantization_config"), g, 1),
		       "%s: quantization_config equals model_free_ptq's", rq_scheme_name(schemes[i]));
		size_t last = strlen(cfg) - strlen("\n}\n");
		TAP_OK(on == strlen(out) && kept_around(cfg, out, last),
		       "%s: every other byte kept, inserted as the last member", rq_scheme_name(schemes[i]));
		TAP_OK(strstr(out, "\n  \"quantization_config\": {\n    \"config_groups\": {\n      \"") &&
		       strstr(out, "\n      \"lm_head\"\n    ],\n"),
		       "%s: written with the file's 2-space indentation", rq_scheme_name(schemes[i]));
		cJSON_Delete(doc);
		cJSON_Delete(g);
		free(out);
	}
	/* custom targets: model_free_ptq names a QuantizationScheme object config_group_0 */
	const char *const tg[] = {"re:.*mlp.*"};
	struct rq_qconfig_edit e = {.scheme = RQ_SCHEME_W8A16, .targets = tg, .ntargets = 1};
	struct rq_err err;
	char *out;
	size_t on;
	int rc = rewrite(cfg, &e, &out, &on, &err);
	cJSON *doc = rc ? NULL : cJSON_Parse(out);
	cJSON *qc = cJSON_GetObjectItem(doc, "quantization_config");
	cJSON *grp = cJSON_GetObjectItem(cJSON_GetObjectItem(qc, "config_groups"), "config_group_0");
	cJSON *t = cJSON_GetObjectItem(grp, "targets"), *ig = cJSON_GetObjectItem(qc, "ignore");
	TAP_OK(grp && cJSON_GetArraySize(t) == 1 &&
	       !strcmp(cJSON_GetArrayItem(t, 0)->valuestring, "re:.*mlp.*") &&
	       cJSON_IsArray(ig) && cJSON_GetArraySize(ig) == 0,
	       "custom targets: group config_group_0, targets as given, empty ignore list");
	cJSON_Delete(doc);
	free(out);
	free(cfg);
}

/* Style: the inserted text follows the file's indentation and separators. */
static void check_style(const char *name, const char *cfg, const char *want1, const char *want2,
                        int same_lines)
{
	struct rq_qconfig_edit e = {.scheme = RQ_SCHEME_FP8_DYNAMIC, .ignore = lm_head, .nignore = 1};
	struct rq_err err;
	char *out;
	size_t on;
	int rc = rewrite(cfg, &e, &out, &on, &err);
	TAP_OK(rc == 0, "%s: rewritten (%s)", name, err.msg);
	if (rc)
		return;
	cJSON *doc = cJSON_Parse(out), *g = golden("", RQ_SCHEME_FP8_DYNAMIC);
	TAP_OK(doc && cJSON_Compare(cJSON_GetObjectItem(doc, "quantization_config"), g, 1),
	       "%s: parses to the golden quantization_config", name);
	TAP_OK(strstr(out, want1) && (!want2 || strstr(out, want2)), "%s: written in the file's style",
	       name);
	if (same_lines) {
		int a = 0, b = 0;
		for (const char *p = cfg; *p; p++)
			a += *p == '\n';
		for (const char *p = out; *p; p++)
			b += *p == '\n';
		TAP_OK(a == b, "%s: no line added to a one-line file", name);
	}
	const char *close = strrchr(cfg, '}');
	size_t at = (size_t)(close - cfg);
	while (at > 0 && strchr(" \t\r\n", cfg[at - 1]))
		at--;
	TAP_OK(kept_around(cfg, out, at), "%s: every other byte kept", name);
	cJSON_Delete(doc);
	cJSON_Delete(g);
	free(out);
}

static void test_styles(void)
{
	check_style("4 spaces", "{\n    \"a\": 1,\n    \"b\": [\n        1,\n        2\n    ]\n}\n",
	            "],\n    \"quantization_config\": {\n        \"config_groups\": {\n"
	            "            \"FP8_DYNAMIC\": {\n                \"format\": \"float-quantized\",",
	            "\n        \"ignore\": [\n            \"lm_head\"\n        ],\n", 0);
	check_style("tabs", "{\n\t\"a\": 1,\n\t\"b\": {}\n}",
	            "{},\n\t\"quantization_config\": {\n\t\t\"config_groups\": {\n\t\t\t\"FP8_DYNAMIC\"",
	            "\n\t\t\t\t\t\"observer_kwargs\": {},\n", 0);
	check_style("compact, Python separators", "{\"a\": 1, \"b\": \"x\"}",
	            "\"b\": \"x\", \"quantization_config\": {\"config_groups\": {\"FP8_DYNAMIC\": "
	            "{\"format\": \"float-quantized\", \"input_activations\": {\"actorder\": null, ",
	            "\"ignore\": [\"lm_head\"], ", 1);
	check_style("compact, no spaces", "{\"a\":1,\"b\":\"x\"}\n",
	            "\"b\":\"x\",\"quantization_config\":{\"config_groups\":{\"FP8_DYNAMIC\":{", NULL, 1);
	check_style("CRLF, 2 spaces", "{\r\n  \"a\": 1\r\n}\r\n",
	            "\"a\": 1,\r\n  \"quantization_config\": {\r\n    \"config_groups\": {\r\n",
	            "\r\n  }\r\n}\r\n", 0);
	check_style("one member", "{\"a\": 1}", "{\"a\": 1, \"quantization_config\": {", NULL, 1);
	/* unicode and escapes elsewhere survive, numbers keep their spelling */
	check_style("unicode and escapes",
	            "{\n  \"name\": \"caf\\u00e9 \\\"q\\\" \xc3\xbc \xf0\x9f\x98\x80\",\n"
	            "  \"eps\": 1e-06,\n  \"theta\": 500000.0,\n  \"path\": \"a\\\\b\\/c\\n\"\n}\n",
	            "\"path\": \"a\\\\b\\/c\\n\",\n  \"quantization_config\": {", NULL, 0);
}

/* An existing compressed-tensors config (Laguna 08-01, mkckpt --layers 2). */
static const char *const experts1[] = {
	"model.layers.1.mlp.experts.0.gate_proj", "model.layers.1.mlp.experts.0.up_proj",
	"model.layers.1.mlp.experts.0.down_proj", "model.layers.1.mlp.experts.3.down_proj",
};

static void test_extend(void)
{
	size_t n;
	char *cfg = slurp("tests/data/qconfig_golden/laguna-08-01.config.json", &n);
	if (!cfg)
		return;
	cJSON *src = cJSON_Parse(cfg), *sqc = cJSON_GetObjectItem(src, "quantization_config");
	const char *g0 = strstr(cfg, "\"group_0\": {");
	const char *g0e = g0 ? strstr(g0, "\n      }\n") : NULL;
	for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
		const char *sn = rq_scheme_name(schemes[i]);
		size_t drop[] = {18};      /* the experts rule, the last entry */
		struct rq_qconfig_edit e = {.scheme = schemes[i], .drop = drop, .ndrop = 1,
		                            .modules = experts1, .nmodules = 4};
		struct rq_err err;
		char *out;
		size_t on;
		int rc = rewrite(cfg, &e, &out, &on, &err);
		TAP_OK(rc == 0, "%s: Laguna config extended (%s)", sn, err.msg);
		if (rc)
			continue;
		cJSON *doc = cJSON_Parse(out), *qc = cJSON_GetObjectItem(doc, "quantization_config");
		cJSON *groups = cJSON_GetObjectItem(qc, "config_groups");
		cJSON *merge = golden("merge_", schemes[i]), *plain = golden("", schemes[i]);
		cJSON *mg = cJSON_GetObjectItem(merge, "config_groups");
		int names_ok = cJSON_GetArraySize(groups) == cJSON_GetArraySize(mg);
		cJSON *c;
		cJSON_ArrayForEach(c, mg)
			names_ok &= cJSON_GetObjectItem(groups, c->string) != NULL;
		TAP_OK(names_ok, "%s: groups named as compressed-tensors' merge names them", sn);
		TAP_OK(cJSON_Compare(cJSON_GetObjectItem(qc, "format"),
		                     cJSON_GetObjectItem(merge, "format"), 1),
		       "%s: format \"%s\" as merge sets it", sn,
		       cJSON_GetStringValue(cJSON_GetObjectItem(qc, "format")));
		cJSON *ng = cJSON_GetObjectItem(groups, rq_scheme_preset(schemes[i]));
		cJSON *pg = cJSON_GetObjectItem(cJSON_GetObjectItem(plain, "config_groups"),
		                                rq_scheme_preset(schemes[i]));
		cJSON *t = cJSON_GetObjectItem(ng, "targets");
		TAP_OK(cJSON_GetArraySize(t) == 1 &&
		       !strcmp(cJSON_GetArrayItem(t, 0)->valuestring,
		               "re:^model\\.layers\\.1\\.mlp\\.experts(\\..*)?$"),
		       "%s: the new group targets the dropped rule", sn);
		cJSON_ReplaceItemInObject(pg, "targets", cJSON_Duplicate(t, 1));
		TAP_OK(cJSON_Compare(ng, pg, 1), "%s: the new group is model_free_ptq's group", sn);
		cJSON *ig = cJSON_GetObjectItem(qc, "ignore");
		TAP_OK(cJSON_GetArraySize(ig) == 18 &&
		       !strcmp(cJSON_GetArrayItem(ig, 17)->valuestring, "lm_head"),
		       "%s: the rule is gone from ignore, the rest kept", sn);
		TAP_OK(g0 && g0e && strstr(out, "\"lm_head\"\n    ],\n") &&
		       memmem(out, on, g0, (size_t)(g0e - g0)) != NULL,
		       "%s: group_0 kept byte for byte, the comma before the rule removed", sn);
		/* every member but format, config_groups and ignore as it was */
		int rest = 1;
		cJSON_ArrayForEach(c, sqc)
			if (strcmp(c->string, "format") && strcmp(c->string, "config_groups") &&
			    strcmp(c->string, "ignore"))
				rest &= cJSON_Compare(c, cJSON_GetObjectItem(qc, c->string), 1);
		TAP_OK(rest && cJSON_GetArraySize(qc) == cJSON_GetArraySize(sqc),
		       "%s: version, sparsity_config and the rest of quantization_config kept", sn);
		cJSON_Delete(doc);
		cJSON_Delete(merge);
		cJSON_Delete(plain);
		free(out);
	}
	cJSON_Delete(src);
	free(cfg);
}

static const char *extend_cfg =
	"{\n  \"quantization_config\": {\n    \"config_groups\": {\n      \"group_0\": {\n"
	"        \"format\": \"float-quantized\",\n        \"targets\": [\"Linear\"],\n"
	"        \"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"channel\"}\n"
	"      }\n    },\n    \"format\": \"float-quantized\",\n    \"ignore\": [\n"
	"      \"model.layers.0.self_attn.q_proj\",\n      \"model.layers.0.self_attn.k_proj\",\n"
	"      \"model.layers.0.self_attn.v_proj\",\n      \"model.layers.0.mlp.down_proj\",\n"
	"      \"lm_head\"\n    ],\n    \"quant_method\": \"compressed-tensors\",\n"
	"    \"quantization_status\": \"compressed\"\n  }\n}\n";

static const char *const qkv0[] = {"model.layers.0.self_attn.q_proj",
                                   "model.layers.0.self_attn.k_proj",
                                   "model.layers.0.self_attn.v_proj"};

static cJSON *extend_qc(const char *cfg, size_t *drop, size_t nd, const char *const *mods,
                        size_t nm, enum rq_scheme s, int *rc, struct rq_err *err)
{
	struct rq_qconfig_edit e = {.scheme = s, .drop = drop, .ndrop = nd, .modules = mods,
	                            .nmodules = nm};
	char *out;
	size_t on;
	*rc = rewrite(cfg, &e, &out, &on, err);
	if (*rc)
		return NULL;
	cJSON *doc = cJSON_Parse(out);
	free(out);
	cJSON *qc = cJSON_DetachItemFromObject(doc, "quantization_config");
	cJSON_Delete(doc);
	return qc;
}

static int strings_are(const cJSON *a, const char *const *v, size_t n)
{
	if (cJSON_GetArraySize(a) != (int)n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (strcmp(cJSON_GetStringValue(cJSON_GetArrayItem(a, (int)i)), v[i]))
			return 0;
	return 1;
}

static void test_drop_and_targets(void)
{
	struct rq_err err;
	int rc;
	/* the first three entries (exact names) cover q/k/v: they become the targets, plus
	 * the qkv_proj vLLM fuses them into; nvfp4 != float-quantized: mixed-precision */
	size_t d1[] = {1, 0, 2};
	cJSON *qc = extend_qc(extend_cfg, d1, 3, qkv0, 3, RQ_SCHEME_NVFP4A16, &rc, &err);
	const char *const t1[] = {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
	                          "model.layers.0.self_attn.v_proj",
	                          "model.layers.0.self_attn.qkv_proj"};
	const char *const rest1[] = {"model.layers.0.mlp.down_proj", "lm_head"};
	cJSON *g = cJSON_GetObjectItem(cJSON_GetObjectItem(qc, "config_groups"), "NVFP4A16");
	TAP_OK(rc == 0 && strings_are(cJSON_GetObjectItem(g, "targets"), t1, 4),
	       "exact dropped names as targets, plus the fused qkv_proj (%s)", err.msg);
	TAP_OK(qc && strings_are(cJSON_GetObjectItem(qc, "ignore"), rest1, 2),
	       "first three entries dropped (any order given)");
	TAP_OK(qc && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(qc, "format")),
	                     "mixed-precision"), "two formats: mixed-precision");
	cJSON_Delete(qc);
	/* drop the middle and the last one; a module no dropped entry covers: its exact name;
	 * a dropped entry matching no new module (lm_head) is removed, not a target */
	size_t d2[] = {3, 4};
	const char *const m2[] = {"model.extra.out_proj", "model.layers.0.mlp.down_proj"};
	const char *const t2[] = {"model.layers.0.mlp.down_proj", "model.extra.out_proj"};
	qc = extend_qc(extend_cfg, d2, 2, m2, 2, RQ_SCHEME_FP8_DYNAMIC, &rc, &err);
	const char *const rest2[] = {qkv0[0], qkv0[1], qkv0[2]};
	g = cJSON_GetObjectItem(cJSON_GetObjectItem(qc, "config_groups"), "FP8_DYNAMIC");
	TAP_OK(rc == 0 && strings_are(cJSON_GetObjectItem(g, "targets"), t2, 2),
	       "targets: the dropped entries used, then uncovered modules' names (%s)", err.msg);
	TAP_OK(qc && strings_are(cJSON_GetObjectItem(qc, "ignore"), rest2, 3),
	       "last two entries dropped, commas right");
	TAP_OK(qc && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(qc, "format")),
	                     "float-quantized"), "one format: format unchanged");
	cJSON_Delete(qc);
	/* every entry dropped */
	size_t d3[] = {0, 1, 2, 3, 4};
	const char *const m3[] = {qkv0[0], qkv0[1], qkv0[2], "model.layers.0.mlp.down_proj",
	                          "lm_head"};
	qc = extend_qc(extend_cfg, d3, 5, m3, 5, RQ_SCHEME_W8A16, &rc, &err);
	TAP_OK(rc == 0 && cJSON_GetArraySize(cJSON_GetObjectItem(qc, "ignore")) == 0,
	       "all entries dropped: an empty ignore list (%s)", err.msg);
	cJSON_Delete(qc);
	/* a regex rule plus a module outside every ignore entry: the rule and the name */
	const char *rx = "{\"quantization_config\": {\"config_groups\": {\"group_0\": "
	                 "{\"format\": \"nvfp4-pack-quantized\", \"targets\": [\"Linear\"]}}, "
	                 "\"format\": \"nvfp4-pack-quantized\", \"ignore\": [\"lm_head\", "
	                 "\"re:^model\\\\.layers\\\\.1\\\\..*\"], \"quant_method\": "
	                 "\"compressed-tensors\"}}";
	size_t d6[] = {1};
	const char *const m6[] = {"model.embed_tokens", "model.layers.1.mlp.up_proj",
	                          "model.layers.1.mlp.gate_proj", "model.layers.1.self_attn.q_proj"};
	const char *const t6[] = {"re:^model\\.layers\\.1\\..*", "model.embed_tokens"};
	qc = extend_qc(rx, d6, 1, m6, 4, RQ_SCHEME_NVFP4A16, &rc, &err);
	g = cJSON_GetObjectItem(cJSON_GetObjectItem(qc, "config_groups"), "NVFP4A16");
	TAP_OK(rc == 0 && strings_are(cJSON_GetObjectItem(g, "targets"), t6, 2),
	       "rule + uncovered module: the rule, the name, no fused names the rule matches (%s)",
	       err.msg);
	cJSON_Delete(qc);
	/* compact arrays */
	const char *compact = "{\"quantization_config\": {\"config_groups\": {\"group_0\": "
	                      "{\"format\": \"pack-quantized\", \"targets\": [\"Linear\"]}}, "
	                      "\"format\": \"pack-quantized\", \"ignore\": [\"a.x\", \"b.x\", \"c.x\"], "
	                      "\"quant_method\": \"compressed-tensors\"}, \"z\": 1}";
	size_t d4[] = {1};
	const char *const m4[] = {"b.x"};
	struct rq_qconfig_edit e = {.scheme = RQ_SCHEME_W4A16, .drop = d4, .ndrop = 1,
	                            .modules = m4, .nmodules = 1};
	char *out = NULL;
	size_t on;
	rc = rewrite(compact, &e, &out, &on, &err);
	TAP_OK(rc == 0 && strstr(out, "\"ignore\": [\"a.x\", \"c.x\"], ") &&
	       strstr(out, "}}, \"W4A16\": {\"format\": \"pack-quantized\", ") == NULL &&
	       strstr(out, "\"targets\": [\"Linear\"]}, \"W4A16\": {\"format\": \"pack-quantized\", "),
	       "compact: middle entry removed with its comma, group appended in compact style (%s)",
	       err.msg);
	free(out);
	/* a second group of the same preset is named as find_unique_name names it */
	char *twice = NULL;
	size_t d5[] = {0};
	const char *const m5[] = {"a.x"};
	struct rq_qconfig_edit e2 = {.scheme = RQ_SCHEME_W4A16, .drop = d5, .ndrop = 1,
	                             .modules = m5, .nmodules = 1};
	rc = rewrite(compact, &e, &out, &on, &err);
	if (!rc)
		rc = rewrite(out, &e2, &twice, &on, &err);
	TAP_OK(rc == 0 && strstr(twice, "\"W4A16_1\": {"), "a second W4A16 group: W4A16_1 (%s)",
	       err.msg);
	free(out);
	free(twice);
}

static void expect_refusal(const char *name, const char *cfg, size_t *drop, size_t nd,
                           const char *const *mods, size_t nm, const char *words)
{
	struct rq_err err;
	int rc;
	cJSON *qc = extend_qc(cfg, drop, nd, mods, nm, RQ_SCHEME_NVFP4A16, &rc, &err);
	TAP_OK(rc < 0 && !qc && strstr(err.msg, "config.json") && strstr(err.msg, words),
	       "refused: %s (%s)", name, err.msg);
	cJSON_Delete(qc);
}

static char *subst(const char *s, const char *from, const char *to)
{
	const char *p = strstr(s, from);
	char *o = malloc(strlen(s) + strlen(to) + 1);
	sprintf(o, "%.*s%s%s", (int)(p - s), s, to, p + strlen(from));
	return o;
}

static void test_refusals(void)
{
	size_t d[] = {3}, bad[] = {9};
	const char *const down[] = {"model.layers.0.mlp.down_proj"};
	const char *const down_q[] = {"model.layers.0.mlp.down_proj", qkv0[0]};
	char *c;
	c = subst(extend_cfg, "\"compressed-tensors\"", "\"fp8\"");
	expect_refusal("quant_method fp8", c, d, 1, down, 1, "not \"compressed-tensors\"");
	free(c);
	c = subst(extend_cfg, "\"quantization_status\": \"compressed\"",
	          "\"quantization_status\": \"frozen\"");
	expect_refusal("status frozen", c, d, 1, down, 1, "frozen");
	free(c);
	c = subst(extend_cfg, "\"quant_method\"", "\"sparsity_config\": {\"format\": \"sparse-24\"}, "
	          "\"quant_method\"");
	expect_refusal("a sparsity_config", c, d, 1, down, 1, "sparsity_config");
	free(c);
	expect_refusal("a module still ignored", extend_cfg, d, 1, down_q, 2,
	               "model.layers.0.self_attn.q_proj");
	c = subst(extend_cfg, "[\"Linear\"]", "[\"Linear\", \"re:.*down_proj$\"]");
	expect_refusal("a module an existing group targets by name", c, d, 1, down, 1,
	               "already targeted by config_groups.group_0");
	free(c);
	c = subst(extend_cfg, "\"format\": \"float-quantized\",\n        \"targets\"", "\"targets\"");
	expect_refusal("a group relying on the global format", c, d, 1, down, 1, "own \"format\"");
	free(c);
	expect_refusal("no module", extend_cfg, d, 1, down, 0, "no newly quantized module");
	struct rq_err err;
	int rc;
	cJSON *qc = extend_qc(extend_cfg, bad, 1, down, 1, RQ_SCHEME_NVFP4A16, &rc, &err);
	TAP_OK(rc == -EINVAL && !qc && strstr(err.msg, "cannot drop entry 9"),
	       "refused: a drop index out of range (%s)", err.msg);
	struct rq_qconfig_edit e = {.scheme = RQ_SCHEME_NVFP4A16};
	char *out = NULL;
	size_t on;
	rc = rewrite("[1, 2]", &e, &out, &on, &err);
	TAP_OK(rc == -EPROTO && !out && strstr(err.msg, "config.json"), "refused: not an object (%s)",
	       err.msg);
	rc = rewrite("{\"a\": 1", &e, &out, &on, &err);
	TAP_OK(rc == -EPROTO && !out, "refused: truncated JSON (%s)", err.msg);
	e.scheme = RQ_SCHEME_NVFP4;
	rc = rewrite("{\"a\": 1}", &e, &out, &on, &err);
	TAP_OK(rc == -EINVAL && !out, "refused: the Laguna scheme (%s)", err.msg);
	e.scheme = RQ_SCHEME_W8A16;
	e.drop = d;
	e.ndrop = 1;
	rc = rewrite("{\"a\": 1}", &e, &out, &on, &err);
	TAP_OK(rc == -EINVAL && !out, "refused: drop without a quantization_config (%s)", err.msg);
}

/* --scheme nvfp4 (W4A4): the quantization_config oneshot saved for the tiny models
 * (tests/data/w4a4_golden.json, tools/golden/gen_w4a4_golden.py), given its ignore list */
static void test_w4a4_golden(void)
{
	size_t n;
	char *gt = slurp("tests/data/w4a4_golden.json", &n);
	cJSON *gold = gt ? cJSON_ParseWithLength(gt, n) : NULL;
	free(gt);
	TAP_OK(gold != NULL, "w4a4: golden read");
	const char *const models[] = {"llama", "qwen2_moe"};
	for (size_t k = 0; gold && k < 2; k++) {
		char rel[128];
		snprintf(rel, sizeof rel, "tests/data/tiny/%s/config.json", models[k]);
		char *cfg = slurp(rel, &n);
		cJSON *want = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(
		              cJSON_GetObjectItem(gold, "models"), models[k]), "quantization_config"),
		              "ignore");
		const char *ign[8];
		int ni = 0;
		const cJSON *c;
		cJSON_ArrayForEach(c, want)
			if (ni < 8)
				ign[ni++] = c->valuestring;
		struct rq_qconfig_edit e = {.scheme = RQ_SCHEME_NVFP4_W4A4, .ignore = ign,
		                            .nignore = (size_t)ni};
		struct rq_err err;
		char *out = NULL;
		size_t on;
		int rc = cfg ? rewrite(cfg, &e, &out, &on, &err) : -ENOENT;
		cJSON *doc = rc ? NULL : cJSON_Parse(out);
		TAP_OK(doc && cJSON_Compare(cJSON_GetObjectItem(doc, "quantization_config"),
		                            cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(
		                                gold, "models"), models[k]), "quantization_config"), 1),
		       "w4a4 %s: quantization_config equals oneshot's (rc %d %s)", models[k], rc,
		       rc ? err.msg : "");
		/* the weights' observer oneshot writes for minmax is the name quant/ gives it
		 * (plan --json's observer_llmc): memoryless_minmax, not the activations' minmax */
		const cJSON *wo = cJSON_GetObjectItem(gold, "models");
		static const char *const path[] = {"quantization_config", "config_groups", "group_0",
		                                   "weights", "observer"};
		wo = cJSON_GetObjectItem(wo, models[k]);
		for (size_t i = 0; i < sizeof path / sizeof path[0]; i++)
			wo = cJSON_GetObjectItem(wo, path[i]);
		TAP_OK(cJSON_IsString(wo) && !strcmp(wo->valuestring,
		                                     rq_observer_llmc(RQ_OBSERVER_MINMAX)),
		       "w4a4 %s: oneshot's weights observer '%s' == rq_observer_llmc(minmax) '%s'",
		       models[k], cJSON_IsString(wo) ? wo->valuestring : "?",
		       rq_observer_llmc(RQ_OBSERVER_MINMAX));
		cJSON_Delete(doc);
		free(out);
		free(cfg);
	}
	cJSON_Delete(gold);
}

int main(void)
{
	test_plain_golden();
	test_w4a4_golden();
	test_styles();
	test_extend();
	test_drop_and_targets();
	test_refusals();
	return tap_done();
}
