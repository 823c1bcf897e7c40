/* test_utf8_stream.c — tools/utf8_stream: what `requantfs generate` prints
 * of a token stream is valid UTF-8; a character split over tokens waits for
 * its last byte; ill-formed bytes become U+FFFD, one per maximal subpart
 * (vectors checked against Python's decode(errors="replace")); the output
 * does not depend on how the input is cut into pieces. */
#include "tests/tap.h"
#include "cli/utf8_stream.h"

#define R "\xEF\xBF\xBD"

/* in, pushed in pieces of `step` bytes (0: whole), then ended. */
static size_t feed(const char *in, size_t len, size_t step, char *out)
{
	struct utf8_stream u = {0};
	size_t w = 0;
	for (size_t i = 0; i < len;) {
		size_t n = step && len - i > step ? step : len - i;
		w += utf8_stream_push(&u, in + i, n, out + w);
		i += n;
	}
	return w + utf8_stream_end(&u, out + w);
}

/* Strictly well-formed UTF-8 (the standard's table)? */
static int valid(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned char b = s[i];
		int k;
		unsigned char lo = 0x80, hi = 0xBF;
		if (b < 0x80) {
			i++;
			continue;
		} else if (b >= 0xC2 && b <= 0xDF) {
			k = 2;
		} else if (b >= 0xE0 && b <= 0xEF) {
			k = 3;
			lo = b == 0xE0 ? 0xA0 : 0x80;
			hi = b == 0xED ? 0x9F : 0xBF;
		} else if (b >= 0xF0 && b <= 0xF4) {
			k = 4;
			lo = b == 0xF0 ? 0x90 : 0x80;
			hi = b == 0xF4 ? 0x8F : 0xBF;
		} else {
			return 0;
		}
		if (i + (size_t)k > n || s[i + 1] < lo || s[i + 1] > hi)
			return 0;
		for (int j = 2; j < k; j++)
			if (s[i + j] < 0x80 || s[i + j] > 0xBF)
				return 0;
		i += (size_t)k;
	}
	return 1;
}

static size_t encode(uint32_t c, unsigned char *o)
{
	if (c < 0x80) {
		o[0] = (unsigned char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (unsigned char)(0xC0 | c >> 6);
		o[1] = (unsigned char)(0x80 | (c & 63));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (unsigned char)(0xE0 | c >> 12);
		o[1] = (unsigned char)(0x80 | (c >> 6 & 63));
		o[2] = (unsigned char)(0x80 | (c & 63));
		return 3;
	}
	o[0] = (unsigned char)(0xF0 | c >> 18);
	o[1] = (unsigned char)(0x80 | (c >> 12 & 63));
	o[2] = (unsigned char)(0x80 | (c >> 6 & 63));
	o[3] = (unsigned char)(0x80 | (c & 63));
	return 4;
}

int main(void)
{
	static const struct { const char *in, *want; } v[] = {
		{"plain ascii", "plain ascii"},
		{"caf\xC3\xA9 \xF0\x9F\x98\x80", "caf\xC3\xA9 \xF0\x9F\x98\x80"},
		{"\xC0\xAF", R R},                       /* overlong lead */
		{"\xED\xA0\x80", R R R},                 /* a surrogate */
		{"\xE2\x82" "A", R "A"},                 /* cut short by ASCII */
		{"\xF4\x90\x80\x80", R R R R},           /* above U+10FFFF */
		{"\xE0\x80\x80", R R R},                 /* overlong */
		{"\xF0\x9F\x98", R},                     /* incomplete at the end */
		{"\xE1\x80\xE2\xF0\x91\x92\xF1\xBF" "A", R R R R "A"},  /* the standard's example */
		{"\x80\xBF", R R},                       /* lone continuations */
		{"\xFE\xFF", R R},
		{"\xC3\xC3\xA9", R "\xC3\xA9"},          /* a new lead restarts */
	};
	char out[256];
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		size_t len = strlen(v[i].in), want = strlen(v[i].want);
		size_t a = feed(v[i].in, len, 0, out);
		int whole = a == want && !memcmp(out, v[i].want, want);
		size_t b = feed(v[i].in, len, 1, out);
		int bytes = b == want && !memcmp(out, v[i].want, want);
		TAP_OK(whole && bytes, "vector %zu: whole and a byte at a time, as Python's decode "
		       "(errors=\"replace\")", i);
	}

	/* a character split over tokens: nothing until its last byte */
	struct utf8_stream u = {0};
	size_t w1 = utf8_stream_push(&u, "x\xF0\x9F", 3, out);
	size_t w2 = utf8_stream_push(&u, "\x98", 1, out + w1);
	size_t w3 = utf8_stream_push(&u, "\x80y", 2, out + w1 + w2);
	TAP_OK(w1 == 1 && w2 == 0 && w3 == 5 && !memcmp(out, "x\xF0\x9F\x98\x80y", 6),
	       "a 4-byte character over three pushes is written whole, with its last byte");
	TAP_OK(utf8_stream_end(&u, out) == 0, "nothing pending after it: the end writes nothing");

	/* random bytes: valid output, the same however they are cut, within the bound */
	uint64_t st = 0x9E3779B97F4A7C15ull;
	static unsigned char in[512];
	static char o1[3 * 512 + 3], o2[3 * 512 + 3];
	int bad_valid = 0, bad_cut = 0, bad_bound = 0, bad_roundtrip = 0;
	for (int t = 0; t < 3000; t++) {
		size_t n = tap_xorshift(&st) % 64;
		for (size_t i = 0; i < n; i++) {
			uint32_t r = tap_xorshift(&st);
			in[i] = (unsigned char)(r % 4 == 0 ? r >> 8 : 0x80 + (r >> 8) % 0x78);
		}
		size_t a = feed((const char *)in, n, 0, o1);
		size_t b = feed((const char *)in, n, 1 + tap_xorshift(&st) % 5, o2);
		bad_valid += !valid((const unsigned char *)o1, a);
		bad_cut += a != b || memcmp(o1, o2, a);
		bad_bound += a > 3 * n + 3;

		/* well-formed text, cut anywhere: unchanged */
		size_t m = 0;
		while (m < 400) {
			uint32_t c = tap_xorshift(&st) % 0x110000;
			if (c >= 0xD800 && c < 0xE000)
				continue;
			m += encode(c, in + m);
		}
		a = feed((const char *)in, m, 1 + tap_xorshift(&st) % 7, o1);
		bad_roundtrip += a != m || memcmp(o1, in, m);
	}
	TAP_OK(!bad_valid, "random bytes: the output is always well-formed UTF-8 (%d bad)", bad_valid);
	TAP_OK(!bad_cut, "random bytes: the same output however the input is cut (%d differ)", bad_cut);
	TAP_OK(!bad_bound, "random bytes: never more than UTF8_STREAM_OUT_MAX (%d over)", bad_bound);
	TAP_OK(!bad_roundtrip, "well-formed text cut at random: printed unchanged (%d changed)",
	       bad_roundtrip);
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}
