/* sha1.c — SHA-1 as FIPS 180-4 section 6.1 states it. */
#include "base/sha1.h"

#include <stdio.h>
#include <string.h>

static uint32_t rol(uint32_t x, int n)
{
	return x << n | x >> (32 - n);
}

static void block(struct sha1 *s, const uint8_t *p)
{
	uint32_t w[80];
	for (int t = 0; t < 16; t++)
		w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
		       (uint32_t)p[4 * t + 2] << 8 | p[4 * t + 3];
	for (int t = 16; t < 80; t++)
		w[t] = rol(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
	uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4];
	for (int t = 0; t < 80; t++) {
		uint32_t f, k;
		if (t < 20) {
			f = (b & c) | (~b & d);
			k = 0x5a827999;
		} else if (t < 40) {
			f = b ^ c ^ d;
			k = 0x6ed9eba1;
		} else if (t < 60) {
			f = (b & c) | (b & d) | (c & d);
			k = 0x8f1bbcdc;
		} else {
			f = b ^ c ^ d;
			k = 0xca62c1d6;
		}
		uint32_t x = rol(a, 5) + f + e + k + w[t];
		e = d;
		d = c;
		c = rol(b, 30);
		b = a;
		a = x;
	}
	s->h[0] += a;
	s->h[1] += b;
	s->h[2] += c;
	s->h[3] += d;
	s->h[4] += e;
}

void sha1_init(struct sha1 *s)
{
	static const uint32_t h0[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476,
	                               0xc3d2e1f0};
	memcpy(s->h, h0, sizeof h0);
	s->len = 0;
	s->nbuf = 0;
}

void sha1_update(struct sha1 *s, const void *data, size_t n)
{
	const uint8_t *p = data;
	s->len += n;
	while (n) {
		if (!s->nbuf && n >= 64) {
			block(s, p);
			p += 64;
			n -= 64;
			continue;
		}
		size_t k = 64 - s->nbuf < n ? 64 - s->nbuf : n;
		memcpy(s->buf + s->nbuf, p, k);
		s->nbuf += k;
		p += k;
		n -= k;
		if (s->nbuf == 64) {
			block(s, s->buf);
			s->nbuf = 0;
		}
	}
}

void sha1_final_hex(struct sha1 *s, char hex[41])
{
	uint64_t bits = s->len * 8;
	uint8_t pad[72] = {0x80};
	size_t np = (s->nbuf < 56 ? 56 : 120) - s->nbuf;
	for (int i = 0; i < 8; i++)
		pad[np + i] = (uint8_t)(bits >> (56 - 8 * i));
	sha1_update(s, pad, np + 8);
	for (int i = 0; i < 5; i++)
		snprintf(hex + 8 * i, 9, "%08x", s->h[i]);
}

void sha1_init_git_blob(struct sha1 *s, uint64_t size)
{
	char hdr[32];
	int n = snprintf(hdr, sizeof hdr, "blob %llu", (unsigned long long)size);
	sha1_init(s);
	sha1_update(s, hdr, (size_t)n + 1);   /* with its NUL */
}
