/* test_tokenizer — the tokenizer against golden ids from Hugging Face
 * `tokenizers` (tests/data/tok_golden.json, made by tools/golden/gen_tok_golden.py
 * from the tokenizer mk_write_tokenizer writes), plus round trips, the
 * streaming decoder, the loader's refusals, and an encode-speed figure.
 *
 * usage: test_tokenizer tests/data/tok_golden.json */
#include "engine/tok/tokenizer.h"
#include "base/err.h"
#include "tools/mkckpt/mkckpt.h"
#include "tests/tap.h"
#include "tests/engine/tok_json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int spit(const char *path, const char *s)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	fputs(s, f);
	return fclose(f);
}

static uint64_t fnv64(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
	return h;
}

static int ids_equal(const struct tok_ids *got, const cJSON *want)
{
	if ((int)got->n != cJSON_GetArraySize(want))
		return 0;
	int i = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, want)
		if (got->v[i++] != it->valueint)
			return 0;
	return 1;
}

static void show_ids(const char *label, const struct tok_ids *ids)
{
	printf("#   %s:", label);
	for (size_t i = 0; i < ids->n && i < 40; i++)
		printf(" %d", ids->v[i]);
	printf("\n");
}

/* tok_decode and the stream must agree with each other and with want. */
static int decode_both(const struct tok *t, const int32_t *ids, size_t n, int flags,
                       const char *want, size_t want_len)
{
	char *out;
	size_t len;
	if (tok_decode(t, ids, n, flags, &out, &len))
		return 0;
	int ok = len == want_len && !memcmp(out, want, len);
	free(out);
	struct tok_stream *s = tok_stream_new(t, flags);
	char *acc = malloc(want_len * 3 + 64);
	size_t accn = 0;
	const char *piece;
	for (size_t i = 0; i < n && ok; i++) {
		if (tok_stream_push(s, ids[i], &piece, &len))
			ok = 0;
		/* only whole UTF-8 sequences may come out */
		else if (len && ((unsigned char)piece[len - 1] & 0xC0) == 0xC0)
			ok = 0;
		else if (accn + len <= want_len * 3 + 64) {
			memcpy(acc + accn, piece, len);
			accn += len;
		}
	}
	if (ok && !tok_stream_flush(s, &piece, &len) && accn + len <= want_len * 3 + 64) {
		memcpy(acc + accn, piece, len);
		accn += len;
		ok = accn == want_len && !memcmp(acc, want, accn);
	} else
		ok = 0;
	tok_stream_free(s);
	free(acc);
	return ok;
}

static void golden(const struct tok *t, const cJSON *g)
{
	const cJSON *c;
	char *buf = malloc(1 << 16);
	int n_ok = 0, n = 0;
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "cases")) {
		const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
		size_t len = tj_unhex(cJSON_GetStringValue(cJSON_GetObjectItem(c, "hex")), buf);
		struct tok_ids plain = {0}, spec = {0};
		int rc = tok_encode(t, buf, len, 0, &plain) | tok_encode(t, buf, len, TOK_ADD_SPECIAL, &spec);
		int ok = !rc && ids_equal(&plain, cJSON_GetObjectItem(c, "ids")) &&
		         ids_equal(&spec, cJSON_GetObjectItem(c, "ids_special"));
		TAP_OK(ok, "encode \"%s\" (%zu bytes -> %zu ids) == tokenizers", name, len, plain.n);
		if (!ok)
			show_ids("ours", &plain);
		TAP_OK(decode_both(t, plain.v, plain.n, 0, buf, len), "decode(encode(\"%s\")) == text, "
		       "also streamed", name);
		n_ok += ok;
		n++;
		tok_ids_free(&plain);
		tok_ids_free(&spec);
	}
	printf("# %d of %d golden texts encode exactly\n", n_ok, n);
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "decodes")) {
		const cJSON *it;
		int32_t ids[128];
		size_t k = 0;
		cJSON_ArrayForEach(it, cJSON_GetObjectItem(c, "ids"))
			if (k < 128)
				ids[k++] = it->valueint;
		int skip = cJSON_IsTrue(cJSON_GetObjectItem(c, "skip_special"));
		size_t len = tj_unhex(cJSON_GetStringValue(cJSON_GetObjectItem(c, "hex")), buf);
		TAP_OK(decode_both(t, ids, k, skip ? TOK_SKIP_SPECIAL : 0, buf, len),
		       "decode of %zu ids (first %d, skip_special %d) == tokenizers", k, k ? ids[0] : -1, skip);
	}
	free(buf);
}

