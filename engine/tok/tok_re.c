/* tok_re.c — the regexes tokenizer.json may carry (Split and Replace
 * patterns, "Regex" or "String") on PCRE2, read as Oniguruma reads them.
 *
 * `tokenizers` compiles its patterns with Oniguruma in Ruby syntax. The
 * translation below keeps what both engines mean the same way and rewrites
 * what differs:
 *   \s      Oniguruma: White_Space (PCRE2's UCP \s lacks U+0085): a class
 *   \w      Oniguruma: Alphabetic, M, Nd, Pc and ² ³ ¹ ¼ ½ ¾ (measured on the
 *           library, tools/golden/gen_unicode_tables.py): a class
 *   \d      \p{Nd} in both;  \h  Oniguruma: a hex digit (PCRE2: horizontal space)
 *   \v      Oniguruma: U+000B (PCRE2: vertical space);  \uHHHH -> \x{HHHH}
 *   {,n}    Oniguruma: {0,n} (PCRE2: literal);  \p{^X} -> \P{X}
 *   (?m)    Ruby's m is PCRE2's s (dot matches \n); ^ and $ always work per line
 *   \p{L} \p{N} \p{Nd} \d \w  also hold the code points Oniguruma's newer
 *           Unicode assigns and PCRE2's does not (unicode_newer.h; U+1C8A is
 *           a letter since Unicode 16) — but not inside a class as \P{..}
 * and refuses, with the construct named, what it cannot promise to run the
 * same: back references and subexpression calls, \b \B \G \K \R \X and
 * other escapes, nested classes and && in classes, POSIX brackets, x mode,
 * absent and conditional groups, {n,m}+ (a repetition of a repetition in
 * Ruby syntax, possessive in PCRE2). Known difference, documented in
 * docs/engine.md: (?i) uses simple case folding (Oniguruma also folds ß
 * with "ss"). Matching is bounded (match, depth and heap limits): a pattern
 * that backtracks catastrophically fails the encode with -ERANGE, never
 * hangs. Invalid UTF-8 in the text (which the library cannot be given)
 * matches no character class. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tok/tok_int.h"
#include "engine/tok/unicode_newer.h"

#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RE_MATCH_LIMIT 10000000u   /* Oniguruma's retry limit in match */
#define RE_DEPTH_LIMIT 100000u
#define RE_HEAP_LIMIT_KIB 65536u

struct tok_re {
	pcre2_code *code;
	pcre2_match_context *mctx;
	char *lit;                 /* a String pattern: matched with memmem */
	size_t litlen;
};

#define WS_SET "\\t-\\r\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
#define WORD_SET "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{b2}\\x{b3}\\x{b9}\\x{bc}-\\x{be}" UC_NEWER_W
#define ND_SET "\\p{Nd}" UC_NEWER_ND
#define HEX_SET "0-9A-Fa-f"

static int put(struct tbuf *o, const char *s)
{
	return tbuf_put(o, s, strlen(s));
}

static int bad(char *why, size_t cap, const char *what, size_t at)
{
	snprintf(why, cap, "%s (at byte %zu) is not supported", what, at);
	return -EPROTO;
}

/* One escape at p[i] == '\\'; in_class: inside [...]. Returns the bytes used
 * or a negative errno. */
