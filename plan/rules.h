/* rules.h — quantization_config.ignore entries and --targets/--ignore,
 * matched like vLLM and compressed-tensors: "re:PAT" matches a module name
 * when Python's re.match(PAT, name) does (anchored at the start only); any
 * other entry must equal the name exactly. PAT is Python re syntax run by
 * PCRE2 with bounded work (plan/pyre.h: what is translated, what is refused
 * with the entry named). Each pattern is compiled once, at init.
 *
 * Decision: a pattern that hits PCRE2's match, depth or heap limit on some
 * module name is an error (-ERANGE, naming the entry and the module) that
 * refuses the plan, and so the mount or export; it is never taken as a
 * match or a non-match. */
#ifndef RQ_PLAN_RULES_H
#define RQ_PLAN_RULES_H

#include <stddef.h>

struct rq_err;
struct rq_pyre;

struct rq_rules {
	size_t n;
	char **text;            /* [n] the entries as written in config.json */
	struct rq_pyre **re;    /* [n] compiled for "re:" entries, else NULL */
};

int rq_rules_init(struct rq_rules *r, const char *const *entries, size_t n, struct rq_err *err);
void rq_rules_free(struct rq_rules *r);

/* 1 if entry k matches module, 0 if not; a negative errno (limit hit,
 * module not UTF-8) with err naming the entry and the module. */
int rq_rule_match(const struct rq_rules *r, size_t k, const char *module, struct rq_err *err);

/* The index of the first entry matching module in *k (-1: none); 0 or the
 * error of rq_rule_match. */
int rq_rules_first(const struct rq_rules *r, const char *module, long *k, struct rq_err *err);

#endif
