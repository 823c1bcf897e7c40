/* test_jinja — the Jinja-subset interpreter without Python: renderings
 * jinja2 3.1 gave for the same template and variables (set up as
 * transformers sets it up; regenerate by rendering the templates below with
 * tests/peer/test_jinja_peer.py's environment), malformed templates that
 * must fail naming line, column and construct, and a mutation run over the
 * test templates: every mutant renders or fails with a message, never
 * crashes (run it in an ASan build too).
 *
 * The hostile templates of tests/fuzz/jinja/ (issue "hostile inputs, fourth
 * round", item 7): each renders or is refused within seconds, with the value
 * jinja2 gives or a message saying why (integer overflow, nesting, the work
 * budget), never a trap, a stack overflow or a hang.
 *
 * usage: test_jinja TEMPLATE.jinja... [SEED_DIR]   (tests/data/chat_templates/,
 *        tests/fuzz/jinja/) */
#include "engine/chat/jinja.h"
#include "base/err.h"
#include "tests/tap.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static const char VARS[] =
	"{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
	"\"content\": \" ok \"}], \"x\": 3, \"s\": \"a,b\", \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"tools\": null}";

/* {template, what jinja2 renders} */
static const char *const golden[][2] = {
	{"  {% if x %}\n  yes\n  {% endif %}\n",
	 "  yes\n"},
	{"a  {%- if x -%}  b  {%- endif -%}  c",
	 "abc"},
	{"{% for m in messages %}\n{{ m.role }}\n{% endfor %}",
	 "user\nassistant\n"},
	{"  {%+ if x %}k{% endif %}",
	 "  k"},
	{"{# c #}\nq {#- c -#} r",
	 "qr"},
	{"{{ u }}|{{ u is defined }}|{{ u|default('d') }}|{{ none }}|{{ true }}|{{ [u] }}",
	 "|False|d|None|True|[Undefined]"},
	{"{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{% endfor %}",
	 "102TrueFalse2211FalseTrue2"},
	{"{% set ns = namespace(k=[]) %}{% for m in messages[::-1] %}{% set ns.k = ns.k + [m.role] %}{% endfor %}{{ ns.k|join('>') }}",
	 "assistant>user"},
	{"{{ messages|tojson }}",
	 "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \" ok \"}]"},
	{"{{ {'a': '\303\251\"\\\\\\n', 'b': [1, 2.5, none, false]}|tojson(indent=2) }}",
	 "{\n  \"a\": \"\303\251\\\"\\\\\\n\",\n  \"b\": [\n    1,\n    2.5,\n    null,\n    false\n  ]\n}"},
	{"{{ 'x' ~ 1 ~ 2.0 ~ none }} {{ 7 // -2 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 1 / 4 }}",
	 "x12.0None -4 -2 1024 0.25"},
	{"{{ ' a b  '.split() }}{{ s.split(',') }}{{ '  t  '.strip() }}{{ 'abc'[::-1] }}{{ 'abc'[1:] }}",
	 "['a', 'b']['a', 'b']tcbabc"},
	{"{% macro m(a, b='B') %}({{ a }},{{ b }}){% endmacro %}{{ m(1) }}{{ m(2, b=3) }}",
	 "(1,B)(2,3)"},
	{"{{ 'y' if x > 5 else 'n' }}{{ 'z' if x }}{{ x in [1, 3] }}{{ 'a' not in s }}",
	 "nzTrueFalse"},
	{"{% for i in range(6) if i is even %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% else %}none{% endfor %}",
	 "02"},
	{"{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}",
	 "['Hi']"},
	{"{% set t %}  in block {{ x }}{% endset %}[{{ t|trim }}]",
	 "[in block 3]"},
	{"line1\015\nline2\015line3\n",
	 "line1\nline2\nline3"},
	{"{{ \"\\u00e9\\x41\\t\\'\" }}",
	 "\303\251A\t'"},
	{"{{ {'b': 1, 'A': 2, 'a': 0}|dictsort }}{{ {'b': 1, 'a': 0}|dictsort(by='value', reverse=true) }}",
	 "[('A', 2), ('a', 0), ('b', 1)][('b', 1), ('a', 0)]"},
	{"{{ ['b', 'A', 'c']|sort }}{{ [3, 1, 2]|sort(reverse=true) }}"
	 "{{ messages|sort(attribute='role')|map(attribute='role')|join(',') }}",
	 "['A', 'b', 'c'][3, 2, 1]assistant,user"},
	{"{% for m in messages %}{{ loop.cycle('odd', 'even') }}{{ loop.previtem is defined }}"
	 "{{ loop.nextitem is defined }}{% endfor %}",
	 "oddFalseTrueevenTrueFalse"},
	{"{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}\n{% endfor %}",
	 "[Hi][ ok ]"},
	{"{{ {'k': '\303\251\360\237\230\200\"x', '\303\251': [1, '\303\274']}|tojson(ensure_ascii=true) }} {{ {'a': 1}|tojson(separators=(',', ':')) }}",
	 "{\"k\": \"\\u00e9\\ud83d\\ude00\\\"x\", \"\\u00e9\": [1, \"\\u00fc\"]} {\"a\":1}"},
};

