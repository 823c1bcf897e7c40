/* jinja_tool — a test driver around jinja_render, for the peer test that
 * compares it with jinja2 (tests/peer/test_jinja_peer.py).
 *
 *   jinja_tool TEMPLATE_FILE     each stdin line: a JSON object of variables
 *                                -> one line: hex of the rendering, or
 *                                   "error " and the message
 *   jinja_tool -                 each stdin line: {"template": T, "vars": {...}}
 *                                -> the same */
#include "engine/chat/jinja.h"
#include "base/err.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *s = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 8192;
			char *t = realloc(s, cap);
			if (!t)
				break;
			s = t;
		}
		size_t r = fread(s + n, 1, cap - n - 1, f);
		if (!r)
			break;
		n += r;
	}
	fclose(f);
	if (s)
		s[n] = 0;
	*len = n;
	return s;
}

static void render(const char *tmpl, size_t len, const cJSON *vars)
{
	char *out = NULL;
	size_t n = 0;
	struct rq_err err = {0};
	if (jinja_render(tmpl, len, vars, &out, &n, &err)) {
		printf("error %s\n", err.msg);
		return;
	}
	for (size_t i = 0; i < n; i++)
		printf("%02x", (unsigned char)out[i]);
	printf("\n");
	free(out);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return fprintf(stderr, "usage: jinja_tool TEMPLATE_FILE|- < vars.jsonl\n"), 2;
	size_t tlen = 0;
	char *tmpl = strcmp(argv[1], "-") ? slurp(argv[1], &tlen) : NULL;
	if (strcmp(argv[1], "-") && !tmpl)
		return fprintf(stderr, "jinja_tool: cannot read %s\n", argv[1]), 1;
	char *line = NULL;
	size_t cap = 0;
	ssize_t got;
	while ((got = getline(&line, &cap, stdin)) > 0) {
		cJSON *j = cJSON_Parse(line);
		if (!j) {
			printf("error bad JSON line\n");
		} else if (tmpl) {
			render(tmpl, tlen, j);
		} else {
			const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(j, "template"));
			render(t ? t : "", t ? strlen(t) : 0, cJSON_GetObjectItem(j, "vars"));
		}
		cJSON_Delete(j);
		fflush(stdout);
	}
	free(line);
	free(tmpl);
	return 0;
}
