/* jinja_lex.c — the template text as tokens, with the white-space rules of
 * the Environment transformers renders chat templates in:
 *   - newlines (\r\n, \r, \n) become \n, and one trailing newline is dropped
 *     (keep_trailing_newline=False);
 *   - {%- / {{- / {#- strip all white space before the tag, -%} / -}} / -#}
 *     all white space after it; a + after {% keeps what lstrip would take;
 *   - trim_blocks: one \n right after %} or #} is dropped (not after +%});
 *   - lstrip_blocks: spaces and tabs between the start of a line and {% or {#
 *     are dropped.
 * Expression tokens: names, strings (Python escapes), integers, floats and
 * the operators; }} and %} end a tag only outside brackets. */
#include "engine/chat/jinja_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct lexer {
	struct jstate *st;
	const char *s;
	size_t n;
	struct jtok *t;
	size_t nt, cap;
};

static struct jtok *emit(struct lexer *L, enum jt_kind k, size_t pos, const char *p, size_t n)
{
	if (L->nt == L->cap) {
		size_t cap = L->cap ? L->cap * 2 : 256;
		struct jtok *t = ja_alloc(L->st, cap * sizeof *t);
		if (L->nt)
			memcpy(t, L->t, L->nt * sizeof *t);
		L->t = t;
		L->cap = cap;
	}
	struct jtok *t = &L->t[L->nt++];
	*t = (struct jtok){.kind = k, .pos = pos, .p = p, .n = n};
	return t;
}

/* Length of s[0..n) without its trailing white space (Python str.rstrip()). */
static size_t rstrip_len(const char *s, size_t n)
{
	size_t i = 0, keep = 0;
	while (i < n) {
		uint32_t c = jutf8_next(s, n, &i);
		if (!jpy_space(c))
			keep = i;
	}
	return keep;
}

/* Offset after the white space (Python's \s) that starts at i. */
static size_t skip_space(const char *s, size_t n, size_t i)
{
	while (i < n) {
		size_t j = i;
		if (!jpy_space(jutf8_next(s, n, &j)))
			break;
		i = j;
	}
	return i;
}

/* The data before a tag, as the tag's opening and lstrip_blocks leave it. */
static void emit_data(struct lexer *L, size_t from, size_t to, char tag, char sign)
{
	size_t len = to - from;
	const char *d = L->s + from;
	if (sign == '-') {
		len = rstrip_len(d, len);
	} else if (sign != '+' && tag != '{') {
		size_t l = len;
		while (l > 0 && d[l - 1] != '\n')
			l--;
		int line_start = from == 0 || L->s[from - 1] == '\n';
		if ((l > 0 || line_start) && l < len && skip_space(d, len, l) == len)
			len = l;
	}
	if (len)
		emit(L, JT_DATA, from, d, len);
}

/* A string literal at i (quote q), decoded as Python's unicode-escape codec
 * decodes it; the offset after the closing quote. */