/* Rewrites the merges of a tokenizer.json as "a b" strings. */
static char *string_merges(const char *json)
{
	cJSON *root = cJSON_Parse(json), *m, *list = cJSON_CreateArray();
	cJSON *model = cJSON_GetObjectItem(root, "model");
	cJSON_ArrayForEach(m, cJSON_GetObjectItem(model, "merges")) {
		char s[512];
		snprintf(s, sizeof s, "%s %s", cJSON_GetArrayItem(m, 0)->valuestring,
		         cJSON_GetArrayItem(m, 1)->valuestring);
		cJSON_AddItemToArray(list, cJSON_CreateString(s));
	}
	cJSON_ReplaceItemInObject(model, "merges", list);
	char *out = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	return out;
}

static char *replace(const char *s, const char *from, const char *to)
{
	const char *p = strstr(s, from);
	if (!p)
		return strdup(s);
	char *o = malloc(strlen(s) + strlen(to) + 1);
	sprintf(o, "%.*s%s%s", (int)(p - s), s, to, p + strlen(from));
	return o;
}

static void variants(const char *dir, const char *json, const struct tok *ref, const cJSON *g)
{
	char path[4200];
	struct rq_err err = {0};
	struct tok *t = NULL;
	snprintf(path, sizeof path, "%s/variant.json", dir);

	char *v = string_merges(json);
	spit(path, v);
	free(v);
	int rc = tok_load(path, &t, &err);
	int same = !rc;
	const cJSON *c;
	char buf[4096];
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "cases")) {
		size_t len = tj_unhex(cJSON_GetStringValue(cJSON_GetObjectItem(c, "hex")), buf);
		struct tok_ids a = {0}, b = {0};
		if (same && (tok_encode(t, buf, len, 0, &a) || tok_encode(ref, buf, len, 0, &b) ||
		             a.n != b.n || (a.n && memcmp(a.v, b.v, a.n * sizeof *a.v))))
			same = 0;
		tok_ids_free(&a);
		tok_ids_free(&b);
	}
	TAP_OK(same, "merges written as \"a b\" strings load and encode the same (rc %d %s)", rc, err.msg);
	tok_free(t);
	t = NULL;

	/* what is refused, with the JSON path the message must name */
	static const char *const breakers[][3] = {
		{"\"MergedWithNext\"", "\"Glued\"", "pre_tokenizer.pretokenizers[0]: behavior \"Glued\""},
		{"\\\\p{N}|", "\\\\p{N}\\\\b|", "pre_tokenizer.pretokenizers[1]: pattern.Regex"},
		{"\\\\p{N}|", "\\\\p{N}(|", "does not compile"},
		{"\"normalizer\":\tnull", "\"normalizer\":\t{\"type\": \"StripAccents\"}",
		 "normalizer: type \"StripAccents\" is not supported (no family we run uses it)"},
		{"\"normalizer\":\tnull", "\"normalizer\":\t{\"type\": \"Sequence\", \"normalizers\": [{\"type\": "
		 "\"NFC\"}, {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"\"}]}",
		 "normalizer.normalizers[1]: type \"Precompiled\""},
		{"\"normalizer\":\tnull", "\"normalizer\":\t{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" \"}}",
		 "normalizer: \"content\" must be a string"},
		{"\"decoder\":", "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, "
		 "{\"type\": \"CTC\"}]}, \"old_decoder\":", "decoder.decoders[1]: type \"CTC\" is not supported"},
		{"\"decoder\":", "\"decoder\": {\"type\": \"Strip\", \"content\": \" \", \"start\": -1, \"stop\": 0}, "
		 "\"old_decoder\":", "decoder: \"start\" must be a count"},
		{"\"type\":\t\"BPE\"", "\"type\":\t\"WordPiece\"", "model: type \"WordPiece\""},
		{"\"dropout\":\tnull", "\"dropout\":\t0.1", "model.dropout"},
	};
	for (size_t i = 0; i < sizeof breakers / sizeof breakers[0]; i++) {
		char *b = replace(json, breakers[i][0], breakers[i][1]);
		int changed = strcmp(b, json) != 0;
		spit(path, b);
		free(b);
		err.msg[0] = 0;
		rc = tok_load(path, &t, &err);
		TAP_OK(changed && rc == -EPROTO && strstr(err.msg, "variant.json") && strstr(err.msg, breakers[i][2]),
		       "refuses %s -> %s: %s", breakers[i][0], breakers[i][1], err.msg);
		tok_free(t);
		t = NULL;
	}
	/* a regex that backtracks catastrophically: the encode fails, never hangs */
	char *b = replace(json, "\"(?i:'s", "\"(?:a|aa)+$|(?i:'s");
	spit(path, b);
	free(b);
	rc = tok_load(path, &t, &err);
	struct tok_ids ids = {0};
	const char *aab = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab";
	int erc = rc ? rc : tok_encode(t, aab, strlen(aab), 0, &ids);
	TAP_OK(rc == 0 && erc == -ERANGE, "a catastrophic regex fails the encode with -ERANGE (load %d, encode %d)",
	       rc, erc);
	tok_ids_free(&ids);
	tok_free(t);
	t = NULL;
	spit(path, "{\"model\": ");
	TAP_OK(tok_load(path, &t, &err) == -EPROTO, "refuses truncated JSON: %s", err.msg);
	TAP_OK(tok_load("/nonexistent/tokenizer.json", &t, &err) == -ENOENT, "missing file: %s", err.msg);
	unlink(path);
}

