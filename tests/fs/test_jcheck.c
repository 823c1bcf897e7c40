/* test_jcheck.c — issue 17, classes 1 and 6 at the unit level:
 *  - st/jcheck.h accepts what cJSON and Python's json read alike and refuses
 *    each kind of disagreement (duplicate keys at any depth, lax whitespace,
 *    raw control characters, trailing data, \u0000, inexact integers, ...),
 *    naming the file and the key path;
 *  - the safetensors parser refuses a duplicate key in __metadata__;
 *  - base/esc.h and rq_errf never let control bytes of input into a message.
 * Argument (optional): a file with one JSON document per line, each preceded
 * by "ok " or "no ", that a peer test (test_jcheck_peer.py) wrote from what
 * Python's json decides; each must get the same answer here. */
#include "st/jcheck.h"
#include "st/jtext.h"
#include "st/st.h"
#include "base/err.h"
#include "base/esc.h"
#include "tests/tap.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

static int check(const char *s, struct rq_err *e)
{
	memset(e, 0, sizeof *e);
	return jc_check(s, strlen(s), "cfg.json", e);
}

static void accepts(const char *s, const char *why)
{
	struct rq_err e;
	int rc = check(s, &e);
	TAP_OK(rc == 0, "accepted: %s%s%s", why, rc ? " -- " : "", rc ? e.msg : "");
}

/* Refused with -EPROTO and every word of `want` (|-separated) in the message. */
static void refuses(const char *s, const char *want, const char *why)
{
	struct rq_err e;
	int rc = check(s, &e);
	int ok = rc == -EPROTO && strstr(e.msg, "cfg.json");
	char w[256];
	snprintf(w, sizeof w, "%s", want);
	for (char *t = strtok(w, "|"); t && ok; t = strtok(NULL, "|"))
		ok = strstr(e.msg, t) != NULL;
	TAP_OK(ok, "refused: %s (rc %d: %s)", why, rc, e.msg);
}

