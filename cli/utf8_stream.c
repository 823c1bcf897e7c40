/* utf8_stream.c — see utf8_stream.h. A byte at a time: either it starts a
 * character (ASCII is written at once, a lead byte waits in pend, anything
 * else is U+FFFD) or it continues the pending one (in range: kept, written
 * when complete; out of range: the pending bytes become one U+FFFD and the
 * byte is looked at again as a start). Ranges from the Unicode standard's
 * table of well-formed UTF-8 byte sequences (no overlongs, no surrogates,
 * nothing above U+10FFFF). */
#include "cli/utf8_stream.h"

#include <string.h>

static size_t fffd(char *out)
{
	memcpy(out, "\xEF\xBF\xBD", 3);
	return 3;
}

/* A lead byte: its character's length and the range of its second byte;
 * 0 when b starts no character. */
static int lead(unsigned char b, unsigned char *lo, unsigned char *hi)
{
	*lo = 0x80;
	*hi = 0xBF;
	if (b >= 0xC2 && b <= 0xDF)
		return 2;
	if (b >= 0xE0 && b <= 0xEF) {
		if (b == 0xE0)
			*lo = 0xA0;        /* no overlongs */
		else if (b == 0xED)
			*hi = 0x9F;        /* no surrogates */
		return 3;
	}
	if (b >= 0xF0 && b <= 0xF4) {
		if (b == 0xF0)
			*lo = 0x90;        /* no overlongs */
		else if (b == 0xF4)
			*hi = 0x8F;        /* nothing above U+10FFFF */
		return 4;
	}
	return 0;
}

static size_t start(struct utf8_stream *u, unsigned char b, char *out)
{
	if (b < 0x80) {
		*out = (char)b;
		return 1;
	}
	int n = lead(b, &u->lo, &u->hi);
	if (!n)
		return fffd(out);
	u->pend[0] = b;
	u->npend = 1;
	u->need = n;
	return 0;
}

size_t utf8_stream_push(struct utf8_stream *u, const char *in, size_t len, char *out)
{
	size_t w = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char b = (unsigned char)in[i];
		if (!u->npend) {
			w += start(u, b, out + w);
		} else if (b >= u->lo && b <= u->hi) {
			u->pend[u->npend++] = b;
			u->lo = 0x80;
			u->hi = 0xBF;
			if (u->npend == u->need) {
				memcpy(out + w, u->pend, (size_t)u->need);
				w += (size_t)u->need;
				u->npend = 0;
			}
		} else {
			u->npend = 0;              /* the maximal subpart so far */
			w += fffd(out + w);
			w += start(u, b, out + w);
		}
	}
	return w;
}

size_t utf8_stream_end(struct utf8_stream *u, char *out)
{
	if (!u->npend)
		return 0;
	u->npend = 0;
	return fffd(out);
}
