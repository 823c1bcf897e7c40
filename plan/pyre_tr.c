/* pyre_tr.c — Python re syntax (str patterns, 3.11) to PCRE2 syntax.
 *
 * One pass, reading the pattern as Python's sre_parse does: outside a class
 * escapes, groups "(?...", quantifiers "{...}" and literals; a class "[...]"
 * is parsed item by item (characters, ranges, \d-style categories) and
 * written back with every character as \x{...}, so no PCRE2-only class
 * syntax ([:alpha:], \Q) can arise. Everything else is copied byte for byte.
 * The whole grammar is not checked here: PCRE2's compiler refuses what is
 * malformed for both (unbalanced parentheses, nothing to repeat, multiple
 * repeats). What we translate beyond spelling:
 *   \s, \S        Python's str.isspace() set (PCRE2's \s lacks \x1c-\x1f, \x85)
 *   \S in a class a class can hold no complement: [X\S] -> (?:[X]|[^space]),
 *                 [^X\S] -> (?:(?![X])[space])
 *   (?i)          four letter families Python folds together and PCRE2 does
 *                 not (i I U+0130 U+0131 and three pairs: `families`): a
 *                 member becomes the family's class. */
#include "plan/pyre.h"
#include "base/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 256

struct tr {
	const char *pat;     /* the Python pattern */
	size_t i, n;         /* read position, length */
	char *o;             /* the PCRE2 pattern [on] of [ocap] */
	size_t on, ocap;
	int oom;
	int only_flags;      /* nothing but global flag groups read so far */
	int icase;           /* case-insensitive here ((?i), scoped or global) */
	int ngroups;         /* capturing groups opened so far */
	int depth;           /* open parentheses */
	int open[MAX_DEPTH];            /* [depth] group number (0: not capturing) */
	unsigned char saved[MAX_DEPTH]; /* [depth] icase outside that group */
	unsigned char closed[100];      /* [g] group g closed (back-references 1..99) */
	char names[100][33];            /* [g] group g's name ("" none; PCRE2: <= 32) */
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

/* Python's str.isspace() set, as the inside of a class. */
static const char space_set[] = "\\t-\\r\\x1c-\\x20\\x85\\xa0\\x{1680}\\x{2000}-\\x{200a}"
                                "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

/* Case-insensitive letters Python makes one class (its simple case mappings
 * and sre_compile's equivalences) that PCRE2's Unicode folding keeps apart:
 * i I U+0130 U+0131; U+FB05 U+FB06; U+0390 U+1FD3; U+03B0 U+1FE3. */
static const struct {
	unsigned long cp[4];
	const char *set;      /* the family as the inside of a class */
} families[] = {
	{{'I', 'i', 0x130, 0x131}, "iI\\x{130}\\x{131}"},
	{{0xfb05, 0xfb06, 0xfb05, 0xfb05}, "\\x{fb05}\\x{fb06}"},
	{{0x390, 0x1fd3, 0x390, 0x390}, "\\x{390}\\x{1fd3}"},
	{{0x3b0, 0x1fe3, 0x3b0, 0x3b0}, "\\x{3b0}\\x{1fe3}"},
};

#define NFAM (sizeof families / sizeof *families)

/* The families with a member in [lo, hi]: bit f for families[f]. */
static unsigned family(unsigned long lo, unsigned long hi)
{
	unsigned m = 0;
	for (size_t f = 0; f < NFAM; f++)
		for (int k = 0; k < 4; k++)
			if (lo <= families[f].cp[k] && families[f].cp[k] <= hi)
				m |= 1u << f;
	return m;
}

/* One UTF-8 character at t->i: its code point, t->i moved past it. */
static int next_cp(struct tr *t, unsigned long *cp)
{
	const unsigned char *p = (const unsigned char *)t->pat + t->i;
	size_t left = t->n - t->i;
	int k = p[0] < 0x80 ? 1 : (p[0] & 0xe0) == 0xc0 ? 2 : (p[0] & 0xf0) == 0xe0 ? 3 :
	        (p[0] & 0xf8) == 0xf0 ? 4 : 0;
	if (!k || (size_t)k > left)
		return refuse(t, "bytes that are not UTF-8");
	unsigned long v = k == 1 ? p[0] : p[0] & (0x7f >> k);
	for (int j = 1; j < k; j++) {
		if ((p[j] & 0xc0) != 0x80)
			return refuse(t, "bytes that are not UTF-8");
		v = v << 6 | (p[j] & 0x3f);
	}
	t->i += (size_t)k;
	*cp = v;
	return 0;
}

/* Exactly k hex digits after the x/u/U at t->i. */
static int hex_cp(struct tr *t, int k, unsigned long *cp)
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
	*cp = v;
	return 0;
}