static void grammar(void)
{
	accepts("{\"a\": [1, 2.5, -0, 1e3, true, false, null, \"x\\n\\u00e9\\ud83d\\ude00\"]}",
	        "every kind of value");
	accepts(" \t\r\n{}\n", "the four whitespace bytes around the value");
	accepts("{\"A\": 1, \"a\": 2}", "keys differing in case (cJSON lookups here are case-sensitive)");
	accepts("[{\"a\": 1}, {\"a\": 2}]", "the same key in two objects");
	accepts("{\"m\": 1000000000000000019884624838656}", "10**30 as HF writes it (exact as a double)");
	accepts("{\"m\": 9007199254740992}", "2**53");
	accepts("\"just a string\"", "a scalar document");

	refuses("{\"a\": 1, \"a\": 2}", "\"a\"|appears twice|bytes 1 and 9|top-level object", "duplicate key at the top");
	refuses("{\"q\": {\"c\": {\"g\": 1, \"x\": 0, \"g\": 2}}}", "\"g\"|q.c", "duplicate key two levels down, path named");
	refuses("{\"l\": [0, {\"k\": 1, \"k\": 1}]}", "\"k\"|l[1]", "duplicate inside an array element");
	refuses("{\"ab\": 1, \"a\\u0062\": 2}", "\"ab\"|appears twice", "duplicate written with an escape");
	refuses("{\"a\":\f1}", "control byte|byte 5", "form feed as whitespace (cJSON skips <= 32)");
	refuses("{\"a\":1}\x01", "not strict JSON", "control byte after the value");
	refuses("{\"a\": \"x\ty\"}", "control character in a string", "raw tab in a string");
	refuses("{\"a\": 1} {\"a\": 2}", "data after the JSON value", "trailing document");
	refuses("{\"a\": 1} x", "data after the JSON value", "trailing garbage");
	refuses("{\"a\": \"x\\u0000y\"}", "\\u0000|a string|value at a", "U+0000 in a value");
	refuses("{\"a\\u0000b\": 1}", "\\u0000|a key", "U+0000 in a key");
	refuses("{\"a\": 9007199254740993}", "9007199254740993|9007199254740992", "2**53 + 1 (cJSON rounds it)");
	refuses("{\"a\": -123456789012345678901}", "not exactly representable", "a long negative integer");
	refuses("{\"a\": 1e400}", "beyond the range", "a number that overflows");
	refuses("{\"a\": 01}", "leading zero", "leading zero");
	refuses("{\"a\": 1.}", "no digit after", "1.");
	refuses("{\"a\": +1}", "expected a value", "+1");
	refuses("{\"a\": NaN}", "NaN and Infinity", "NaN (Python reads it, cJSON does not)");
	refuses("{\"a\": Infinity}", "NaN and Infinity", "Infinity");
	refuses("{\"a\": \"\\x\"}", "invalid escape", "invalid escape");
	refuses("{\"a\": \"\\ud800\"}", "surrogate", "lone leading surrogate");
	refuses("{\"a\": \"\\udc00\"}", "surrogate", "lone trailing surrogate");
	refuses("{\"a\": \"\xff\"}", "UTF-8|byte 7", "invalid UTF-8");
	refuses("\xef\xbb\xbf{}", "byte-order mark", "a BOM");
	refuses("", "unexpected end", "empty text");
	refuses("{\"a\": [1, 2,]}", "expected a value", "trailing comma");
	refuses("{\"a\": 1,}", "expected a string", "trailing comma in an object");
	refuses("{'a': 1}", "expected a string", "single quotes");

	char deep[300];
	memset(deep, '[', 129);
	memset(deep + 129, ']', 129);
	deep[258] = 0;
	refuses(deep, "deeper than 128", "129 levels");
	deep[128] = 0;
	memset(deep, '[', 128);
	memset(deep + 128, ']', 128);
	deep[256] = 0;
	accepts(deep, "128 levels");

	/* a key path with control bytes comes out escaped */
	struct rq_err e;
	check("{\"x\\u001b[31m\": {\"k\": 1, \"k\": 2}}", &e);
	TAP_OK(!strchr(e.msg, 0x1b) && strstr(e.msg, "x\\x1b[31m"), "key path escaped: %s", e.msg);
	check("{\"\\n\": 1, \"\\n\": 2}", &e);
	TAP_OK(!strchr(e.msg, '\n') && strstr(e.msg, "\"\\n\" appears twice"), "duplicate key \\n escaped: %s", e.msg);

	/* jc_check_keys (safetensors headers): duplicates only */
	const char *big = "{\"t\": {\"x\": 123456789012345678901234567890, \"m\": \"\\u0000\"}}";
	TAP_OK(jc_check_keys(big, strlen(big), "h", &e) == 0, "jc_check_keys ignores values no cJSON reads");
	TAP_OK(jc_check_keys("{\"t\": {\"x\": 1, \"x\": 1}}", 24, "h", &e) == -EPROTO &&
	       strstr(e.msg, "\"x\" appears twice"), "jc_check_keys refuses a key twice: %s", e.msg);

	/* jc_parse gives the tree on success, NULL with the message otherwise */
	cJSON *j = jc_parse("{\"a\": 1, \"a\": 2}", 16, "x.json", &e);
	TAP_OK(!j && e.code == -EPROTO && strstr(e.msg, "x.json"), "jc_parse refuses: %s", e.msg);
	j = jc_parse("{\"a\": 2}", 8, "x.json", &e);
	TAP_OK(j && cJSON_GetObjectItemCaseSensitive(j, "a")->valuedouble == 2, "jc_parse parses");
	cJSON_Delete(j);
}

/* The text tools find a key as cJSON does: after decoding escapes (else an
 * escaped "quantization\u005fconfig" would be edited by one and read by
 * the other). */
