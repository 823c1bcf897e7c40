/* test_plan_text.c — the text-level pieces of the plan: ignore rules with
 * Python re.match semantics, JSON spans, and the Python-compatible writer. */
#include "tests/tap.h"
#include "base/err.h"
#include "st/jtext.h"
#include "fs/rules.h"

#include <errno.h>
#include <string.h>

static int match(const char *entry, const char *name)
{
	struct rq_rules r;
	struct rq_err e = {0};
	const char *ents[1] = {entry};
	if (rq_rules_init(&r, ents, 1, &e))
		return -1;
	int m = rq_rule_match(&r, 0, name);
	rq_rules_free(&r);
	return m;
}

static void test_rules(void)
{
	const char *rule = "re:^model\\.layers\\.4[0-7]\\.mlp\\.experts(\\..*)?$";
	TAP_OK(match(rule, "model.layers.40.mlp.experts.3.gate_proj") == 1, "rule matches an expert");
	TAP_OK(match(rule, "model.layers.47.mlp.experts") == 1, "rule matches the experts module");
	TAP_OK(match(rule, "model.layers.48.mlp.experts.3.gate_proj") == 0, "layer 48 is not matched");
	TAP_OK(match(rule, "model.layers.4.mlp.experts.3.gate_proj") == 0, "layer 4 is not matched");
	TAP_OK(match(rule, "model.layers.40.mlp.shared_expert.up_proj") == 0, "shared expert is not");
	TAP_OK(match("re:.*self_attn.*", "model.layers.1.self_attn.q_proj") == 1, "re:.* matches");
	TAP_OK(match("re:self_attn", "model.layers.1.self_attn.q_proj") == 0,
	       "re.match is anchored at the start");
	TAP_OK(match("re:model\\.layers\\.\\d+\\.mlp\\.gate$", "model.layers.12.mlp.gate") == 1,
	       "\\d is translated");
	TAP_OK(match("re:(?:model)\\.norm", "model.norm") == 1, "(?: is translated");
	TAP_OK(match("lm_head", "lm_head") == 1 && match("lm_head", "lm_head2") == 0,
	       "plain entries match exactly");
	TAP_OK(match("re:a(?=b)", "ab") == -1, "look-ahead is refused");
}

static void test_spans(void)
{
	const char *s = "{\"a\": [1, {\"x\": \"]\"}], \"quantization_config\": {\"ignore\": "
	                "[\"lm_head\", \"re:a\\\\.b\" , \"c\"]}}";
	size_t n = strlen(s), qc, ign, st[8], en[8], cnt;
	TAP_OK(jt_member(s, n, 0, "quantization_config", &qc) == 0, "member found past a tricky string");
	TAP_OK(jt_member(s, n, qc, "ignore", &ign) == 0, "nested member found");
	TAP_OK(jt_elements(s, n, ign, st, en, 8, &cnt) == 0 && cnt == 3, "three elements");
	TAP_OK(!strncmp(s + st[1], "\"re:a\\\\.b\"", en[1] - st[1]), "element span is exact");
	TAP_OK(jt_member(s, n, 0, "nope", &qc) == -ENOENT, "missing member is -ENOENT");
	TAP_OK(jt_elements("[1, 2", 5, 0, st, en, 8, &cnt) == -EPROTO, "truncated array is -EPROTO");
}

static void test_dump(void)
{
	cJSON *j = cJSON_Parse("{\"weight_map\": {\"b\": \"x\", \"a\": \"\\u00e9\\ud83d\\ude00\"},"
	                       "\"metadata\": {\"total_size\": 123456789012, \"f\": 0.1, \"e\": [],"
	                       "\"o\": {}, \"t\": true, \"n\": null}}");
	struct jt_buf b = {0};
	jt_dump_python(&b, j, 0);
	const char *want =
		"{\n  \"metadata\": {\n    \"e\": [],\n    \"f\": 0.1,\n    \"n\": null,\n    \"o\": {},\n"
		"    \"t\": true,\n    \"total_size\": 123456789012\n  },\n  \"weight_map\": {\n"
		"    \"a\": \"\\u00e9\\ud83d\\ude00\",\n    \"b\": \"x\"\n  }\n}";
	TAP_OK(b.p && !strcmp(b.p, want), "json.dumps(indent=2, sort_keys=True) layout");
	if (b.p && strcmp(b.p, want))
		printf("# got:\n%s\n", b.p);
	free(b.p);
	cJSON_Delete(j);
}

int main(void)
{
	test_rules();
	test_spans();
	test_dump();
	return tap_done();
}
