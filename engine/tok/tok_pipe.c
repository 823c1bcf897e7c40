/* tok_pipe.c — reads the pipeline around the BPE model from tokenizer.json:
 * normalizer, pre_tokenizer, decoder and post_processor. Each is turned into
 * a short list of steps (tok_int.h) once, at load; anything `tokenizers`
 * would run differently from what tok_norm.c / tok_split.c / tok_encode.c /
 * tok_decode.c implement is refused with -EPROTO naming the JSON field and
 * what is supported, never approximated. */
#include "engine/tok/tok_int.h"
#include "base/err.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The regexes tok_split.c runs natively, byte for byte as tokenizer.json has them. */
static const struct {
	int re;
	const char *pattern;
	const char *who;
} known_re[] = {
	{RE_NEWLINES, "(?:\\r?\\n)+(?!\\r?\\n)", "line-break runs (Laguna)"},
	{RE_CL100K_N1, "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
		       "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "Qwen2 / Laguna"},
	{RE_CL100K_N3, "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
		       "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "Llama-3"},
	{RE_GPT2, "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", "GPT-2"},
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

/* ---- normalizer ---- */

static int load_norm(struct tok *t, const cJSON *n, const char *field, const char *path, struct rq_err *err)
{
	char sub[256];
	if (!n || cJSON_IsNull(n))
		return 0;
	if (is_type(n, "Sequence")) {
		const cJSON *it;
		int i = 0;
		cJSON_ArrayForEach(it, get(n, "normalizers")) {
			snprintf(sub, sizeof sub, "%s.normalizers[%d]", field, i++);
			int rc = load_norm(t, it, sub, path, err);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (t->n_norm == 8)
		return rq_errf(err, -EPROTO, "%s: %s: more than 8 normalizers", path, field);
	struct tok_norm *s = &t->norm[t->n_norm++];   /* counted now so tok_pipe_free sees it */
	memset(s, 0, sizeof *s);
	const cJSON *pat = get(n, "pattern");
	if (is_type(n, "NFC"))
		s->kind = TN_NFC;
	else if (is_type(n, "Prepend") && str(n, "prepend")) {
		s->kind = TN_PREPEND;
		if (dupstr(str(n, "prepend"), &s->a, &s->alen))
			return -ENOMEM;
	} else if (is_type(n, "Replace") && str(pat, "String") && str(n, "content")) {
		s->kind = TN_REPLACE;
		if (!str(pat, "String")[0])
			return rq_errf(err, -EPROTO, "%s: %s.pattern.String: empty pattern", path, field);
		if (dupstr(str(pat, "String"), &s->a, &s->alen) || dupstr(str(n, "content"), &s->b, &s->blen))
			return -ENOMEM;
	} else
		return rq_errf(err, -EPROTO, "%s: %s: type \"%s\"%s is not supported; supported normalizers: "
			       "NFC, Prepend, Replace with a String pattern, a Sequence of them, or null",
			       path, field, str(n, "type") ? str(n, "type") : "?",
			       is_type(n, "Replace") ? " (with a Regex pattern)" : "");
	return 0;
}

/* ---- pre_tokenizer ---- */

static int behavior(const char *b)
{
	if (!b)
		return 0;
	return !strcmp(b, "Isolated") ? SB_ISOLATED : !strcmp(b, "MergedWithNext") ? SB_MERGED_NEXT
	       : !strcmp(b, "MergedWithPrevious") ? SB_MERGED_PREV : !strcmp(b, "Removed") ? SB_REMOVED : 0;
}

static int load_pre(struct tok *t, const cJSON *p, const char *field, const char *path, struct rq_err *err)
{
	char sub[256];
	if (!p || cJSON_IsNull(p))
		return 0;
	if (is_type(p, "Sequence")) {
		const cJSON *it;
		int i = 0;
		cJSON_ArrayForEach(it, get(p, "pretokenizers")) {
			snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", field, i++);
			int rc = load_pre(t, it, sub, path, err);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (t->n_pt == 8)
		return rq_errf(err, -EPROTO, "%s: %s: more than 8 pre-tokenizers", path, field);
	if (t->n_pt && (t->pt[t->n_pt - 1].kind == TP_BYTELEVEL || t->pt[t->n_pt - 1].kind == TP_METASPACE))
		return rq_errf(err, -EPROTO, "%s: %s: a pre-tokenizer after ByteLevel or Metaspace is not "
			       "supported (they must come last)", path, field);
	struct tok_pre *s = &t->pt[t->n_pt];
	memset(s, 0, sizeof *s);
	if (is_type(p, "Split")) {
		const char *re = str(get(p, "pattern"), "Regex");
		s->kind = TP_SPLIT;
		if (!re)
			return rq_errf(err, -EPROTO, "%s: %s.pattern: only a Regex pattern is supported", path, field);
		for (size_t i = 0; i < sizeof known_re / sizeof known_re[0]; i++)
			if (!strcmp(re, known_re[i].pattern))
				s->re = known_re[i].re;
		if (!s->re)
			return rq_errf(err, -EPROTO, "%s: %s.pattern.Regex \"%.120s\" is not one the engine runs "
				       "(GPT-2's, Llama-3's, Qwen2's or the line-break splitter, exactly)",
				       path, field, re);
		if (!(s->behavior = behavior(str(p, "behavior"))))
			return rq_errf(err, -EPROTO, "%s: %s.behavior \"%s\" is not supported (Isolated, "
				       "MergedWithNext, MergedWithPrevious, Removed)", path, field,
				       str(p, "behavior") ? str(p, "behavior") : "?");
		if (boolean(p, "invert", 0))
			return rq_errf(err, -EPROTO, "%s: %s.invert: only false is supported", path, field);
	} else if (is_type(p, "Digits")) {
		s->kind = TP_DIGITS;
		s->individual = boolean(p, "individual_digits", 0);
	} else if (is_type(p, "ByteLevel")) {
		s->kind = TP_BYTELEVEL;
		s->prefix_space = boolean(p, "add_prefix_space", 1);
		s->use_regex = boolean(p, "use_regex", 1);
		t->byte_level = 1;
	} else if (is_type(p, "Metaspace")) {
		s->kind = TP_METASPACE;
		s->split = boolean(p, "split", 1);
		if (!one_char(p, "replacement", s->rep, &s->replen))
			return rq_errf(err, -EPROTO, "%s: %s.replacement: not one character", path, field);
		if (!(s->prepend = prepend_scheme(p)))
			return rq_errf(err, -EPROTO, "%s: %s.prepend_scheme \"%s\": not always/first/never",
				       path, field, str(p, "prepend_scheme"));
	} else
		return rq_errf(err, -EPROTO, "%s: %s: type \"%s\" is not supported; supported pre-tokenizers: "
			       "Split (known regexes), Digits, ByteLevel, Metaspace, a Sequence of them, or null",
			       path, field, str(p, "type") ? str(p, "type") : "?");
	t->n_pt++;
	return 0;
}

/* ---- decoder ---- */

static int load_dec(struct tok *t, const cJSON *d, const char *field, const char *path, struct rq_err *err)
{
	char sub[256];
	if (is_type(d, "Sequence")) {
		const cJSON *it;
		int i = 0;
		cJSON_ArrayForEach(it, get(d, "decoders")) {
			snprintf(sub, sizeof sub, "%s.decoders[%d]", field, i++);
			int rc = load_dec(t, it, sub, path, err);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (t->n_dec == 8)
		return rq_errf(err, -EPROTO, "%s: %s: more than 8 decoders", path, field);
	struct tok_dec *s = &t->dec[t->n_dec++];
	memset(s, 0, sizeof *s);
	const cJSON *pat = get(d, "pattern");
	if (is_type(d, "ByteLevel"))
		s->kind = TD_BYTELEVEL;
	else if (is_type(d, "ByteFallback"))
		s->kind = TD_BYTEFALLBACK;
	else if (is_type(d, "Fuse"))
		s->kind = TD_FUSE;
	else if (is_type(d, "Replace") && str(pat, "String") && str(d, "content") && str(pat, "String")[0]) {
		s->kind = TD_REPLACE;
		if (dupstr(str(pat, "String"), &s->a, &s->alen) || dupstr(str(d, "content"), &s->b, &s->blen))
			return -ENOMEM;
	} else if (is_type(d, "Strip")) {
		const cJSON *st = get(d, "start"), *sp = get(d, "stop");
		char c[8];
		size_t n;
		s->kind = TD_STRIP;
		if (!one_char(d, "content", c, &n) || !cJSON_IsNumber(st) || st->valueint < 0 ||
		    (sp && (!cJSON_IsNumber(sp) || sp->valueint != 0)))
			return rq_errf(err, -EPROTO, "%s: %s: only Strip with one content character, a start "
				       "count and stop 0 is supported", path, field);
		s->start = st->valueint;
		if (dupstr(c, &s->a, &s->alen))
			return -ENOMEM;
	} else if (is_type(d, "Metaspace")) {
		char c[8];
		size_t n;
		s->kind = TD_METASPACE;
		if (!one_char(d, "replacement", c, &n) || !(s->prepend = prepend_scheme(d)))
			return rq_errf(err, -EPROTO, "%s: %s: replacement or prepend_scheme not understood",
				       path, field);
		if (dupstr(c, &s->a, &s->alen))
			return -ENOMEM;
	} else
		return rq_errf(err, -EPROTO, "%s: %s: type \"%s\" is not supported; supported decoders: "
			       "ByteLevel, Metaspace, or a Sequence of Replace (String), ByteFallback, Fuse, "
			       "Strip, Metaspace", path, field, str(d, "type") ? str(d, "type") : "?");
	return 0;
}

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
		return rq_errf(err, -EPROTO, "%s: %s: type \"%s\" is not supported (TemplateProcessing, "
			       "ByteLevel, Sequence, or null)", path, field, str(pp, "type") ? str(pp, "type") : "?");
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

int tok_pipe_load(struct tok *t, const cJSON *root, const char *path, struct rq_err *err)
{
	int rc = load_norm(t, get(root, "normalizer"), "normalizer", path, err);
	if (!rc)
		rc = load_pre(t, get(root, "pre_tokenizer"), "pre_tokenizer", path, err);
	if (rc)
		return rc;
	const cJSON *dec = get(root, "decoder");
	if (!dec || cJSON_IsNull(dec))
		t->dec_none = 1;
	else if ((rc = load_dec(t, dec, "decoder", path, err)))
		return rc;
	for (int i = 0; i < t->n_dec; i++)
		if (t->dec[i].kind == TD_BYTELEVEL && t->n_dec > 1)
			return rq_errf(err, -EPROTO, "%s: decoder: ByteLevel is supported only as the whole "
				       "decoder", path);
	return load_post(t, get(root, "post_processor"), "post_processor", path, err);
}

void tok_pipe_free(struct tok *t)
{
	for (int i = 0; i < t->n_norm; i++) {
		free(t->norm[i].a);
		free(t->norm[i].b);
	}
	for (int i = 0; i < t->n_dec; i++) {
		free(t->dec[i].a);
		free(t->dec[i].b);
	}
}