static size_t lex_string(struct lexer *L, size_t i)
{
	char q = L->s[i];
	size_t start = i++;
	struct jbuf b = {0};
	while (i < L->n && L->s[i] != q) {
		if (L->s[i] != '\\' || i + 1 >= L->n) {
			jb_put(L->st, &b, L->s + i++, 1);
			continue;
		}
		char c = L->s[i + 1], out[8];
		size_t olen = 1;
		i += 2;
		switch (c) {
		case '\n': olen = 0; break;
		case '\\': case '\'': case '"': out[0] = c; break;
		case 'n': out[0] = '\n'; break;
		case 'r': out[0] = '\r'; break;
		case 't': out[0] = '\t'; break;
		case 'a': out[0] = '\a'; break;
		case 'b': out[0] = '\b'; break;
		case 'f': out[0] = '\f'; break;
		case 'v': out[0] = '\v'; break;
		case 'x': case 'u': case 'U': case '0': case '1': case '2': case '3':
		case '4': case '5': case '6': case '7': {
			uint32_t v = 0;
			int want = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 3, got = 0;
			if (c >= '0' && c <= '7') {
				i--;
				while (got < 3 && i < L->n && L->s[i] >= '0' && L->s[i] <= '7')
					v = v * 8 + (uint32_t)(L->s[i++] - '0'), got++;
			} else {
				for (; got < want && i < L->n; got++, i++) {
					char h = L->s[i];
					int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 :
						h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
					if (d < 0)
						break;
					v = v * 16 + (uint32_t)d;
				}
				if (got < want || v > 0x10FFFF)
					jfail(L->st, i, -EINVAL, "bad \\%c escape in a string literal", c);
			}
			olen = v < 0x80 ? 1 : v < 0x800 ? 2 : v < 0x10000 ? 3 : 4;
			if (olen == 1)
				out[0] = (char)v;
			else {
				static const unsigned char lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
				for (size_t k = olen - 1; k > 0; k--, v >>= 6)
					out[k] = (char)(0x80 | (v & 0x3F));
				out[0] = (char)(lead[olen] | v);
			}
			break;
		}
		case 'N':
			jfail(L->st, i, -EINVAL, "\\N{...} escapes are not supported");
		default: out[0] = '\\', out[1] = c, olen = 2; break;
		}
		jb_put(L->st, &b, out, olen);
	}
	if (i >= L->n)
		jfail(L->st, start, -EINVAL, "unterminated string literal");
	struct jtok *t = emit(L, JT_STRING, start, b.s ? b.s : "", b.n);
	(void)t;
	return i + 1;
}

static int isname(char c, int first)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9');
}

/* A number literal: an int (64-bit: a longer one is refused, jinja2 would
 * keep it exact) or a float; '_' separates digits. */
static size_t lex_number(struct lexer *L, size_t i)
{
	size_t start = i, k = 0;
	char *buf = ja_alloc(L->st, 2 * (L->n - i) + 2);   /* the digits, without '_' */
	int isf = 0;
	int after_dot = L->nt && L->t[L->nt - 1].kind == JT_OP && L->t[L->nt - 1].n == 1 &&
		L->t[L->nt - 1].p[0] == '.';
	while (i < L->n && ((L->s[i] >= '0' && L->s[i] <= '9') || L->s[i] == '_'))
		if (L->s[i++] != '_')
			buf[k++] = L->s[i - 1];
	if (!after_dot && i + 1 < L->n && L->s[i] == '.' && L->s[i + 1] >= '0' && L->s[i + 1] <= '9') {
		isf = 1;
		buf[k++] = L->s[i++];
		while (i < L->n && ((L->s[i] >= '0' && L->s[i] <= '9') || L->s[i] == '_'))
			if (L->s[i++] != '_')
				buf[k++] = L->s[i - 1];
	}
	if (!after_dot && i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
		size_t j = i + 1;
		if (j < L->n && (L->s[j] == '+' || L->s[j] == '-'))
			j++;
		if (j < L->n && L->s[j] >= '0' && L->s[j] <= '9') {
			isf = 1;
			while (i < j)
				buf[k++] = L->s[i++];
			while (i < L->n && L->s[i] >= '0' && L->s[i] <= '9')
				buf[k++] = L->s[i++];
		}
	}
	buf[k] = 0;
	struct jtok *t = emit(L, isf ? JT_FLOAT : JT_INT, start, L->s + start, i - start);
	errno = 0;
	if (isf)
		t->f = strtod(buf, NULL);
	else
		t->i = strtoll(buf, NULL, 10);
	if (!isf && errno == ERANGE)
		jfail(L->st, start, -EINVAL, "the integer %.40s%s is larger than 2**63-1: jinja2 would keep it "
		      "exact; not supported", buf, k > 40 ? "..." : "");
	return i;
}

static const char *const ops2[] = {"//", "**", "==", "!=", ">=", "<="};

