/* test_jinja — the Jinja-subset interpreter without Python: renderings
 * jinja2 3.1 gave for the same template and variables (set up as
 * transformers sets it up; regenerate by rendering the templates below with
 * tests/peer/test_jinja_peer.py's environment), malformed templates that
 * must fail naming line, column and construct, and a mutation run over the
 * test templates: every mutant renders or fails with a message, never
 * crashes (run it in an ASan build too).
 *
 * usage: test_jinja TEMPLATE.jinja...   (tests/data/chat_templates/) */
#include "engine/chat/jinja.h"
#include "base/err.h"
#include "tests/tap.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>

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
	"\n", " ", "0", "1e9", "range(99999)", "{% macro q(a) %}{{ q(a) }}{% endmacro %}{{ q(1) }}"};

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
	TAP_OK(argc > 1, "templates to mutate given (%d)", argc - 1);
	for (int i = 1; i < argc; i++) {
		char *t = tap_slurp(argv[i], NULL);
		TAP_OK(t != NULL, "read %s", argv[i]);
		if (t)
			mutate(strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i], t, vars, 3000);
		free(t);
	}
	cJSON_Delete(vars);
	return tap_done();
}
