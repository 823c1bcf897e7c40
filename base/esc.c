/* esc.c — escaping of input text for messages (esc.h). */
#include "base/esc.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

size_t rq_utf8_char(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned c = s[0];
	size_t len;
	uint32_t v, min;
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xC2 && c <= 0xDF) {
		len = 2, v = c & 0x1F, min = 0x80;
	} else if (c >= 0xE0 && c <= 0xEF) {
		len = 3, v = c & 0x0F, min = 0x800;
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4, v = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3F);
	}
	if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
		return 0;
	*cp = v;
	return len;
}

static int shown_escaped(uint32_t cp)
{
	return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
	       (cp >= 0x2066 && cp <= 0x2069);
}

/* The bytes one unit at s[0, n) takes in the output: a plain byte, a whole
 * UTF-8 sequence, or an escape (written to esc). *used = input bytes. */
static size_t unit(const unsigned char *s, size_t n, char esc[16], size_t *used)
{
	uint32_t cp = 0;
	if (s[0] >= 0x20 && s[0] < 0x7F) {
		*used = 1;
		esc[0] = (char)s[0];
		return 1;
	}
	if (s[0] < 0x80) {
		*used = 1;
		switch (s[0]) {
		case '\n': memcpy(esc, "\\n", 3); return 2;
		case '\r': memcpy(esc, "\\r", 3); return 2;
		case '\t': memcpy(esc, "\\t", 3); return 2;
		default: return (size_t)snprintf(esc, 16, "\\x%02x", s[0]);
		}
	}
	size_t len = rq_utf8_char(s, n, &cp);
	if (!len) {
		*used = 1;
		return (size_t)snprintf(esc, 16, "\\x%02x", s[0]);
	}
	*used = len;
	if (shown_escaped(cp))
		return (size_t)snprintf(esc, 16, "\\u{%04x}", (unsigned)cp);
	memcpy(esc, s, len);
	return len;
}

char *rq_esc_n(char *out, size_t cap, const char *s, size_t n)
{
	if (!s) {
		snprintf(out, cap, "(null)");
		return out;
	}
	n = strnlen(s, n);
	const unsigned char *p = (const unsigned char *)s;
	size_t o = 0, i = 0;
	while (i < n) {
		char u[16];
		size_t used, k = unit(p + i, n - i, u, &used);
		if (o + k + 1 > cap) {
			/* does not fit: end in "..." on a unit boundary */
			while (o > 0 && o + 4 > cap)
				o--;
			while (o > 0 && (out[o] & 0xC0) == 0x80)
				o--;
			snprintf(out + o, cap - o, "%s", cap - o >= 4 ? "..." : "");
			return out;
		}
		memcpy(out + o, u, k);
		o += k;
		i += used;
	}
	out[o] = 0;
	return out;
}

char *rq_esc(char *out, size_t cap, const char *s)
{
	return rq_esc_n(out, cap, s, (size_t)-1);
}

int rq_esc_clean(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		char u[16];
		size_t used, k = unit(p + i, n - i, u, &used);
		if (k != used || memcmp(u, p + i, k))
			return 0;
		i += used;
	}
	return 1;
}

/* ---- printf with escaped %s arguments ------------------------------------ */

#pragma GCC diagnostic ignored "-Wformat-nonliteral"

struct out {
	char *p;
	size_t cap, len;   /* len may pass cap: what would have been written */
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->len < o->cap) {
		size_t k = o->cap - 1 - o->len < n ? o->cap - 1 - o->len : n;
		memcpy(o->p + o->len, s, k);
		o->p[o->len + k] = 0;
	}
	o->len += n;
}

/* One conversion: spec[0, n) is "%...c" with its '*'s already taken into w
 * and p (-1: none). */
#define PIECE(val) do {                                                             \
		char b_[512];                                                                   \
		int r_ = w_star && p_star ? snprintf(b_, sizeof b_, spec, w, p, val)           \
		         : w_star ? snprintf(b_, sizeof b_, spec, w, val)                      \
		         : p_star ? snprintf(b_, sizeof b_, spec, p, val)                      \
		         : snprintf(b_, sizeof b_, spec, val);                                 \
		if (r_ > 0)                                                                     \
			put(o, b_, (size_t)r_ < sizeof b_ ? (size_t)r_ : sizeof b_ - 1);            \
	} while (0)

