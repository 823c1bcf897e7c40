/* tokenizer.c — BPE from tokenizer.json: loading the model (vocab, merges,
 * added tokens) and the lookups; the pipeline around it is read by
 * tok_pipe.c, run by tok_norm.c / tok_split.c / tok_encode.c, decoded by
 * tok_decode.c.
 *
 * Encoding follows `tokenizers` step by step:
 *   1. added tokens not flagged `normalized`: leftmost-longest match over the
 *      raw text, with the single_word / lstrip / rstrip rules of
 *      AddedVocabulary::find_matches;
 *   2. each gap between them: the normalizers (tok_norm.c), then the
 *      `normalized` added tokens (their content normalized too) over it;
 *   3. each remaining gap: the pre-tokenizer steps (tok_split.c);
 *   4. each piece: its characters (GPT-2 byte symbols after ByteLevel) as
 *      vocabulary ids, unknown ones as <0xNN> byte tokens (byte_fallback) or
 *      unk_token, then merged lowest rank first, leftmost first among equal
 *      ranks (BPE::merge_word);
 *   5. the post-processor's special ids around the whole (TOK_ADD_SPECIAL).
 *
 * The folder is one straight line: each file calls only the files below it
 * (tok_int.h declares what crosses).
 *
 *   encode    tok_encode.c   tok_encode: steps 1-5 above over the loaded model
 *   model     tokenizer.c    tok_load/tok_free: vocab, merges, added tokens,
 *                            the GPT-2 byte alphabet; the lookups
 *   pipeline  tok_pipe.c     reads normalizer, pre_tokenizer, decoder,
 *                            post_processor into steps (at load), one
 *                            loader per component type
 *   decode    tok_decode.c   ids back to text (the decoders), the
 *                            streaming decoder
 *   steps     tok_norm.c     the normalizers: NFC, NFD, NFKC, NFKD,
 *                            Lowercase, Strip, Prepend, Replace
 *             tok_split.c    the pre-tokenizers, the native regexes;
 *                            tok_pretokenize (Laguna's alone)
 *   regex     tok_re.c       Split / Replace patterns: Oniguruma's syntax
 *                            on PCRE2, bounded; find_iter, replace
 *   leaf      tok_text.c     UTF-8, Unicode classes, lowercase, the GPT-2
 *                            byte alphabet, struct tbuf
 */
#include "engine/tok/tokenizer.h"
#include "engine/tok/tok_int.h"
#include "base/err.h"
#include "base/file.h"
#include "st/jcheck.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ULL;
	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
	return h;
}

static uint64_t hash_u64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x;
}

static int strmap_init(struct strmap *m, size_t n)
{
	m->cap = 16;
	while (m->cap < 2 * n + 16)
		m->cap *= 2;
	m->key = calloc(m->cap, sizeof *m->key);
	m->val = calloc(m->cap, sizeof *m->val);
	m->n = 0;
	return m->key && m->val ? 0 : -ENOMEM;
}

static int strmap_get(const struct strmap *m, const char *k)
{
	if (!m->cap)
		return -1;
	for (size_t i = hash_str(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->key[i])
			return -1;
		if (!strcmp(m->key[i], k))
			return m->val[i];
	}
}

/* Inserts or replaces (the caller sized the table). */
static void strmap_put(struct strmap *m, const char *k, int32_t v)
{
	size_t i = hash_str(k) & (m->cap - 1);
	while (m->key[i] && strcmp(m->key[i], k))
		i = (i + 1) & (m->cap - 1);
	if (!m->key[i])
		m->n++;
	m->key[i] = k;
	m->val[i] = v;
}

static void strmap_free(struct strmap *m)
{
	free(m->key);
	free(m->val);
}

