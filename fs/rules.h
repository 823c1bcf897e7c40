/* rules.h — quantization_config.ignore entries and --targets/--ignore,
 * matched like vLLM and compressed-tensors: "re:PAT" matches a module name
 * when Python's re.match(PAT, name) does (anchored at the start only); any
 * other entry must equal the name exactly. PAT is translated to POSIX ERE (\d \w \s and (?:
 * are rewritten); a pattern using other Python-only syntax is refused. */
#ifndef RQ_FS_RULES_H
#define RQ_FS_RULES_H

#include <regex.h>
#include <stddef.h>

struct rq_err;

struct rq_rules {
	size_t n;
	char **text;       /* [n] the entries as written in config.json */
	regex_t *re;       /* [n] compiled for "re:" entries */
	int *is_re;        /* [n] */
};

int rq_rules_init(struct rq_rules *r, const char *const *entries, size_t n, struct rq_err *err);
void rq_rules_free(struct rq_rules *r);
int rq_rule_match(const struct rq_rules *r, size_t k, const char *module);

/* Compiles one Python-style pattern with re.match semantics. */
int rq_regex_compile(regex_t *re, const char *pat, int anchor_start, struct rq_err *err);

#endif
