/* tok_norm.c — the normalizers tokenizer.json may declare: NFC, NFD, NFKC,
 * NFKD, Lowercase, Strip, Prepend, Replace (String or Regex pattern), in
 * sequence, as `tokenizers` applies them to each stretch of text between
 * added tokens.
 *
 * NFC follows UAX #15: full canonical decomposition (tables generated from
 * the library itself, tools/golden/gen_nfc_tables.py; Hangul algorithmic), canonical
 * ordering of non-starters, then canonical composition with the blocking
 * rule. NFKC / NFKD decompose by the compatibility table first
 * (tools/golden/gen_nfkc_tables.py), then go on as NFC / NFD. Bytes that are
 * not UTF-8 (which `tokenizers` cannot be given) pass through unchanged,
 * each one a starter. */
#include "engine/tok/nfc_tables.h"
#include "engine/tok/nfkc_tables.h"
#include "engine/tok/tok_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19, VCOUNT = 21,
       TCOUNT = 28, NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

static unsigned ccc(uint32_t c)
{
	if (c < 0x300 || c == TOK_BAD_CP)
		return 0;
	size_t lo = 0, hi = sizeof nfc_ccc / sizeof nfc_ccc[0];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < nfc_ccc[mid][0])
			hi = mid;
		else if (c > nfc_ccc[mid][1])
			lo = mid + 1;
		else
			return nfc_ccc[mid][2];
	}
	return 0;
}

/* The full decomposition of c: a pointer into nfc_pool and its length, or 0. */
static size_t decomp(uint32_t c, const uint32_t **d)
{
	size_t lo = 0, hi = sizeof nfc_dec / sizeof nfc_dec[0];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < nfc_dec[mid][0])
			hi = mid;
		else if (c > nfc_dec[mid][0])
			lo = mid + 1;
		else {
			*d = nfc_pool + nfc_dec[mid][1];
			return nfc_dec[mid][2];
		}
	}
	return 0;
}

/* The full compatibility decomposition of c when it differs from the
 * canonical one: a pointer into nfkc_pool and its length, or 0. */
static size_t kdecomp(uint32_t c, const uint32_t **d)
{
	size_t lo = 0, hi = sizeof nfkc_dec / sizeof nfkc_dec[0];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < nfkc_dec[mid][0])
			hi = mid;
		else if (c > nfkc_dec[mid][0])
			lo = mid + 1;
		else {
			*d = nfkc_pool + nfkc_dec[mid][1];
			return nfkc_dec[mid][2];
		}
	}
	return 0;
}

/* The primary composite of a + b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b)
{
	if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
		return SBASE + ((a - LBASE) * VCOUNT + b - VBASE) * TCOUNT;
	if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
		return a + b - TBASE;
	if (a > 0x1FFFFF || b > 0x1FFFFF)
		return 0;
	uint64_t k = (uint64_t)a << 21 | b;
	size_t lo = 0, hi = sizeof nfc_comp / sizeof nfc_comp[0];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (k < nfc_comp[mid][0])
			hi = mid;
		else if (k > nfc_comp[mid][0])
			lo = mid + 1;
		else
			return (uint32_t)nfc_comp[mid][1];
	}
	return 0;
}

/* A code point buffer; bad bytes are kept as 0x80000000 | byte. */
struct cps {
	uint32_t *v;
	size_t n, cap;
};

static int cps_put(struct cps *b, uint32_t c)
{
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 64;
		uint32_t *v = realloc(b->v, cap * sizeof *v);
		if (!v)
			return -ENOMEM;
		b->v = v;
		b->cap = cap;
	}
	b->v[b->n++] = c;
	return 0;
}

#define RAW_BYTE 0x80000000u

/* Stable sort of v[0..n) by combining class (all non-zero, below 256). */
static int sort_run(uint32_t *v, size_t n)
{
	size_t start[257] = {0};
	uint32_t *tmp = malloc(n * sizeof *tmp);
	if (!tmp)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		start[ccc(v[i]) + 1]++;
	for (int k = 1; k <= 256; k++)
		start[k] += start[k - 1];
	for (size_t i = 0; i < n; i++)
		tmp[start[ccc(v[i])]++] = v[i];
	memcpy(v, tmp, n * sizeof *v);
	free(tmp);
	return 0;
}

