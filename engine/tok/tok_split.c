/* tok_split.c — the pre-tokenizers of tokenizer.json: Split on the regexes
 * the decoder families use, Digits, ByteLevel (prefix space, GPT-2 regex)
 * and Metaspace, run in order as a Sequence, exactly as `tokenizers` does.
 *
 * Why native matchers rather than a regex engine: the families we run use
 * four regex strings — GPT-2's, cl100k's with \p{N} (Qwen2, Laguna) or
 * \p{N}{1,3} (Llama-3), and the newline-run splitter. `tokenizers` runs them
 * on Oniguruma, a backtracking engine. Each is an ordered alternation of
 * class runs, so which branch wins at a position is decided by the next one
 * to three code points; written out that way each matcher is exact, needs no
 * backtracking and runs at memory speed. A general engine for the same subset
 * would be several times the code and would accept "nearly the same" regexes
 * that Oniguruma runs differently (case folding, possessive runs, other \s
 * sets) — a silent mis-tokenization. So tok_pipe.c compares the pattern
 * byte for byte with the known strings and refuses any other, naming it.
 *
 * Pieces: each step splits (or rewrites) one piece and hands every
 * non-empty sub-piece to the next step; the last hands them to the caller.
 * "first" follows tokenizers' offsets_original().0 == 0 (Metaspace's
 * prepend_scheme "first"): the piece starts at offset 0 of the input. */
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

/* ---- the steps ---- */

struct run {
	const struct tok *t;
	int (*fn)(void *ctx, const char *p, size_t len);
	void *ctx;
};

static int step(const struct run *r, int k, const unsigned char *s, size_t n, int first);

static int emit(const struct run *r, int k, const unsigned char *s, size_t a, size_t b, int first)
{
	return b > a ? step(r, k + 1, s + a, b - a, first && a == 0) : 0;
}

/* The next match of step pt in s[p..n): 1 and [*ms, *me), or 0. */
static int find(const struct tok_pre *pt, const unsigned char *s, size_t p, size_t n, size_t *ms, size_t *me)
{
	uint32_t c;
	size_t q;
	switch (pt->kind) {
	case TP_SPLIT:
		if (pt->re != RE_NEWLINES) {
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
	case TP_DIGITS:   /* char::is_numeric, one at a time or in runs */
		for (; p < n; p = q) {
			q = tok_utf8_next(s, n, p, &c);
			if (tok_is_numeric(c)) {
				*ms = p;
				*me = pt->individual ? q : run_of(s, q, n, tok_is_numeric);
				return 1;
			}
		}
		return 0;
	case TP_BYTELEVEL: /* use_regex: GPT-2's */
		*ms = p;
		*me = match_gpt2(s, p, n);
		return 1;
	default: {         /* Metaspace split: each replacement character */
		const unsigned char *m = memmem(s + p, n - p, pt->rep, pt->replen);
		if (!m)
			return 0;
		*ms = (size_t)(m - s);
		*me = *ms + pt->replen;
		return 1;
	}
	}
}

/* Splits s[0..n) at the matches of step k, as SplitDelimiterBehavior says. */
static int split_by(const struct run *r, int k, int behavior, const unsigned char *s, size_t n, int first)
{
	const struct tok_pre *pt = &r->t->pt[k];
	size_t p = 0, done = 0, ms, me;
	int rc = 0;
	while (!rc && p < n && find(pt, s, p, n, &ms, &me)) {
		switch (behavior) {
		case SB_ISOLATED:
			if (!(rc = emit(r, k, s, done, ms, first)))
				rc = emit(r, k, s, ms, me, first);
			done = me;
			break;
		case SB_REMOVED:
			rc = emit(r, k, s, done, ms, first);
			done = me;
			break;
		case SB_MERGED_PREV:
			rc = emit(r, k, s, done, me, first);
			done = me;
			break;
		default:   /* SB_MERGED_NEXT */
			rc = emit(r, k, s, done, ms, first);
			done = ms;
			break;
		}
		p = me > ms ? me : ms + 1;
	}
	return rc ? rc : emit(r, k, s, done, n, first);
}

/* Metaspace: ' ' -> replacement, the replacement prepended as
 * prepend_scheme says, then (split) a new piece before each replacement. */
static int metaspace(const struct run *r, int k, const unsigned char *s, size_t n, int first)
{
	const struct tok_pre *pt = &r->t->pt[k];
	struct tbuf b = {0};
	int rc = tbuf_put(&b, "", 0);
	int starts = n && (s[0] == ' ' || (n >= pt->replen && !memcmp(s, pt->rep, pt->replen)));
	if (!rc && !starts && (pt->prepend == PS_ALWAYS || (pt->prepend == PS_FIRST && first)))
		rc = tbuf_put(&b, pt->rep, pt->replen);
	for (size_t i = 0; i < n && !rc; i++)
		rc = s[i] == ' ' ? tbuf_put(&b, pt->rep, pt->replen) : tbuf_put(&b, s + i, 1);
	if (!rc)
		rc = pt->split ? split_by(r, k, SB_MERGED_NEXT, (unsigned char *)b.s, b.n, first)
		               : emit(r, k, (unsigned char *)b.s, 0, b.n, first);
	free(b.s);
	return rc;
}

static int step(const struct run *r, int k, const unsigned char *s, size_t n, int first)
{
	if (k == r->t->n_pt)
		return n ? r->fn(r->ctx, (const char *)s, n) : 0;
	const struct tok_pre *pt = &r->t->pt[k];
	switch (pt->kind) {
	case TP_SPLIT:
		return split_by(r, k, pt->behavior, s, n, first);
	case TP_DIGITS:
		return split_by(r, k, SB_ISOLATED, s, n, first);
	case TP_METASPACE:
		return metaspace(r, k, s, n, first);
	default: {   /* TP_BYTELEVEL: the byte mapping itself is the model's (tok_encode.c) */
		if (!pt->prefix_space || (n && s[0] == ' '))
			return pt->use_regex ? split_by(r, k, SB_ISOLATED, s, n, first)
			                     : emit(r, k, s, 0, n, first);
		struct tbuf b = {0};
		int rc = tbuf_put(&b, " ", 1) || tbuf_put(&b, s, n) ? -ENOMEM : 0;
		if (!rc)
			rc = pt->use_regex ? split_by(r, k, SB_ISOLATED, (unsigned char *)b.s, b.n, first)
			                   : emit(r, k, (unsigned char *)b.s, 0, b.n, first);
		free(b.s);
		return rc;
	}
	}
}

int tok_pre_run(const struct tok *t, const char *s, size_t n, int first,
                int (*fn)(void *ctx, const char *p, size_t len), void *ctx)
{
	struct run r = {t, fn, ctx};
	return step(&r, 0, (const unsigned char *)s, n, first);
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