static void text_keys(void)
{
	const char *s = "{\"a\": 1, \"quantization\\u005fconfig\": {\"ig\\/n\\u00e9\\ud83d\\ude00\": 7}}";
	size_t n = strlen(s), qc = 0, v = 0;
	cJSON *j = cJSON_Parse(s);
	TAP_OK(cJSON_GetObjectItemCaseSensitive(j, "quantization_config") != NULL,
	       "cJSON finds the escaped key");
	cJSON_Delete(j);
	int rc = jt_member(s, n, 0, "quantization_config", &qc);
	TAP_OK(rc == 0 && s[qc] == '{', "jt_member finds it too (rc %d)", rc);
	rc = jt_member(s, n, qc, "ig/n\xc3\xa9\xf0\x9f\x98\x80", &v);
	TAP_OK(rc == 0 && s[v] == '7', "jt_member decodes \\/, \\u00e9 and a surrogate pair (rc %d)", rc);
	TAP_OK(jt_member(s, n, 0, "quantization_confi", &v) == -ENOENT &&
	       jt_member(s, n, 0, "quantization_configx", &v) == -ENOENT, "prefixes do not match");
}

/* A duplicate key in a safetensors header's __metadata__ (copied into the
 * headers we present) is refused, naming the file and the key. */
static void st_metadata(void)
{
	const char *json = "{\"__metadata__\": {\"format\": \"pt\", \"format\": \"np\"}, "
	                   "\"t\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}}";
	size_t n = strlen(json), len = 8 + n + 2;
	uint8_t *b = malloc(len);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)n >> (8 * i));
	memcpy(b + 8, json, n);
	b[8 + n] = b[9 + n] = 7;
	struct st_header *h = NULL;
	struct rq_err e = {0};
	int rc = st_parse_mem(b, len, len, "s.safetensors", &h, &e);
	TAP_OK(rc == -EPROTO && strstr(e.msg, "s.safetensors (header)") && strstr(e.msg, "at __metadata__") &&
	       strstr(e.msg, "\"format\" appears twice"), "st: duplicate __metadata__ key: %s", e.msg);
	st_header_free(h);
	/* a repeated extra field of a tensor entry (ignored by every reader, but
	 * a key twice all the same) */
	const char *j3 = "{\"t\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2], "
	                 "\"x\": 1, \"x\": 2}}";
	n = strlen(j3);
	len = 8 + n + 2;
	b = realloc(b, len);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)n >> (8 * i));
	memcpy(b + 8, j3, n);
	b[8 + n] = b[9 + n] = 7;
	h = NULL;
	rc = st_parse_mem(b, len, len, "s.safetensors", &h, &e);
	TAP_OK(rc == -EPROTO && strstr(e.msg, "\"x\" appears twice in the object at t"),
	       "st: a tensor entry's extra field twice: %s", e.msg);
	st_header_free(h);
	/* and a tensor name with ESC and a newline is escaped in messages */
	const char *j2 = "{\"bad\\u001b[2J\\nname\": {\"dtype\": \"U8\", \"shape\": [3], "
	                 "\"data_offsets\": [0, 2]}}";
	n = strlen(j2);
	len = 8 + n + 2;
	b = realloc(b, len);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)n >> (8 * i));
	memcpy(b + 8, j2, n);
	h = NULL;
	rc = st_parse_mem(b, len, len, "s.safetensors", &h, &e);
	TAP_OK(rc == -EPROTO && !strchr(e.msg, 0x1b) && !strchr(e.msg, '\n') &&
	       strstr(e.msg, "bad\\x1b[2J\\nname"), "st: tensor name escaped: %s", e.msg);
	st_header_free(h);
	free(b);
}

