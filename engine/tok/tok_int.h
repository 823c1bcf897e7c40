/* tok_int.h — internals shared by the files of engine/tok (not public); the
 * order of those files is at the top of tokenizer.c. */
#ifndef RQ_ENGINE_TOK_INT_H
#define RQ_ENGINE_TOK_INT_H

#include <stddef.h>
#include <stdint.h>

#define TOK_BAD_CP UINT32_MAX   /* a byte that starts no valid UTF-8 sequence */

/* Decodes the code point at s[i] (i < end): strict UTF-8 (no overlong forms,
 * surrogates or values past U+10FFFF). Returns the index after it; an
 * invalid byte is one TOK_BAD_CP code point of length 1. */
size_t tok_utf8_next(const unsigned char *s, size_t end, size_t i, uint32_t *cp);
/* The code point that ends just before s[i] (i > start); returns its index. */
size_t tok_utf8_prev(const unsigned char *s, size_t start, size_t i, uint32_t *cp);
/* Writes code point c as UTF-8 (1 to 4 bytes); returns the length. */
size_t tok_put_utf8(char *o, uint32_t c);

int tok_is_ws(uint32_t c);       /* White_Space, = Oniguruma's \s and Rust's is_whitespace */
int tok_is_letter(uint32_t c);   /* \p{L} */
int tok_is_number(uint32_t c);   /* \p{N} */
int tok_is_word(uint32_t c);     /* Rust regex \w: Alphabetic, M, Nd, Pc, Join_Control */
int tok_is_numeric(uint32_t c);  /* Rust char::is_numeric (the Digits pre-tokenizer) */

/* A growable byte string, NUL-terminated when s is not NULL. */
struct tbuf {
	char *s;
	size_t n, cap;
};
int tbuf_put(struct tbuf *b, const void *p, size_t n);   /* 0 or -ENOMEM */

/* Appends in[0..n) to out with each invalid part replaced by U+FFFD, as
 * Rust's String::from_utf8_lossy does (one U+FFFD per maximal invalid
 * subpart). When !final, a trailing sequence that is incomplete but could
 * still become valid is left unconsumed. Returns the bytes consumed, or
 * (size_t)-1 when out of memory. */
size_t tok_utf8_lossy(const unsigned char *in, size_t n, int final, struct tbuf *out);

/* ---- the loaded tokenizer (tokenizer.c builds it, tok_encode.c uses it) ---- */

struct strmap {                /* string -> id, open addressing */
	const char **key;      /* [cap], NULL = empty; points into tok_str / added */
	int32_t *val;          /* [cap] */
	size_t cap, n;
};

struct mergemap {              /* (left id, right id) -> (rank, merged id) */
	uint64_t *key;         /* [cap], UINT64_MAX = empty */
	int32_t *rank, *merged;/* [cap] */
	size_t cap;
};

struct added {
	char *content;         /* NUL-terminated bytes, len of them */
	size_t len;
	char *match;           /* what is matched: content, normalized when `normalized` */
	size_t mlen;
	int32_t id;
	unsigned char single_word, lstrip, rstrip, normalized, special;
};

/* The pipeline steps tokenizer.json declares, read once by tok_pipe.c; each
 * component kind (normalizer, pre-tokenizer, decoder) is a struct of its
 * parsed parameters with a kind, applied by its runner (tok_norm.c,
 * tok_split.c, tok_decode.c). Sequences are flattened in order. */
#define TOK_MAX_STEPS 16
struct tok_re;
enum { TN_NFC = 1, TN_NFD, TN_NFKC, TN_NFKD, TN_PREPEND, TN_REPLACE, TN_LOWERCASE, TN_STRIP };   /* normalizers */
struct tok_norm {
	int kind;
	char *a, *b;           /* Prepend: a; Replace: content b */
	size_t alen, blen;
	struct tok_re *re;     /* Replace: the pattern (String or Regex) */
	int left, right;       /* Strip: strip_left, strip_right */
};

/* Regexes recognized by their exact string (tok_split.c runs them natively);
 * RE_WHITESPACE: the Whitespace pre-tokenizer's \w+|[^\w\s]+ (Rust's \w). */