static int mergemap_init(struct mergemap *m, size_t n)
{
	m->cap = 16;
	while (m->cap < 2 * n + 16)
		m->cap *= 2;
	m->key = malloc(m->cap * sizeof *m->key);
	m->rank = malloc(m->cap * sizeof *m->rank);
	m->merged = malloc(m->cap * sizeof *m->merged);
	if (!m->key || !m->rank || !m->merged)
		return -ENOMEM;
	memset(m->key, 0xff, m->cap * sizeof *m->key);
	return 0;
}

int tok_merge_get(const struct mergemap *m, int32_t l, int32_t r, int32_t *rank, int32_t *merged)
{
	uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
	for (size_t i = hash_u64(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (m->key[i] == UINT64_MAX)
			return 0;
		if (m->key[i] == k) {
			*rank = m->rank[i];
			*merged = m->merged[i];
			return 1;
		}
	}
}

/* A pair listed twice keeps its last rank, as tokenizers' HashMap collect does. */
static void mergemap_put(struct mergemap *m, int32_t l, int32_t r, int32_t rank, int32_t merged)
{
	uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
	size_t i = hash_u64(k) & (m->cap - 1);
	while (m->key[i] != UINT64_MAX && m->key[i] != k)
		i = (i + 1) & (m->cap - 1);
	m->key[i] = k;
	m->rank[i] = rank;
	m->merged[i] = merged;
}

/* What a token decodes to on its own. ByteLevel decoder: its characters
 * mapped back to bytes when all of them are in the alphabet, else its own
 * UTF-8; other decoders: tok_dec_piece. */
static char *token_bytes(const struct tok *t, const char *tokstr, uint32_t *len)
{
	if (t->n_dec != 1 || t->dec[0].kind != TD_BYTELEVEL)
		return tok_dec_piece(t, tokstr, len);
	size_t n = strlen(tokstr), o = 0;
	char *out = malloc(n + 1);
	if (!out)
		return NULL;
	const unsigned char *s = (const unsigned char *)tokstr;
	for (size_t i = 0; i < n;) {
		uint32_t c;
		i = tok_utf8_next(s, n, i, &c);
		int b = tok_symbol_byte(c);
		if (b < 0) {
			memcpy(out, tokstr, n);
			o = n;
			break;
		}
		out[o++] = (char)b;
	}
	out[o] = 0;
	*len = (uint32_t)o;
	return out;
}

/* ---- loading ---- */

static int flag(const cJSON *o, const char *k)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* An integer in [0, max]: a token id as tokenizers reads one (a u32), never
 * a float that would be truncated onto another token's id. */
static int is_id(const cJSON *v, double max)
{
	return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= max &&
	       v->valuedouble == floor(v->valuedouble);
}

/* What a bad id is, for messages: the number, else its JSON type. */
static const char *id_text(const cJSON *v, char *b, size_t cap)
{
	if (cJSON_IsNumber(v))
		snprintf(b, cap, "%.17g", v->valuedouble);
	else
		snprintf(b, cap, "%s", cJSON_IsString(v) ? "a string" : cJSON_IsNull(v) ? "null" :
		         cJSON_IsBool(v) ? "a boolean" : "an array or object");
	return b;
}

static int load_model(struct tok *t, const cJSON *model, const char *path, struct rq_err *err)
{
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges"), *it;
	const cJSON *cs = cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix");
	const cJSON *ew = cJSON_GetObjectItemCaseSensitive(model, "end_of_word_suffix");
	const cJSON *dr = cJSON_GetObjectItemCaseSensitive(model, "dropout");
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(model, "type");
	if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "BPE") || !cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
		return rq_errf(err, -EPROTO, "%s: model: type \"%s\" is not supported (only BPE, with vocab and "
			       "merges)", path, cJSON_IsString(ty) ? ty->valuestring : "?");
	if ((cs && !cJSON_IsNull(cs) && !cJSON_IsString(cs)) || (ew && !cJSON_IsNull(ew) && !cJSON_IsString(ew)))
		return rq_errf(err, -EPROTO, "%s: model.%s: must be a string or null", path,
			       cs && !cJSON_IsNull(cs) && !cJSON_IsString(cs) ? "continuing_subword_prefix"
			                                                       : "end_of_word_suffix");
	if ((cJSON_IsString(cs) && !(t->prefix = strdup(cs->valuestring))) ||
	    (cJSON_IsString(ew) && !(t->suffix = strdup(ew->valuestring))))
		return -ENOMEM;
	t->prefix_len = t->prefix ? strlen(t->prefix) : 0;
	t->suffix_len = t->suffix ? strlen(t->suffix) : 0;
	if (dr && !cJSON_IsNull(dr))
		return rq_errf(err, -EPROTO, "%s: model.dropout: must be null (BPE dropout is random: a "
			       "validating engine cannot reproduce it); set it to null", path);
	t->ignore_merges = flag(model, "ignore_merges");
	t->byte_fallback = flag(model, "byte_fallback");
	t->fuse_unk = flag(model, "fuse_unk");
	cJSON_ArrayForEach(it, vocab) {
		char b[40];
		if (!is_id(it, (1 << 24) - 1))
			return rq_errf(err, -EPROTO, "%s: model.vocab[\"%s\"]: the id must be an integer in "
			               "[0, %d], not %s", path, it->string, (1 << 24) - 1,
			               id_text(it, b, sizeof b));
		if (it->valueint >= t->n_ids)
			t->n_ids = it->valueint + 1;
	}
	return 0;
}

