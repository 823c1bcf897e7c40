/* tok_encode.c — encoding (added tokens, pre-tokenizer, BPE merges),
 * decoding and the streaming decoder. See tokenizer.c for the steps. */
#include "base/grow.h"
#include "engine/tok_int.h"
#include "engine/tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct hent {
	int32_t rank, pos, merged;
};

/* Per-call scratch for the merge loop, grown as pieces get longer. */
struct enc {
	const struct tok *t;
	const unsigned char *s;     /* the whole text */
	struct tok_ids *out;
	int32_t *id, *prev, *next;  /* [cap] symbols of the piece being merged */
	struct hent *heap;          /* [2 * cap] candidate merges */
	size_t cap, nheap;
	char *sym;                  /* [2 * cap + 1] piece in the GPT-2 alphabet (ignore_merges) */
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

/* BPE on one pre-token s[a..b) (BPE::merge_word without dropout). */
static int bpe(struct enc *e, size_t a, size_t b)
{
	const struct tok *t = e->t;
	size_t n = b - a;
	if (n == 1)
		return push_id(e->out, t->byte_id[e->s[a]]);
	if (enc_reserve(e, n))
		return -ENOMEM;
	if (t->ignore_merges) {
		size_t m = 0;
		for (size_t i = a; i < b; i++)
			m += tok_byte_symbol(e->s[i], e->sym + m);
		e->sym[m] = 0;
		int id = tok_vocab_get(t, e->sym);
		if (id >= 0)
			return push_id(e->out, id);
	}
	e->nheap = 0;
	for (size_t i = 0; i < n; i++) {
		e->id[i] = t->byte_id[e->s[a + i]];
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

static int on_piece(void *ctx, size_t start, size_t end)
{
	struct enc *e = ctx;
	return bpe(e, start, end);
}

/* Text between added tokens: pre-tokenize, then BPE each piece. The pieces
 * come relative to s + a, so shift the base pointer for the callback. */
static int encode_gap(struct enc *e, size_t a, size_t b)
{
	const unsigned char *base = e->s;
	e->s = base + a;
	int rc = tok_pretokenize((const char *)e->s, b - a, on_piece, e);
	e->s = base;
	return rc;
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
			if (ad->normalized == norm && ad->len <= end - p && !memcmp(s + p, ad->content, ad->len)) {
				*at = p;
				return ad;
			}
		}
	}
	return NULL;
}

/* One pass over s[a..b): tokens of the first pass (norm 0) split the text,
 * the gaps go to the second pass (norm 1), whose gaps go to encode_gap. */
static int split_added(struct enc *e, size_t a, size_t b, int norm)
{
	const struct tok *t = e->t;
	const unsigned char *s = e->s;
	size_t done = a, p = a, at;
	const struct added *ad;
	int rc;
	while (p < b && (ad = find_added(t, s, p, b, norm, &at))) {
		size_t start = at, stop = at + ad->len;
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
		if (done < start) {
			rc = norm ? encode_gap(e, done, start) : split_added(e, done, start, 1);
			if (rc)
				return rc;
		}
		if ((rc = push_id(e->out, ad->id)))
			return rc;
		done = stop;
	}
	if (done < b)
		return norm ? encode_gap(e, done, b) : split_added(e, done, b, 1);
	return 0;
}

int tok_encode(const struct tok *t, const char *text, size_t len, int flags, struct tok_ids *out)
{
	struct enc e = {.t = t, .s = (const unsigned char *)text, .out = out};
	int rc = 0;
	if (flags & TOK_ADD_SPECIAL)
		for (int i = 0; i < t->n_pre && !rc; i++)
			rc = push_id(out, t->pre[i]);
	if (!rc && len)
		rc = split_added(&e, 0, len, 0);
	if (flags & TOK_ADD_SPECIAL)
		for (int i = 0; i < t->n_post && !rc; i++)
			rc = push_id(out, t->post[i]);
	free(e.id);
	free(e.prev);
	free(e.next);
	free(e.heap);
	free(e.sym);
	return rc;
}

/* ---- decoding ---- */

int tok_token_bytes(const struct tok *t, int id, const char **bytes, size_t *len)
{
	if (id < 0 || id >= t->n_ids || !t->tok_bytes[id])
		return -EINVAL;
	*bytes = t->tok_bytes[id];
	*len = t->tok_len[id];
	return 0;
}

static int keep(const struct tok *t, int32_t id, int flags)
{
	return id >= 0 && id < t->n_ids && t->tok_bytes[id] && !((flags & TOK_SKIP_SPECIAL) && t->special[id]);
}

int tok_decode(const struct tok *t, const int32_t *ids, size_t n, int flags, char **out, size_t *out_len)
{
	struct tbuf raw = {0}, txt = {0};
	int rc = tbuf_put(&raw, "", 0);
	for (size_t i = 0; i < n && !rc; i++)
		if (keep(t, ids[i], flags))
			rc = tbuf_put(&raw, t->tok_bytes[ids[i]], t->tok_len[ids[i]]);
	if (!rc && (tbuf_put(&txt, "", 0) || tok_utf8_lossy((unsigned char *)raw.s, raw.n, 1, &txt) == (size_t)-1))
		rc = -ENOMEM;
	free(raw.s);
	if (rc) {
		free(txt.s);
		return rc;
	}
	*out = txt.s;
	*out_len = txt.n;
	return 0;
}

struct tok_stream {
	const struct tok *t;
	int flags;
	struct tbuf pend;   /* bytes of an incomplete UTF-8 sequence, at most 3 */
	struct tbuf out;    /* the text returned by the last call */
};

struct tok_stream *tok_stream_new(const struct tok *t, int flags)
{
	struct tok_stream *s = calloc(1, sizeof *s);
	if (s) {
		s->t = t;
		s->flags = flags;
	}
	return s;
}

static int stream_emit(struct tok_stream *s, int final, const char **text, size_t *len)
{
	s->out.n = 0;
	if (tbuf_put(&s->out, "", 0))
		return -ENOMEM;
	size_t used = tok_utf8_lossy((unsigned char *)s->pend.s, s->pend.n, final, &s->out);
	if (used == (size_t)-1)
		return -ENOMEM;
	memmove(s->pend.s, s->pend.s + used, s->pend.n - used);
	s->pend.n -= used;
	*text = s->out.s;
	*len = s->out.n;
	return 0;
}

int tok_stream_push(struct tok_stream *s, int32_t id, const char **text, size_t *len)
{
	if (tbuf_put(&s->pend, "", 0))
		return -ENOMEM;
	if (keep(s->t, id, s->flags) && tbuf_put(&s->pend, s->t->tok_bytes[id], s->t->tok_len[id]))
		return -ENOMEM;
	return stream_emit(s, 0, text, len);
}

int tok_stream_flush(struct tok_stream *s, const char **text, size_t *len)
{
	if (tbuf_put(&s->pend, "", 0))
		return -ENOMEM;
	return stream_emit(s, 1, text, len);
}

void tok_stream_free(struct tok_stream *s)
{
	if (!s)
		return;
	free(s->pend.s);
	free(s->out.s);
	free(s);
}