static long escape(const char *p, size_t i, int in_class, struct tbuf *o, char *why, size_t cap)
{
	char c = p[i + 1], tmp[64];
	const char *set = NULL;
	int neg = 0;
	if (!c)
		return bad(why, cap, "a trailing backslash", i);
	switch (c) {
	case 's': case 'S': set = WS_SET; neg = c == 'S'; break;
	case 'w': case 'W': set = WORD_SET; neg = c == 'W'; break;
	case 'h': case 'H': set = HEX_SET; neg = c == 'H'; break;
	case 'd': case 'D':
		if (in_class && c == 'D')   /* (PCRE2's own: the newer digits stay out) */
			return put(o, "\\P{Nd}") ? -ENOMEM : 2;
		set = ND_SET;
		neg = c == 'D';
		break;
	case 'v':
		return put(o, "\\x{0b}") ? -ENOMEM : 2;
	case 'p': case 'P': {
		const char *end = p[i + 2] == '{' ? strchr(p + i + 3, '}') : NULL;
		if (!end)
			return bad(why, cap, "\\p without {name}", i);
		int caret = p[i + 3] == '^';
		char pc = (c == 'P') ^ caret ? 'P' : 'p';
		size_t nl = (size_t)(end - (p + i + 3 + caret));
		const char *newer = nl == 1 && p[i + 3 + caret] == 'L' ? UC_NEWER_L
		                    : nl == 1 && p[i + 3 + caret] == 'N' ? UC_NEWER_N
		                    : nl == 2 && !memcmp(p + i + 3 + caret, "Nd", 2) ? UC_NEWER_ND : NULL;
		if (newer && !(in_class && pc == 'P')) {   /* the class and its newer code points */
			snprintf(tmp, sizeof tmp, "%s\\p{%.*s}", in_class ? "" : pc == 'P' ? "[^" : "[", (int)nl,
			         p + i + 3 + caret);
			if (put(o, tmp) || put(o, newer) || (!in_class && put(o, "]")))
				return -ENOMEM;
			return (long)(end - (p + i)) + 1;
		}
		snprintf(tmp, sizeof tmp, "\\%c{", pc);
		if (put(o, tmp) || tbuf_put(o, p + i + 3 + caret, (size_t)(end - (p + i + 3 + caret))) || put(o, "}"))
			return -ENOMEM;
		return (long)(end - (p + i)) + 1;
	}
	case 'u': {
		size_t k = 0;
		while (k < 4 && strchr("0123456789abcdefABCDEF", p[i + 2 + k]) && p[i + 2 + k])
			k++;
		if (k != 4)
			return bad(why, cap, "\\u without four hex digits", i);
		snprintf(tmp, sizeof tmp, "\\x{%.4s}", p + i + 2);
		return put(o, tmp) ? -ENOMEM : 6;
	}
	case 'x': case 't': case 'n': case 'r': case 'f': case 'a': case 'e': case '0':
		/* \xHH, \x{...} and \0oo read the same in both */
		return tbuf_put(o, p + i, 2) ? -ENOMEM : 2;
	case 'A': case 'z': case 'Z':
		if (in_class)
			return bad(why, cap, "an anchor escape inside a class", i);
		return tbuf_put(o, p + i, 2) ? -ENOMEM : 2;
	case 'b':
		if (in_class)   /* backspace in both */
			return tbuf_put(o, p + i, 2) ? -ENOMEM : 2;
		/* fall through */
	default:
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    (unsigned char)c >= 0x80) {
			snprintf(tmp, sizeof tmp, "the escape \\%c", c);
			return bad(why, cap, tmp, i);
		}
		return tbuf_put(o, p + i, 2) ? -ENOMEM : 2;   /* an escaped symbol: itself */
	}
	if (in_class && neg) {
		snprintf(tmp, sizeof tmp, "\\%c inside a character class", c);
		return bad(why, cap, tmp, i);
	}
	if (!in_class && (put(o, neg ? "[^" : "[") || put(o, set) || put(o, "]")))
		return -ENOMEM;
	if (in_class && put(o, set))
		return -ENOMEM;
	return 2;
}

/* A class [...] at p[i] == '['; returns the bytes used or a negative errno. */
static long klass(const char *p, size_t i, struct tbuf *o, char *why, size_t cap)
{
	size_t j = i + 1;
	if (put(o, "["))
		return -ENOMEM;
	if (p[j] == '^')
		j++;
	if (p[j] == ']')
		j++;   /* a leading ] is itself in both */
	if (tbuf_put(o, p + i + 1, j - i - 1))
		return -ENOMEM;
	while (p[j] && p[j] != ']') {
		if (p[j] == '[')
			return bad(why, cap, "a nested class or POSIX bracket inside [...]", j);
		if (p[j] == '&' && p[j + 1] == '&')
			return bad(why, cap, "class intersection &&", j);
		if (p[j] == '\\') {
			long k = escape(p, j, 1, o, why, cap);
			if (k < 0)
				return k;
			j += (size_t)k;
			continue;
		}
		if (tbuf_put(o, p + j, 1))
			return -ENOMEM;
		j++;
	}
	if (!p[j])
		return bad(why, cap, "an unterminated [", i);
	return put(o, "]") ? -ENOMEM : (long)(j - i) + 1;
}

