/* tok_int.h — internals shared by tokenizer.c and tok_text.c (not public). */
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

int tok_is_ws(uint32_t c);       /* White_Space, = Oniguruma's \s and Rust's is_whitespace */
int tok_is_letter(uint32_t c);   /* \p{L} */
int tok_is_number(uint32_t c);   /* \p{N} */
int tok_is_word(uint32_t c);     /* Rust regex \w: Alphabetic, M, Nd, Pc, Join_Control */

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
	int32_t id;
	unsigned char single_word, lstrip, rstrip, normalized, special;
};

struct tok {
	int n_ids;             /* one past the largest id */
	char **tok_str;        /* [n_ids] vocabulary string (GPT-2 alphabet), NULL = hole */
	char **tok_bytes;      /* [n_ids] what the id decodes to, NULL = hole */
	uint32_t *tok_len;     /* [n_ids] length of tok_bytes */
	unsigned char *special;/* [n_ids] 1 = added token flagged special */
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
};

/* Writes code point c as UTF-8 (1 to 4 bytes); returns the length. */
size_t tok_put_utf8(char *o, uint32_t c);
/* The GPT-2 alphabet symbol of byte b as UTF-8; returns its length. */
size_t tok_byte_symbol(unsigned char b, char out[4]);
/* Id of a model-vocabulary string, -1 if none. */
int tok_vocab_get(const struct tok *t, const char *s);
/* (left, right) -> rank and merged id; 0 when the pair never merges. */
int tok_merge_get(const struct mergemap *m, int32_t l, int32_t r, int32_t *rank, int32_t *merged);

#endif