enum { RE_NEWLINES = 1, RE_CL100K_N1, RE_CL100K_N3, RE_GPT2, RE_WHITESPACE };
enum { SB_ISOLATED = 1, SB_MERGED_NEXT, SB_MERGED_PREV, SB_REMOVED, SB_CONTIGUOUS };
enum { TP_SPLIT = 1, TP_DIGITS, TP_BYTELEVEL, TP_METASPACE, TP_WHITESPACE_SPLIT, TP_PUNCTUATION };
enum { PS_ALWAYS = 1, PS_FIRST, PS_NEVER };                     /* Metaspace prepend_scheme */
struct tok_pre {
	int kind;
	int re;                /* Split: RE_* when the pattern is a known one (native), else 0 */
	struct tok_re *rx;     /* Split (and Whitespace): the pattern on PCRE2 / memmem when re == 0 */
	int behavior, invert;  /* Split, Punctuation */
	int individual;        /* Digits */
	int prefix_space, use_regex;   /* ByteLevel */
	int map;               /* ByteLevel: map bytes to the GPT-2 alphabet here (not the model) */
	int prepend, split;    /* Metaspace */
	char rep[8];           /* Metaspace replacement, UTF-8, NUL-terminated */
	size_t replen;
};

enum { TD_BYTELEVEL = 1, TD_METASPACE, TD_REPLACE, TD_BYTEFALLBACK, TD_FUSE, TD_STRIP, TD_BPE };
struct tok_dec {
	int kind;
	char *a, *b;           /* Replace: content b; Metaspace / Strip: a = the character; BPE: a = suffix */
	size_t alen, blen;
	struct tok_re *re;     /* Replace: the pattern */
	int start, stop;       /* Strip: characters cut from the start / the end */
	int prepend;           /* Metaspace: prepend_scheme */
};

struct tok {
	int n_ids;             /* one past the largest id */
	char **tok_str;        /* [n_ids] vocabulary string (GPT-2 alphabet), NULL = hole */
	char **tok_bytes;      /* [n_ids] what the id decodes to on its own, NULL = hole */
	const char **dec_str;  /* [n_ids] the token string decoders see (added content first) */
	uint32_t *tok_len;     /* [n_ids] length of tok_bytes */
	unsigned char *special;/* [n_ids] 1 = added token flagged special */
	unsigned char *skip;   /* [n_ids] 1 = dropped by TOK_SKIP_SPECIAL: dec_str is the
	                        * content of a special added token (mark_skipped) */
	struct strmap vocab;   /* model vocabulary */
	struct strmap added_map;
	struct mergemap merges;
	int32_t byte_id[256];  /* id of the one-symbol token of each byte */
	struct added *added;   /* [n_added] */
	int n_added;
	int32_t *first[256];   /* indices into added by first byte, longest first, -1 ended */
	int32_t pre[8], post[8]; /* post-processor ids before / after the sequence */
	int n_pre, n_post;
	int ignore_merges;
	int byte_fallback, fuse_unk;
	int32_t unk_id;        /* -1: no unk_token (unknown characters are dropped) */
	int32_t byte_tok[256]; /* byte_fallback: id of "<0xNN>", -1 = missing */
	char *prefix, *suffix; /* continuing_subword_prefix, end_of_word_suffix; NULL = none */
	size_t prefix_len, suffix_len;
	struct tok_norm norm[TOK_MAX_STEPS];
	int n_norm;
	struct tok_pre pt[TOK_MAX_STEPS];  /* pre-tokenizer steps, in order */
	int n_pt;
	int byte_level;        /* a ByteLevel pre-tokenizer ends pt and the model has no
	                        * prefix/suffix: the model maps bytes to GPT-2 symbols (fast path) */
	struct tok_dec dec[TOK_MAX_STEPS];
	int n_dec;             /* 0 with dec_none: no decoder (tokens joined by " ") */
	int stream_whole;      /* streaming cannot cut the text early: a ByteLevel after a
	                        * Fuse sees some token it keeps raw (tokenizer.c) */
	int dec_none;
};

/* tok_pipe.c: reads normalizer, pre_tokenizer, decoder, post_processor into t;
 * 0 or -EPROTO / -ENOMEM with the JSON field named in err. */
struct rq_err;
struct cJSON;
int tok_pipe_load(struct tok *t, const struct cJSON *root, const char *path, struct rq_err *err);
void tok_pipe_free(struct tok *t);