/* Up to `max` octal digits at t->i. */
static int oct_cp(struct tr *t, int max, unsigned long *cp)
{
	unsigned long v = 0;
	for (int k = 0; k < max && t->i < t->n && is_oct(t->pat[t->i]); k++)
		v = v * 8 + (unsigned long)(t->pat[t->i++] - '0');
	if (v > 0377)
		return refuse(t, "octal escape above \\377");
	*cp = v;
	return 0;
}

enum { ITEM_CP, ITEM_CAT, ITEM_DONE };

/* The escape whose backslash is at t->i: a character (*cp), a category
 * (*cat: d D w W s S), or (outside a class) something written already. */
static int escape(struct tr *t, int in_class, unsigned long *cp, char *cat)
{
	if (t->i + 1 >= t->n)
		return refuse(t, "a trailing backslash");
	char c = t->pat[++t->i];
	int rc = 0;
	switch (c) {
	case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
		*cat = c;
		t->i++;
		return ITEM_CAT;
	case 'a': *cp = 7; break;
	case 'f': *cp = '\f'; break;
	case 'n': *cp = '\n'; break;
	case 'r': *cp = '\r'; break;
	case 't': *cp = '\t'; break;
	case 'v': *cp = 0x0b; break;
	case 'x': return (rc = hex_cp(t, 2, cp)) ? rc : ITEM_CP;
	case 'u': return (rc = hex_cp(t, 4, cp)) ? rc : ITEM_CP;
	case 'U': return (rc = hex_cp(t, 8, cp)) ? rc : ITEM_CP;
	case 'N': return refuse(t, "\\N{...} (named Unicode characters are not translated; "
	                        "write the character itself)");
	default:
		if (in_class && c == 'b') {
			*cp = 8;
			break;
		}
		if (in_class && is_oct(c))
			return (rc = oct_cp(t, 3, cp)) ? rc : ITEM_CP;
		if (!in_class && (c == 'A' || c == 'b' || c == 'B' || c == 'Z')) {
			puts_(t, c == 'Z' ? "\\z" : c == 'A' ? "\\A" : c == 'b' ? "\\b" : "\\B");
			t->i++;           /* Python's \Z is the very end: PCRE2's \z */
			return ITEM_DONE;
		}
		if (!in_class && c == '0') {
			t->i++;
			return (rc = oct_cp(t, 2, cp)) ? rc : ITEM_CP;
		}
		if (!in_class && is_digit(c)) {
			/* three octal digits are a character, else a group number */
			if (t->i + 2 < t->n && is_oct(c) && is_oct(t->pat[t->i + 1]) &&
			    is_oct(t->pat[t->i + 2]))
				return (rc = oct_cp(t, 3, cp)) ? rc : ITEM_CP;
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
			return ITEM_DONE;
		}
		if (is_alpha(c) || is_digit(c))
			return refuse(t, "the escape \\%c (Python refuses it%s)", c,
			              in_class ? " inside a class" : "");
		return (rc = next_cp(t, cp)) ? rc : ITEM_CP;   /* escaped punctuation etc. */
	}
	t->i++;
	return ITEM_CP;
}

/* A character outside a class: letters, digits and '_' as themselves,
 * other ASCII punctuation escaped, anything else as \x{...}. */
static void put_char(struct tr *t, unsigned long cp)
{
	char b[3] = {'\\', (char)cp, 0};
	unsigned fm = t->icase ? family(cp, cp) : 0;
	if (fm) {
		puts_(t, "[");
		for (size_t f = 0; f < NFAM; f++)
			if (fm & 1u << f)
				puts_(t, families[f].set);
		puts_(t, "]");
	} else if (cp < 0x80 && (is_alpha((char)cp) || is_digit((char)cp) || cp == '_')) {
		put(t, b + 1, 1);
	} else if (cp > 0x20 && cp < 0x7f) {
		puts_(t, b);
	} else {
		putcp(t, cp);
	}
}