static void escaping(void)
{
	char out[64];
	TAP_OK(!strcmp(rq_esc(out, sizeof out, "plain é ✓"), "plain é ✓"), "printable UTF-8 kept");
	TAP_OK(!strcmp(rq_esc(out, sizeof out, "a\x1b[31mb\r\n\t\x7f"), "a\\x1b[31mb\\r\\n\\t\\x7f"),
	       "C0 controls and DEL: %s", out);
	TAP_OK(!strcmp(rq_esc(out, sizeof out, "x\xff\xc3(y"), "x\\xff\\xc3(y"), "invalid UTF-8: %s", out);
	TAP_OK(!strcmp(rq_esc(out, sizeof out, "\xc2\x9b" "1m \xe2\x80\xae!"), "\\u{009b}1m \\u{202e}!"),
	       "C1 CSI and a bidi override: %s", out);
	TAP_OK(!strcmp(rq_esc(out, sizeof out, "\xed\xa0\x80"), "\\xed\\xa0\\x80"), "encoded surrogate: %s", out);
	char twice[64];
	rq_esc(twice, sizeof twice, out);
	TAP_OK(!strcmp(twice, out), "escaping twice changes nothing");
	char small[8];
	rq_esc(small, sizeof small, "abcdefghijkl");
	TAP_OK(!strcmp(small, "abcd..."), "too long ends in ...: %s", small);
	TAP_OK(rq_esc_clean("ok", 2) && !rq_esc_clean("\n", 1), "rq_esc_clean");

	struct rq_err e;
	rq_errf(&e, -EPROTO, "%s: tensor '%s' (%d, %llu, %zu, %.3s, %5.1f, %%, %c) '%.*s'", "f\nx",
	        "t\x1b]0;pwn\x07", -3, 18446744073709551615ull, (size_t)7, "abcdef", 2.25, 'q', 2, "\r\rzz");
	TAP_OK(!strcmp(e.msg, "f\\nx: tensor 't\\x1b]0;pwn\\x07' (-3, 18446744073709551615, 7, abc,   2.2, "
	                      "%, q) '\\r\\r'") && e.code == -EPROTO, "rq_errf escapes %%s args, formats the rest: %s",
	       e.msg);
	rq_errf(&e, -EINVAL, "list:");
	rq_err_append(&e, "\n  %s", "one");
	rq_err_append(&e, "\n  %s", "tw\no");
	TAP_OK(!strcmp(e.msg, "list:\n  one\n  tw\\no"), "rq_err_append keeps the format's newlines only");
	rq_err_prefix(&e, "%s", "p\x1b");
	TAP_OK(!strncmp(e.msg, "p\\x1b: list:\n", 13), "rq_err_prefix escapes its arguments: %s", RQ_ESC(e.msg));
}

/* Documents decided by Python's json (peer): same answers. */
static void peer(const char *file)
{
	size_t len;
	char *all = tap_slurp(file, &len);
	TAP_OK(all != NULL, "peer cases %s readable", file);
	if (!all)
		return;
	int n = 0, agree = 0;
	for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
		/* "ok <hex>" / "no <hex>": the document hex-encoded (it may hold any byte) */
		int want = !strncmp(line, "ok ", 3);
		size_t hl = strlen(line + 3), dl = hl / 2;
		char *doc = malloc(dl + 1);
		for (size_t i = 0; i < dl; i++) {
			unsigned v;
			sscanf(line + 3 + 2 * i, "%2x", &v);
			doc[i] = (char)v;
		}
		struct rq_err e;
		int rc = jc_check(doc, dl, "peer.json", &e);
		n++;
		if ((rc == 0) == want)
			agree++;
		else
			printf("# disagree with Python (python %s): %.*s -> %s\n", want ? "accepts" : "refuses",
			       (int)dl, doc, rc ? e.msg : "accepted");
		free(doc);
	}
	TAP_OK(n > 0 && agree == n, "%d of %d documents decided as Python's json (plus cJSON) decides",
	       agree, n);
	free(all);
}

int main(int argc, char **argv)
{
	grammar();
	text_keys();
	st_metadata();
	escaping();
	if (argc > 1)
		peer(argv[1]);
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}
