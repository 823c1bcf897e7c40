/* tok_encode.c — encoding: added tokens, normalizers, pre-tokenizer, BPE
 * merges, post-processor ids. See tokenizer.c for the steps. */
#include "base/grow.h"
#include "engine/tok/tok_int.h"
#include "engine/tok/tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct hent {
	int32_t rank, pos, merged;
};

/* Per-call scratch for the merge loop, grown as pieces get longer. */
struct enc {
	const struct tok *t;
	struct tok_ids *out;
	int32_t *id, *prev, *next;  /* [cap] symbols of the piece being merged */
	struct hent *heap;          /* [2 * cap] candidate merges */
	size_t cap, nheap;
	char *sym;                  /* [2 * cap + 1] piece in the GPT-2 alphabet (ignore_merges) */
	char *one;                  /* one character with the model's prefix and suffix */
};

static int push_id(struct tok_ids *o, int32_t id)
{
	if (RQ_GROW(o->v, o->n, o->cap, 64))
		return -ENOMEM;
	o->v[o->n++] = id;
	return 0;
}

void tok_ids_free(struct tok_ids *ids)
{
	if (!ids)
		return;
	free(ids->v);
	ids->v = NULL;
	ids->n = ids->cap = 0;
}

static int enc_reserve(struct enc *e, size_t n)
{
	if (n <= e->cap)
		return 0;
	size_t cap = e->cap ? e->cap : 64;
	while (cap < n)
		cap *= 2;
	int32_t *id = realloc(e->id, cap * sizeof *id);
	if (id)
		e->id = id;
	int32_t *pv = realloc(e->prev, cap * sizeof *pv);
	if (pv)
		e->prev = pv;
	int32_t *nx = realloc(e->next, cap * sizeof *nx);
	if (nx)
		e->next = nx;
	struct hent *h = realloc(e->heap, 2 * cap * sizeof *h);
	if (h)
		e->heap = h;
	char *sym = realloc(e->sym, 2 * cap + 1);
	if (sym)
		e->sym = sym;
	if (!id || !pv || !nx || !h || !sym)
		return -ENOMEM;
	e->cap = cap;
	return 0;
}

static int hless(const struct hent *a, const struct hent *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void hpush(struct enc *e, int32_t l)
{
	int32_t rank, merged;
	int32_t r = e->next[l];
	if (r < 0 || !tok_merge_get(&e->t->merges, e->id[l], e->id[r], &rank, &merged))
		return;
	size_t i = e->nheap++;
	struct hent x = {rank, l, merged};
	while (i > 0 && hless(&x, &e->heap[(i - 1) / 2])) {
		e->heap[i] = e->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	e->heap[i] = x;
}

static struct hent hpop(struct enc *e)
{
	struct hent top = e->heap[0], x = e->heap[--e->nheap];
	size_t i = 0, n = e->nheap;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && hless(&e->heap[c + 1], &e->heap[c]))
			c++;
		if (!hless(&e->heap[c], &x))
			break;
		e->heap[i] = e->heap[c];
		i = c;
	}
	if (n)
		e->heap[i] = x;
	return top;
}

/* The initial symbols of a piece that is not byte-level: each character
 * (continuing_subword_prefix before all but the first, end_of_word_suffix
 * after the last) as its vocabulary id, else its <0xNN> byte tokens
 * (byte_fallback; the bytes of the affixed string), else unk_token
 * (consecutive ones fused when fuse_unk), else nothing (BPE::merge_word).
 * e->sym holds the affixed character. */
static size_t char_symbols(struct enc *e, const unsigned char *s, size_t n)
{
	const struct tok *t = e->t;
	size_t m = 0;
	int unk = 0;   /* an unk symbol is pending */
	for (size_t i = 0; i < n;) {
		uint32_t c;
		size_t j = tok_utf8_next(s, n, i, &c), k, len = 0;
		char *one = e->one;
		if (i && t->prefix)
			memcpy(one, t->prefix, len = t->prefix_len);
		memcpy(one + len, s + i, j - i);
		len += j - i;
		if (j == n && t->suffix) {
			memcpy(one + len, t->suffix, t->suffix_len);
			len += t->suffix_len;
		}
		one[len] = 0;
		int id = tok_vocab_get(t, one);
		if (id >= 0) {
			if (unk)
				e->id[m++] = t->unk_id;
			unk = 0;
			e->id[m++] = id;
		} else {
			const unsigned char *u = (const unsigned char *)one;
			for (k = 0; t->byte_fallback && k < len && t->byte_tok[u[k]] >= 0; k++)
				;
			if (t->byte_fallback && k == len) {
				for (k = 0; k < len; k++)
					e->id[m++] = t->byte_tok[u[k]];
			} else if (t->unk_id >= 0) {
				if (unk && !t->fuse_unk)
					e->id[m++] = t->unk_id;
				unk = 1;
			}
		}
		i = j;
	}
	if (unk)
		e->id[m++] = t->unk_id;
	return m;
}