/* Splits a merge given as "a b" or ["a", "b"]; returns 0 when malformed. */
static int merge_parts(const cJSON *m, char *buf, size_t cap, const char **a, const char **b)
{
	if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2) {
		const cJSON *x = cJSON_GetArrayItem(m, 0), *y = cJSON_GetArrayItem(m, 1);
		if (!cJSON_IsString(x) || !cJSON_IsString(y))
			return 0;
		*a = x->valuestring;
		*b = y->valuestring;
		return 1;
	}
	if (!cJSON_IsString(m) || strlen(m->valuestring) >= cap)
		return 0;
	strcpy(buf, m->valuestring);
	char *sp = strchr(buf, ' ');
	if (!sp || strchr(sp + 1, ' '))
		return 0;
	*sp = 0;
	*a = buf;
	*b = sp + 1;
	return 1;
}

/* A ByteLevel decoder after a Fuse sees the whole text as one string and
 * maps it back to bytes only when every character is in its alphabet: one
 * token with another character (a space, "<0xE6>" turned into U+FFFD by
 * ByteFallback) changes how all the text before it decodes; so does a
 * ByteLevel after a ByteLevel (the first one's text is any text); a Strip
 * with a stop after the tokens are joined cuts the end of the text. Then
 * the streaming decoder returns the text only at the end (the library's
 * own DecodeStream fails on such text). */
static int stream_whole(const struct tok *t)
{
	int fused = 0, joined = 0, risky = 0, bytelevel = 0;
	for (int k = 0; k < t->n_dec; k++) {
		if (joined && t->dec[k].kind == TD_STRIP && t->dec[k].stop)
			return 1;   /* the end of the text is cut: later ids move it */
		if (bytelevel && t->dec[k].kind == TD_BYTELEVEL)
			return 1;
		bytelevel |= t->dec[k].kind == TD_BYTELEVEL;
		risky |= fused && t->dec[k].kind == TD_BYTELEVEL;
		fused |= t->dec[k].kind == TD_FUSE;
		joined |= t->dec[k].kind == TD_FUSE || t->dec[k].kind == TD_BYTELEVEL;
	}
	for (int id = 0; risky && id < t->n_ids; id++) {
		const unsigned char *s = (const unsigned char *)t->dec_str[id];
		size_t n = s ? strlen((const char *)s) : 0;
		if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>')
			return 1;
		for (size_t i = 0; i < n;) {
			uint32_t c;
			i = tok_utf8_next(s, n, i, &c);
			if (c == TOK_BAD_CP || tok_symbol_byte(c) < 0)
				return 1;
		}
	}
	return 0;
}

