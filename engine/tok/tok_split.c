/* tok_split.c — the pre-tokenizers of tokenizer.json: Split (String or
 * Regex pattern, every behavior, invert), Digits, ByteLevel (prefix space,
 * GPT-2 regex), Metaspace, Whitespace (a Split), WhitespaceSplit and
 * Punctuation, run in order as a Sequence, exactly as `tokenizers` does.
 *
 * Any regex runs on PCRE2 as Oniguruma reads it (tok_re.c). The fast path:
 * the families we run use four regex strings — GPT-2's, cl100k's with \p{N}
 * (Qwen2, Laguna) or \p{N}{1,3} (Llama-3), and the newline-run splitter.
 * Each is an ordered alternation of class runs, so which branch wins at a
 * position is decided by the next one to three code points; written out
 * that way each matcher is exact, needs no backtracking and runs at memory
 * speed. tok_pipe.c compares the pattern byte for byte with the known
 * strings and runs those natively; any other goes to tok_re.c. The peer test (tests/peer/test_tok_peer.py) checks that both
 * paths give the same ids on the known patterns.
 *
 * Pieces: each step splits (or rewrites) one piece and hands every
 * non-empty sub-piece to the next step; the last hands them to the caller.
 * z follows tokenizers' alignments (tok_normalize): the first z bytes of a
 * piece stand at offset 0 of the input; a piece with z > 0 is "first" for
 * Metaspace's prepend_scheme (offsets_original().0 == 0). A sub-piece at
 * byte a keeps z - a of them; a character rewritten (the ByteLevel
 * alphabet, ' ' -> replacement) or prepended to keeps its offsets. */
#include "engine/tok/tok_int.h"
#include "engine/tok/tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- the regexes ---- */

static int fold_is(uint32_t c, char lower)
{
	/* (?i) in Oniguruma uses Unicode case folding: U+017F LONG S folds to s */
	return c == (uint32_t)lower || c == (uint32_t)(lower - 32) || (lower == 's' && c == 0x17F);
}

static int is_other(uint32_t c)  /* [^\s\p{L}\p{N}] */
{
	return !tok_is_ws(c) && !tok_is_letter(c) && !tok_is_number(c);
}

/* End of the run of code points from e on that pass is(). */
static size_t run_of(const unsigned char *s, size_t e, size_t b, int (*is)(uint32_t))
{
	while (e < b) {
		uint32_t c;
		size_t n = tok_utf8_next(s, b, e, &c);
		if (!is(c))
			break;
		e = n;
	}
	return e;
}

