/* tok_pipe.c — reads the pipeline around the model from tokenizer.json:
 * normalizer, pre_tokenizer, decoder and post_processor, as `tokenizers`
 * defines them. Each component kind has a table of the types the engine
 * runs, one loader per type that reads its parameters into a step
 * (tok_int.h); a Sequence of any kind is flattened in order (nested, or
 * empty). Anything else — a type outside the tables, a missing or mistyped
 * parameter, a pattern that does not compile — is refused with -EPROTO
 * naming the JSON path and what is supported, never approximated. */
#include "engine/tok/tok_int.h"
#include "base/err.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The regexes tok_split.c runs natively, byte for byte as tokenizer.json has them. */
static const struct {
	int re;
	const char *pattern;
} known_re[] = {
	{RE_NEWLINES, "(?:\\r?\\n)+(?!\\r?\\n)"},
	{RE_CL100K_N1, "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
		       "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
	{RE_CL100K_N3, "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
		       "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
	{RE_GPT2, "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
};


struct ld {
	struct tok *t;
	const char *path;      /* the file, for messages */
	struct rq_err *err;
};

static const cJSON *get(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *str(const cJSON *o, const char *k)
{
	const cJSON *v = get(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int is_type(const cJSON *o, const char *want)
{
	const char *t = str(o, "type");
	return t && !strcmp(t, want);
}

/* A boolean field: def when absent or null. */
static int boolean(const cJSON *o, const char *k, int def)
{
	const cJSON *v = get(o, k);
	return !v || cJSON_IsNull(v) ? def : cJSON_IsTrue(v);
}

static int dupstr(const char *s, char **out, size_t *len)
{
	if (!(*out = strdup(s)))
		return -ENOMEM;
	*len = strlen(s);
	return 0;
}

/* The one-character replacement of Metaspace (pre-tokenizer or decoder). */
static int one_char(const cJSON *o, const char *k, char *out, size_t *len)
{
	const char *s = str(o, k);
	if (!s)
		return 0;
	uint32_t c;
	size_t n = strlen(s);
	if (!n || n >= 8 || tok_utf8_next((const unsigned char *)s, n, 0, &c) != n)
		return 0;
	memcpy(out, s, n + 1);
	*len = n;
	return 1;
}

/* prepend_scheme, or the older add_prefix_space. */
static int prepend_scheme(const cJSON *o)
{
	const char *ps = str(o, "prepend_scheme");
	if (!ps)
		return boolean(o, "add_prefix_space", 1) ? PS_ALWAYS : PS_NEVER;
	return !strcmp(ps, "always") ? PS_ALWAYS : !strcmp(ps, "first") ? PS_FIRST
	       : !strcmp(ps, "never") ? PS_NEVER : 0;
}

/* A refusal naming the JSON path. */
#define REFUSE(c, field, ...) refuse(c, field, __VA_ARGS__)
static int refuse(const struct ld *c, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int refuse(const struct ld *c, const char *field, const char *fmt, ...)
{
	char m[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	return rq_errf(c->err, -EPROTO, "%s: %s: %s", c->path, field, m);
}

/* A required string parameter. */
static int need_str(const struct ld *c, const cJSON *o, const char *k, const char *field, const char **out)
{
	if (!(*out = str(o, k)))
		return REFUSE(c, field, "\"%s\" must be a string", k);
	return 0;
}

/* A boolean parameter: def when absent or null, refused when not a boolean. */
static int need_bool(const struct ld *c, const cJSON *o, const char *k, const char *field, int def, int *out)
{
	const cJSON *v = get(o, k);
	if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v))
		return REFUSE(c, field, "\"%s\" must be true or false", k);
	*out = boolean(o, k, def);
	return 0;
}

/* A pattern {"String": s} or {"Regex": r}, compiled (tok_re.c). */
static int pattern(const struct ld *c, const cJSON *o, const char *field, struct tok_re **re)
{
	const cJSON *p = get(o, "pattern");
	const char *lit = str(p, "String"), *rx = str(p, "Regex");
	char why[320];
	if (!cJSON_IsObject(p) || cJSON_GetArraySize(p) != 1 || (!lit && !rx))
		return REFUSE(c, field, "\"pattern\" must be {\"String\": ...} or {\"Regex\": ...}");
	int rc = tok_re_compile(lit ? lit : rx, lit != NULL, re, why, sizeof why);
	if (rc == -EPROTO)
		return REFUSE(c, field, "pattern.Regex \"%.160s\": %s; the engine reads Oniguruma's syntax "
		              "on PCRE2 (docs/engine.md, Tokenizers)", rx, why);
	return rc;
}

static int behavior(const struct ld *c, const cJSON *o, const char *field, int def, int *out)
{
	static const char *const names[] = {"Isolated", "MergedWithNext", "MergedWithPrevious", "Removed",
	                                     "Contiguous"};
	const char *b = str(o, "behavior");
	*out = def;
	if (!b && def)
		return 0;
	for (int i = 0; b && i < 5; i++)
		if (!strcmp(b, names[i]))
			return (*out = SB_ISOLATED + i), 0;
	return REFUSE(c, field, "behavior \"%s\" is not one of Removed, Isolated, MergedWithPrevious, "
	              "MergedWithNext, Contiguous", b ? b : "(missing)");
}

/* A component kind: its types and their loaders. */
struct comp {
	const char *type;
	int (*load)(struct ld *c, const cJSON *o, const char *field);
};

static int load_kind(struct ld *c, const cJSON *o, const char *field, const char *kind, const char *seq_key,
                     const struct comp *types, size_t n_types, const char *supported)
{
	char sub[256];
	if (!o || cJSON_IsNull(o))
		return 0;
	const char *type = str(o, "type");
	if (!cJSON_IsObject(o) || !type)
		return REFUSE(c, field, "a %s must be an object with a \"type\"", kind);
	if (!strcmp(type, "Sequence")) {
		const cJSON *list = get(o, seq_key), *it;
		int i = 0;
		if (!cJSON_IsArray(list))
			return REFUSE(c, field, "Sequence needs an array \"%s\"", seq_key);
		cJSON_ArrayForEach(it, list) {
			snprintf(sub, sizeof sub, "%s.%s[%d]", field, seq_key, i++);
			int rc = load_kind(c, it, sub, kind, seq_key, types, n_types, supported);
			if (rc)
				return rc;
		}
		return 0;
	}
	for (size_t i = 0; i < n_types; i++)
		if (!strcmp(type, types[i].type))
			return types[i].load(c, o, field);
	return REFUSE(c, field, "type \"%s\" is not supported (no family we run uses it); supported %ss: %s, "
	              "Sequence", type, kind, supported);
}

/* ---- normalizers ---- */

static struct tok_norm *new_norm(struct ld *c, const char *field, int kind)
{
	if (c->t->n_norm == TOK_MAX_STEPS) {
		REFUSE(c, field, "more than %d normalizers", TOK_MAX_STEPS);
		return NULL;
	}
	struct tok_norm *s = &c->t->norm[c->t->n_norm++];   /* counted now so tok_pipe_free sees it */
	memset(s, 0, sizeof *s);
	s->kind = kind;
	return s;
}

static int n_nfc(struct ld *c, const cJSON *o, const char *field)
{
	(void)o;
	return new_norm(c, field, TN_NFC) ? 0 : -EPROTO;
}

static int n_nfd(struct ld *c, const cJSON *o, const char *field)
{
	(void)o;
	return new_norm(c, field, TN_NFD) ? 0 : -EPROTO;
}

static int n_nfkc(struct ld *c, const cJSON *o, const char *field)
{
	(void)o;
	return new_norm(c, field, TN_NFKC) ? 0 : -EPROTO;
}

static int n_nfkd(struct ld *c, const cJSON *o, const char *field)
{
	(void)o;
	return new_norm(c, field, TN_NFKD) ? 0 : -EPROTO;
}

static int n_lower(struct ld *c, const cJSON *o, const char *field)
{
	(void)o;
	return new_norm(c, field, TN_LOWERCASE) ? 0 : -EPROTO;
}

static int n_strip(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_norm *s = new_norm(c, field, TN_STRIP);
	if (!s)
		return -EPROTO;
	int rc = need_bool(c, o, "strip_left", field, 0, &s->left);
	return rc ? rc : need_bool(c, o, "strip_right", field, 0, &s->right);
}

static int n_prepend(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_norm *s = new_norm(c, field, TN_PREPEND);
	const char *p;
	int rc = s ? need_str(c, o, "prepend", field, &p) : -EPROTO;
	return rc ? rc : dupstr(p, &s->a, &s->alen);
}

static int n_replace(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_norm *s = new_norm(c, field, TN_REPLACE);
	const char *content;
	int rc = s ? need_str(c, o, "content", field, &content) : -EPROTO;
	if (!rc)
		rc = pattern(c, o, field, &s->re);
	return rc ? rc : dupstr(content, &s->b, &s->blen);
}

static int n_refused(struct ld *c, const cJSON *o, const char *field)
{
	(void)o;
	return REFUSE(c, field, "type \"Precompiled\" (SentencePiece's precompiled_charsmap) is not "
	              "supported: no family we run (llama, mistral, qwen2/3, mixtral, qwen MoE, laguna) "
	              "uses it");
}

static const struct comp norm_types[] = {
	{"NFC", n_nfc}, {"NFD", n_nfd}, {"NFKC", n_nfkc}, {"NFKD", n_nfkd}, {"Lowercase", n_lower},
	{"Strip", n_strip}, {"Prepend", n_prepend}, {"Replace", n_replace}, {"Precompiled", n_refused},
};

/* ---- pre-tokenizers ---- */

static struct tok_pre *new_pre(struct ld *c, const char *field, int kind)
{
	if (c->t->n_pt == TOK_MAX_STEPS) {
		REFUSE(c, field, "more than %d pre-tokenizers", TOK_MAX_STEPS);
		return NULL;
	}
	struct tok_pre *s = &c->t->pt[c->t->n_pt++];
	memset(s, 0, sizeof *s);
	s->kind = kind;
	return s;
}

static int p_split(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_pre *s = new_pre(c, field, TP_SPLIT);
	if (!s)
		return -EPROTO;
	const char *rx = str(get(o, "pattern"), "Regex");
	for (size_t i = 0; rx && i < sizeof known_re / sizeof known_re[0]; i++)
		if (!strcmp(rx, known_re[i].pattern))
			s->re = known_re[i].re;
	int rc = s->re ? 0 : pattern(c, o, field, &s->rx);
	if (!rc)
		rc = behavior(c, o, field, 0, &s->behavior);
	return rc ? rc : need_bool(c, o, "invert", field, 0, &s->invert);
}

static int p_whitespace(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_pre *s = new_pre(c, field, TP_SPLIT);
	(void)o;
	if (!s)
		return -EPROTO;
	s->re = RE_WHITESPACE;   /* \w+|[^\w\s]+ inverted, Removed (tok_split.c) */
	s->behavior = SB_REMOVED;
	s->invert = 1;
	return 0;
}

static int p_wssplit(struct ld *c, const cJSON *o, const char *field)
{
	(void)o;
	return new_pre(c, field, TP_WHITESPACE_SPLIT) ? 0 : -EPROTO;
}

static int p_punct(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_pre *s = new_pre(c, field, TP_PUNCTUATION);
	return s ? behavior(c, o, field, SB_ISOLATED, &s->behavior) : -EPROTO;
}

static int p_digits(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_pre *s = new_pre(c, field, TP_DIGITS);
	return s ? need_bool(c, o, "individual_digits", field, 0, &s->individual) : -EPROTO;
}

static int p_bytelevel(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_pre *s = new_pre(c, field, TP_BYTELEVEL);
	int trim, rc = s ? need_bool(c, o, "add_prefix_space", field, 1, &s->prefix_space) : -EPROTO;
	if (!rc)
		rc = need_bool(c, o, "use_regex", field, 1, &s->use_regex);
	return rc ? rc : need_bool(c, o, "trim_offsets", field, 1, &trim);   /* offsets only */
}

static int p_metaspace(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_pre *s = new_pre(c, field, TP_METASPACE);
	if (!s)
		return -EPROTO;
	if (!one_char(o, "replacement", s->rep, &s->replen))
		return REFUSE(c, field, "\"replacement\" must be one character");
	if (!(s->prepend = prepend_scheme(o)))
		return REFUSE(c, field, "prepend_scheme \"%s\" is not always, first or never",
		              str(o, "prepend_scheme"));
	return need_bool(c, o, "split", field, 1, &s->split);
}

static const struct comp pre_types[] = {
	{"Split", p_split}, {"Digits", p_digits}, {"ByteLevel", p_bytelevel}, {"Metaspace", p_metaspace},
	{"Whitespace", p_whitespace}, {"WhitespaceSplit", p_wssplit}, {"Punctuation", p_punct},
};

/* ---- decoders ---- */

static struct tok_dec *new_dec(struct ld *c, const char *field, int kind)
{
	if (c->t->n_dec == TOK_MAX_STEPS) {
		REFUSE(c, field, "more than %d decoders", TOK_MAX_STEPS);
		return NULL;
	}
	struct tok_dec *s = &c->t->dec[c->t->n_dec++];
	memset(s, 0, sizeof *s);
	s->kind = kind;
	return s;
}

static int d_plain(struct ld *c, const cJSON *o, const char *field)
{
	const char *type = str(o, "type");
	int kind = !strcmp(type, "ByteLevel") ? TD_BYTELEVEL : !strcmp(type, "ByteFallback") ? TD_BYTEFALLBACK
	                                                                                  : TD_FUSE;
	return new_dec(c, field, kind) ? 0 : -EPROTO;
}

static int d_replace(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_dec *s = new_dec(c, field, TD_REPLACE);
	const char *content;
	int rc = s ? need_str(c, o, "content", field, &content) : -EPROTO;
	if (!rc)
		rc = pattern(c, o, field, &s->re);
	return rc ? rc : dupstr(content, &s->b, &s->blen);
}

static int count(const struct ld *c, const cJSON *o, const char *k, const char *field, int *out)
{
	const cJSON *v = get(o, k);
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e6 ||
	    v->valuedouble != floor(v->valuedouble))
		return REFUSE(c, field, "\"%s\" must be a count (an integer >= 0)", k);
	*out = v->valueint;
	return 0;
}

static int d_strip(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_dec *s = new_dec(c, field, TD_STRIP);
	char ch[8];
	size_t n;
	if (!s)
		return -EPROTO;
	if (!one_char(o, "content", ch, &n))
		return REFUSE(c, field, "\"content\" must be one character");
	int rc = count(c, o, "start", field, &s->start);
	if (!rc)
		rc = count(c, o, "stop", field, &s->stop);
	return rc ? rc : dupstr(ch, &s->a, &s->alen);
}

static int d_metaspace(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_dec *s = new_dec(c, field, TD_METASPACE);
	char ch[8];
	size_t n;
	if (!s)
		return -EPROTO;
	if (!one_char(o, "replacement", ch, &n))
		return REFUSE(c, field, "\"replacement\" must be one character");
	if (!(s->prepend = prepend_scheme(o)))
		return REFUSE(c, field, "prepend_scheme \"%s\" is not always, first or never",
		              str(o, "prepend_scheme"));
	return dupstr(ch, &s->a, &s->alen);
}

static int d_bpe(struct ld *c, const cJSON *o, const char *field)
{
	struct tok_dec *s = new_dec(c, field, TD_BPE);
	const char *suffix = str(o, "suffix");
	return s ? dupstr(suffix ? suffix : "</w>", &s->a, &s->alen) : -EPROTO;
}

static const struct comp dec_types[] = {
	{"ByteLevel", d_plain}, {"ByteFallback", d_plain}, {"Fuse", d_plain}, {"Replace", d_replace},
	{"Strip", d_strip}, {"Metaspace", d_metaspace}, {"BPEDecoder", d_bpe},
};

/* ---- post_processor: TemplateProcessing's "single", ByteLevel (offsets only), Sequence ---- */

static int load_post(struct tok *t, const cJSON *pp, const char *field, const char *path, struct rq_err *err)
{
	char sub[256];
	if (!pp || cJSON_IsNull(pp) || is_type(pp, "ByteLevel"))
		return 0;
	if (is_type(pp, "Sequence")) {
		const cJSON *it;
		int i = 0;
		cJSON_ArrayForEach(it, get(pp, "processors")) {
			snprintf(sub, sizeof sub, "%s.processors[%d]", field, i++);
			int rc = load_post(t, it, sub, path, err);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (!is_type(pp, "TemplateProcessing"))
		return rq_errf(err, -EPROTO, "%s: %s: type \"%s\" is not supported (no family we run uses "
			       "it); supported post-processors: TemplateProcessing, ByteLevel, Sequence, or null",
			       path, field, str(pp, "type") ? str(pp, "type") : "?");
	const cJSON *specials = get(pp, "special_tokens"), *it;
	int seen_seq = 0;
	cJSON_ArrayForEach(it, get(pp, "single")) {
		const cJSON *sp = get(it, "SpecialToken");
		if (get(it, "Sequence")) {
			seen_seq = 1;
			continue;
		}
		const char *name = str(sp, "id");
		const cJSON *id;
		if (!name || !get(specials, name))
			return rq_errf(err, -EPROTO, "%s: %s.single: an item that is neither Sequence nor a "
				       "SpecialToken listed in special_tokens", path, field);
		int k = 0;
		cJSON_ArrayForEach(id, get(get(specials, name), "ids")) {
			int32_t *dst = seen_seq ? t->post : t->pre;
			int *n = seen_seq ? &t->n_post : &t->n_pre;
			/* an integer token id: a float would be truncated onto another token */
			if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) ||
			    id->valuedouble != floor(id->valuedouble))
				return rq_errf(err, -EPROTO, "%s: %s.special_tokens[\"%s\"].ids[%d]: must be an "
					       "integer token id in [0, %d]", path, field, name, k, (1 << 24) - 1);
			k++;
			if (*n >= 8)
				return rq_errf(err, -EPROTO, "%s: %s.special_tokens[\"%s\"].ids: more than 8 "
					       "around the sequence", path, field, name);
			dst[(*n)++] = (int32_t)id->valueint;
		}
	}
	return 0;
}

#define N(a) (sizeof a / sizeof a[0])

int tok_pipe_load(struct tok *t, const cJSON *root, const char *path, struct rq_err *err)
{
	struct ld c = {t, path, err};
	int rc = load_kind(&c, get(root, "normalizer"), "normalizer", "normalizer", "normalizers", norm_types,
	                   N(norm_types), "NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace");
	if (!rc)
		rc = load_kind(&c, get(root, "pre_tokenizer"), "pre_tokenizer", "pre-tokenizer", "pretokenizers",
		               pre_types, N(pre_types), "Split, Digits, ByteLevel, Metaspace, Whitespace, "
		               "WhitespaceSplit, Punctuation");
	if (rc)
		return rc;
	/* ByteLevel maps bytes to its alphabet itself unless it is last and the
	 * model takes no prefix/suffix (then the model does: the fast path) */
	for (int i = 0; i < t->n_pt; i++)
		t->pt[i].map = t->pt[i].kind == TP_BYTELEVEL && (i + 1 < t->n_pt || t->prefix || t->suffix);
	t->byte_level = t->n_pt && t->pt[t->n_pt - 1].kind == TP_BYTELEVEL && !t->pt[t->n_pt - 1].map;
	const cJSON *dec = get(root, "decoder");
	if (!dec || cJSON_IsNull(dec))
		t->dec_none = 1;
	else if ((rc = load_kind(&c, dec, "decoder", "decoder", "decoders", dec_types, N(dec_types),
	                         "ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace, BPEDecoder")))
		return rc;
	return load_post(t, get(root, "post_processor"), "post_processor", path, err);
}

void tok_pipe_free(struct tok *t)
{
	for (int i = 0; i < t->n_norm; i++) {
		free(t->norm[i].a);
		free(t->norm[i].b);
		tok_re_free(t->norm[i].re);
	}
	for (int i = 0; i < t->n_pt; i++)
		tok_re_free(t->pt[i].rx);
	for (int i = 0; i < t->n_dec; i++) {
		free(t->dec[i].a);
		free(t->dec[i].b);
		tok_re_free(t->dec[i].re);
	}
}
