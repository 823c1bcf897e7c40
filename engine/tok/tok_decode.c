/* tok_decode.c — ids back to text, as `tokenizers`' decode does: the token
 * strings (added tokens' content first, special ones dropped on request)
 * through the decoder, joined.
 *
 * ByteLevel alone (GPT-2 style families, Laguna) maps each token back to its
 * bytes and replaces invalid UTF-8 with U+FFFD as from_utf8_lossy does; the
 * bytes of each id are precomputed (tok_bytes), so decode and the streaming
 * decoder are one pass (the fast path). Every other chain (ByteLevel,
 * Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder, in any order)
 * runs as the library's decode_chain over the list of token strings. Its streaming
 * decoder decodes a short sliding window of ids (chain_emit), holding back
 * a trailing run of <0xNN> byte tokens, which only the next token resolves. */
#include "base/grow.h"
#include "engine/tok/tok_int.h"
#include "engine/tok/tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

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
	return id >= 0 && id < t->n_ids && t->tok_bytes[id] && !((flags & TOK_SKIP_SPECIAL) && t->skip[id]);
}

static int bytelevel_only(const struct tok *t)
{
	return t->n_dec == 1 && t->dec[0].kind == TD_BYTELEVEL;
}

/* ByteFallback's test: "<0xHH>" (Rust's u8::from_str_radix, which takes a '+'). */
static int byte_token(const char *s, size_t n, unsigned char *b)
{
	if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
		return 0;
	unsigned v = 0;
	for (int i = 3; i < 5; i++) {
		char c = s[i];
		if (i == 3 && c == '+')
			continue;
		int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
		if (d < 0)
			return 0;
		v = v * 16 + (unsigned)d;
	}
	*b = (unsigned char)v;
	return 1;
}

/* ---- the decoder chain over a list of strings ---- */

struct strs {
	struct tbuf *v;
	size_t n, cap;
};

static void strs_free(struct strs *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].s);
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}

static int strs_push(struct strs *l, const char *s, size_t n)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		struct tbuf *v = realloc(l->v, cap * sizeof *v);
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	struct tbuf *b = &l->v[l->n++];
	*b = (struct tbuf){0};
	return tbuf_put(b, s, n);
}

/* s with every a replaced by b (also: Metaspace, rep -> ' '). */
static int replace_into(const char *s, size_t n, const char *a, size_t alen, const char *b, size_t blen,
                        struct tbuf *out)
{
	size_t i = 0;
	if (tbuf_put(out, "", 0))
		return -ENOMEM;
	while (i < n) {
		const char *m = memmem(s + i, n - i, a, alen);
		size_t end = m ? (size_t)(m - s) : n;
		if (tbuf_put(out, s + i, end - i) || (m && tbuf_put(out, b, blen)))
			return -ENOMEM;
		i = m ? end + alen : n;
	}
	return 0;
}

static int flush_bytes(struct strs *out, struct tbuf *run)
{
	int rc = 0;
	if (!run->n)
		return 0;
	struct tbuf chk = {0};
	size_t used = tok_utf8_lossy((unsigned char *)run->s, run->n, 1, &chk);
	int valid = used != (size_t)-1 && chk.n == run->n && !memcmp(chk.s, run->s, run->n);
	free(chk.s);
	if (used == (size_t)-1)
		return -ENOMEM;
	if (valid)
		rc = strs_push(out, run->s, run->n);
	else
		for (size_t i = 0; i < run->n && !rc; i++)
			rc = strs_push(out, FFFD, 3);
	run->n = 0;
	return rc;
}

/* ByteLevel on a token: its characters as the bytes they stand for when
 * all are in the alphabet, else its own bytes (ByteLevel::decode_chain). */
static int bytelevel_token(const char *s, size_t n, struct tbuf *out)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t at = out->n;
	for (size_t i = 0; i < n;) {
		uint32_t c;
		i = tok_utf8_next(u, n, i, &c);
		int b = c == TOK_BAD_CP ? -1 : tok_symbol_byte(c);
		unsigned char byte = (unsigned char)b;
		if (b < 0) {
			out->n = at;
			return tbuf_put(out, s, n);
		}
		if (tbuf_put(out, &byte, 1))
			return -ENOMEM;
	}
	return 0;
}

/* Strip: up to start leading and stop trailing copies of the character
 * (the library panics when they overlap; here the token becomes empty). */
static int strip_token(const struct tok_dec *d, const char *s, size_t n, struct strs *out)
{
	size_t a = 0, b = n;
	for (int c = 0; c < d->start && a + d->alen <= n && !memcmp(s + a, d->a, d->alen); c++)
		a += d->alen;
	for (int c = 0; c < d->stop && b >= d->alen && !memcmp(s + b - d->alen, d->a, d->alen); c++)
		b -= d->alen;
	return strs_push(out, s + a, b > a ? b - a : 0);
}

