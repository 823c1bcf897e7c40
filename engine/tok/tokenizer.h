/* tokenizer.h — BPE tokenizers read from a Hugging Face tokenizer.json.
 *
 * Encodes and decodes exactly as the `tokenizers` library does: the BPE
 * model (byte_fallback, unk_token, fuse_unk, ignore_merges, subword prefix
 * and suffix) inside the normalizers, pre-tokenizers, decoders and
 * post-processors the file declares, in any order the library accepts
 * (docs/engine.md, Tokenizers, lists them; engine/tok/tok_pipe.c reads
 * them); Split / Replace regexes in Oniguruma's syntax on PCRE2, bounded;
 * added tokens with their single_word / lstrip / rstrip / normalized /
 * special flags. Anything else is refused with -EPROTO naming the JSON
 * path, never tokenized differently. Input bytes that are not valid UTF-8
 * are tokenized byte by byte as "other" characters (the library cannot be
 * given such input). */
#ifndef RQ_ENGINE_TOKENIZER_H
#define RQ_ENGINE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct rq_err;
struct tok;

/* Loads PATH: a tokenizer.json file, or a directory holding one. It must be
 * a regular file (or a link to one) of at most TOK_FILE_MAX bytes: anything
 * else is refused naming the file (real ones: tens of MiB at most). */
#define TOK_FILE_MAX ((size_t)256 << 20)
int tok_load(const char *path, struct tok **out, struct rq_err *err);
void tok_free(struct tok *t);

/* One past the largest token id (model vocab and added tokens). */
int tok_vocab_size(const struct tok *t);
/* Id of a token by its vocabulary string ("<think>", "Ġthe"), added tokens
 * first; -1 when there is none. */
int tok_id(const struct tok *t, const char *token);
/* 1 when id is an added token flagged special. TOK_SKIP_SPECIAL skips it
 * unless it is `normalized` and its normalizers change its text: decode
 * tests the string the id decodes as, as `tokenizers` does. */
int tok_is_special(const struct tok *t, int id);
/* The ids TOK_ADD_SPECIAL puts before the text (the post-processor's
 * template, e.g. Llama's BOS): their count, the first *n_max of them in ids. */
int tok_prefix_ids(const struct tok *t, int32_t *ids, int n_max);

/* A growable id array; zero-initialise, release with tok_ids_free. */
struct tok_ids {
	int32_t *v;      /* token ids, n of them */
	size_t n, cap;
};
void tok_ids_free(struct tok_ids *ids);

enum {
	TOK_ADD_SPECIAL = 1,     /* encode: apply the post-processor (Laguna: leading 〈|EOS|〉, Llama: BOS) */
	TOK_SKIP_SPECIAL = 2,    /* decode: drop special added tokens (tok_is_special) */
};

/* Appends the ids of text[0..len) to out. 0, -ENOMEM, or -ERANGE when a
 * regex of the pipeline hit its match limits (catastrophic backtracking). */
int tok_encode(const struct tok *t, const char *text, size_t len, int flags, struct tok_ids *out);

/* The bytes token id decodes to on its own (may be part of a UTF-8
 * sequence). 0, or -EINVAL for an id out of range / without a token. */
int tok_token_bytes(const struct tok *t, int id, const char **bytes, size_t *len);

/* Decodes ids into a malloc'd NUL-terminated string (*out, *out_len bytes),
 * exactly as tokenizers' decode: invalid UTF-8 becomes U+FFFD. Unknown ids
 * are skipped. 0, -ENOMEM or -ERANGE (a Replace decoder's regex limits). */
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
