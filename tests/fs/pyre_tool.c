/* pyre_tool.c — runs patterns over names through the product's matchers, for
 * tests/peer/test_pyre_peer.py (which asks Python's re the same questions).
 *
 *   pyre_tool rules|search < INPUT
 *
 * INPUT lines: "P <hex>" a pattern, "N <hex>" a name (hex of the UTF-8 or
 * other bytes, so that any byte can travel). rules: each pattern is an
 * ignore/targets entry through plan/rules.h ("re:PAT" as re.match, others
 * exact); search: a raw pattern through plan/pyre.h as re.search (verify
 * --tensors). Output, per pattern i in order:
 *   C i ok | C i refused <message>
 *   R i <one of 1 0 E per name>          (when it compiled)
 *   E i j <message>                       (for each E)
 *   T i <slowest name, ms of CPU time>
 * Exit 0 unless the input is malformed or memory runs out. */
#include "base/err.h"
#include "plan/pyre.h"
#include "plan/rules.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct list {
	char **v;
	size_t n, cap;
};

static int push(struct list *l, char *s)
{
	if (l->n == l->cap) {
		size_t c = l->cap ? l->cap * 2 : 64;
		char **v = realloc(l->v, c * sizeof *v);
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = c;
	}
	l->v[l->n++] = s;
	return 0;
}

static char *unhex(const char *h)
{
	size_t n = strlen(h);
	while (n && (h[n - 1] == '\n' || h[n - 1] == '\r'))
		n--;
	if (n % 2)
		return NULL;
	char *s = malloc(n / 2 + 1);
	for (size_t i = 0; s && i < n / 2; i++) {
		unsigned v;
		if (sscanf(h + 2 * i, "%2x", &v) != 1) {
			free(s);
			return NULL;
		}
		s[i] = (char)v;
	}
	if (s)
		s[n / 2] = 0;
	return s;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);   /* CPU time: the bound holds on a loaded machine */
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* one-line message: newlines and other control bytes as '?' */
static void print_msg(const char *m)
{
	for (; *m; m++)
		putchar((unsigned char)*m < 0x20 ? '?' : *m);
	putchar('\n');
}

int main(int argc, char **argv)
{
	int search = argc == 2 && !strcmp(argv[1], "search");
	if (argc != 2 || (!search && strcmp(argv[1], "rules"))) {
		fprintf(stderr, "usage: pyre_tool rules|search < INPUT\n");
		return 2;
	}
	struct list pats = {0}, names = {0};
	char *line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, stdin) > 0) {
		if (line[0] == '\n')
			continue;
		char *s = (line[0] == 'P' || line[0] == 'N') && line[1] == ' ' ? unhex(line + 2) : NULL;
		if (!s || push(line[0] == 'P' ? &pats : &names, s)) {
			fprintf(stderr, "pyre_tool: bad input line: %s", line);
			return 2;
		}
	}
	free(line);
	char *res = malloc(names.n + 1);
	if (!res)
		return 1;
	for (size_t i = 0; i < pats.n; i++) {
		struct rq_err err = {0};
		struct rq_rules rules;
		struct rq_pyre *re = NULL;
		const char *ent[1] = {pats.v[i]};
		int rc = search ? rq_pyre_compile(&re, pats.v[i], RQ_PYRE_SEARCH, NULL, &err)
		                : rq_rules_init(&rules, ent, 1, &err);
		if (rc) {
			printf("C %zu refused ", i);
			print_msg(err.msg);
			continue;
		}
		printf("C %zu ok\n", i);
		double slowest = 0;
		for (size_t j = 0; j < names.n; j++) {
			double t0 = now();
			int m = search ? rq_pyre_exec(re, names.v[j], &err)
			               : rq_rule_match(&rules, 0, names.v[j], &err);
			double dt = now() - t0;
			slowest = dt > slowest ? dt : slowest;
			res[j] = m < 0 ? 'E' : m ? '1' : '0';
			if (m < 0) {
				printf("E %zu %zu ", i, j);
				print_msg(err.msg);
			}
		}
		res[names.n] = 0;
		printf("R %zu %s\nT %zu %.3f\n", i, res, i, slowest * 1e3);
		if (search)
			rq_pyre_free(re);
		else
			rq_rules_free(&rules);
	}
	free(res);
	for (size_t i = 0; i < pats.n; i++)
		free(pats.v[i]);
	for (size_t j = 0; j < names.n; j++)
		free(names.v[j]);
	free(pats.v);
	free(names.v);
	return 0;
}