static void put_cat(struct tr *t, char cat, int in_class)
{
	if (cat == 's' || cat == 'S') {
		puts_(t, in_class ? "" : cat == 's' ? "[" : "[^");
		puts_(t, space_set);
		puts_(t, in_class ? "" : "]");
		return;
	}
	char b[3] = {'\\', cat, 0};
	puts_(t, b);
}

/* One class item at t->i: a character or a category. */
static int class_item(struct tr *t, unsigned long *cp, char *cat)
{
	if (t->pat[t->i] == '\\')
		return escape(t, 1, cp, cat);
	int rc = next_cp(t, cp);
	return rc ? rc : ITEM_CP;
}

/* "[...]" at t->i, as sre_parse reads it: a ']' first is literal; "a-]"
 * is 'a' and '-'; a range needs two characters in order. */
static int klass(struct tr *t)
{
	int neg = 0, has_S = 0;
	unsigned fam = 0;     /* families met, bit per index */
	t->i++;
	if (t->i < t->n && t->pat[t->i] == '^')
		neg = 1, t->i++;
	size_t first = t->i, mark = t->on;
	for (;;) {
		if (t->i >= t->n)
			return refuse(t, "an unterminated character set");
		if (t->pat[t->i] == ']' && t->i != first) {
			t->i++;
			break;
		}
		unsigned long lo = 0, hi = 0;
		char cat = 0, cat2 = 0;
		int k = class_item(t, &lo, &cat);
		if (k < 0)
			return k;
		if (t->i < t->n && t->pat[t->i] == '-' && t->i + 1 < t->n && t->pat[t->i + 1] != ']') {
			t->i++;
			int k2 = class_item(t, &hi, &cat2);
			if (k2 < 0)
				return k2;
			if (k != ITEM_CP || k2 != ITEM_CP || hi < lo)
				return refuse(t, "a bad character range");
			putcp(t, lo);
			puts_(t, "-");
			putcp(t, hi);
			fam |= family(lo, hi);
			continue;
		}
		if (k == ITEM_CAT && cat == 'S') {
			has_S = 1;
		} else if (k == ITEM_CAT) {
			put_cat(t, cat, 1);
		} else {
			putcp(t, lo);
			fam |= family(lo, lo);
		}
	}
	for (size_t f = 0; t->icase && f < NFAM; f++)
		if (fam & 1u << f)
			puts_(t, families[f].set);
	size_t len = t->on - mark;
	char *inner = strndup(t->o + mark, len);
	if (!inner) {
		t->oom = 1;
		return 0;
	}
	t->on = mark;
	if (!has_S) {
		puts_(t, neg ? "[^" : "[");
		puts_(t, inner);
		puts_(t, "]");
	} else if (!len) {                 /* [\S] or [^\S] */
		put_cat(t, neg ? 's' : 'S', 0);
	} else {                           /* no complement inside a class: an alternative */
		puts_(t, neg ? "(?:(?![" : "(?:[");
		puts_(t, inner);
		puts_(t, neg ? "])[" : "]|[^");
		puts_(t, space_set);
		puts_(t, "])");
	}
	free(inner);
	return 0;
}

/* A group name (Python: an identifier; PCRE2 10.42: ASCII only) up to `end`;
 * its start in *s. */
static int group_name(struct tr *t, char end, size_t *s)
{
	*s = t->i;
	while (t->i < t->n && t->pat[t->i] != end) {
		char c = t->pat[t->i];
		if (!(is_alpha(c) || c == '_' || (is_digit(c) && t->i > *s)))
			return refuse(t, "a group name that is not an ASCII identifier");
		t->i++;
	}
	if (t->i >= t->n || t->i == *s)
		return refuse(t, "a missing or unterminated group name");
	put(t, t->pat + *s, t->i - *s);
	put(t, &end, 1);
	t->i++;
	return 0;
}