/* TOK_SKIP_SPECIAL drops an id when the string it decodes as is the content
 * of an added token flagged special: Tokenizer::decode tests the string, not
 * the id. So a special token with `normalized` whose normalizers change its
 * content (Prepend "▁": "▁<tool>") decodes as that text and is kept, as the
 * library keeps it. t->skip[id] holds the answer (bit 2 marks, meanwhile,
 * the ids whose content is a special token's); t->special[id] keeps the flag. */
static void mark_skipped(struct tok *t)
{
	for (int j = 0; j < t->n_added; j++)
		if (t->added[j].special)
			t->skip[t->added[j].id] = 2;   /* the content of id is a special one */
	for (int id = 0; id < t->n_ids; id++) {
		int c = t->dec_str[id] ? strmap_get(&t->added_map, t->dec_str[id]) : -1;
		t->skip[id] |= c >= 0 && (t->skip[c] & 2);
	}
	for (int id = 0; id < t->n_ids; id++)
		t->skip[id] &= 1;
}

/* Longest first; equal lengths keep file order. */
static int cmp_added_len(const void *x, const void *y, void *ctx)
{
	const struct added *ad = ctx;
	int32_t i = *(const int32_t *)x, j = *(const int32_t *)y;
	if (ad[i].mlen != ad[j].mlen)
		return ad[i].mlen < ad[j].mlen ? 1 : -1;
	return (i > j) - (i < j);
}