/* BPE on one pre-token (BPE::merge_word without dropout). */
static int bpe(struct enc *e, const unsigned char *s, size_t n)
{
	const struct tok *t = e->t;
	if (n == 1 && t->byte_level && t->byte_id[s[0]] >= 0)
		return push_id(e->out, t->byte_id[s[0]]);
	/* byte fallback may give each byte of a character and its affixes an id */
	if (enc_reserve(e, 4 * n + 4 * (t->prefix_len + t->suffix_len) * n + 8))
		return -ENOMEM;
	if (t->ignore_merges) {
		size_t m = 0;
		if (t->byte_level)
			for (size_t i = 0; i < n; i++)
				m += tok_byte_symbol(s[i], e->sym + m);
		else
			memcpy(e->sym, s, m = n);
		e->sym[m] = 0;
		int id = tok_vocab_get(t, e->sym);
		if (id >= 0)
			return push_id(e->out, id);
	}
	size_t i = 0;
	while (t->byte_level && i < n && t->byte_id[s[i]] >= 0)
		i++;
	if (t->byte_level && i == n) {
		for (i = 0; i < n; i++)
			e->id[i] = t->byte_id[s[i]];
	} else if (t->byte_level) {
		/* a byte whose symbol the vocabulary lacks: the model sees the
		 * symbols as characters, unknown ones as for any BPE */
		size_t m = 0;
		for (i = 0; i < n; i++)
			m += tok_byte_symbol(s[i], e->sym + m);
		n = char_symbols(e, (const unsigned char *)e->sym, m);
	} else
		n = char_symbols(e, s, n);
	if (!n)
		return 0;
	e->nheap = 0;
	for (size_t i = 0; i < n; i++) {
		e->prev[i] = (int32_t)i - 1;
		e->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
	}
	for (size_t i = 0; i + 1 < n; i++)
		hpush(e, (int32_t)i);
	while (e->nheap) {
		struct hent h = hpop(e);
		int32_t l = h.pos, r = e->next[l], rank, merged;
		/* stale entries: l was absorbed (id -1), or its pair changed */
		if (e->id[l] < 0 || r < 0 || !tok_merge_get(&t->merges, e->id[l], e->id[r], &rank, &merged) ||
		    merged != h.merged)
			continue;
		e->id[l] = merged;
		e->id[r] = -1;
		e->next[l] = e->next[r];
		if (e->next[r] >= 0)
			e->prev[e->next[r]] = l;
		if (e->prev[l] >= 0)
			hpush(e, e->prev[l]);
		hpush(e, l);
	}
	for (int32_t i = 0; i >= 0; i = e->next[i])
		if (push_id(e->out, e->id[i]))
			return -ENOMEM;
	return 0;
}

static int on_piece(void *ctx, const char *p, size_t len)
{
	return bpe(ctx, (const unsigned char *)p, len);
}

/* ---- added tokens (AddedVocabulary::find_matches) ----
 * single_word asks the Rust regexes "\w$" / "^\w" of the text around the
 * match; lstrip / rstrip take the white space ("\s*$", "^\s*") next to it. */

static int starts_with_word(const unsigned char *s, size_t i, size_t end)
{
	uint32_t c;
	tok_utf8_next(s, end, i, &c);
	return tok_is_word(c);
}

static int ends_with_word(const unsigned char *s, size_t start, size_t i)
{
	uint32_t c;
	tok_utf8_prev(s, start, i, &c);
	return tok_is_word(c);
}

/* Where the white space that ends s[start..i) begins. */
static size_t ws_start_before(const unsigned char *s, size_t start, size_t i)
{
	while (i > start) {
		uint32_t c;
		size_t p = tok_utf8_prev(s, start, i, &c);
		if (!tok_is_ws(c))
			break;
		i = p;
	}
	return i;
}