/* {template, words the error must contain} */
static const char *const broken[][2] = {
	{"{% if x %}never closed", "line 1 col 1: this {% if %} is never closed"},
	{"{% for m in messages %}{% endif %}", "unexpected {% endif %}"},
	{"{{ x ", "is never closed"},
	{"{{ 'unterminated }}", "unterminated string literal"},
	{"{# open comment", "comment {# is never closed"},
	{"a\nb\n  {% include 'x' %}", "line 3 col 6: the tag {% include %} is not supported"},
	{"{% raw %}x{% endraw %}", "{% raw %} is not supported"},
	{"{{ x | nosuchfilter }}", "no filter named 'nosuchfilter'"},
	{"{{ x is nosuchtest }}", "no test named 'nosuchtest'"},
	{"{{ u.attr }}", "'u' is undefined"},
	{"{{ u + 1 }}", "'u' is undefined"},
	{"{{ 'a' + 1 }}", "unsupported operand type(s) for +: 'str' and 'int'"},
	{"{{ raise_exception('no system role') }}", "raise_exception(\"no system role\")"},
	{"{{ messages.append(1) }}", "not allowed in the sandbox"},
	{"{% set ns = namespace(_x=1) %}", "underscore-prefixed"},
	{"{% set y = 1 %}{% set y.a = 2 %}", "non-namespace"},
	{"{{ (1 }}", "unexpected '}'"},
	{"{{ f(1 2) }}", "expected ','"},
	{"{{ ] }}", "unexpected ']'"},
	{"{{ x @ 2 }}", "unexpected character '@'"},
	{"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "takes not more than 1 argument"},
	{"{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}", "nested deeper than 64"},
	{"{{ 1 / 0 }}", "division by zero"},
	{"{{ 'ab' * 1000000000000 }}", "larger than"},
	{"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "more than"},
	{"{% break %}", "outside a for loop"},
	{"{{ none.x.y }}", "has no attribute 'x'"},
	{"{{ x is divisibleby 0 }}", "needs integers"},
};

/* s on one TAP line: newlines written as \n */
static const char *oneline(const char *s, char *buf, size_t n)
{
	size_t k = 0;
	for (; *s && k + 3 < n; s++)
		if (*s == '\n') {
			buf[k++] = '\\';
			buf[k++] = 'n';
		} else {
			buf[k++] = *s;
		}
	buf[k] = 0;
	return buf;
}

static int render(const char *tmpl, const cJSON *vars, char **out, struct rq_err *err)
{
	size_t n;
	*out = NULL;
	return jinja_render(tmpl, strlen(tmpl), vars, out, &n, err);
}

static void deep(const cJSON *vars, const char *open, const char *close, int n, const char *what)
{
	size_t lo = strlen(open), lc = strlen(close);
	char *t = malloc((lo + lc) * (size_t)n + 16), *p = t, *out;
	struct rq_err err = {0};
	p += sprintf(p, "{{ ");
	for (int i = 0; i < n; i++)
		p = memcpy(p, open, lo), p += lo;
	*p++ = '1';
	for (int i = 0; i < n; i++)
		p = memcpy(p, close, lc), p += lc;
	strcpy(p, " }}");
	int rc = render(t, vars, &out, &err);
	TAP_OK(rc == -EINVAL && strstr(err.msg, "nested"), "%d levels of %s refused: %s", n, what, err.msg);
	free(out);
	free(t);
}

static const char *const bits[] = {
	"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "(", ")", "[", "]", "{", "}", "'", "\"", "\\", "|",
	".", ",", ":", "=", "~", "*", "not ", " in ", " if ", " else ", "endfor", "endif", "{% endif %}",
	"{% else %}", "{% for m in messages %}", "{% if x %}", "loop.", "ns.", "messages[0]", "|tojson",
	"\n", " ", "0", "1e9", "range(99999)", "{% macro q(a) %}{{ q(a) }}{% endmacro %}{{ q(1) }}",
	"(-2**63)", "// -1", "% -1", "**99", "* 10**18", "[::9223372036854775807]", "|abs", "|int", "|sort",
	".rfind('a')", "99999999999999999999"};

/* Mutants of tmpl: each renders (0) or fails with a message (-EINVAL). */
static void mutate(const char *name, const char *tmpl, const cJSON *vars, int rounds)
{
	uint64_t seed = 0x9E3779B97F4A7C15ULL ^ strlen(tmpl);
	size_t n = strlen(tmpl);
	char *buf = malloc(n * 2 + 4096);
	int rendered = 0, refused = 0, bad = 0;
	char first_bad[1100] = "";
	for (int r = 0; r < rounds; r++) {
		size_t len = n;
		memcpy(buf, tmpl, n + 1);
		int edits = 1 + (int)(tap_xorshift64(&seed) % 4);
		for (int e = 0; e < edits && len > 0; e++) {
			size_t at = tap_xorshift64(&seed) % len, k = 1 + tap_xorshift64(&seed) % 12;
			if (at + k > len)
				k = len - at;
			switch (tap_xorshift64(&seed) % 3) {
			case 0:   /* delete */
				memmove(buf + at, buf + at + k, len - at - k + 1);
				len -= k;
				break;
			case 1: {   /* insert a piece of syntax */
				const char *b = bits[tap_xorshift64(&seed) % (sizeof bits / sizeof *bits)];
				size_t bl = strlen(b);
				if (len + bl >= n * 2 + 4000)
					break;
				memmove(buf + at + bl, buf + at, len - at + 1);
				memcpy(buf + at, b, bl);
				len += bl;
				break;
			}
			default:   /* duplicate a span */
				if (len + k >= n * 2 + 4000)
					break;
				memmove(buf + at + k, buf + at, len - at + 1);
				len += k;
				break;
			}
		}
		char *out = NULL;
		struct rq_err err = {0};
		int rc = render(buf, vars, &out, &err);
		if (rc == 0 && out)
			rendered++;
		else if (rc == -EINVAL && strstr(err.msg, "chat template"))
			refused++;
		else if (!bad++)
			snprintf(first_bad, sizeof first_bad, "rc %d: %s", rc, err.msg);
		free(out);
	}
	free(buf);
	TAP_OK(!bad && refused > 0, "%s: %d mutants: %d render, %d refused with a message, %d otherwise %s",
	       name, rounds, rendered, refused, bad, first_bad);
}

/* ---- hostile templates (tests/fuzz/jinja/NAME.jinja, also fuzz seeds) ------
 * Each starts with {# expect: TEXT #}: its rendering, or its error message,
 * must contain TEXT. Each runs in a child process with a time limit, so a
 * crash (a trap, a stack overflow) or a hang is one failed line, not the end
 * of the test. */

#define SEED_LIMIT_S 10

/* Renders tmpl in a child: "rc work\n" then the output or the message, in *res. */
static int run_child(const char *tmpl, const cJSON *vars, char *res, size_t cap, int *status, double *secs)
{
	int fd[2];
	struct timespec t0, t1;
	if (pipe(fd))
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid_t pid = fork();
	if (pid == 0) {
		char *out = NULL;
		size_t n = 0;
		uint64_t used = 0;
		struct rq_err err = {0};
		close(fd[0]);
		alarm(SEED_LIMIT_S);
		int rc = jinja_render_budget(tmpl, strlen(tmpl), vars, 0, &used, &out, &n, &err);
		FILE *f = fdopen(fd[1], "w");
		fprintf(f, "%d %llu\n%.*s", rc, (unsigned long long)used, (int)(rc ? strlen(err.msg) : n < 4000 ? n : 4000),
			rc ? err.msg : out);
		fclose(f);
		_exit(0);
	}
	close(fd[1]);
	size_t k = 0;
	ssize_t r;
	while ((r = read(fd[0], res + k, cap - 1 - k)) > 0)
		k += (size_t)r;
	res[k] = 0;
	close(fd[0]);
	waitpid(pid, status, 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	*secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	return 0;
}

static void hostile(const char *dir, const cJSON *vars)
{
	struct dirent **ents;
	int n = scandir(dir, &ents, NULL, alphasort), seen = 0;
	TAP_OK(n > 0, "hostile templates in %s", dir);
	for (int i = 0; i < n; i++) {
		char path[4200], res[8192], want[512] = "";
		const char *name = ents[i]->d_name;
		size_t len = strlen(name);
		if (len < 7 || strcmp(name + len - 6, ".jinja")) {
			free(ents[i]);
			continue;
		}
		snprintf(path, sizeof path, "%s/%s", dir, name);
		char *t = tap_slurp(path, NULL);
		const char *e = t ? strstr(t, " #}") : NULL;
		if (t && !strncmp(t, "{# expect: ", 11) && e && e - t - 11 < (long)sizeof want)
			memcpy(want, t + 11, (size_t)(e - t - 11));
		int status = 0;
		double secs = 0;
		seen++;
		if (!*want || run_child(t, vars, res, sizeof res, &status, &secs)) {
			TAP_OK(0, "%s: no {# expect: ... #} first, or no child", name);
		} else {
			int rc = atoi(res);
			char *body = strchr(res, '\n');
			body = body ? body + 1 : res;
			int done = WIFEXITED(status) && WEXITSTATUS(status) == 0;
			TAP_OK(done && strstr(body, want) && (rc == 0 || (rc == -EINVAL && strstr(body, "chat template"))) &&
			       secs < SEED_LIMIT_S, "%s: %s in %.2f s (work %s): %.300s", name,
			       !done ? (WIFSIGNALED(status) ? (WTERMSIG(status) == SIGALRM ? "HUNG" : "CRASHED") : "died")
			       : rc ? "refused" : "rendered", secs, strchr(res, ' ') ? strtok(strchr(res, ' ') + 1, "\n") : "?",
			       WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : body);
			if (done && !strstr(body, want))
				printf("#   wanted: %s\n", want);
		}
		free(t);
		free(ents[i]);
	}
	free(ents);
	TAP_OK(seen >= 30, "%d hostile templates ran", seen);
}

/* The real templates on a conversation use a tiny part of the work budget. */
static void margin(const char *name, const char *tmpl, const cJSON *vars)
{
	char *out = NULL;
	size_t n;
	uint64_t used = 0;
	struct rq_err err = {0};
	int rc = jinja_render_budget(tmpl, strlen(tmpl), vars, 0, &used, &out, &n, &err);
	TAP_OK(rc == 0 && used * 1000 < JINJA_WORK_DEFAULT, "%s renders using %llu units of work, under a "
	       "thousandth of the budget (%llu) %s", name, (unsigned long long)used,
	       (unsigned long long)JINJA_WORK_DEFAULT, rc ? err.msg : "");
	free(out);
}

int main(int argc, char **argv)
{
	cJSON *vars = cJSON_Parse(VARS);
	for (size_t i = 0; i < sizeof golden / sizeof *golden; i++) {
		char *out;
		struct rq_err err = {0};
		int rc = render(golden[i][0], vars, &out, &err);
		int ok = !rc && !strcmp(out, golden[i][1]);
		TAP_OK(ok, "golden %zu renders as jinja2 does", i);
		if (!ok)
			printf("#   template %s\n#   ours     %s\n#   jinja2   %s\n", golden[i][0], rc ? err.msg : out,
			       golden[i][1]);
		free(out);
	}
	for (size_t i = 0; i < sizeof broken / sizeof *broken; i++) {
		char *out, line[256];
		struct rq_err err = {0};
		int rc = render(broken[i][0], vars, &out, &err);
		TAP_OK(rc == -EINVAL && strstr(err.msg, broken[i][1]) && strstr(err.msg, "chat template"),
		       "refused: %s -> %s", oneline(broken[i][0], line, sizeof line),
		       rc ? err.msg : "(rendered)");
		free(out);
	}
	deep(vars, "(", ")", 70, "parentheses");
	deep(vars, "not ", "", 100000, "not");
	deep(vars, "-", "", 100000, "unary minus");
	deep(vars, "[", "]", 100000, "brackets");
	{
		size_t n = 100000;
		char *t = malloc(n * 12 + 1), *out;
		struct rq_err err = {0};
		t[0] = 0;
		for (size_t i = 0; i < n; i++)
			strcat(t + i * 10, "{% if x %}");
		int rc = render(t, vars, &out, &err);
		TAP_OK(rc == -EINVAL && strstr(err.msg, "nested"), "100000 nested {%% if %%} refused: %s", err.msg);
		free(t);
	}
	int ntmpl = 0;
	for (int i = 1; i < argc; i++) {
		struct stat sb;
		if (!stat(argv[i], &sb) && S_ISDIR(sb.st_mode)) {
			hostile(argv[i], vars);
			continue;
		}
		char *t = tap_slurp(argv[i], NULL);
		const char *name = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
		TAP_OK(t != NULL, "read %s", argv[i]);
		ntmpl++;
		if (t) {
			margin(name, t, vars);
			mutate(name, t, vars, 3000);
		}
		free(t);
	}
	TAP_OK(ntmpl > 0, "templates to mutate given (%d)", ntmpl);
	cJSON_Delete(vars);
	return tap_done();
}
