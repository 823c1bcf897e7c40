/* err.c — error messages, with every string argument escaped.
 *
 * Decision (issue 17, class 6): the escaping is done here, once, rather than
 * at each of the hundreds of call sites: rq_errf formats its format string
 * itself, conversion by conversion, and runs each %s argument through
 * rq_esc_n (esc.h), so a tensor name, key or file content holding ESC [ or a
 * newline can neither drive the terminal nor fake a line of output. Literal
 * text of the format (the only place a deliberate "\n" may come from) is
 * copied as is; a message that wants lines made of input text builds them
 * with rq_err_append. rq_esc leaves '\' alone, so text escaped before it is
 * passed as %s comes out unchanged. */
#include "base/err.h"
#include "base/esc.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

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

/* Formats into buf[cap]; a message that does not fit ends in "...". */
static void format_into(char *buf, size_t cap, const char *fmt, va_list ap)
{
	struct out o = {buf, cap, 0};
	buf[0] = 0;
	vformat(&o, fmt, ap);
	if (o.len >= cap && cap >= 4)
		memcpy(buf + cap - 4, "...", 4);
}

int rq_errf(struct rq_err *e, int code, const char *fmt, ...)
{
	if (!e)
		return code;
	va_list ap;
	va_start(ap, fmt);
	format_into(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	e->code = code;
	return code;
}

int rq_err_append(struct rq_err *e, const char *fmt, ...)
{
	if (!e)
		return 0;
	size_t l = strlen(e->msg);
	if (l + 1 < sizeof e->msg) {
		va_list ap;
		va_start(ap, fmt);
		format_into(e->msg + l, sizeof e->msg - l, fmt, ap);
		va_end(ap);
	}
	return e->code;
}

int rq_err_prefix(struct rq_err *e, const char *fmt, ...)
{
	if (!e)
		return 0;
	char head[512], old[sizeof e->msg];
	va_list ap;
	va_start(ap, fmt);
	format_into(head, sizeof head, fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof old);
	/* A message that no longer fits ends in "..." rather than mid-word. */
	if (snprintf(e->msg, sizeof e->msg, "%s: %s", head, old) >= (int)sizeof e->msg)
		memcpy(e->msg + sizeof e->msg - 4, "...", 4);
	return e->code;
}