static void misc(const struct tok *t, const cJSON *g)
{
	TAP_OK(tok_vocab_size(t) == cJSON_GetObjectItem(g, "vocab_size")->valueint, "vocab size %d",
	       tok_vocab_size(t));
	TAP_OK(tok_id(t, "\xe3\x80\x88|EOS|\xe3\x80\x89") == 2 && tok_id(t, "\xe3\x80\x88|PAD|\xe3\x80\x89") == 9 &&
	       tok_id(t, "<think>") == 18 && tok_id(t, "</think>") == 19 && tok_id(t, "<assistant>") == 23 &&
	       tok_id(t, "</assistant>") == 24 && tok_id(t, "<user>") == -1,
	       "Laguna's ids: bos/eos 2, pad 9, <think> 18, </think> 19, <assistant> 23, </assistant> 24");
	int32_t pre[4] = {-1, -1, -1, -1};
	TAP_OK(tok_prefix_ids(t, pre, 4) == 1 && pre[0] == 2 && pre[1] == -1,
	       "the post-processor puts one id before the text: 2 (got %d)", pre[0]);
	TAP_OK(tok_is_special(t, 2) && tok_is_special(t, 24) && !tok_is_special(t, 18) &&
	       !tok_is_special(t, 23) && !tok_is_special(t, 500) && !tok_is_special(t, -1),
	       "special flags: 2 and 24 special, 18 and 23 not");
	const char *b;
	size_t n;
	TAP_OK(tok_token_bytes(t, 24, &b, &n) == 0 && n == 12 && !memcmp(b, "</assistant>", 12) &&
	       tok_token_bytes(t, -1, &b, &n) == -EINVAL && tok_token_bytes(t, 1 << 20, &b, &n) == -EINVAL,
	       "token bytes of 24 and of bad ids");

	/* bytes that are not UTF-8 still round-trip, one "other" character each */
	static const char bad[] = "ok \xff\xfe \xc3( \xe2\x82 x\xed\xa0\x80y \xf4\x90\x80\x80 \xc0\xaf end\xe2";
	struct tok_ids ids = {0};
	int rc = tok_encode(t, bad, sizeof bad - 1, 0, &ids);
	char *out;
	size_t len;
	int ok = !rc && !tok_decode(t, ids.v, ids.n, 0, &out, &len);
	/* decode is lossy by design (as tokenizers), so check the raw bytes */
	struct { char b[256]; size_t n; } raw = {{0}, 0};
	for (size_t i = 0; ok && i < ids.n; i++) {
		ok = !tok_token_bytes(t, ids.v[i], &b, &n) && raw.n + n < sizeof raw.b;
		memcpy(raw.b + raw.n, b, n);
		raw.n += n;
	}
	TAP_OK(ok && raw.n == sizeof bad - 1 && !memcmp(raw.b, bad, raw.n),
	       "invalid UTF-8 input: token bytes concatenate back to the input");
	if (ok)
		free(out);
	tok_ids_free(&ids);
}