static int build(struct tok *t, const cJSON *root, const char *path, struct rq_err *err)
{
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
	const cJSON *addl = cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), *it;
	const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
	int rc = load_model(t, model, path, err);
	if (!rc)
		rc = tok_pipe_load(t, root, path, err);
	if (rc)
		return rc;

	/* the model vocabulary */
	size_t nv = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(model, "vocab"));
	t->n_added = cJSON_GetArraySize(addl);
	size_t cap = t->n_ids + t->n_added;   /* added tokens may get ids past the vocab */
	t->tok_str = calloc(cap, sizeof *t->tok_str);
	t->tok_bytes = calloc(cap, sizeof *t->tok_bytes);
	t->dec_str = calloc(cap, sizeof *t->dec_str);
	t->tok_len = calloc(cap, sizeof *t->tok_len);
	t->special = calloc(cap, 1);
	t->skip = calloc(cap, 1);
	t->added = calloc(t->n_added + 1, sizeof *t->added);
	if (!t->tok_str || !t->tok_bytes || !t->dec_str || !t->tok_len || !t->special || !t->skip || !t->added ||
	    strmap_init(&t->vocab, nv) || strmap_init(&t->added_map, t->n_added))
		return -ENOMEM;
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(model, "vocab")) {
		int id = it->valueint;
		if (t->tok_str[id])
			return rq_errf(err, -EPROTO, "%s: model.vocab: id %d appears twice", path, id);
		if (!(t->tok_str[id] = strdup(it->string)))
			return -ENOMEM;
		strmap_put(&t->vocab, t->tok_str[id], id);
	}

	/* Added tokens take the id their content has (AddedVocabulary::add_tokens):
	 * an earlier added token's, else the model's, else the next free one past
	 * the model; the "id" written in the file is not what decides. */
	int i = 0, max_added = -1;
	cJSON_ArrayForEach(it, addl) {
		const cJSON *ct = cJSON_GetObjectItemCaseSensitive(it, "content");
		if (!cJSON_IsString(ct) || !ct->valuestring[0])
			return rq_errf(err, -EPROTO, "%s: added_tokens[%d]: no content", path, i);
		const cJSON *idj = cJSON_GetObjectItemCaseSensitive(it, "id");
		char b[40];
		if (idj && !is_id(idj, 4294967295.0))   /* not what decides the id; tokenizers reads a u32 */
			return rq_errf(err, -EPROTO, "%s: added_tokens[%d].id: must be an integer in [0, "
			               "4294967295], not %s", path, i, id_text(idj, b, sizeof b));
		struct added *a = &t->added[i++];
		if (!(a->content = strdup(ct->valuestring)))
			return -ENOMEM;
		a->len = strlen(a->content);
		a->single_word = flag(it, "single_word");
		a->lstrip = flag(it, "lstrip");
		a->rstrip = flag(it, "rstrip");
		a->normalized = flag(it, "normalized");
		a->special = flag(it, "special");
		a->id = strmap_get(&t->added_map, a->content);
		if (a->id < 0)
			a->id = strmap_get(&t->vocab, a->content);
		if (a->id < 0)
			a->id = max_added < 0 ? (int)nv : max_added >= (int)nv || !nv ? max_added + 1 : (int)nv;
		if (a->id > max_added)
			max_added = a->id;
		if (a->id >= t->n_ids)
			t->n_ids = a->id + 1;
		strmap_put(&t->added_map, a->content, a->id);
		t->special[a->id] = a->special;
		/* a normalized token is matched in normalized text, as its normalized
		 * content, and decodes as that too (AddedVocabulary keeps it so) */
		struct tbuf m = {0};
		rc = tbuf_put(&m, "", 0) ? -ENOMEM : a->normalized ? tok_normalize(t, a->content, a->len, NULL, &m)
		                                                   : tbuf_put(&m, a->content, a->len);
		if (rc) {
			free(m.s);
			return rc == -ERANGE ? rq_errf(err, rc, "%s: added_tokens[%d]: normalizing its content "
			                               "hit the regex match limits", path, i - 1) : rc;
		}
		a->match = m.s;
		a->mlen = m.n;
		t->dec_str[a->id] = a->match;
		if (!a->mlen)
			return rq_errf(err, -EPROTO, "%s: added_tokens[%d]: content normalizes to nothing",
				       path, i - 1);
	}
	for (int id = 0; id < t->n_ids; id++) {
		if (!t->dec_str[id])
			t->dec_str[id] = t->tok_str[id];
		if (t->dec_str[id] && !(t->tok_bytes[id] = token_bytes(t, t->dec_str[id], &t->tok_len[id])))
			return -ENOMEM;
	}
	mark_skipped(t);
	t->stream_whole = stream_whole(t);
	for (int b = 0; b < 256; b++) {
		char s[8] = {0};
		t->byte_tok[b] = -1;
		if (t->byte_fallback) {
			snprintf(s, sizeof s, "<0x%02X>", b);
			t->byte_tok[b] = strmap_get(&t->vocab, s);
		}
		memset(s, 0, sizeof s);
		tok_byte_symbol((unsigned char)b, s);
		t->byte_id[b] = strmap_get(&t->vocab, s);   /* -1: unknown, as any character */
	}
	t->unk_id = -1;
	if (cJSON_IsString(unk) && (t->unk_id = strmap_get(&t->vocab, unk->valuestring)) < 0)
		return rq_errf(err, -EPROTO, "%s: model.unk_token \"%s\" is not in model.vocab", path,
			       unk->valuestring);

	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
	if (mergemap_init(&t->merges, cJSON_GetArraySize(merges)))
		return -ENOMEM;
	int rank = 0;
	char buf[1024], cat[1024];
	cJSON_ArrayForEach(it, merges) {
		const char *a, *b;
		if (!merge_parts(it, buf, sizeof buf, &a, &b) || strlen(a) + strlen(b) >= sizeof cat)
			return rq_errf(err, -EPROTO, "%s: model.merges[%d]: malformed", path, rank);
		/* the merged token is a + b without its continuing_subword_prefix
		 * (BpeBuilder cuts prefix_len bytes off b, whatever they are) */
		size_t la = strlen(a), lb = strlen(b);
		if (lb < t->prefix_len || (lb > t->prefix_len && ((unsigned char)b[t->prefix_len] & 0xC0) == 0x80))
			return rq_errf(err, -EPROTO, "%s: model.merges[%d] (\"%s\" \"%s\"): the second token is "
				       "shorter than continuing_subword_prefix (tokenizers fails on it)", path, rank, a, b);
		memcpy(cat, a, la);
		strcpy(cat + la, b + t->prefix_len);
		int ia = strmap_get(&t->vocab, a), ib = strmap_get(&t->vocab, b);
		int ic = strmap_get(&t->vocab, cat);
		if (ia < 0 || ib < 0 || ic < 0)
			return rq_errf(err, -EPROTO, "%s: model.merges[%d] (\"%s\" \"%s\"): token not in "
				       "vocab", path, rank, a, b);
		mergemap_put(&t->merges, ia, ib, rank++, ic);
	}

	/* added tokens by first byte, longest first */
	for (int b = 0; b < 256; b++) {
		int n = 0;
		for (i = 0; i < t->n_added; i++)
			n += (unsigned char)t->added[i].match[0] == b;
		if (!n)
			continue;
		if (!(t->first[b] = malloc((n + 1) * sizeof(int32_t))))
			return -ENOMEM;
		n = 0;
		for (i = 0; i < t->n_added; i++)
			if ((unsigned char)t->added[i].match[0] == b)
				t->first[b][n++] = i;
		qsort_r(t->first[b], n, sizeof(int32_t), cmp_added_len, t->added);
		t->first[b][n] = -1;
	}
	return 0;
}