static void vformat(struct out *o, const char *fmt, va_list ap)
{
	const char *f = fmt;
	while (*f) {
		const char *pc = strchr(f, '%');
		if (!pc) {
			put(o, f, strlen(f));
			break;
		}
		put(o, f, (size_t)(pc - f));
		f = pc + 1;
		if (*f == '%') {
			put(o, "%", 1);
			f++;
			continue;
		}
		char spec[32];
		size_t n = 0;
		int w = 0, p = -1, w_star = 0, p_star = 0, lm = 0; /* lm: 'H' hh, 'h', 'l', 'L' ll, 'z', 'j', 't', 'D' long double */
		spec[n++] = '%';
		while (*f && strchr("-+ #0'", *f) && n < 8)
			spec[n++] = *f++;
		if (*f == '*') {
			w_star = 1;
			w = va_arg(ap, int);
			spec[n++] = *f++;
		} else {
			while (*f >= '0' && *f <= '9' && n < 16)
				spec[n++] = *f++;
		}
		if (*f == '.') {
			spec[n++] = *f++;
			if (*f == '*') {
				p_star = 1;
				p = va_arg(ap, int);
				spec[n++] = *f++;
			} else {
				p = 0;
				while (*f >= '0' && *f <= '9' && n < 24) {
					p = p * 10 + (*f - '0');
					spec[n++] = *f++;
				}
			}
		}
		if (f[0] == 'h' && f[1] == 'h') lm = 'H', spec[n++] = *f++, spec[n++] = *f++;
		else if (f[0] == 'l' && f[1] == 'l') lm = 'L', spec[n++] = *f++, spec[n++] = *f++;
		else if (*f && strchr("hlzjt", *f)) lm = *f, spec[n++] = *f++;
		else if (*f == 'L') lm = 'D', spec[n++] = *f++;
		char c = *f;
		if (!c)
			break;
		f++;
		spec[n++] = c;
		spec[n] = 0;
		switch (c) {
		case 's': {
			const char *s = va_arg(ap, const char *);
			char esc[1024];
			rq_esc_n(esc, sizeof esc, s, p >= 0 ? (size_t)p : (size_t)-1);
			/* width and '-' still apply, the precision was the input's */
			char sspec[24];
			size_t k = 0;
			for (size_t i = 0; i < n && spec[i] != '.' && spec[i] != 's'; i++)
				if (k < sizeof sspec - 2)
					sspec[k++] = spec[i];
			sspec[k++] = 's';
			sspec[k] = 0;
			char b[1100];
			int r = w_star ? snprintf(b, sizeof b, sspec, w, esc) : snprintf(b, sizeof b, sspec, esc);
			if (r > 0)
				put(o, b, (size_t)r < sizeof b ? (size_t)r : sizeof b - 1);
			break;
		}
		case 'c':
			PIECE(va_arg(ap, int));
			break;
		case 'p':
			PIECE(va_arg(ap, void *));
			break;
		case 'd': case 'i':
			switch (lm) {
			case 'l': PIECE(va_arg(ap, long)); break;
			case 'L': PIECE(va_arg(ap, long long)); break;
			case 'z': PIECE(va_arg(ap, ssize_t)); break;
			case 'j': PIECE(va_arg(ap, intmax_t)); break;
			case 't': PIECE(va_arg(ap, ptrdiff_t)); break;
			default: PIECE(va_arg(ap, int)); break;
			}
			break;
		case 'u': case 'o': case 'x': case 'X':
			switch (lm) {
			case 'l': PIECE(va_arg(ap, unsigned long)); break;
			case 'L': PIECE(va_arg(ap, unsigned long long)); break;
			case 'z': PIECE(va_arg(ap, size_t)); break;
			case 'j': PIECE(va_arg(ap, uintmax_t)); break;
			case 't': PIECE(va_arg(ap, ptrdiff_t)); break;
			default: PIECE(va_arg(ap, unsigned)); break;
			}
			break;
		case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': case 'a': case 'A':
			if (lm == 'D')
				PIECE(va_arg(ap, long double));
			else
				PIECE(va_arg(ap, double));
			break;
		default:
			/* %n and unknown conversions: written out literally, no argument taken
			 * (gcc's format check keeps them out of the callers) */
			put(o, spec, n);
			break;
		}
	}
}

void rq_vfmt_esc(char *buf, size_t cap, const char *fmt, va_list ap)
{
	struct out o = {buf, cap, 0};
	buf[0] = 0;
	vformat(&o, fmt, ap);
	if (o.len >= cap && cap >= 4)
		memcpy(buf + cap - 4, "...", 4);
}