/* A hand-made SentencePiece-style tokenizer.json (Llama-2's pipeline) whose
 * ids follow by hand from the rules: Prepend/Replace normalizers, byte
 * fallback, fused unk, BOS template, the Replace/ByteFallback/Fuse/Strip
 * decoder. The peer test checks the same shapes against tokenizers itself. */
static const char SP_JSON[] =
	"{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
	" {\"id\": 1, \"content\": \"<s>\", \"special\": true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
	" \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\u2581\"},"
	"  {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\u2581\"}]},"
	" \"pre_tokenizer\": null,"
	" \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}},"
	"  {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1]}}},"
	" \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\u2581\"},"
	"  \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
	"  {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
	" \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": \"<unk>\", \"fuse_unk\": true,"
	"  \"byte_fallback\": true, \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"\u2581\": 3, \"h\": 4,"
	"  \"i\": 5, \"\u2581h\": 6, \"\u2581hi\": 7, \"<0xC3>\": 8, \"<0xA9>\": 9}, \"merges\": [\"\u2581 h\", \"\u2581h i\"]}}";

static void sentencepiece(const char *dir)
{
	char path[4200];
	struct rq_err err = {0};
	struct tok *t = NULL;
	snprintf(path, sizeof path, "%s/sp.json", dir);
	spit(path, SP_JSON);
	int rc = tok_load(path, &t, &err);
	TAP_OK(rc == 0, "SentencePiece-style tokenizer.json loads: %s", rc ? err.msg : "ok");
	if (rc)
		return;
	static const struct {
		const char *text;
		int flags;
		int32_t ids[6];
		size_t n;
		const char *back;   /* decode of ids, skipping specials */
	} cases[] = {
		{"hi hi", 0, {7, 7}, 2, "hi hi"},
		{"hi hi", TOK_ADD_SPECIAL, {1, 7, 7}, 3, "hi hi"},
		{"h\xc3\xa9", 0, {6, 8, 9}, 3, "h\xc3\xa9"},                 /* byte fallback */
		{"<s>hi", 0, {1, 7}, 2, "hi"},                               /* Prepend per gap */
		{"zz hi", 0, {3, 0, 7}, 3, " hi"},    /* fused unk; skipped as special: "▁" "▁hi" */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct tok_ids ids = {0};
		int ok = !tok_encode(t, cases[i].text, strlen(cases[i].text), cases[i].flags, &ids) &&
		         ids.n == cases[i].n && !memcmp(ids.v, cases[i].ids, ids.n * sizeof *ids.v);
		TAP_OK(ok, "SentencePiece-style encode \"%s\" (flags %d)", cases[i].text, cases[i].flags);
		if (!ok)
			show_ids("ours", &ids);
		TAP_OK(decode_both(t, cases[i].ids, cases[i].n, TOK_SKIP_SPECIAL, cases[i].back, strlen(cases[i].back)),
		       "SentencePiece-style decode (and streamed) -> \"%s\"", cases[i].back);
		tok_ids_free(&ids);
	}
	int32_t bad[] = {6, 8};   /* a byte run that never completes: one U+FFFD per byte */
	TAP_OK(decode_both(t, bad, 2, 0, "h\xef\xbf\xbd", 4), "unfinished byte-fallback run decodes to U+FFFD");
	tok_free(t);
	t = NULL;
	char *v = replace(SP_JSON, "\"unk_token\": \"<unk>\"", "\"unk_token\": \"<nope>\"");
	spit(path, v);
	free(v);
	TAP_OK(tok_load(path, &t, &err) == -EPROTO && strstr(err.msg, "unk_token"), "refuses an unk_token "
	       "outside the vocab: %s", err.msg);
	tok_free(t);
	unlink(path);
}