static int chain_step(const struct tok_dec *d, struct strs *in, struct strs *out)
{
	int rc = 0;
	struct tbuf run = {0};
	for (size_t i = 0; i < in->n && !rc; i++) {
		const char *s = in->v[i].s ? in->v[i].s : "";
		size_t n = in->v[i].n;
		unsigned char b;
		switch (d->kind) {
		case TD_REPLACE:
			rc = strs_push(out, "", 0) ? -ENOMEM
			     : tok_re_replace(d->re, s, n, d->b, d->blen, NULL, &out->v[out->n - 1]);
			break;
		case TD_METASPACE:
			if (i == 0 && d->prepend != PS_NEVER)
				rc = strs_push(out, "", 0) || replace_into(s, n, d->a, d->alen, "", 0, &out->v[out->n - 1]);
			else
				rc = strs_push(out, "", 0) || replace_into(s, n, d->a, d->alen, " ", 1, &out->v[out->n - 1]);
			break;
		case TD_BPE:   /* the suffix ends a word: a space, none after the last token */
			rc = strs_push(out, "", 0) || replace_into(s, n, d->a, d->alen, i + 1 < in->n ? " " : "",
			                                           i + 1 < in->n, &out->v[out->n - 1]);
			break;
		case TD_BYTEFALLBACK:
			if (byte_token(s, n, &b))
				rc = tbuf_put(&run, &b, 1);
			else
				rc = flush_bytes(out, &run) || strs_push(out, s, n);
			break;
		case TD_FUSE:
		case TD_BYTELEVEL:   /* both join the tokens into one string */
			if (!out->n)
				rc = strs_push(out, "", 0);
			if (!rc)
				rc = d->kind == TD_FUSE ? tbuf_put(&run, s, n) : bytelevel_token(s, n, &run);
			break;
		default:   /* TD_STRIP */
			rc = strip_token(d, s, n, out);
			break;
		}
	}
	if (!rc && d->kind == TD_BYTEFALLBACK)
		rc = flush_bytes(out, &run);
	if (!rc && d->kind == TD_FUSE && out->n)
		rc = tbuf_put(&out->v[0], run.s ? run.s : "", run.n);
	if (!rc && d->kind == TD_BYTELEVEL && out->n)   /* from_utf8_lossy of all the bytes */
		rc = tok_utf8_lossy((unsigned char *)(run.s ? run.s : ""), run.n, 1, &out->v[0]) == (size_t)-1;
	free(run.s);
	return rc == -ERANGE ? rc : rc ? -ENOMEM : 0;
}

/* The decoder chain on the kept ids, joined into out. */
static int chain_decode(const struct tok *t, const int32_t *ids, size_t n, int flags, struct tbuf *out)
{
	struct strs a = {0}, b = {0};
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++)
		if (keep(t, ids[i], flags))
			rc = strs_push(&a, t->dec_str[ids[i]], strlen(t->dec_str[ids[i]]));
	for (int k = 0; k < t->n_dec && !rc; k++) {
		rc = chain_step(&t->dec[k], &a, &b);
		strs_free(&a);
		a = b;
		b = (struct strs){0};
	}
	for (size_t i = 0; i < a.n && !rc; i++)
		rc = (t->dec_none && i && tbuf_put(out, " ", 1)) || tbuf_put(out, a.v[i].s, a.v[i].n) ? -ENOMEM : 0;
	strs_free(&a);
	strs_free(&b);
	return rc;
}

char *tok_dec_piece(const struct tok *t, const char *s, uint32_t *len)
{
	struct tbuf cur = {0}, next = {0};
	unsigned char b;
	int joined = 0;   /* a Fuse or ByteLevel ran: the token is inside one string */
	int rc = tbuf_put(&cur, s, strlen(s));
	for (int k = 0; k < t->n_dec && !rc; k++) {
		const struct tok_dec *d = &t->dec[k];
		next.n = 0;
		rc = tbuf_put(&next, "", 0);
		if (rc)
			break;
		if (d->kind == TD_REPLACE)
			rc = tok_re_replace(d->re, cur.s, cur.n, d->b, d->blen, NULL, &next);
		else if (d->kind == TD_METASPACE)
			rc = replace_into(cur.s, cur.n, d->a, d->alen, " ", 1, &next);
		else if (d->kind == TD_BPE)
			rc = replace_into(cur.s, cur.n, d->a, d->alen, " ", 1, &next);
		else if (d->kind == TD_BYTEFALLBACK && byte_token(cur.s, cur.n, &b))
			rc = tbuf_put(&next, &b, 1);
		else if (d->kind == TD_BYTELEVEL)
			rc = bytelevel_token(cur.s, cur.n, &next);
		else if (d->kind == TD_STRIP && !joined) {
			struct strs one = {0};
			rc = strip_token(d, cur.s, cur.n, &one) || tbuf_put(&next, one.v[0].s, one.v[0].n);
			strs_free(&one);
		} else
			rc = tbuf_put(&next, cur.s, cur.n);
		joined |= d->kind == TD_FUSE || d->kind == TD_BYTELEVEL;
		struct tbuf tmp = cur;
		cur = next;
		next = tmp;
	}
	free(next.s);
	if (rc) {
		free(cur.s);
		return NULL;
	}
	*len = (uint32_t)cur.n;
	return cur.s;
}