/* The closed group named pat[s, s + len), or 0. */
static int closed_named(const struct tr *t, size_t s, size_t len)
{
	for (int g = 1; g < (int)(sizeof t->closed) && g <= t->ngroups; g++)
		if (t->closed[g] && strlen(t->names[g]) == len && !memcmp(t->names[g], t->pat + s, len))
			return g;
	return 0;
}

static int open_group(struct tr *t, int capturing)
{
	if (t->depth >= MAX_DEPTH)
		return refuse(t, "parentheses nested deeper than %d", MAX_DEPTH);
	t->saved[t->depth] = (unsigned char)t->icase;
	t->open[t->depth++] = capturing ? ++t->ngroups : 0;
	return 0;
}

static void close_group(struct tr *t)
{
	if (t->depth > 0) {
		int g = t->open[--t->depth];
		if (g > 0 && g < (int)sizeof t->closed)
			t->closed[g] = 1;
		t->icase = t->saved[t->depth];
	}
	puts_(t, ")");
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
	for (size_t k = 0; k < noff; k++)
		if (strchr(on, off[k]))
			return refuse(t, "the flag '%c' turned on and off (Python refuses it)", off[k]);
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
		t->icase |= strchr(on, 'i') != NULL;
		return 0;
	}
	puts_(t, "(?");
	puts_(t, on);
	if (noff) {
		puts_(t, "-");
		puts_(t, off);
	}
	puts_(t, ":");
	int rc = open_group(t, 0);
	if (strchr(on, 'i'))
		t->icase = 1;
	if (strchr(off, 'i'))
		t->icase = 0;
	return rc;
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
	size_t ns;
	if (c == 'P' && left > 3 && p[3] == '<') {
		puts_(t, "(?P<");
		t->i += 4;
		int rc = group_name(t, '>', &ns);
		if (!rc)
			rc = open_group(t, 1);
		size_t len = t->i - 1 - ns;
		if (!rc && t->ngroups < (int)(sizeof t->closed) && len < sizeof t->names[0])
			memcpy(t->names[t->ngroups], t->pat + ns, len);
		return rc;
	}
	if (c == 'P' && left > 3 && p[3] == '=') {
		puts_(t, "(?P=");
		t->i += 4;
		int rc = group_name(t, ')', &ns);
		if (!rc && !closed_named(t, ns, t->i - 1 - ns))
			return refuse(t, "(?P=%.*s) refers to a group that is open or not defined (Python "
			              "refuses it)", (int)(t->i - 1 - ns), t->pat + ns);
		return rc;
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
		int rc = group_name(t, ')', &s);
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

int rq_pyre_translate(const char *pat, const char *shown, char **out, struct rq_err *err)
{
	struct rq_err local = {0};
	struct tr t = {.pat = pat, .n = strlen(pat), .only_flags = 1,
	               .shown = shown ? shown : pat, .err = err ? err : &local};
	int rc = 0;
	put(&t, "", 0);
	while (rc >= 0 && t.i < t.n && !t.oom) {
		char c = pat[t.i];
		if (!(c == '(' && t.i + 2 < t.n && pat[t.i + 1] == '?' && pat[t.i + 2] &&
		      strchr("aiLmsux", pat[t.i + 2])))
			t.only_flags = 0;
		unsigned long cp;
		char cat;
		switch (c) {
		case '\\':
			rc = escape(&t, 0, &cp, &cat);
			if (rc == ITEM_CP)
				put_char(&t, cp);
			else if (rc == ITEM_CAT)
				put_cat(&t, cat, 0);
			break;
		case '[': rc = klass(&t); break;
		case '(': rc = group(&t); break;
		case ')': close_group(&t); t.i++; break;
		case '{': brace(&t); break;
		case '}': puts_(&t, "\\}"); t.i++; break;
		case '.': case '^': case '$': case '|': case '*': case '+': case '?':
			put(&t, &c, 1);
			t.i++;
			break;
		default:
			rc = next_cp(&t, &cp);
			if (!rc)
				put_char(&t, cp);
		}
	}
	if (rc >= 0 && t.oom)
		rc = -ENOMEM;
	if (rc < 0) {
		free(t.o);
		return rc == -ENOMEM ? rq_errf(err, rc, "pattern '%s': out of memory", t.shown) : rc;
	}
	*out = t.o;
	return 0;
}