static void speed(const struct tok *t, const cJSON *g)
{
	size_t cap = 1 << 20, n = 0;
	char *text = malloc(cap + 4096), buf[4096];
	const cJSON *c;
	while (n < cap)
		cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "cases")) {
			size_t len = tj_unhex(cJSON_GetStringValue(cJSON_GetObjectItem(c, "hex")), buf);
			memcpy(text + n, buf, len);
			n += len;
		}
	struct timespec a, b;
	struct tok_ids ids = {0};
	clock_gettime(CLOCK_MONOTONIC, &a);
	int rc = tok_encode(t, text, n, 0, &ids);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
	TAP_OK(rc == 0 && ids.n > n / 16, "encode %.1f MB of golden text: %zu ids", n / 1e6, ids.n);
	printf("# encode speed: %.1f MB/s, %.2f Mtok/s (one thread)\n", n / 1e6 / s, ids.n / 1e6 / s);
	tok_ids_free(&ids);
	free(text);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return printf("Bail out! usage: test_tokenizer tok_golden.json\n"), 1;
	char *gtext = tap_slurp(argv[1], NULL);
	cJSON *g = gtext ? cJSON_Parse(gtext) : NULL;
	TAP_OK(g != NULL, "read %s", argv[1]);
	if (!g)
		return tap_done();

	char dir[] = "/tmp/rq-tok-XXXXXX", path[4200];
	struct rq_err err = {0};
	int vs = 0;
	TAP_OK(mkdtemp(dir) && !mk_write_tokenizer(dir, &vs, &err), "mk_write_tokenizer: %d ids %s", vs, err.msg);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	size_t jlen = 0;
	char *json = tap_slurp(path, &jlen), hash[32];
	snprintf(hash, sizeof hash, "%016llx", json ? (unsigned long long)fnv64(json, jlen) : 0ULL);
	TAP_OK(json && !strcmp(hash, cJSON_GetStringValue(cJSON_GetObjectItem(g, "tokenizer_json_fnv64"))),
	       "tokenizer.json is the one the golden data was made from (fnv64 %s); if mkckpt's "
	       "tokenizer changed on purpose, rerun tools/golden/gen_tok_golden.py", hash);

	struct tok *t = NULL;
	int rc = tok_load(dir, &t, &err);
	TAP_OK(rc == 0, "tok_load(%s): %s", dir, rc ? err.msg : "ok");
	if (t) {
		golden(t, g);
		misc(t, g);
		if (json)
			variants(dir, json, t, g);
		sentencepiece(dir);
		speed(t, g);
	}
	tok_free(t);
	free(json);
	cJSON_Delete(g);
	free(gtext);
	tap_rmtree(dir);
	return tap_done();
}