/* White space at p: "\s*[\r\n]+" (when nl), then "\s+(?!\S)", then "\s+". */
static size_t ws_match(const unsigned char *s, size_t p, size_t b, int nl)
{
	size_t run_end = p, last_start = p, after_rn = 0;
	int ncp = 0;
	while (run_end < b) {
		uint32_t c;
		size_t n = tok_utf8_next(s, b, run_end, &c);
		if (!tok_is_ws(c))
			break;
		if (c == '\r' || c == '\n')
			after_rn = n;
		last_start = run_end;
		run_end = n;
		ncp++;
	}
	if (nl && after_rn)
		return after_rn;
	if (run_end < b && ncp >= 2)
		return last_start;
	return run_end;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxd}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_cl100k(const unsigned char *s, size_t p, size_t b, int maxd)
{
	uint32_t c0, c1 = TOK_BAD_CP, c2 = TOK_BAD_CP;
	size_t q = tok_utf8_next(s, b, p, &c0), r = q, e;
	if (q < b)
		r = tok_utf8_next(s, b, q, &c1);

	if (c0 == '\'' && q < b) {
		if (fold_is(c1, 's') || fold_is(c1, 't') || fold_is(c1, 'm') || fold_is(c1, 'd'))
			return r;
		if (r < b) {
			e = tok_utf8_next(s, b, r, &c2);
			if ((fold_is(c1, 'r') && fold_is(c2, 'e')) || (fold_is(c1, 'v') && fold_is(c2, 'e')) ||
			    (fold_is(c1, 'l') && fold_is(c2, 'l')))
				return e;
		}
	}
	if (tok_is_letter(c0))
		return run_of(s, q, b, tok_is_letter);
	if (c0 != '\r' && c0 != '\n' && !tok_is_number(c0) && q < b && tok_is_letter(c1))
		return run_of(s, r, b, tok_is_letter);
	if (tok_is_number(c0)) {
		e = q;
		for (int k = 1; k < maxd && e < b; k++) {
			uint32_t c;
			size_t n = tok_utf8_next(s, b, e, &c);
			if (!tok_is_number(c))
				break;
			e = n;
		}
		return e;
	}
	e = 0;
	if (c0 == ' ' && q < b && is_other(c1))
		e = r;
	else if (is_other(c0))
		e = q;
	if (e) {
		e = run_of(s, e, b, is_other);
		while (e < b && (s[e] == '\r' || s[e] == '\n'))
			e++;
		return e;
	}
	return ws_match(s, p, b, 1);
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t match_gpt2(const unsigned char *s, size_t p, size_t b)
{
	uint32_t c0, c1 = TOK_BAD_CP, c2 = TOK_BAD_CP;
	size_t q = tok_utf8_next(s, b, p, &c0), r = q, e;
	if (q < b)
		r = tok_utf8_next(s, b, q, &c1);
	if (c0 == '\'' && q < b) {
		if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
			return r;
		if (r < b) {
			e = tok_utf8_next(s, b, r, &c2);
			if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
				return e;
		}
	}
	static int (*const cls[3])(uint32_t) = {tok_is_letter, tok_is_number, is_other};
	for (int k = 0; k < 3; k++) {
		if (c0 == ' ' && q < b && cls[k](c1))
			return run_of(s, r, b, cls[k]);
		if (cls[k](c0))
			return run_of(s, q, b, cls[k]);
	}
	return ws_match(s, p, b, 0);
}

size_t tok_re_match(int re, const unsigned char *s, size_t p, size_t b)
{
	switch (re) {
	case RE_CL100K_N3:
		return match_cl100k(s, p, b, 3);
	case RE_GPT2:
		return match_gpt2(s, p, b);
	default:
		return match_cl100k(s, p, b, 1);
	}
}

static int is_break_at(const unsigned char *s, size_t len, size_t i)
{
	return s[i] == '\n' || (s[i] == '\r' && i + 1 < len && s[i + 1] == '\n');
}

/* ---- the steps ----
 * Each step lists the pieces of its input as tokenizers' find_matches does
 * (matches and the text between them), flips them when inverted, folds them
 * as its SplitDelimiterBehavior says (NormalizedString::split) and hands
 * each non-empty one to the next step. The list of each step lives in
 * struct run, reused: a step finishes its list before it emits. */

struct piece {
	size_t a, b;
	int match;
};

struct run {
	const struct tok *t;
	int (*fn)(void *ctx, const char *p, size_t len);
	void *ctx;
	struct piece *pc[TOK_MAX_STEPS];   /* each step's pieces */
	size_t n[TOK_MAX_STEPS], cap[TOK_MAX_STEPS];
};

static int step(struct run *r, int k, const unsigned char *s, size_t n, size_t z);

static int next_char(const unsigned char *s, size_t n, size_t p, int (*is)(uint32_t), size_t *ms, size_t *me)
{
	for (size_t q; p < n; p = q) {
		uint32_t c;
		q = tok_utf8_next(s, n, p, &c);
		if (is(c)) {
			*ms = p;
			*me = q;
			return 1;
		}
	}
	return 0;
}

/* The Whitespace pre-tokenizer's \w+|[^\w\s]+ from p: the next run of word
 * characters (Rust regex's \w: the library runs this one on the regex crate,
 * whose Unicode is newer than PCRE2's) or of others that are not white
 * space. 1 and [*ms, *me), or 0. */
static int match_words(const unsigned char *s, size_t n, size_t p, size_t *ms, size_t *me)
{
	uint32_t c;
	size_t q;
	for (; p < n; p = q) {
		q = tok_utf8_next(s, n, p, &c);
		if (!tok_is_ws(c))
			break;
	}
	if (p >= n)
		return 0;
	int word = tok_is_word(c);
	*ms = p;
	for (p = q; p < n; p = q) {
		q = tok_utf8_next(s, n, p, &c);
		if (tok_is_ws(c) || tok_is_word(c) != word)
			break;
	}
	*me = p;
	return 1;
}

/* The next match of step pat in s[p..n): 1 and [*ms, *me), 0, or -errno. */
static int find(const void *pat, const unsigned char *s, size_t n, size_t p, size_t *ms, size_t *me)
{
	const struct tok_pre *pt = pat;
	const unsigned char *m;
	if (p >= n)   /* the native patterns never match empty */
		return pt->kind == TP_SPLIT && !pt->re ? tok_re_find(pt->rx, s, n, p, ms, me) : 0;
	switch (pt->kind) {
	case TP_SPLIT:
		if (!pt->re)
			return tok_re_find(pt->rx, s, n, p, ms, me);
		if (pt->re == RE_WHITESPACE)
			return match_words(s, n, p, ms, me);
		if (pt->re != RE_NEWLINES) {   /* these tile the text: a match at every position */
			*ms = p;
			*me = tok_re_match(pt->re, s, p, n);
			return 1;
		}
		/* (?:\r?\n)+(?!\r?\n): a maximal run of line breaks */
		while (p < n && !is_break_at(s, n, p))
			p++;
		if (p == n)
			return 0;
		*ms = p;
		while (p < n && is_break_at(s, n, p))
			p += s[p] == '\r' ? 2 : 1;
		*me = p;
		return 1;
	case TP_DIGITS:
		return next_char(s, n, p, tok_is_numeric, ms, me);
	case TP_WHITESPACE_SPLIT:
		return next_char(s, n, p, tok_is_ws, ms, me);
	case TP_PUNCTUATION:
		return next_char(s, n, p, tok_is_punct, ms, me);
	case TP_BYTELEVEL: /* use_regex: GPT-2's */
		*ms = p;
		*me = match_gpt2(s, p, n);
		return 1;
	default:           /* Metaspace split: each replacement character */
		if (!(m = memmem(s + p, n - p, pt->rep, pt->replen)))
			return 0;
		*ms = (size_t)(m - s);
		*me = *ms + pt->replen;
		return 1;
	}
}

struct collect {
	struct run *r;
	int k;
	size_t start;
};

static int push(struct run *r, int k, size_t a, size_t b, int match)
{
	if (r->n[k] == r->cap[k]) {
		size_t cap = r->cap[k] ? 2 * r->cap[k] : 64;
		struct piece *v = realloc(r->pc[k], cap * sizeof *v);
		if (!v)
			return -ENOMEM;
		r->pc[k] = v;
		r->cap[k] = cap;
	}
	r->pc[k][r->n[k]++] = (struct piece){a, b, match};
	return 0;
}

static int on_match(void *ctx, size_t ms, size_t me)
{
	struct collect *c = ctx;
	if (c->start != ms && push(c->r, c->k, c->start, ms, 0))
		return -ENOMEM;
	c->start = me;
	return push(c->r, c->k, ms, me, 1);
}

/* The next step on s[a..b); ByteLevel that maps (not last, or a model with a
 * subword prefix/suffix) hands on the piece in the GPT-2 alphabet. */
static int emit(struct run *r, int k, const unsigned char *s, size_t a, size_t b, size_t z)
{
	const struct tok_pre *pt = &r->t->pt[k];
	if (b <= a)
		return 0;
	if (pt->kind != TP_BYTELEVEL || !pt->map)
		return step(r, k + 1, s + a, b - a, z > a ? z - a : 0);
	struct tbuf m = {0};
	size_t zm = 0;
	int rc = 0;
	for (size_t i = a; i < b && !rc; i++) {
		char sym[4];
		rc = tbuf_put(&m, sym, tok_byte_symbol(s[i], sym));
		if (i < z)
			zm = m.n;
	}
	if (!rc)
		rc = step(r, k + 1, (const unsigned char *)m.s, m.n, zm);
	free(m.s);
	return rc;
}

/* Folds the pieces of step k in place as behavior says; returns where the
 * result starts (MergedWithNext folds from the end). */
static size_t fold(struct piece *v, size_t n, int behavior)
{
	size_t w = 0;
	int prev = 0;
	switch (behavior) {
	case SB_ISOLATED:
		return 0;
	case SB_REMOVED:
		for (size_t i = 0; i < n; i++)
			if (!v[i].match)
				v[w++] = v[i];
		for (size_t i = w; i < n; i++)
			v[i].b = v[i].a;   /* emptied: not emitted */
		return 0;
	case SB_MERGED_NEXT:
		w = n;
		for (size_t i = n; i-- > 0;) {
			int m = v[i].match;
			if (m && !prev && w < n)
				v[w].a = v[i].a;
			else
				v[--w] = v[i];
			prev = m;
		}
		return w;
	default:   /* SB_MERGED_PREV, SB_CONTIGUOUS */
		for (size_t i = 0; i < n; i++) {
			int merge = behavior == SB_MERGED_PREV ? v[i].match && !prev : v[i].match == prev;
			int m = v[i].match;
			if (merge && w)
				v[w - 1].b = v[i].b;
			else
				v[w++] = v[i];
			prev = m;
		}
		for (size_t i = w; i < n; i++)
			v[i].b = v[i].a;
		return 0;
	}
}

/* Splits s[0..n) at the matches of step k. */
static int split_by(struct run *r, int k, int behavior, int invert, const unsigned char *s, size_t n, size_t z)
{
	struct collect c = {r, k, 0};
	if (!n)
		return 0;
	r->n[k] = 0;
	int rc = tok_find_iter(find, &r->t->pt[k], s, n, on_match, &c);
	if (!rc && c.start != n)
		rc = push(r, k, c.start, n, 0);
	if (rc)
		return rc;
	for (size_t i = 0; invert && i < r->n[k]; i++)
		r->pc[k][i].match = !r->pc[k][i].match;
	size_t n_p = r->n[k];
	for (size_t i = fold(r->pc[k], n_p, behavior); i < n_p && !rc; i++)
		rc = emit(r, k, s, r->pc[k][i].a, r->pc[k][i].b, z);
	return rc;
}

/* Metaspace: ' ' -> replacement, the replacement prepended as
 * prepend_scheme says, then (split) a new piece before each replacement. */
static int metaspace(struct run *r, int k, const unsigned char *s, size_t n, size_t z)
{
	const struct tok_pre *pt = &r->t->pt[k];
	struct tbuf b = {0};
	size_t zb = 0;
	int rc = tbuf_put(&b, "", 0);
	int starts = n && (s[0] == ' ' || (n >= pt->replen && !memcmp(s, pt->rep, pt->replen)));
	if (!rc && !starts && (pt->prepend == PS_ALWAYS || (pt->prepend == PS_FIRST && z)))
		rc = tbuf_put(&b, pt->rep, pt->replen);
	for (size_t i = 0; i < n && !rc; i++) {
		rc = s[i] == ' ' ? tbuf_put(&b, pt->rep, pt->replen) : tbuf_put(&b, s + i, 1);
		if (i < z)
			zb = b.n;
	}
	if (!rc)
		rc = pt->split ? split_by(r, k, SB_MERGED_NEXT, 0, (unsigned char *)b.s, b.n, zb)
		               : emit(r, k, (unsigned char *)b.s, 0, b.n, zb);
	free(b.s);
	return rc;
}

static int step(struct run *r, int k, const unsigned char *s, size_t n, size_t z)
{
	if (k == r->t->n_pt)
		return n ? r->fn(r->ctx, (const char *)s, n) : 0;
	const struct tok_pre *pt = &r->t->pt[k];
	switch (pt->kind) {
	case TP_SPLIT:
	case TP_PUNCTUATION:
		return split_by(r, k, pt->behavior, pt->invert, s, n, z);
	case TP_DIGITS:   /* char::is_numeric, one at a time or in runs */
		return split_by(r, k, pt->individual ? SB_ISOLATED : SB_CONTIGUOUS, 0, s, n, z);
	case TP_WHITESPACE_SPLIT:
		return split_by(r, k, SB_REMOVED, 0, s, n, z);
	case TP_METASPACE:
		return metaspace(r, k, s, n, z);
	default: {   /* TP_BYTELEVEL */
		if (!pt->prefix_space || (n && s[0] == ' '))
			return pt->use_regex ? split_by(r, k, SB_ISOLATED, 0, s, n, z) : emit(r, k, s, 0, n, z);
		struct tbuf b = {0};
		int rc = tbuf_put(&b, " ", 1) || tbuf_put(&b, s, n) ? -ENOMEM : 0;
		z = z ? z + 1 : 0;   /* the space takes the first character's offsets */
		if (!rc)
			rc = pt->use_regex ? split_by(r, k, SB_ISOLATED, 0, (unsigned char *)b.s, b.n, z)
			                   : emit(r, k, (unsigned char *)b.s, 0, b.n, z);
		free(b.s);
		return rc;
	}
	}
}

int tok_pre_run(const struct tok *t, const char *s, size_t n, size_t z,
                int (*fn)(void *ctx, const char *p, size_t len), void *ctx)
{
	struct run r = {.t = t, .fn = fn, .ctx = ctx};
	int rc = step(&r, 0, (const unsigned char *)s, n, z);
	for (int k = 0; k < TOK_MAX_STEPS; k++)
		free(r.pc[k]);
	return rc;
}

/* ---- Laguna's pre-tokenizer alone (tok_pretokenize) ----
 *
 * Laguna's tokenizer.json pre-tokenizer is a Sequence of
 *   1. Split(Regex "(?:\r?\n)+(?!\r?\n)", behavior MergedWithNext):
 *      every maximal run of line breaks ("\n" or "\r\n") starts a new piece
 *      that runs up to the next such run;
 *   2. Split(Regex cl100k's with \p{N} (RE_CL100K_N1), behavior Isolated),
 *      inside each piece;
 *   3. ByteLevel(add_prefix_space false, use_regex false): bytes to the
 *      GPT-2 alphabet only (done by tokenizer.c).
 * The regex alternatives are tried in order at each position, exactly as a
 * backtracking engine (Oniguruma, in `tokenizers`) would; every code point
 * matches one of them, so the matches tile each piece. */

static int split_piece(const unsigned char *s, size_t a, size_t b,
                       int (*fn)(void *, size_t, size_t), void *ctx)
{
	while (a < b) {
		size_t e = tok_re_match(RE_CL100K_N1, s, a, b);
		int rc = fn(ctx, a, e);
		if (rc)
			return rc;
		a = e;
	}
	return 0;
}

int tok_pretokenize(const char *text, size_t len,
                    int (*fn)(void *ctx, size_t start, size_t end), void *ctx)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t piece = 0, i = 0;
	while (i < len) {
		if (!is_break_at(s, len, i)) {
			i++;   /* \r and \n never occur inside a multi-byte sequence */
			continue;
		}
		if (i > piece) {
			int rc = split_piece(s, piece, i, fn, ctx);
			if (rc)
				return rc;
		}
		piece = i;
		while (i < len && is_break_at(s, len, i))
			i += s[i] == '\r' ? 2 : 1;
	}
	return len > piece ? split_piece(s, piece, len, fn, ctx) : 0;
}