/* An option group "(?imx-imx)" or "(?imx-imx:" at p[i]; 0 when it is not one. */
static long options(const char *p, size_t i, struct tbuf *o, char *why, size_t cap)
{
	size_t j = i + 2;
	while (p[j] && strchr("imx-", p[j]))
		j++;
	if (j == i + 2 || (p[j] != ')' && p[j] != ':'))
		return 0;
	if (put(o, "(?"))
		return -ENOMEM;
	for (size_t k = i + 2; k < j; k++) {
		if (p[k] == 'x')
			return bad(why, cap, "extended mode (?x)", i);
		char c = p[k] == 'm' ? 's' : p[k];
		if (tbuf_put(o, &c, 1))
			return -ENOMEM;
	}
	return tbuf_put(o, p + j, 1) ? -ENOMEM : (long)(j - i) + 1;
}

/* An interval "{n}", "{n,}", "{n,m}", "{,m}" at p[i]; 0 when "{" is literal. */
static long interval(const char *p, size_t i, struct tbuf *o, char *why, size_t cap)
{
	size_t j = i + 1, digits = 0, comma = 0;
	for (; p[j] && p[j] != '}'; j++) {
		if (p[j] == ',' && !comma)
			comma = 1;
		else if (p[j] >= '0' && p[j] <= '9')
			digits++;
		else
			return 0;
	}
	if (!p[j] || !digits)
		return 0;
	if (p[j + 1] == '+')
		return bad(why, cap, "an interval followed by + ({n,m}+)", i);
	if (put(o, "{") || (p[i + 1] == ',' && put(o, "0")) || tbuf_put(o, p + i + 1, j - i))
		return -ENOMEM;
	return (long)(j - i) + 1;
}

static int translate(const char *p, struct tbuf *o, char *why, size_t cap)
{
	if (put(o, ""))
		return -ENOMEM;
	for (size_t i = 0; p[i];) {
		long k = 0;
		if (p[i] == '\\')
			k = escape(p, i, 0, o, why, cap);
		else if (p[i] == '[')
			k = klass(p, i, o, why, cap);
		else if (p[i] == '{')
			k = interval(p, i, o, why, cap);
		else if (p[i] == '(' && p[i + 1] == '?') {
			char c = p[i + 2];
			if (c == ':' || c == '=' || c == '!' || c == '>' || c == '#' ||
			    (c == '<' && (p[i + 3] == '=' || p[i + 3] == '!')))
				k = 0;
			else if (c == '<' || c == '\'')
				k = 0;   /* a named group: the same in both */
			else if (!(k = options(p, i, o, why, cap)))
				return bad(why, cap, "this (? group (absent, conditional or unknown)", i);
		}
		if (k < 0)
			return (int)k;
		if (!k) {
			if (tbuf_put(o, p + i, 1))
				return -ENOMEM;
			k = 1;
		}
		i += (size_t)k;
	}
	return 0;
}

void tok_re_free(struct tok_re *re)
{
	if (!re)
		return;
	pcre2_code_free(re->code);
	pcre2_match_context_free(re->mctx);
	free(re->lit);
	free(re);
}

int tok_re_compile(const char *pattern, int literal, struct tok_re **out, char *why, size_t cap)
{
	struct tok_re *re = calloc(1, sizeof *re);
	struct tbuf tr = {0};
	int rc = 0;
	if (!re)
		return -ENOMEM;
	if (literal && *pattern) {   /* an empty String is an empty regex */
		if (!(re->lit = strdup(pattern)))
			rc = -ENOMEM;
		re->litlen = strlen(pattern);
		goto done;
	}
	if ((rc = translate(pattern, &tr, why, cap)))
		goto done;
	pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
	if (!cc || !(re->mctx = pcre2_match_context_create(NULL))) {
		pcre2_compile_context_free(cc);
		rc = -ENOMEM;
		goto done;
	}
	pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
	pcre2_set_match_limit(re->mctx, RE_MATCH_LIMIT);
	pcre2_set_depth_limit(re->mctx, RE_DEPTH_LIMIT);
	pcre2_set_heap_limit(re->mctx, RE_HEAP_LIMIT_KIB);
	int ec;
	PCRE2_SIZE eoff;
	re->code = pcre2_compile((PCRE2_SPTR)tr.s, tr.n, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE |
	                         PCRE2_ALT_CIRCUMFLEX | PCRE2_MATCH_INVALID_UTF | PCRE2_NEVER_BACKSLASH_C,
	                         &ec, &eoff, cc);
	pcre2_compile_context_free(cc);
	if (!re->code) {
		PCRE2_UCHAR m[160];
		pcre2_get_error_message(ec, m, sizeof m);
		snprintf(why, cap, "does not compile: %s (at byte %zu of its PCRE2 form \"%.200s\")",
		         (char *)m, (size_t)eoff, tr.s);
		rc = -EPROTO;
	}
done:
	free(tr.s);
	if (rc) {
		tok_re_free(re);
		return rc;
	}
	*out = re;
	return 0;
}

