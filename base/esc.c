/* esc.c — escaping of input text for messages (esc.h). */
#include "base/esc.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Length (2..4) of the valid UTF-8 sequence at s[0, n) and its code point,
 * or 0 when s[0] does not begin one (overlong forms, surrogates and values
 * above U+10FFFF are invalid). */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned c = s[0];
	size_t len;
	uint32_t v, min;
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
	size_t len = utf8_seq(s, n, &cp);
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