/* tok_re.c: a Split / Replace pattern, Oniguruma's reading on PCRE2 (literal:
 * a String pattern). 0, -ENOMEM, or -EPROTO with why[cap] saying what. */
int tok_re_compile(const char *pattern, int literal, struct tok_re **out, char *why, size_t cap);
void tok_re_free(struct tok_re *re);
/* The leftmost match in s[from..n): 1 and [*ms, *me); 0: none; -ERANGE: the
 * match limits were hit; -ENOMEM. */
int tok_re_find(const struct tok_re *re, const unsigned char *s, size_t n, size_t from,
                size_t *ms, size_t *me);
/* Oniguruma's find_iter over s[0..n) with finder find (pat its argument):
 * each(ctx, ms, me) per match, an empty match right after a match skipped.
 * Returns the first non-zero result of find (< 0) or each. */
typedef int (*tok_find_fn)(const void *pat, const unsigned char *s, size_t n, size_t from,
                           size_t *ms, size_t *me);
int tok_find_iter(tok_find_fn find, const void *pat, const unsigned char *s, size_t n,
                  int (*each)(void *ctx, size_t ms, size_t me), void *ctx);
/* s[0..n) with each match of re replaced by content (NormalizedString::replace,
 * the Replace decoder), appended to out. z (NULL: not tracked): in, how many
 * leading bytes of s stand at offset 0 of the original text; out, the same
 * for what was appended (tok_normalize's z). 0, -ENOMEM or -ERANGE. */
int tok_re_replace(const struct tok_re *re, const char *s, size_t n, const char *content, size_t clen,
                   size_t *z, struct tbuf *out);

/* tok_text.c: the GPT-2 byte alphabet: the symbol of byte b as UTF-8 (its
 * length), and the byte of symbol c (-1: c is not in the alphabet). */
size_t tok_byte_symbol(unsigned char b, char out[4]);
int tok_symbol_byte(uint32_t c);
int tok_is_punct(uint32_t c);    /* the Punctuation pre-tokenizer's is_punc */
/* Appends the lowercase of code point c (Rust char::to_lowercase). 0 or -ENOMEM. */
int tok_lower(uint32_t c, struct tbuf *out);

/* tok_norm.c: applies t's normalizers to s[0..n), appending to out. 0, -ENOMEM, or
 * -ERANGE (a Replace regex hit its match limits). z (NULL: not tracked) follows
 * tokenizers' alignments: in, how many leading bytes of s stand at offset 0
 * of the original text (the first character's, when s starts it, else 0);
 * out, the same for the normalized text. A piece of it starting at byte a is
 * at offset 0 when a < z (offsets_original().0 == 0: Metaspace's "first"):
 * Strip, or a Replace of the first characters, moves the start on. */
int tok_normalize(const struct tok *t, const char *s, size_t n, size_t *z, struct tbuf *out);
/* NFC (compose) or NFD of s[0..n) appended to out; with compat, NFKC or
 * NFKD. 0 or -ENOMEM. */
int tok_nf(const char *s, size_t n, int compose, int compat, struct tbuf *out);

/* tok_decode.c: what token string s decodes to on its own (not first in
 * the text) under a decoder other than ByteLevel; malloc'd, NULL = ENOMEM. */
char *tok_dec_piece(const struct tok *t, const char *s, uint32_t *len);

/* tok_split.c: end of the match of regex re (RE_*) that starts at s[p],
 * inside s[p..b) (p < b). The tiling regexes match at every position. */
size_t tok_re_match(int re, const unsigned char *s, size_t p, size_t b);
/* tok_split.c: runs t's pre-tokenizer steps on s[0..n) (z: how many leading
 * bytes of it stand at offset 0 of the original text, as tok_normalize) and
 * calls fn with each final piece (bytes, not necessarily inside s). Returns
 * the first non-zero fn result, or -ENOMEM. */
int tok_pre_run(const struct tok *t, const char *s, size_t n, size_t z,
                int (*fn)(void *ctx, const char *p, size_t len), void *ctx);

/* tokenizer.c: id of a model-vocabulary string, -1 if none. */
int tok_vocab_get(const struct tok *t, const char *s);
/* (left, right) -> rank and merged id; 0 when the pair never merges. */
int tok_merge_get(const struct mergemap *m, int32_t l, int32_t r, int32_t *rank, int32_t *merged);

#endif
