/* rules.c — ignore-list matching with Python re.match semantics. */
#include "fs/rules.h"
#include "base/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int rq_regex_compile(regex_t *re, const char *pat, int anchor_start, struct rq_err *err)
{
	size_t n = strlen(pat);
	char *ere = malloc(n * 12 + 8), *o = ere;
	if (!ere)
		return -ENOMEM;
	if (anchor_start)
		o = stpcpy(o, "^(");
	for (size_t i = 0; i < n; i++) {
		if (pat[i] == '\\' && i + 1 < n) {
			char c = pat[++i];
			switch (c) {
			case 'd': o = stpcpy(o, "[0-9]"); break;
			case 'D': o = stpcpy(o, "[^0-9]"); break;
			case 'w': o = stpcpy(o, "[A-Za-z0-9_]"); break;
			case 'W': o = stpcpy(o, "[^A-Za-z0-9_]"); break;
			case 's': o = stpcpy(o, "[[:space:]]"); break;
			case 'S': o = stpcpy(o, "[^[:space:]]"); break;
			case 'A': o = stpcpy(o, "^"); break;
			case 'Z': o = stpcpy(o, "$"); break;
			default:
				if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
					free(ere);
					return rq_errf(err, -EINVAL, "pattern '%s': the escape \\%c has no "
					               "POSIX equivalent here", pat, c);
				}
				*o++ = '\\';
				*o++ = c;
			}
		} else if (pat[i] == '(' && pat[i + 1] == '?') {
			if (pat[i + 2] != ':') {
				free(ere);
				return rq_errf(err, -EINVAL, "pattern '%s': Python group syntax '(?%c' "
				               "is not supported", pat, pat[i + 2]);
			}
			*o++ = '(';
			i += 2;
		} else if ((pat[i] == '*' || pat[i] == '+' || pat[i] == '?') && pat[i + 1] == '?') {
			free(ere);
			return rq_errf(err, -EINVAL, "pattern '%s': non-greedy quantifiers are not "
			               "supported", pat);
		} else {
			*o++ = pat[i];
		}
	}
	if (anchor_start)
		*o++ = ')';
	*o = 0;
	int rc = regcomp(re, ere, REG_EXTENDED | REG_NOSUB);
	free(ere);
	if (rc) {
		char m[128];
		regerror(rc, re, m, sizeof m);
		return rq_errf(err, -EINVAL, "pattern '%s' does not compile: %s", pat, m);
	}
	return 0;
}

int rq_rules_init(struct rq_rules *r, const char *const *entries, size_t n, struct rq_err *err)
{
	memset(r, 0, sizeof *r);
	r->text = calloc(n + 1, sizeof *r->text);
	r->re = calloc(n + 1, sizeof *r->re);
	r->is_re = calloc(n + 1, sizeof *r->is_re);
	if (!r->text || !r->re || !r->is_re) {
		rq_rules_free(r);
		return -ENOMEM;
	}
	for (size_t k = 0; k < n; k++) {
		r->text[k] = strdup(entries[k]);
		if (!r->text[k]) {
			rq_rules_free(r);
			return -ENOMEM;
		}
		r->n = k + 1;
		if (!strncmp(entries[k], "re:", 3)) {
			int rc = rq_regex_compile(&r->re[k], entries[k] + 3, 1, err);
			if (rc) {
				r->n = k;  /* k's regex was not compiled */
				free(r->text[k]);
				rq_rules_free(r);
				return rc;
			}
			r->is_re[k] = 1;
		}
	}
	return 0;
}

void rq_rules_free(struct rq_rules *r)
{
	if (!r)
		return;
	for (size_t k = 0; k < r->n; k++) {
		if (r->is_re && r->is_re[k])
			regfree(&r->re[k]);
		if (r->text)
			free(r->text[k]);
	}
	free(r->text);
	free(r->re);
	free(r->is_re);
	memset(r, 0, sizeof *r);
}

int rq_rule_match(const struct rq_rules *r, size_t k, const char *module)
{
	if (r->is_re[k])
		return regexec(&r->re[k], module, 0, NULL, 0) == 0;
	return strcmp(r->text[k], module) == 0;
}
