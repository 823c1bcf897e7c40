/* test_plan_text.c — the text-level pieces of the plan: ignore rules with
 * Python re.match semantics, JSON spans, and the Python-compatible writer. */
#include "tests/tap.h"
#include "base/err.h"
#include "st/jtext.h"
#include "plan/rules.h"

#include <errno.h>
#include <string.h>
#include <time.h>

/* 1 match, 0 none, -1 refused at compile, -2 error while matching; *e holds
 * the message. */
static int match_e(const char *entry, const char *name, struct rq_err *e)
{
	struct rq_rules r;
	const char *ents[1] = {entry};
	memset(e, 0, sizeof *e);
	if (rq_rules_init(&r, ents, 1, e))
		return -1;
	int m = rq_rule_match(&r, 0, name, e);
	rq_rules_free(&r);
	return m < 0 ? -2 : m;
}

static int match(const char *entry, const char *name)
{
	struct rq_err e;
	return match_e(entry, name, &e);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);   /* CPU time: the bound holds on a loaded machine */
	return t.tv_sec + t.tv_nsec * 1e-9;
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
	/* Python semantics POSIX ERE did not have (each answered wrongly or refused before) */
	TAP_OK(match("re:a(?=b)", "ab") == 1 && match("re:a(?=b)", "ac") == 0,
	       "look-ahead works as in Python");
	TAP_OK(match("re:.*?_proj$", "model.q_proj") == 1, "lazy quantifiers work as in Python");
	TAP_OK(match("re:.*\\.\\d$", "model.layers.\xd9\xa3") == 1,
	       "\\d matches a Unicode digit (U+0663), as Python's does");
	TAP_OK(match("re:\\w+$", "caf\xc3\xa9") == 1, "\\w matches a Unicode letter");
	TAP_OK(match("re:.{4}$", "caf\xc3\xa9") == 1 && match("re:.{5}$", "caf\xc3\xa9") == 0,
	       "'.' is one character, not one byte");
	TAP_OK(match("re:.*proj$", "q_proj\n") == 1, "'$' matches before a final newline");
	TAP_OK(match("re:.*proj\\Z", "q_proj\n") == 0 && match("re:.*proj\\Z", "q_proj") == 1,
	       "\\Z is the very end");
	TAP_OK(match("re:x{,2}y$", "xxy") == 1 && match("re:x{,2}y$", "xxxy") == 0,
	       "{,n} is a quantifier");
	TAP_OK(match("re:[[:alpha:]]+$", "a]") == 1 && match("re:[[:alpha:]]$", "b") == 0,
	       "[[:alpha:]] is Python's set of characters, not a POSIX class");
	TAP_OK(match("re:(?i)LM_HEAD$", "lm_head") == 1, "(?i) works");
	TAP_OK(match("re:\\s$", "\x1c") == 1 && match("re:\\s$", "\xc2\x85") == 1,
	       "\\s is str.isspace (\\x1c, U+0085)");
	TAP_OK(match("re:(?P<l>\\d+)\\.(?P=l)$", "12.12") == 1 &&
	       match("re:(\\d+)\\.\\1$", "12.13") == 0, "back-references work");
	/* refused with the entry named */
	struct rq_err e;
	TAP_OK(match_e("re:(?x)a b", "ab", &e) == -1 && strstr(e.msg, "'re:(?x)a b'"),
	       "the verbose flag is refused, naming the entry (%s)", e.msg);
	TAP_OK(match_e("re:\\N{DIGIT ONE}", "1", &e) == -1 && strstr(e.msg, "re:\\N{DIGIT ONE}"),
	       "\\N{...} is refused, naming the entry");
	TAP_OK(match_e("re:(*LIMIT_MATCH=1)a", "a", &e) == -1, "PCRE2 verbs are refused");
	TAP_OK(match_e("re:a(?i)b", "ab", &e) == -1, "global flags after the start are refused");
	TAP_OK(match_e("re:\\q", "q", &e) == -1, "a bad escape is refused as Python does");
	TAP_OK(match_e("re:a{99999}", "a", &e) == -1 && strstr(e.msg, "re:a{99999}"),
	       "a repeat PCRE2 cannot hold is refused, naming the entry");
	TAP_OK(match_e("re:lm_head", "lm_\xff", &e) == -2 && strstr(e.msg, "UTF-8"),
	       "a name that is not UTF-8 is an error");
	/* catastrophic backtracking: an error naming the entry and the module, fast */
	char name[1100];
	memset(name, 'a', 1000);
	strcpy(name + 1000, "!by!");      /* has the b and y PCRE2 looks for first */
	static const char *const bad[] = {"re:(a|aa)*$", "re:(a|aa)*b", "re:(a+)+b", "re:(a*)*b",
	                                  "re:(.{1,200}){1,200}y$", "re:(a|a?)+b",
	                                  "re:(?:a+){2,}b", "re:(.*a){12}b"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		double t0 = now();
		int m = match_e(bad[i], name, &e);
		double dt = now() - t0;
		TAP_OK(m == -2 && strstr(e.msg, bad[i]) && strstr(e.msg, "aaaaaaaa") &&
		       strstr(e.msg, "limit") && dt < 1.0,
		       "%s on 1000 a's: a limit error naming entry and module in %.3f s CPU (%s)", bad[i],
		       dt, m == -2 ? "error" : m == 1 ? "matched" : m == 0 ? "no match" : "refused");
	}
	memset(name, 'x', 60);
	strcpy(name + 60, "!y");
	double t0 = now();
	int m = match_e("re:(x+x+)+y", name, &e);
	TAP_OK(m == -2 && now() - t0 < 1.0, "(x+x+)+y on 60 x's: a limit error within 1 s CPU");
	TAP_OK(match("re:(a|aa)*$", "aaaa") == 1, "the same pattern on a short name answers");
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