int tok_load(const char *path, struct tok **out, struct rq_err *err)
{
	char file[4096];
	struct stat st;
	if (stat(path, &st))
		return rq_errf(err, -errno, "%s: %s", path, strerror(errno));
	snprintf(file, sizeof file, S_ISDIR(st.st_mode) ? "%s/tokenizer.json" : "%s", path);
	char *text = NULL;
	size_t size = 0;
	int rc = rq_file_read(file, TOK_FILE_MAX, &text, &size, err);   /* no FIFO, no device */
	if (rc)
		return rc;
	cJSON *root = jc_parse(text, size, file, err);
	free(text);
	if (!root)
		return err ? err->code : -EPROTO;   /* jc_parse said why */
	struct tok *t = calloc(1, sizeof *t);
	rc = t ? build(t, root, file, err) : -ENOMEM;
	cJSON_Delete(root);
	if (rc) {
		if (rc == -ENOMEM)
			rq_errf(err, rc, "%s: out of memory", file);
		tok_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void tok_free(struct tok *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->n_ids && t->tok_str && t->tok_bytes; i++) {
		free(t->tok_str[i]);
		free(t->tok_bytes[i]);
	}
	for (int i = 0; i < t->n_added && t->added; i++) {
		free(t->added[i].content);
		free(t->added[i].match);
	}
	free(t->dec_str);
	free(t->prefix);
	free(t->suffix);
	tok_pipe_free(t);
	for (int b = 0; b < 256; b++)
		free(t->first[b]);
	free(t->tok_str);
	free(t->tok_bytes);
	free(t->tok_len);
	free(t->special);
	free(t->skip);
	free(t->added);
	strmap_free(&t->vocab);
	strmap_free(&t->added_map);
	free(t->merges.key);
	free(t->merges.rank);
	free(t->merges.merged);
	free(t);
}

int tok_vocab_get(const struct tok *t, const char *s)
{
	return strmap_get(&t->vocab, s);
}

int tok_vocab_size(const struct tok *t) { return t->n_ids; }

int tok_id(const struct tok *t, const char *token)
{
	int id = strmap_get(&t->added_map, token);
	return id >= 0 ? id : strmap_get(&t->vocab, token);
}

int tok_is_special(const struct tok *t, int id)
{
	return id >= 0 && id < t->n_ids && t->special[id];
}

int tok_prefix_ids(const struct tok *t, int32_t *ids, int n_max)
{
	for (int i = 0; i < t->n_pre && i < n_max; i++)
		ids[i] = t->pre[i];
	return t->n_pre;
}
