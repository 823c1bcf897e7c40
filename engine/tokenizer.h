/* tokenizer.h — byte-level BPE read from a Hugging Face tokenizer.json.
 *
 * Encodes exactly as the `tokenizers` library does for Laguna's tokenizer:
 * added tokens are matched first (leftmost-longest, honouring their
 * single_word / lstrip / rstrip / normalized flags), the rest is split by
 * Laguna's pre-tokenizer (newline runs MergedWithNext, then the cl100k-style
 * regex with single-digit numbers, both hand-written here), mapped to the
 * GPT-2 byte alphabet and merged by rank. Decoding follows the ByteLevel
 * decoder, invalid UTF-8 replaced by U+FFFD as Rust's from_utf8_lossy does.
 *
 * Any other pre-tokenizer, normalizer or model in the file is refused with
 * -EPROTO naming the field, rather than silently tokenized differently.
 * Input bytes that are not valid UTF-8 are tokenized byte by byte as
 * "other" characters (the library cannot be given such input at all). */
#ifndef RQ_ENGINE_TOKENIZER_H
#define RQ_ENGINE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct rq_err;
struct tok;

/* Loads PATH: a tokenizer.json file, or a directory holding one. */
int tok_load(const char *path, struct tok **out, struct rq_err *err);
void tok_free(struct tok *t);

/* One past the largest token id (model vocab and added tokens). */
int tok_vocab_size(const struct tok *t);
/* Id of a token by its vocabulary string ("<think>", "Ġthe"), added tokens
 * first; -1 when there is none. */
int tok_id(const struct tok *t, const char *token);
/* 1 when id is an added token flagged special (skipped by TOK_SKIP_SPECIAL). */
int tok_is_special(const struct tok *t, int id);

/* A growable id array; zero-initialise, release with tok_ids_free. */
struct tok_ids {
	int32_t *v;      /* token ids, n of them */
	size_t n, cap;
};
void tok_ids_free(struct tok_ids *ids);

enum {
	TOK_ADD_SPECIAL = 1,     /* encode: apply the post-processor (Laguna: leading 〈|EOS|〉) */
	TOK_SKIP_SPECIAL = 2,    /* decode: drop added tokens flagged special */
};

/* Appends the ids of text[0..len) to out. 0 or -ENOMEM. */
int tok_encode(const struct tok *t, const char *text, size_t len, int flags, struct tok_ids *out);

/* The bytes token id decodes to on its own (may be part of a UTF-8
 * sequence). 0, or -EINVAL for an id out of range / without a token. */
int tok_token_bytes(const struct tok *t, int id, const char **bytes, size_t *len);

/* Decodes ids into a malloc'd NUL-terminated string (*out, *out_len bytes),
 * exactly as tokenizers' decode: invalid UTF-8 becomes U+FFFD. Unknown ids
 * are skipped. 0 or -ENOMEM. */
int tok_decode(const struct tok *t, const int32_t *ids, size_t n, int flags, char **out, size_t *out_len);

/* Streaming decode: push ids one by one, get back only complete UTF-8 text;
 * the concatenation of all pieces and the final flush equals tok_decode of
 * all the ids. Text returned stays valid until the next call. */
struct tok_stream;
struct tok_stream *tok_stream_new(const struct tok *t, int flags);
int tok_stream_push(struct tok_stream *s, int32_t id, const char **text, size_t *len);
int tok_stream_flush(struct tok_stream *s, const char **text, size_t *len);
void tok_stream_free(struct tok_stream *s);

/* Laguna's pre-tokenizer alone, on text without added tokens: calls fn with
 * the byte range of each piece in order. Used by mkckpt's BPE trainer and by
 * tests. Returns the first non-zero value fn returns, else 0. */
int tok_pretokenize(const char *text, size_t len,
                    int (*fn)(void *ctx, size_t start, size_t end), void *ctx);

#endif