int tok_re_find(const struct tok_re *re, const unsigned char *s, size_t n, size_t from,
                size_t *ms, size_t *me)
{
	if (re->lit) {
		const unsigned char *m = re->litlen ? memmem(s + from, n - from, re->lit, re->litlen) : NULL;
		if (!m)
			return 0;
		*ms = (size_t)(m - s);
		*me = *ms + re->litlen;
		return 1;
	}
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re->code, NULL);
	if (!md)
		return -ENOMEM;
	int rc = pcre2_match(re->code, s, n, from, 0, md, re->mctx);
	if (rc >= 0) {
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		*ms = ov[0];
		*me = ov[1];
	}
	pcre2_match_data_free(md);
	if (rc >= 0)
		return 1;
	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	return rc == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -ERANGE;
}

static int re_find(const void *pat, const unsigned char *s, size_t n, size_t from, size_t *ms, size_t *me)
{
	return tok_re_find(pat, s, n, from, ms, me);
}

int tok_find_iter(tok_find_fn find, const void *pat, const unsigned char *s, size_t n,
                  int (*each)(void *ctx, size_t ms, size_t me), void *ctx)
{
	size_t from = 0, ms, me, last_end = (size_t)-1;
	while (from <= n) {
		int rc = find(pat, s, n, from, &ms, &me);
		if (rc <= 0)
			return rc;
		if (ms == me && me == last_end) {   /* onig's FindMatches: step one character */
			uint32_t c;
			from = from < n ? tok_utf8_next(s, n, from, &c) : n + 1;
			continue;
		}
		from = last_end = me;
		if ((rc = each(ctx, ms, me)))
			return rc;
	}
	return 0;
}

struct repl {
	const char *s, *content;
	size_t clen, done;
	struct tbuf *out;
	size_t z, zout;        /* leading bytes at original offset 0: in s, in out */
	int zopen;             /* out is still inside that prefix */
};

/* The text s[a..b) kept: its bytes below z keep offset 0. */
static void repl_kept(struct repl *r, size_t a, size_t b)
{
	if (!r->zopen || a == b)
		return;
	r->zout += (b < r->z ? b : r->z) - (a < r->z ? a : r->z);
	r->zopen = b <= r->z;
}

static int repl_each(void *ctx, size_t ms, size_t me)
{
	struct repl *r = ctx;
	if (tbuf_put(r->out, r->s + r->done, ms - r->done) || tbuf_put(r->out, r->content, r->clen))
		return -ENOMEM;
	repl_kept(r, r->done, ms);
	/* the content takes the alignment of the match's last byte
	 * (NormalizedString::replace), (0, 0) for an empty match at 0 */
	if (r->zopen && (me == 0 || me <= r->z))
		r->zout += r->clen;
	else if (r->clen)
		r->zopen = 0;
	r->done = me;
	return 0;
}

int tok_re_replace(const struct tok_re *re, const char *s, size_t n, const char *content, size_t clen,
                   size_t *z, struct tbuf *out)
{
	struct repl r = {s, content, clen, 0, out, z ? *z : 0, 0, z && *z};
	if (!n)   /* find_matches on "" is one non-match */
		return 0;
	int rc = tok_find_iter(re_find, re, (const unsigned char *)s, n, repl_each, &r);
	if (rc || (rc = tbuf_put(out, s + r.done, n - r.done)))
		return rc;
	repl_kept(&r, r.done, n);
	if (z)
		*z = r.zout;
	return 0;
}
