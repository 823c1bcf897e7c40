/* rules.c — ignore/targets entries: exact names or Python re.match patterns. */
#include "plan/rules.h"
#include "plan/pyre.h"
#include "base/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int rq_rules_init(struct rq_rules *r, const char *const *entries, size_t n, struct rq_err *err)
{
	memset(r, 0, sizeof *r);
	r->text = calloc(n + 1, sizeof *r->text);
	r->re = calloc(n + 1, sizeof *r->re);
	if (!r->text || !r->re) {
		rq_rules_free(r);
		return -ENOMEM;
	}
	for (size_t k = 0; k < n; k++) {
		r->n = k + 1;
		r->text[k] = strdup(entries[k]);
		if (!r->text[k]) {
			rq_rules_free(r);
			return -ENOMEM;
		}
		if (!strncmp(entries[k], "re:", 3)) {
			int rc = rq_pyre_compile(&r->re[k], entries[k] + 3, RQ_PYRE_MATCH, entries[k], err);
			if (rc) {
				rq_rules_free(r);
				return rc;
			}
		}
	}
	return 0;
}

void rq_rules_free(struct rq_rules *r)
{
	if (!r)
		return;
	for (size_t k = 0; k < r->n; k++) {
		if (r->re)
			rq_pyre_free(r->re[k]);
		if (r->text)
			free(r->text[k]);
	}
	free(r->text);
	free(r->re);
	memset(r, 0, sizeof *r);
}

int rq_rule_match(const struct rq_rules *r, size_t k, const char *module, struct rq_err *err)
{
	if (r->re[k])
		return rq_pyre_exec(r->re[k], module, err);
	return strcmp(r->text[k], module) == 0;
}

int rq_rules_first(const struct rq_rules *r, const char *module, long *k, struct rq_err *err)
{
	for (size_t j = 0; j < r->n; j++) {
		int m = rq_rule_match(r, j, module, err);
		if (m < 0)
			return m;
		if (m) {
			*k = (long)j;
			return 0;
		}
	}
	*k = -1;
	return 0;
}