/* The tokens of one {{ }} or {% %} tag from i; the offset after its end. */
static size_t lex_tag(struct lexer *L, size_t i, char tag, size_t open)
{
	char stack[64];
	int depth = 0;
	const char *close = tag == '{' ? "}}" : "%}";
	for (;;) {
		i = skip_space(L->s, L->n, i);
		if (i >= L->n)
			jfail(L->st, open, -EINVAL, "unexpected end of template: %s is never closed",
			      tag == '{' ? "this {{" : "this {%");
		const char *s = L->s + i;
		size_t left = L->n - i;
		if (!depth) {
			int strip = left >= 3 && s[0] == '-' && !memcmp(s + 1, close, 2);
			int plus = tag == '%' && left >= 3 && s[0] == '+' && !memcmp(s + 1, close, 2);
			if (strip || plus || (left >= 2 && !memcmp(s, close, 2))) {
				emit(L, tag == '{' ? JT_VAR_END : JT_BLOCK_END, i, s, 2);
				i += 2 + (strip || plus);
				if (strip)
					return skip_space(L->s, L->n, i);
				if (!plus && tag == '%' && i < L->n && L->s[i] == '\n')
					i++;
				return i;
			}
		}
		char c = s[0];
		if (c == '\'' || c == '"') {
			i = lex_string(L, i);
		} else if (c >= '0' && c <= '9') {
			i = lex_number(L, i);
		} else if (isname(c, 1)) {
			size_t j = i;
			while (j < L->n && isname(L->s[j], 0))
				j++;
			emit(L, JT_NAME, i, s, j - i);
			i = j;
		} else {
			size_t len = 0;
			for (size_t k = 0; k < sizeof ops2 / sizeof *ops2; k++)
				if (left >= 2 && !memcmp(s, ops2[k], 2))
					len = 2;
			if (!len && strchr("+-/*%~[](){}=><.:|,;", c) && c)
				len = 1;
			if (!len)
				jfail(L->st, i, -EINVAL, "unexpected character '%c' in a tag", c);
			if (c == '(' || c == '[' || c == '{') {
				if (depth == (int)sizeof stack)
					jfail(L->st, i, -EINVAL, "brackets nested too deeply");
				stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
			} else if (len == 1 && (c == ')' || c == ']' || c == '}')) {
				if (!depth || stack[depth - 1] != c)
					jfail(L->st, i, -EINVAL, "unexpected '%c'", c);
				depth--;
			}
			emit(L, JT_OP, i, s, len);
			i += len;
		}
	}
}

void jl_lex(struct jstate *st, const char *text, size_t len, struct jtok **toks, size_t *ntoks)
{
	char *s = ja_alloc(st, len + 1);
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (text[i] == '\r') {
			s[n++] = '\n';
			if (i + 1 < len && text[i + 1] == '\n')
				i++;
		} else {
			s[n++] = text[i];
		}
	}
	if (n && s[n - 1] == '\n')
		n--;
	s[n] = 0;
	st->src = s;
	st->src_len = n;
	struct lexer L = {.st = st, .s = s, .n = n};
	size_t pos = 0;
	while (pos < n) {
		const char *t = s + pos;
		size_t at = (size_t)-1;
		while ((t = memchr(t, '{', n - (size_t)(t - s))) != NULL) {
			if ((size_t)(t - s) + 1 < n && strchr("{%#", t[1]) && t[1]) {
				at = (size_t)(t - s);
				break;
			}
			t++;
		}
		if (at == (size_t)-1) {
			emit(&L, JT_DATA, pos, s + pos, n - pos);
			break;
		}
		char tag = s[at + 1];
		char sign = at + 2 < n && (s[at + 2] == '-' || s[at + 2] == '+') ? s[at + 2] : 0;
		emit_data(&L, pos, at, tag, sign);
		size_t i = at + 2 + (sign != 0);
		if (tag == '#') {
			const char *e = NULL;
			for (size_t k = i; k + 1 < n; k++)
				if (s[k] == '#' && s[k + 1] == '}') {
					e = s + k;
					break;
				}
			if (!e)
				jfail(st, at, -EINVAL, "this comment {# is never closed");
			size_t end = (size_t)(e - s);
			pos = end + 2;
			if (end > i && s[end - 1] == '-')
				pos = skip_space(s, n, pos);
			else if (!(end > i && s[end - 1] == '+') && pos < n && s[pos] == '\n')
				pos++;
			continue;
		}
		emit(&L, tag == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, at, s + at, 2);
		pos = lex_tag(&L, i, tag, at);
	}
	emit(&L, JT_EOF, n, s + n, 0);
	*toks = L.t;
	*ntoks = L.nt;
}