static size_t ws_end_after(const unsigned char *s, size_t i, size_t end)
{
	while (i < end) {
		uint32_t c;
		size_t n = tok_utf8_next(s, end, i, &c);
		if (!tok_is_ws(c))
			break;
		i = n;
	}
	return i;
}

/* Leftmost-longest added token (with normalized == norm) at or after p. */
static const struct added *find_added(const struct tok *t, const unsigned char *s, size_t p, size_t end,
                                      int norm, size_t *at)
{
	for (; p < end; p++) {
		const int32_t *c = t->first[s[p]];
		if (!c)
			continue;
		for (; *c >= 0; c++) {
			const struct added *ad = &t->added[*c];
			if (ad->normalized == norm && ad->mlen <= end - p && !memcmp(s + p, ad->match, ad->mlen)) {
				*at = p;
				return ad;
			}
		}
	}
	return NULL;
}

static int split_added(struct enc *e, const unsigned char *s, size_t a, size_t b, int norm, size_t z);

/* A gap of the first pass: normalized, then the second pass over it. */
static int normalize_gap(struct enc *e, const unsigned char *s, size_t n, size_t z)
{
	if (!e->t->n_norm)
		return split_added(e, s, 0, n, 1, z);
	struct tbuf nb = {0};
	int rc = tbuf_put(&nb, "", 0) ? -ENOMEM : tok_normalize(e->t, (const char *)s, n, &z, &nb);
	if (!rc)
		rc = split_added(e, (const unsigned char *)nb.s, 0, nb.n, 1, z);
	free(nb.s);
	return rc;
}

/* A gap: to the second pass (norm 0), or pre-tokenized and merged (norm 1). */
static int gap(struct enc *e, const unsigned char *s, size_t a, size_t b, int norm, size_t z)
{
	z = z > a ? z - a : 0;
	if (!norm)
		return normalize_gap(e, s + a, b - a, z);
	return tok_pre_run(e->t, (const char *)s + a, b - a, z, on_piece, e);
}

/* One pass over s[a..b): tokens of the first pass (norm 0, raw text) split
 * it; each gap is normalized and goes to the second pass (norm 1, the
 * normalized tokens), whose gaps are pre-tokenized. z: the bytes s[0..z)
 * stand at offset 0 of the input (tok_normalize's z): a gap starting at
 * a < z is "first" for Metaspace. */
static int split_added(struct enc *e, const unsigned char *s, size_t a, size_t b, int norm, size_t z)
{
	const struct tok *t = e->t;
	size_t done = a, p = a, at;
	const struct added *ad;
	int rc;
	while (p < b && (ad = find_added(t, s, p, b, norm, &at))) {
		size_t start = at, stop = at + ad->mlen;
		p = stop;   /* the automaton resumes after the match even if it is rejected */
		if (ad->single_word && ((start > a && ends_with_word(s, a, start)) ||
		                        (stop < b && starts_with_word(s, stop, b))))
			continue;
		if (ad->lstrip) {
			start = ws_start_before(s, a, start);
			if (start < done)
				start = done;
		}
		if (ad->rstrip)
			stop = ws_end_after(s, stop, b);
		if (done < start && (rc = gap(e, s, done, start, norm, z)))
			return rc;
		if ((rc = push_id(e->out, ad->id)))
			return rc;
		done = stop;
	}
	return done < b ? gap(e, s, done, b, norm, z) : 0;
}

/* The bytes of text's first character: those at offset 0 of the input. */
static size_t first_char_len(const char *text, size_t len)
{
	uint32_t c;
	return tok_utf8_next((const unsigned char *)text, len, 0, &c);
}

int tok_encode(const struct tok *t, const char *text, size_t len, int flags, struct tok_ids *out)
{
	struct enc e = {.t = t, .out = out};
	int rc = 0;
	if (!(e.one = malloc(t->prefix_len + t->suffix_len + 8)))
		return -ENOMEM;
	if (flags & TOK_ADD_SPECIAL)
		for (int i = 0; i < t->n_pre && !rc; i++)
			rc = push_id(out, t->pre[i]);
	if (!rc && len)
		rc = split_added(&e, (const unsigned char *)text, 0, len, 0, first_char_len(text, len));
	if (flags & TOK_ADD_SPECIAL)
		for (int i = 0; i < t->n_post && !rc; i++)
			rc = push_id(out, t->post[i]);
	free(e.id);
	free(e.prev);
	free(e.next);
	free(e.heap);
	free(e.sym);
	free(e.one);
	return rc;
}