int tok_nf(const char *text, size_t n, int nfc, int compat, struct tbuf *out)
{
	const unsigned char *s = (const unsigned char *)text;
	struct cps b = {0};
	int rc = 0;
	for (size_t i = 0; i < n && !rc;) {
		uint32_t c;
		size_t j = tok_utf8_next(s, n, i, &c);
		const uint32_t *d;
		size_t k;
		if (c == TOK_BAD_CP)
			rc = cps_put(&b, RAW_BYTE | s[i]);
		else if (compat && (k = kdecomp(c, &d)))   /* full: already canonical too */
			for (size_t m = 0; m < k && !rc; m++)
				rc = cps_put(&b, d[m]);
		else if (c >= SBASE && c < SBASE + SCOUNT) {
			uint32_t x = c - SBASE;
			rc = cps_put(&b, LBASE + x / NCOUNT) || cps_put(&b, VBASE + x % NCOUNT / TCOUNT) ||
			     (x % TCOUNT && cps_put(&b, TBASE + x % TCOUNT)) ? -ENOMEM : 0;
		} else if ((k = decomp(c, &d)))
			for (size_t m = 0; m < k && !rc; m++)
				rc = cps_put(&b, d[m]);
		else
			rc = cps_put(&b, c);
		i = j;
	}
	/* canonical ordering: a stable sort by class of each run of non-starters
	 * (counting sort, so that a long run of marks stays linear) */
	for (size_t i = 0; i < b.n && !rc;) {
		size_t j = i;
		while (j < b.n && ccc(b.v[j]))
			j++;
		if (j - i > 1)
			rc = sort_run(b.v + i, j - i);
		i = j > i ? j : i + 1;
	}
	/* canonical composition */
	size_t m = 0, sp = 0;
	unsigned last = 0;
	for (size_t i = 0; i < b.n && !rc; i++) {
		uint32_t c = b.v[i], x;
		if (!nfc) {   /* NFD: decomposed and ordered */
			b.v[m++] = c;
			continue;
		}
		unsigned k = ccc(c);
		if (i == 0) {
			b.v[m++] = c;
			last = k ? 256 : 0;
			continue;
		}
		if (!(b.v[sp] & RAW_BYTE) && !(c & RAW_BYTE) && (last < k || last == 0) &&
		    (x = compose(b.v[sp], c))) {
			b.v[sp] = x;
			continue;
		}
		if (!k)
			sp = m;
		last = k;
		b.v[m++] = c;
	}
	for (size_t i = 0; i < m && !rc; i++) {
		char u[4];
		if (b.v[i] & RAW_BYTE) {
			u[0] = (char)(b.v[i] & 0xFF);
			rc = tbuf_put(out, u, 1);
		} else
			rc = tbuf_put(out, u, tok_put_utf8(u, b.v[i]));
	}
	free(b.v);
	return rc;
}

/* Strip: the white space at the start (left) and the end (right). */
static int strip(const char *s, size_t n, const struct tok_norm *nm, size_t *z, struct tbuf *out)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t a = 0, b = n;
	uint32_t c;
	while (nm->left && a < b) {
		size_t j = tok_utf8_next(u, b, a, &c);
		if (!tok_is_ws(c))
			break;
		a = j;
	}
	while (nm->right && b > a) {
		size_t j = tok_utf8_prev(u, a, b, &c);
		if (!tok_is_ws(c))
			break;
		b = j;
	}
	*z = *z > a ? (*z < b ? *z : b) - a : 0;
	return tbuf_put(out, s + a, b - a);
}

/* Lowercase: each code point by Rust's char::to_lowercase (no context rule). */
static int lowercase(const char *s, size_t n, struct tbuf *out)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		uint32_t c;
		size_t j = tok_utf8_next(u, n, i, &c);
		if (c == TOK_BAD_CP ? tbuf_put(out, s + i, 1) : tok_lower(c, out))
			return -ENOMEM;
		i = j;
	}
	return 0;
}

/* A normalizer that maps each character on its own (up to NFC's composition
 * across the cut, which only moves where the offset-0 prefix ends inside a
 * grapheme: nothing a later step can tell).  */
static int map_chars(const struct tok_norm *nm, const char *s, size_t n, struct tbuf *out)
{
	if (nm->kind == TN_LOWERCASE)
		return lowercase(s, n, out);
	return tok_nf(s, n, nm->kind == TN_NFC || nm->kind == TN_NFKC, nm->kind == TN_NFKC || nm->kind == TN_NFKD, out);
}

/* One normalizer on cur, appended to next; *z (tok_normalize) follows. */
static int apply(const struct tok_norm *nm, const struct tbuf *cur, size_t *z, struct tbuf *next)
{
	size_t at = next->n;
	int rc;
	switch (nm->kind) {
	case TN_PREPEND:   /* only a non-empty text; it takes the first character's offsets */
		*z = cur->n && *z ? *z + nm->alen : 0;
		return cur->n ? tbuf_put(next, nm->a, nm->alen) || tbuf_put(next, cur->s, cur->n) ? -ENOMEM : 0 : 0;
	case TN_STRIP:
		return strip(cur->s, cur->n, nm, z, next);
	case TN_REPLACE:
		return tok_re_replace(nm->re, cur->s, cur->n, nm->b, nm->blen, z, next);
	default:           /* each character its own: the prefix maps to the prefix */
		if ((rc = map_chars(nm, cur->s, cur->n, next)))
			return rc;
		if (*z && *z < cur->n) {
			struct tbuf p = {0};
			rc = tbuf_put(&p, "", 0) ? -ENOMEM : map_chars(nm, cur->s, *z, &p);
			*z = p.n;
			free(p.s);
			return rc;
		}
		*z = *z ? next->n - at : 0;
		return 0;
	}
}

int tok_normalize(const struct tok *t, const char *s, size_t n, size_t *z, struct tbuf *out)
{
	struct tbuf cur = {0}, next = {0};
	size_t zz = z ? *z : 0;
	int rc = tbuf_put(&cur, s, n);
	for (int i = 0; i < t->n_norm && !rc; i++) {
		next.n = 0;
		if ((rc = tbuf_put(&next, "", 0)) || (rc = apply(&t->norm[i], &cur, &zz, &next)))
			break;
		struct tbuf tmp = cur;
		cur = next;
		next = tmp;
	}
	if (!rc)
		rc = tbuf_put(out, cur.s, cur.n);
	if (!rc && z)
		*z = zz;
	free(cur.s);
	free(next.s);
	return rc;
}