int tok_decode(const struct tok *t, const int32_t *ids, size_t n, int flags, char **out, size_t *out_len)
{
	struct tbuf raw = {0}, txt = {0};
	int rc = tbuf_put(&txt, "", 0);
	if (!rc && !bytelevel_only(t))
		rc = chain_decode(t, ids, n, flags, &txt);
	else if (!rc) {
		rc = tbuf_put(&raw, "", 0);
		for (size_t i = 0; i < n && !rc; i++)
			if (keep(t, ids[i], flags))
				rc = tbuf_put(&raw, t->tok_bytes[ids[i]], t->tok_len[ids[i]]);
		if (!rc && tok_utf8_lossy((unsigned char *)raw.s, raw.n, 1, &txt) == (size_t)-1)
			rc = -ENOMEM;
	}
	free(raw.s);
	if (rc) {
		free(txt.s);
		return rc;
	}
	*out = txt.s;
	*out_len = txt.n;
	return 0;
}

/* ---- streaming ---- */

struct tok_stream {
	const struct tok *t;
	int flags;
	struct tbuf pend;   /* ByteLevel: bytes of an incomplete UTF-8 sequence, at most 3 */
	struct tbuf out;    /* the text returned by the last call */
	struct tok_ids ids; /* other decoders: the kept ids so far */
	size_t p, r;        /* other decoders: window start, end of what was returned */
	size_t emitted;     /* other decoders: bytes returned so far */
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

/* Other decoders, as tokenizers' DecodeStream: decode the window
 * ids[p..end) and return what it adds to the decode of ids[p..r), the part
 * returned last time; then slide the window to [r..end). A window starts
 * with the same token in both decodes, so a Strip / Metaspace rule for the
 * first token treats both alike, and it never starts inside a byte run
 * (end is held back before a trailing run unless final). Should the window
 * decode ever not extend the earlier one, the whole text is decoded
 * instead; either way the pieces add up to tok_decode of all the ids. */
static int chain_emit(struct tok_stream *s, int final, const char **text, size_t *len)
{
	const struct tok *t = s->t;
	size_t end = s->ids.n;
	unsigned char b;
	int fallback = 0;
	for (int k = 0; k < t->n_dec; k++)
		fallback |= t->dec[k].kind == TD_BYTEFALLBACK;
	while (!final && fallback && end > s->r && byte_token(t->dec_str[s->ids.v[end - 1]],
	                                                        strlen(t->dec_str[s->ids.v[end - 1]]), &b))
		end--;
	s->out.n = 0;
	if (tbuf_put(&s->out, "", 0))
		return -ENOMEM;
	*text = s->out.s;
	*len = 0;
	if (end <= s->r || (t->stream_whole && !final))
		return 0;
	struct tbuf win = {0}, pre = {0};
	int rc = tbuf_put(&win, "", 0) || tbuf_put(&pre, "", 0) ||
	         chain_decode(t, s->ids.v + s->p, end - s->p, 0, &win) ||
	         chain_decode(t, s->ids.v + s->p, s->r - s->p, 0, &pre) ? -ENOMEM : 0;
	/* text ending in U+FFFD may be a UTF-8 sequence that the next ids
	 * complete (ByteLevel, ByteFallback): held back, as DecodeStream does */
	if (!rc && !final && win.n >= 3 && !memcmp(win.s + win.n - 3, FFFD, 3)) {
		free(win.s);
		free(pre.s);
		return 0;
	}
	if (!rc && win.n >= pre.n && !memcmp(win.s, pre.s, pre.n))
		rc = tbuf_put(&s->out, win.s + pre.n, win.n - pre.n);
	else if (!rc) {
		win.n = 0;
		rc = chain_decode(t, s->ids.v, end, 0, &win);
		if (!rc && win.n > s->emitted)
			rc = tbuf_put(&s->out, win.s + s->emitted, win.n - s->emitted);
	}
	free(win.s);
	free(pre.s);
	if (rc)
		return -ENOMEM;
	s->emitted += s->out.n;
	s->p = s->r;
	s->r = end;
	*text = s->out.s;
	*len = s->out.n;
	return 0;
}

int tok_stream_push(struct tok_stream *s, int32_t id, const char **text, size_t *len)
{
	if (!bytelevel_only(s->t)) {
		if (keep(s->t, id, s->flags)) {
			if (RQ_GROW(s->ids.v, s->ids.n, s->ids.cap, 64))
				return -ENOMEM;
			s->ids.v[s->ids.n++] = id;
		}
		return chain_emit(s, 0, text, len);
	}
	if (tbuf_put(&s->pend, "", 0))
		return -ENOMEM;
	if (keep(s->t, id, s->flags) && tbuf_put(&s->pend, s->t->tok_bytes[id], s->t->tok_len[id]))
		return -ENOMEM;
	return stream_emit(s, 0, text, len);
}

int tok_stream_flush(struct tok_stream *s, const char **text, size_t *len)
{
	if (!bytelevel_only(s->t))
		return chain_emit(s, 1, text, len);
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
	free(s->ids.v);
	free(s);
}
