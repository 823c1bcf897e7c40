/* pyre.c — Python re patterns on PCRE2, bounded (see pyre.h).
 *
 * The translator walks the pattern once, as Python's sre_parse reads it:
 * outside a class it knows escapes, groups "(?...", quantifiers "{...}";
 * inside a class only escapes and the closing ']'. Everything else is copied
 * byte for byte (UTF-8 stays UTF-8). It does not check the whole grammar:
 * PCRE2's compiler refuses what is malformed for both (unbalanced
 * parentheses, a quantifier with nothing to repeat, a bad range). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "fs/pyre.h"
#include "base/err.h"

#include <errno.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rq_pyre {
	pcre2_code *code;
	pcre2_match_context *mctx;   /* the limits; read-only after compile */
	char *shown;                 /* the pattern as errors name it */
};

/* ---- translation ----------------------------------------------------- */

struct tr {
	const char *pat;     /* the Python pattern */
	size_t i, n;         /* read position, length */
	char *o;             /* the PCRE2 pattern [on] of [ocap] */
	size_t on, ocap;
	int oom;
	int only_flags;      /* nothing but global flag groups read so far */
	int ngroups;         /* capturing groups opened so far */
	int open[256];       /* stack: group number of each open '(' (0: not capturing) */
	int depth;
	unsigned char closed[100];   /* [g] group g closed (backreferences 1..99) */
	struct rq_err *err;
	const char *shown;
};

static void put(struct tr *t, const char *s, size_t n)
{
	if (t->on + n + 1 > t->ocap) {
		size_t c = (t->on + n + 1) * 2;
		char *p = realloc(t->o, c);
		if (!p) {
			t->oom = 1;
			return;
		}
		t->o = p;
		t->ocap = c;
	}
	memcpy(t->o + t->on, s, n);
	t->on += n;
	t->o[t->on] = 0;
}

static void puts_(struct tr *t, const char *s)
{
	put(t, s, strlen(s));
}

static void putcp(struct tr *t, unsigned long v)
{
	char b[24];
	snprintf(b, sizeof b, "\\x{%lx}", v);
	puts_(t, b);
}

