/* tok_text.c — the text side of the tokenizer: UTF-8, Unicode classes
 * (generated tables), lowercase, the GPT-2 byte alphabet. The bottom of the folder: it calls no
 * other file of it. */
#include "engine/tok/tok_int.h"
#include "engine/tok/unicode_tables.h"
#include "engine/tok/case_tables.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 ---- */

/* Second-byte bounds for a lead byte (Unicode Table 3-7); need = 0: invalid lead. */
static void lead_info(unsigned b, int *need, unsigned *lo, unsigned *hi)
{
	*lo = 0x80;
	*hi = 0xBF;
	if (b >= 0xC2 && b <= 0xDF)
		*need = 1;
	else if (b >= 0xE0 && b <= 0xEF) {
		*need = 2;
		if (b == 0xE0)
			*lo = 0xA0;
		else if (b == 0xED)
			*hi = 0x9F;
	} else if (b >= 0xF0 && b <= 0xF4) {
		*need = 3;
		if (b == 0xF0)
			*lo = 0x90;
		else if (b == 0xF4)
			*hi = 0x8F;
	} else
		*need = 0;
}

/* Length of the valid sequence at s[i], 0 if none; *part: how many bytes
 * form a valid-so-far prefix (for lossy replacement), *trunc: the input ended
 * inside a valid prefix. */
static int seq_len(const unsigned char *s, size_t end, size_t i, int *part, int *trunc)
{
	unsigned b = s[i], lo, hi;
	int need;
	*trunc = 0;
	*part = 1;
	if (b < 0x80)
		return 1;
	lead_info(b, &need, &lo, &hi);
	if (!need)
		return 0;
	for (int k = 1; k <= need; k++) {
		if (i + k >= end) {
			*trunc = 1;
			*part = k;
			return 0;
		}
		unsigned c = s[i + k];
		if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) {
			*part = k;
			return 0;
		}
	}
	return need + 1;
}

size_t tok_utf8_next(const unsigned char *s, size_t end, size_t i, uint32_t *cp)
{
	int part, trunc;
	int n = seq_len(s, end, i, &part, &trunc);
	if (!n) {
		*cp = TOK_BAD_CP;
		return i + 1;
	}
	uint32_t c = s[i];
	if (n > 1)
		c &= 0x3F >> (n - 1);
	for (int k = 1; k < n; k++)
		c = c << 6 | (s[i + k] & 0x3F);
	*cp = c;
	return i + n;
}

size_t tok_utf8_prev(const unsigned char *s, size_t start, size_t i, uint32_t *cp)
{
	/* the last code point is the one a forward scan from up to 3 bytes
	 * back lands on; try the longest candidate first */
	for (size_t k = 4; k >= 1; k--) {
		if (i - start < k)
			continue;
		uint32_t c;
		if (tok_utf8_next(s, i, i - k, &c) == i && (k == 1 || c != TOK_BAD_CP)) {
			*cp = c;
			return i - k;
		}
	}
	*cp = TOK_BAD_CP;
	return i - 1;
}

size_t tok_put_utf8(char *o, uint32_t c)
{
	if (c < 0x80) {
		o[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (char)(0xC0 | c >> 6);
		o[1] = (char)(0x80 | (c & 0x3F));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (char)(0xE0 | c >> 12);
		o[1] = (char)(0x80 | (c >> 6 & 0x3F));
		o[2] = (char)(0x80 | (c & 0x3F));
		return 3;
	}
	o[0] = (char)(0xF0 | c >> 18);
	o[1] = (char)(0x80 | (c >> 12 & 0x3F));
	o[2] = (char)(0x80 | (c >> 6 & 0x3F));
	o[3] = (char)(0x80 | (c & 0x3F));
	return 4;
}

size_t tok_utf8_lossy(const unsigned char *in, size_t n, int final, struct tbuf *out)
{
	static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
	size_t i = 0, run = 0;   /* in[run..i) is valid and not yet copied */
	while (i < n) {
		int part, trunc;
		int len = seq_len(in, n, i, &part, &trunc);
		if (len) {
			i += len;
			continue;
		}
		if (tbuf_put(out, in + run, i - run))
			return (size_t)-1;
		if (trunc && !final)
			return i;
		if (tbuf_put(out, fffd, 3))
			return (size_t)-1;
		i += part;
		run = i;
	}
	if (tbuf_put(out, in + run, i - run))
		return (size_t)-1;
	return n;
}

int tbuf_put(struct tbuf *b, const void *p, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *s = realloc(b->s, cap);
		if (!s)
			return -ENOMEM;
		b->s = s;
		b->cap = cap;
	}
	if (n)
		memcpy(b->s + b->n, p, n);
	b->n += n;
	b->s[b->n] = 0;
	return 0;
}