static int refuse(struct tr *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(struct tr *t, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return rq_errf(t->err, -EINVAL, "pattern '%s': %s at offset %zu; rewrite the pattern "
	               "without it (requantfs matches Python re syntax through PCRE2 and refuses "
	               "what it cannot translate exactly)", t->shown, why, t->i);
}

static int is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int is_oct(char c)
{
	return c >= '0' && c <= '7';
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int is_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Python's str.isspace() set (what \s matches in a str pattern), as the
 * inside of a class; PCRE2's \s under UCP lacks \x1c-\x1f and \x85. */
static const char space_set[] = "\\t-\\r\\x1c-\\x20\\x85\\xa0\\x{1680}\\x{2000}-\\x{200a}"
                                "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

/* Exactly k hex digits after t->pat[t->i] (the x/u/U), as \x{...}. */
static int hex_escape(struct tr *t, int k)
{
	unsigned long v = 0;
	for (int j = 1; j <= k; j++) {
		char c = t->i + j < t->n ? t->pat[t->i + j] : 0;
		if (!is_hex(c))
			return refuse(t, "\\%c needs exactly %d hex digits", t->pat[t->i], k);
		v = v * 16 + (unsigned long)(is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
	}
	if (v > 0x10ffff)
		return refuse(t, "\\%c escape above U+10FFFF", t->pat[t->i]);
	t->i += (size_t)k + 1;
	putcp(t, v);
	return 0;
}

/* An octal escape of up to `max` digits starting at t->pat[t->i]. */
static int oct_escape(struct tr *t, int max)
{
	unsigned long v = 0;
	int k = 0;
	while (k < max && t->i < t->n && is_oct(t->pat[t->i]))
		v = v * 8 + (unsigned long)(t->pat[t->i++] - '0'), k++;
	if (v > 0377)
		return refuse(t, "octal escape above \\377");
	putcp(t, v);
	return 0;
}

/* Copies one UTF-8 character (its lead byte at t->i) unchanged. */
static void copy_char(struct tr *t)
{
	size_t j = t->i + 1;
	while (j < t->n && (t->pat[j] & 0xc0) == 0x80)
		j++;
	put(t, t->pat + t->i, j - t->i);
	t->i = j;
}

/* t->pat[t->i] is a backslash. */
static int escape(struct tr *t, int in_class)
{
	if (t->i + 1 >= t->n)
		return refuse(t, "a trailing backslash");
	t->i++;
	char c = t->pat[t->i];
	switch (c) {
	case 'd': case 'D': case 'w': case 'W':
		put(t, t->pat + t->i - 1, 2);
		t->i++;
		return 0;
	case 's':
		puts_(t, in_class ? "" : "[");
		puts_(t, space_set);
		puts_(t, in_class ? "" : "]");
		t->i++;
		return 0;
	case 'S':
		if (in_class)
			return refuse(t, "\\S inside a character class");
		puts_(t, "[^");
		puts_(t, space_set);
		puts_(t, "]");
		t->i++;
		return 0;
	case 'a': puts_(t, "\\x07"); t->i++; return 0;
	case 'f': puts_(t, "\\f"); t->i++; return 0;
	case 'n': puts_(t, "\\n"); t->i++; return 0;
	case 'r': puts_(t, "\\r"); t->i++; return 0;
	case 't': puts_(t, "\\t"); t->i++; return 0;
	case 'v': puts_(t, "\\x0b"); t->i++; return 0;
	case 'x': return hex_escape(t, 2);
	case 'u': return hex_escape(t, 4);
	case 'U': return hex_escape(t, 8);
	case 'N': return refuse(t, "\\N{...} (named Unicode characters are not translated; "
	                        "write the character itself)");
	case '\\': puts_(t, "\\\\"); t->i++; return 0;
	}
	if (in_class) {
		if (c == 'b') {
			puts_(t, "\\x08");
			t->i++;
			return 0;
		}
		if (is_oct(c))
			return oct_escape(t, 3);
	} else {
		switch (c) {
		case 'A': case 'b': case 'B':
			put(t, t->pat + t->i - 1, 2);
			t->i++;
			return 0;
		case 'Z':
			puts_(t, "\\z");   /* Python's \Z is the very end */
			t->i++;
			return 0;
		case '0':
			t->i++;
			return oct_escape(t, 2);
		}
		if (is_digit(c)) {
			/* three octal digits are a character, else a group number */
			if (t->i + 2 < t->n && is_oct(c) && is_oct(t->pat[t->i + 1]) &&
			    is_oct(t->pat[t->i + 2]))
				return oct_escape(t, 3);
			int g = c - '0';
			t->i++;
			if (t->i < t->n && is_digit(t->pat[t->i]))
				g = g * 10 + (t->pat[t->i++] - '0');
			if (!t->closed[g])
				return refuse(t, "back-reference \\%d to a group that is open or not "
				              "defined (Python refuses it)", g);
			char b[16];
			snprintf(b, sizeof b, "\\g{%d}", g);
			puts_(t, b);
			return 0;
		}
	}
	if (is_alpha(c) || is_digit(c))
		return refuse(t, "the escape \\%c (Python refuses it%s)", c,
		              in_class ? " inside a class" : "");
	if ((unsigned char)c >= 0x80) {   /* an escaped non-ASCII character is itself */
		copy_char(t);
		return 0;
	}
	put(t, t->pat + t->i - 1, 2);     /* escaped punctuation or space: literal */
	t->i++;
	return 0;
}

/* A group name (Python: an identifier; PCRE2 10.42: ASCII only) up to `end`. */
static int group_name(struct tr *t, char end)
{
	size_t s = t->i;
	while (t->i < t->n && t->pat[t->i] != end) {
		char c = t->pat[t->i];
		if (!(is_alpha(c) || c == '_' || (is_digit(c) && t->i > s)))
			return refuse(t, "a group name that is not an ASCII identifier");
		t->i++;
	}
	if (t->i >= t->n || t->i == s)
		return refuse(t, "a missing or unterminated group name");
	put(t, t->pat + s, t->i - s);
	put(t, &end, 1);
	t->i++;
	return 0;
}

static int open_group(struct tr *t, int capturing)
{
	if (t->depth >= (int)(sizeof t->open / sizeof t->open[0]))
		return refuse(t, "parentheses nested deeper than %zu",
		              sizeof t->open / sizeof t->open[0]);
	t->open[t->depth++] = capturing ? ++t->ngroups : 0;
	return 0;
}

/* Inline flags "(?aiLmsux)" or "(?aiLmsux-imsx:"; t->i at the first letter. */
static int flags(struct tr *t)
{
	char on[8] = "", off[8] = "";
	int neg = 0;
	size_t non = 0, noff = 0;
	for (; t->i < t->n; t->i++) {
		char c = t->pat[t->i];
		if (c == ':' || c == ')')
			break;
		if (c == '-' && !neg) {
			neg = 1;
			continue;
		}
		if (c == 'a' || c == 'L' || c == 'x')
			return refuse(t, "the inline flag '%c' (not translated)", c);
		if (c == 'u' && !neg)
			continue;          /* str patterns are Unicode already */
		if (c != 'i' && c != 'm' && c != 's')
			return refuse(t, "an unknown group extension or flag '%c'", c);
		char *set = neg ? off : on;
		size_t *k = neg ? &noff : &non;
		if (!strchr(set, c))
			set[(*k)++] = c;
	}
	if (t->i >= t->n)
		return refuse(t, "an unterminated flag group");
	char end = t->pat[t->i++];
	if (end == ')') {
		if (neg)
			return refuse(t, "'-' in a global flag group (Python needs ':')");
		if (!t->only_flags)
			return refuse(t, "global flags not at the start of the pattern (Python refuses "
			              "them)");
		if (non) {
			puts_(t, "(?");
			puts_(t, on);
			puts_(t, ")");
		}
		return 0;
	}
	puts_(t, "(?");
	puts_(t, on);
	if (noff) {
		puts_(t, "-");
		puts_(t, off);
	}
	puts_(t, ":");
	return open_group(t, 0);
}

/* t->pat[t->i] is '(' outside a class. */
static int group(struct tr *t)
{
	const char *p = t->pat + t->i;
	size_t left = t->n - t->i;
	if (left > 1 && p[1] == '*')
		return refuse(t, "'(*' (a PCRE2 verb; in Python, nothing to repeat)");
	if (left < 2 || p[1] != '?') {
		t->i++;
		puts_(t, "(");
		return open_group(t, 1);
	}
	char c = left > 2 ? p[2] : 0;
	if (c == ':' || c == '=' || c == '!' || c == '>') {
		put(t, p, 3);
		t->i += 3;
		return open_group(t, 0);
	}
	if (c == '<' && left > 3 && (p[3] == '=' || p[3] == '!')) {
		put(t, p, 4);
		t->i += 4;
		return open_group(t, 0);
	}
	if (c == 'P' && left > 3 && p[3] == '<') {
		puts_(t, "(?P<");
		t->i += 4;
		int rc = group_name(t, '>');
		return rc ? rc : open_group(t, 1);
	}
	if (c == 'P' && left > 3 && p[3] == '=') {
		puts_(t, "(?P=");
		t->i += 4;
		return group_name(t, ')');
	}
	if (c == '#') {                      /* a comment: dropped */
		const char *e = memchr(p, ')', left);
		if (!e)
			return refuse(t, "an unterminated comment");
		t->i += (size_t)(e - p) + 1;
		return 0;
	}
	if (c == '(') {                      /* (?(id)yes|no): a group number or name */
		size_t s = t->i + 3, e = s;
		int num = 1;
		while (e < t->n && t->pat[e] != ')')
			num &= is_digit(t->pat[e++]);
		if (e >= t->n || e == s)
			return refuse(t, "an unterminated condition");
		if (num) {
			put(t, p, e - t->i + 1);
			t->i = e + 1;
			return open_group(t, 0);
		}
		puts_(t, "(?(<");
		t->i = s;
		int rc = group_name(t, ')');
		if (rc)
			return rc;
		t->on--;                         /* "name)" -> "name>)" */
		puts_(t, ">)");
		return open_group(t, 0);
	}
	if (is_alpha(c) || c == '-') {
		t->i += 2;
		return flags(t);
	}
	return refuse(t, "the group syntax '(?%c' (not Python, or not translated)", c ? c : ' ');
}

/* '{' outside a class: a quantifier {m}, {m,}, {,n}, {m,n}, {,} as Python
 * reads it (PCRE2 10.42 takes "{,n}" literally), else a literal '{'. */
static void brace(struct tr *t)
{
	size_t j = t->i + 1, lo = j;
	while (j < t->n && is_digit(t->pat[j]))
		j++;
	size_t lo_end = j, hi = j, hi_end = j;
	int comma = j < t->n && t->pat[j] == ',';
	if (comma) {
		hi = hi_end = ++j;
		while (hi_end < t->n && is_digit(t->pat[hi_end]))
			hi_end++;
		j = hi_end;
	}
	if (j >= t->n || t->pat[j] != '}' || j == t->i + 1) {
		puts_(t, "\\{");
		t->i++;
		return;
	}
	puts_(t, "{");
	if (lo_end > lo)
		put(t, t->pat + lo, lo_end - lo);
	else
		puts_(t, "0");
	if (comma) {
		puts_(t, ",");
		put(t, t->pat + hi, hi_end - hi);
	}
	puts_(t, "}");
	t->i = j + 1;
}

static int translate(const char *pat, const char *shown, char **out, struct rq_err *err)
{
	struct rq_err local = {0};
	struct tr t = {.pat = pat, .n = strlen(pat), .only_flags = 1, .shown = shown,
	               .err = err ? err : &local};
	int rc = 0, in_class = 0;
	put(&t, "", 0);
	while (!rc && t.i < t.n && !t.oom) {
		char c = pat[t.i];
		int flag_group = !in_class && c == '(' && t.i + 2 < t.n && pat[t.i + 1] == '?' &&
		                 strchr("aiLmsux", pat[t.i + 2]);
		if (!flag_group)
			t.only_flags = 0;
		if (c == '\\') {
			rc = escape(&t, in_class);
		} else if (in_class) {
			if (c == ']')
				in_class = 0;
			if (c == '[')
				puts_(&t, "\\[");      /* never a POSIX [:class:] */
			else
				put(&t, &c, 1);
			t.i++;
		} else if (c == '[') {
			in_class = 1;
			puts_(&t, "[");
			t.i++;
			if (t.i < t.n && pat[t.i] == '^')
				puts_(&t, "^"), t.i++;
			if (t.i < t.n && pat[t.i] == ']')
				puts_(&t, "\\]"), t.i++;       /* a leading ']' is literal */
		} else if (c == '(') {
			rc = group(&t);
		} else if (c == ')') {
			if (t.depth > 0) {
				int g = t.open[--t.depth];
				if (g > 0 && g < (int)sizeof t.closed)
					t.closed[g] = 1;
			}
			puts_(&t, ")");
			t.i++;
		} else if (c == '{') {
			brace(&t);
		} else if (c == '}') {
			puts_(&t, "\\}");
			t.i++;
		} else {
			copy_char(&t);
		}
	}
	if (!rc && t.oom)
		rc = -ENOMEM;
	if (rc) {
		free(t.o);
		return rc;
	}
	*out = t.o;
	return 0;
}

int rq_pyre_translate(const char *pat, char **out, struct rq_err *err)
{
	return translate(pat, pat, out, err);
}

/* ---- compile and match ----------------------------------------------- */

void rq_pyre_free(struct rq_pyre *re)
{
	if (!re)
		return;
	pcre2_code_free(re->code);
	pcre2_match_context_free(re->mctx);
	free(re->shown);
	free(re);
}

int rq_pyre_compile(struct rq_pyre **out, const char *pat, enum rq_pyre_mode mode,
                    const char *shown, struct rq_err *err)
{
	if (!shown)
		shown = pat;
	char *pp = NULL;
	int rc = translate(pat, shown, &pp, err);
	if (rc)
		return rc;
	struct rq_pyre *re = calloc(1, sizeof *re);
	pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
	if (!re || !cc || !(re->shown = strdup(shown)) ||
	    !(re->mctx = pcre2_match_context_create(NULL))) {
		rc = -ENOMEM;
		goto fail;
	}
	pcre2_set_newline(cc, PCRE2_NEWLINE_LF);   /* '.' and '$' know only "\n", as Python */
	pcre2_set_match_limit(re->mctx, RQ_PYRE_MATCH_LIMIT);
	pcre2_set_depth_limit(re->mctx, RQ_PYRE_DEPTH_LIMIT);
	pcre2_set_heap_limit(re->mctx, RQ_PYRE_HEAP_LIMIT_KIB);
	uint32_t opt = PCRE2_UTF | PCRE2_UCP | PCRE2_ALT_CIRCUMFLEX | PCRE2_NEVER_BACKSLASH_C |
	               (mode == RQ_PYRE_MATCH ? PCRE2_ANCHORED : 0);
	int ec;
	PCRE2_SIZE eoff;
	re->code = pcre2_compile((PCRE2_SPTR)pp, PCRE2_ZERO_TERMINATED, opt, &ec, &eoff, cc);
	if (!re->code) {
		PCRE2_UCHAR m[256];
		pcre2_get_error_message(ec, m, sizeof m);
		rc = rq_errf(err, -EINVAL, "pattern '%s' does not compile: %s (PCRE2, at offset %zu "
		             "of its translation '%s'); fix the pattern", shown, (char *)m,
		             (size_t)eoff, pp);
		goto fail;
	}
	pcre2_compile_context_free(cc);
	free(pp);
	*out = re;
	return 0;
fail:
	pcre2_compile_context_free(cc);
	rq_pyre_free(re);
	free(pp);
	return rc;
}

int rq_pyre_exec(const struct rq_pyre *re, const char *subject, struct rq_err *err)
{
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	if (!md)
		return -ENOMEM;
	size_t n = strlen(subject);
	int rc = pcre2_match(re->code, (PCRE2_SPTR)subject, n, 0, 0, md, re->mctx);
	size_t bad = rc < 0 ? (size_t)pcre2_get_startchar(md) : 0;   /* the bad UTF-8 byte */
	pcre2_match_data_free(md);
	if (rc >= 0)
		return 1;
	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	const char *more = n > 200 ? "..." : "";
	if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
	    rc == PCRE2_ERROR_HEAPLIMIT)
		return rq_errf(err, -ERANGE, "pattern '%s' on '%.200s%s' (%zu bytes) gave up at "
		               "PCRE2's %s limit (%u): it backtracks catastrophically (nested or "
		               "overlapping repetition such as (a+)+ or (a|aa)*); rewrite it, e.g. "
		               "with one repetition per position or a literal prefix", re->shown,
		               subject, more, n,
		               rc == PCRE2_ERROR_MATCHLIMIT ? "match" :
		               rc == PCRE2_ERROR_DEPTHLIMIT ? "depth" : "heap (KiB)",
		               rc == PCRE2_ERROR_MATCHLIMIT ? RQ_PYRE_MATCH_LIMIT :
		               rc == PCRE2_ERROR_DEPTHLIMIT ? RQ_PYRE_DEPTH_LIMIT :
		               RQ_PYRE_HEAP_LIMIT_KIB);
	if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
		return rq_errf(err, -EILSEQ, "pattern '%s': the name '%.200s%s' is not valid UTF-8 "
		               "(byte %zu); no Python loader could read it", re->shown, subject, more,
		               bad);
	if (rc == PCRE2_ERROR_NOMEMORY)
		return -ENOMEM;
	PCRE2_UCHAR m[256];
	pcre2_get_error_message(rc, m, sizeof m);
	return rq_errf(err, -EIO, "pattern '%s' on '%.200s%s': PCRE2 failed: %s", re->shown,
	               subject, more, (char *)m);
}