/* ---- Unicode classes ---- */

static unsigned uc_class(uint32_t c)
{
	if (c < 0x80) {
		if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
			return UC_L | UC_WORD;
		if (c >= '0' && c <= '9')
			return UC_N | UC_NUMERIC | UC_WORD;
		return c == '_' ? UC_WORD : 0;
	}
	size_t lo = 0, hi = sizeof uc_ranges / sizeof uc_ranges[0];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < uc_ranges[mid][0])
			hi = mid;
		else if (c > uc_ranges[mid][1] >> 4)
			lo = mid + 1;
		else
			return uc_ranges[mid][1] & 15;
	}
	return 0;
}

int tok_is_letter(uint32_t c) { return (uc_class(c) & UC_L) != 0; }
int tok_is_number(uint32_t c) { return (uc_class(c) & UC_N) != 0; }
int tok_is_word(uint32_t c) { return (uc_class(c) & UC_WORD) != 0; }
int tok_is_numeric(uint32_t c) { return (uc_class(c) & UC_NUMERIC) != 0; }

int tok_is_ws(uint32_t c)
{
	if (c < 0x80)
		return c == ' ' || (c >= 0x09 && c <= 0x0D);
	return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
	       c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int tok_is_punct(uint32_t c)
{
	size_t lo = 0, hi = sizeof tok_punct / sizeof tok_punct[0];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < tok_punct[mid][0])
			hi = mid;
		else if (c > tok_punct[mid][1])
			lo = mid + 1;
		else
			return 1;
	}
	return 0;
}

int tok_lower(uint32_t c, struct tbuf *out)
{
	char u[4];
	size_t lo = 0, hi = sizeof tok_lower_map / sizeof tok_lower_map[0];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < tok_lower_map[mid][0])
			hi = mid;
		else if (c > tok_lower_map[mid][0])
			lo = mid + 1;
		else {
			for (int k = 1; k < 4 && tok_lower_map[mid][k]; k++)
				if (tbuf_put(out, u, tok_put_utf8(u, tok_lower_map[mid][k])))
					return -ENOMEM;
			return 0;
		}
	}
	return tbuf_put(out, u, tok_put_utf8(u, c));
}

/* ---- the GPT-2 byte alphabet (ByteLevel) ---- */

static uint32_t byte_char[256];     /* byte -> code point */
static int16_t char_byte[324];      /* code point -> byte, -1 = not in the alphabet */
static pthread_once_t alphabet_once = PTHREAD_ONCE_INIT;

static void init_alphabet(void)
{
	int n = 0;
	for (int c = 0; c < 324; c++)
		char_byte[c] = -1;
	for (int b = 0; b < 256; b++) {
		int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
		byte_char[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
		char_byte[byte_char[b]] = (int16_t)b;
	}
}

size_t tok_byte_symbol(unsigned char b, char out[4])
{
	pthread_once(&alphabet_once, init_alphabet);
	return tok_put_utf8(out, byte_char[b]);
}

int tok_symbol_byte(uint32_t c)
{
	pthread_once(&alphabet_once, init_alphabet);
	return c < 324 ? char_byte[c] : -1;
}
