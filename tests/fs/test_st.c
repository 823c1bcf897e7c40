/* test_st.c — fs/st.h: the canonical serializer against bytes written by
 * safetensors 0.8 (captured below), round trips, every refusal of SPEC.md §5
 * with the right code and a message naming the file and tensor, and a
 * random-mutation fuzz loop that must never crash. */
#include "st/st.h"

#include "base/err.h"
#include "tests/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------ */

/* A whole file in memory: 8-byte length, header text as given (padded with
 * spaces to pad8 when asked), then data_len bytes of data. */
static uint8_t *mkfile(const char *json, int pad8, size_t data_len, size_t *len)
{
	size_t n = strlen(json), hn = n;
	if (pad8)
		while (hn % 8)
			hn++;
	uint8_t *b = malloc(8 + hn + data_len + 1);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)hn >> (8 * i));
	memcpy(b + 8, json, n);
	memset(b + 8 + n, ' ', hn - n);
	for (size_t i = 0; i < data_len; i++)
		b[8 + hn + i] = (uint8_t)i;
	*len = 8 + hn + data_len;
	return b;
}

static int parse_json(const char *json, size_t data_len, struct st_header **h, struct rq_err *err)
{
	size_t len;
	uint8_t *b = mkfile(json, 1, data_len, &len);
	int rc = st_parse_mem(b, len, len, "t.safetensors", h, err);
	free(b);
	return rc;
}

/* Expects a refusal: -EPROTO and every needle in the message. */
static void refuse(const char *what, const char *json, size_t data_len, const char *needle)
{
	struct st_header *h = NULL;
	struct rq_err err = {0};
	int rc = parse_json(json, data_len, &h, &err);
	TAP_OK(rc == -EPROTO && strstr(err.msg, "t.safetensors") &&
	       (!needle || strstr(err.msg, needle)),
	       "refuses %s (rc %d: %s)", what, rc, err.msg);
	if (!rc)
		st_header_free(h);
}

static void accept(const char *what, const char *json, size_t data_len, size_t ntensors)
{
	struct st_header *h = NULL;
	struct rq_err err = {0};
	int rc = parse_json(json, data_len, &h, &err);
	TAP_OK(rc == 0 && h->n == ntensors, "accepts %s (rc %d: %s)", what, rc, err.msg);
	if (!rc)
		st_header_free(h);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* ---- the serializer ----------------------------------------------------- */

static void test_dtypes(void)
{
	int ok = 1;
	for (int d = 0; d < ST_NDTYPES; d++) {
		enum st_dtype back;
		const char *n = st_dtype_name((enum st_dtype)d);
		if (st_dtype_parse(n, strlen(n), &back) || back != (enum st_dtype)d)
			ok = 0;
	}
	enum st_dtype x;
	TAP_OK(ok, "every dtype name parses back to itself");
	TAP_OK(st_dtype_parse("bf16", 4, &x) == -EINVAL && st_dtype_parse("BF1", 3, &x) == -EINVAL,
	       "unknown dtype names are refused");
	TAP_OK(st_dtype_bits(ST_F4) == 4 && st_dtype_bits(ST_F6_E2M3) == 6 &&
	       st_dtype_bits(ST_BF16) == 16 && st_dtype_bits(ST_C64) == 64 &&
	       st_dtype_bits(ST_F8_E8M0) == 8, "dtype sizes");
}

/* Captured from safetensors 0.8.0: serialize(t, metadata={"format": "pt"}). */
static const char golden1[] =
	"{\"__metadata__\":{\"format\":\"pt\"},"
	"\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	"\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[8,20]},"
	"\"z0\":{\"dtype\":\"BF16\",\"shape\":[0,5],\"data_offsets\":[20,20]},"
	"\"w.scale\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,2],\"data_offsets\":[20,22]},"
	"\"q\\\"\\\\\\n\\u0001\\u001f\x7f\\t\\b\\f\\r/\xc3\xa9\":{\"dtype\":\"I8\",\"shape\":[],"
	"\"data_offsets\":[22,23]},"
	"\"c\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[23,27]}}   ";

static void test_layout_golden(void)
{
	struct st_spec s[] = {
		{"b", ST_BF16, 2, {2, 3}},
		{"a", ST_F32, 1, {2}},
		{"c", ST_U8, 1, {4}},
		{"w.scale", ST_F8_E4M3, 2, {1, 2}},
		{"q\"\\\n\x01\x1f\x7f\t\b\f\r/\xc3\xa9", ST_I8, 0, {0}},
		{"z0", ST_BF16, 2, {0, 5}},
	};
	size_t n = sizeof s / sizeof s[0], order[6], hlen;
	uint64_t begin[6], dsize;
	uint8_t *hdr;
	struct rq_err err = {0};
	int rc = st_layout(s, n, "{\"format\":\"pt\"}", &hdr, &hlen, order, begin, &dsize, &err);
	TAP_OK(rc == 0, "st_layout on six tensors (%s)", err.msg);
	if (rc)
		return;
	size_t glen = sizeof golden1 - 1;
	TAP_OK(hlen == 8 + glen && glen == 408 && hdr[0] == 408 % 256 && hdr[1] == 408 / 256 &&
	       !memcmp(hdr + 8, golden1, glen), "header bytes equal safetensors 0.8's");
	TAP_OK(dsize == 27 && begin[1] == 0 && begin[0] == 8 && begin[5] == 20 && begin[3] == 20 &&
	       begin[4] == 22 && begin[2] == 23, "data offsets");
	TAP_OK(order[0] == 1 && order[1] == 0 && order[2] == 5 && order[3] == 3 && order[4] == 4 &&
	       order[5] == 2, "data order: dtype descending, then name");
	free(hdr);

	/* F4: logical shape, two per byte; an empty set is "{}" plus padding */
	struct st_spec f4 = {"x", ST_F4, 2, {3, 2}};
	rc = st_layout(&f4, 1, NULL, &hdr, &hlen, NULL, NULL, NULL, &err);
	static const char g2[] = "{\"x\":{\"dtype\":\"F4\",\"shape\":[3,2],\"data_offsets\":[0,3]}} ";
	TAP_OK(rc == 0 && hlen == 8 + sizeof g2 - 1 && !memcmp(hdr + 8, g2, sizeof g2 - 1),
	       "F4 tensor header matches safetensors");
	if (!rc)
		free(hdr);
	rc = st_layout(NULL, 0, NULL, &hdr, &hlen, NULL, NULL, &dsize, &err);
	TAP_OK(rc == 0 && hlen == 16 && hdr[0] == 8 && !memcmp(hdr + 8, "{}      ", 8) && dsize == 0,
	       "empty tensor set");
	if (!rc)
		free(hdr);
}

static void test_layout_refusals(void)
{
	uint8_t *hdr = NULL;
	size_t hlen;
	struct rq_err err = {0};
	struct st_spec dup[] = {{"a", ST_F32, 1, {1}}, {"b", ST_U8, 1, {1}}, {"a", ST_BF16, 1, {1}}};
	TAP_OK(st_layout(dup, 3, NULL, &hdr, &hlen, NULL, NULL, NULL, &err) == -EINVAL &&
	       strstr(err.msg, "duplicate") && strstr(err.msg, "'a'"), "layout refuses duplicates: %s",
	       err.msg);
	struct st_spec odd = {"f4odd", ST_F4, 1, {3}};
	TAP_OK(st_layout(&odd, 1, NULL, &hdr, &hlen, NULL, NULL, NULL, &err) == -EINVAL &&
	       strstr(err.msg, "f4odd"), "layout refuses 3 F4 values (1.5 bytes): %s", err.msg);
	struct st_spec big = {"huge", ST_F64, 3, {1ull << 32, 1ull << 32, 2}};
	TAP_OK(st_layout(&big, 1, NULL, &hdr, &hlen, NULL, NULL, NULL, &err) == -EINVAL,
	       "layout refuses an overflowing shape");
	struct st_spec ok = {"a", ST_F32, 1, {1}};
	TAP_OK(st_layout(&ok, 1, "{\"a\":1}", &hdr, &hlen, NULL, NULL, NULL, &err) == -EINVAL,
	       "layout refuses __metadata__ with a non-string value");
	TAP_OK(hdr == NULL, "no output on failure");
}

/* ---- parse what we write ------------------------------------------------ */

static void test_round_trip(void)
{
	int bad = 0;
	for (int iter = 0; iter < 200; iter++) {
		struct st_spec s[12];
		char names[12][32];
		size_t n = rnd() % 12, order[12];
		uint64_t begin[12], dsize;
		for (size_t i = 0; i < n; i++) {
			snprintf(names[i], sizeof names[i], "t%llu.%zu\x01\xe2\x82\xac",
			         (unsigned long long)(rnd() % 100), i);
			s[i].name = names[i];
			do
				s[i].dtype = (enum st_dtype)(rnd() % ST_NDTYPES);
			while (st_dtype_bits(s[i].dtype) < 8);
			s[i].ndim = (int)(rnd() % 4);
			for (int d = 0; d < s[i].ndim; d++)
				s[i].shape[d] = rnd() % 5;
		}
		const char *meta = iter % 3 == 0 ? NULL : iter % 3 == 1 ? "{\"format\":\"pt\"}"
		                                                        : "{\"a\":\"\\u00e9\\n\",\"b\":\"\"}";
		uint8_t *hdr;
		size_t hlen;
		struct rq_err err = {0};
		if (st_layout(s, n, meta, &hdr, &hlen, order, begin, &dsize, &err)) {
			bad++;
			continue;
		}
		uint8_t *file = calloc(1, hlen + dsize);
		memcpy(file, hdr, hlen);
		struct st_header *h;
		if (st_parse_mem(file, hlen + dsize, hlen + dsize, "rt", &h, &err)) {
			printf("# round trip %d: %s\n", iter, err.msg);
			bad++;
		} else {
			if (h->n != n || h->data_start != hlen || h->file_size != hlen + dsize ||
			    (meta ? !h->metadata || strcmp(h->metadata, meta) : h->metadata != NULL))
				bad++;
			/* zero-size tensors may share an offset, so compare by name */
			for (size_t i = 0; i < n && h->n == n; i++) {
				const struct st_spec *x = &s[order[i]];
				long f = st_find(h, x->name);
				const struct st_tensor *t = f < 0 ? NULL : &h->t[f];
				if (!t || strcmp(t->name, x->name) || t->dtype != x->dtype ||
				    t->ndim != x->ndim ||
				    memcmp(t->shape, x->shape, sizeof(uint64_t) * (size_t)x->ndim) ||
				    t->begin != begin[order[i]] ||
				    t->end != begin[order[i]] + st_spec_bytes(x) ||
				    (i && h->t[i].begin < h->t[i - 1].begin))
					bad++;
			}
			if (st_find(h, "no such tensor") != -1)
				bad++;
			st_header_free(h);
		}
		free(file);
		free(hdr);
	}
	TAP_OK(bad == 0, "200 random tensor sets survive st_layout -> st_parse_mem (%d bad)", bad);
}

/* ---- refusals ----------------------------------------------------------- */

static void test_refusals(void)
{
	struct st_header *h = NULL;
	struct rq_err err = {0};
	uint8_t tiny[5] = {0};
	TAP_OK(st_parse_mem(tiny, 5, 5, "t.safetensors", &h, &err) == -EPROTO &&
	       strstr(err.msg, "t.safetensors"), "refuses a file shorter than 8 bytes: %s", err.msg);
	uint8_t big[16] = {0};
	uint64_t n = 100000001;
	memcpy(big, &n, 8);
	TAP_OK(st_parse_mem(big, 16, 1ull << 40, "t.safetensors", &h, &err) == -EPROTO &&
	       strstr(err.msg, "100,000,000"), "refuses N > 100,000,000: %s", err.msg);
	n = 100;
	memcpy(big, &n, 8);
	TAP_OK(st_parse_mem(big, 16, 16, "t.safetensors", &h, &err) == -EPROTO,
	       "refuses 8 + N > file size: %s", err.msg);

	const char *T = "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
	char buf[512];
	snprintf(buf, sizeof buf, "{\"a\":%s}", T);
	accept("a one-tensor file", buf, 8, 1);
	refuse("a truncated data section", buf, 7, "truncated");
	refuse("trailing bytes after the data", buf, 9, "trailing");
	refuse("a JSON array header", "[1,2]", 0, "not a JSON object");
	refuse("garbage after the object", "{}x", 0, "trailing");
	size_t len;
	uint8_t *nul = mkfile("{}", 1, 0, &len);
	nul[len - 1] = 0;
	TAP_OK(st_parse_mem(nul, len, len, "t.safetensors", &h, &err) == -EPROTO,
	       "refuses NUL padding: %s", err.msg);
	free(nul);
	refuse("invalid UTF-8", "{\"\xff\":1}", 0, "UTF-8");
	refuse("a UTF-8-encoded surrogate", "{\"\xed\xa0\x80\":1}", 0, "UTF-8");
	refuse("an unknown dtype",
	       "{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'w'");
	refuse("a negative dimension",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "'w'");
	refuse("a float dimension",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "'w'");
	refuse("an exponent dimension",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]}}", 8, "'w'");
	refuse("a leading-zero number",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, "'w'");
	refuse("a dimension beyond 2^64",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[18446744073709551616],\"data_offsets\":[0,8]}}",
	       8, "'w'");
	refuse("a shape whose product overflows",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
	       8, "'w'");
	refuse("a size that does not match the shape",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "'w'");
	refuse("data_offsets that end before they begin",
	       "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
	       "\"v\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,0]}}", 0, "'v'");
	refuse("three data_offsets",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, "'w'");
	refuse("a hole between tensors",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	       "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, "hole");
	refuse("overlapping tensors",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	       "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlap");
	refuse("a first tensor that does not start at 0",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "'w'");
	refuse("duplicate tensor names",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	       "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate");
	refuse("a missing field", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "data_offsets");
	refuse("a duplicate field",
	       "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
	       "duplicate field");
	refuse("3 F4 values (not whole bytes)",
	       "{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, "'w'");
	refuse("__metadata__ with a number", "{\"__metadata__\":{\"a\":1}}", 0, "metadata");
	refuse("__metadata__ twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate");
	refuse("a lone surrogate escape", "{\"__metadata__\":{\"\\ud800\":\"x\"}}", 0, "surrogate");
	refuse("a raw control character", "{\"__metadata__\":{\"a\":\"\x01\"}}", 0, "control");
	refuse("a tensor entry that is a string", "{\"w\":\"F32\"}", 0, "'w'");
	refuse("an unterminated object", "{\"__metadata__\":{}", 0, NULL);
	refuse("a number out of binary64 range",
	       "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1e400}}", 8,
	       "range");
	refuse("a name with U+0000",
	       "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
	       "U+0000");
	refuse("nine dimensions",
	       "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
	       "'w'");

	/* nesting: serde_json allows 127 levels in all */
	char deep[1200];
	int lv = 125;   /* object + tensor entry + 125 arrays = 127 levels */
	for (int round = 0; round < 2; round++, lv++) {
		char *p = deep;
		p += sprintf(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":");
		for (int i = 0; i < lv; i++)
			*p++ = '[';
		for (int i = 0; i < lv; i++)
			*p++ = ']';
		strcpy(p, "}}");
		if (!round)
			accept("127 levels of nesting", deep, 1, 1);
		else
			refuse("128 levels of nesting", deep, 1, "recursion");
	}

	accept("an empty header", "{}", 0, 0);
	accept("unknown fields in a tensor entry",
	       "{\"w\":{\"x\":[{\"y\":null},true,-1.5e3,\"\\u00e9\\ud83d\\ude00\"],\"dtype\":\"F32\","
	       "\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1);
	accept("whitespace everywhere",
	       " \t\n{ \"w\" :\r{ \"dtype\" : \"F32\" , \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 8 "
	       "] } } \n", 8, 1);
	accept("null __metadata__", "{\"__metadata__\":null}", 0, 0);
	accept("zero-size tensors sharing an offset",
	       "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
	       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	       "\"c\":{\"dtype\":\"BF16\",\"shape\":[2,0],\"data_offsets\":[4,4]}}", 4, 3);

	/* escapes in names decode; the raw metadata is kept as written */
	const char *esc = "{\"__metadata__\" : { \"k\":\"v\\n\" } ,"
	                  "\"\\u0041\\/\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[1],"
	                  "\"data_offsets\":[0,1]}}";
	int rc = parse_json(esc, 1, &h, &err);
	TAP_OK(rc == 0 && !strcmp(h->t[0].name, "A/\xf0\x9f\x98\x80") &&
	       !strcmp(h->metadata, "{ \"k\":\"v\\n\" }") && st_find(h, "A/\xf0\x9f\x98\x80") == 0,
	       "escaped names decode, __metadata__ raw text kept (%s)", rc ? err.msg : h->metadata);
	if (!rc)
		st_header_free(h);
}

/* ---- files -------------------------------------------------------------- */

static void test_files(void)
{
	char path[] = "/tmp/rq-test-st-XXXXXX";
	int fd = mkstemp(path);
	struct st_spec s[] = {{"model.embed.weight", ST_BF16, 2, {4, 8}},
	                      {"model.norm.weight", ST_F32, 1, {8}}};
	uint8_t *hdr;
	size_t hlen;
	uint64_t dsize;
	struct rq_err err = {0};
	st_layout(s, 2, "{\"format\":\"pt\"}", &hdr, &hlen, NULL, NULL, &dsize, &err);
	uint8_t *zero = calloc(1, dsize);
	int wr = write(fd, hdr, hlen) == (ssize_t)hlen && write(fd, zero, dsize) == (ssize_t)dsize;
	struct st_header *h;
	int rc = st_parse_fd(fd, path, &h, &err);
	TAP_OK(wr && rc == 0 && h->n == 2 && st_find(h, "model.norm.weight") == 0 &&
	       h->t[1].begin == 32 && h->file_size == hlen + dsize, "st_parse_fd on a real file");
	if (!rc)
		st_header_free(h);
	rc = st_parse_path(path, &h, &err);
	TAP_OK(rc == 0, "st_parse_path");
	if (!rc)
		st_header_free(h);
	if (ftruncate(fd, (off_t)(hlen + dsize - 1)) == 0) {
		rc = st_parse_path(path, &h, &err);
		TAP_OK(rc == -EPROTO && strstr(err.msg, path) && strstr(err.msg, "truncated"),
		       "a truncated file is refused by path: %s", err.msg);
	}
	if (ftruncate(fd, 3) == 0) {
		rc = st_parse_fd(fd, path, &h, &err);
		TAP_OK(rc == -EPROTO && strstr(err.msg, "8-byte"), "a 3-byte file: %s", err.msg);
	}
	close(fd);
	unlink(path);
	rc = st_parse_path("/nonexistent/x.safetensors", &h, &err);
	TAP_OK(rc == -ENOENT && strstr(err.msg, "/nonexistent/x.safetensors"),
	       "a missing file gives -ENOENT naming it");
	free(zero);
	free(hdr);
}

/* ---- fuzz --------------------------------------------------------------- */

static void test_fuzz(void)
{
	struct st_spec s[] = {
		{"model.layers.0.mlp.experts.0.gate_proj.weight_packed", ST_U8, 2, {4, 8}},
		{"model.layers.0.mlp.experts.0.gate_proj.weight_scale", ST_F8_E4M3, 2, {4, 1}},
		{"model.layers.0.mlp.experts.0.gate_proj.weight_global_scale", ST_F32, 1, {1}},
		{"model.layers.0.self_attn.q_proj.weight", ST_BF16, 2, {2, 16}},
		{"x\"\\\x01", ST_F4, 1, {8}},
	};
	uint8_t *hdr;
	size_t hlen;
	uint64_t dsize;
	struct rq_err err = {0};
	st_layout(s, 5, "{\"format\":\"pt\"}", &hdr, &hlen, NULL, NULL, &dsize, &err);
	size_t base_len = hlen + dsize;
	uint8_t *base = calloc(1, base_len);
	memcpy(base, hdr, hlen);
	free(hdr);
	int accepted = 0, refused = 0, other = 0, broken = 0;
	static const char tokens[] = "{}[]\",:0123456789-.eE \\u\x80\xff";
	for (int iter = 0; iter < 20000; iter++) {
		size_t len = base_len;
		uint8_t *f = malloc(base_len + 64);
		memcpy(f, base, base_len);
		int muts = 1 + (int)(rnd() % 4);
		for (int m = 0; m < muts; m++) {
			size_t at = (size_t)(rnd() % len);
			switch (rnd() % 6) {
			case 0:
				f[at] ^= (uint8_t)(1u << (rnd() % 8));
				break;
			case 1:
				f[at] = (uint8_t)tokens[rnd() % (sizeof tokens - 1)];
				break;
			case 2:   /* delete a byte */
				memmove(f + at, f + at + 1, len - at - 1);
				len--;
				break;
			case 3:   /* insert a byte */
				if (len < base_len + 60) {
					memmove(f + at + 1, f + at, len - at);
					f[at] = (uint8_t)tokens[rnd() % (sizeof tokens - 1)];
					len++;
				}
				break;
			case 4:   /* truncate */
				len = at + 1;
				break;
			case 5:   /* the length prefix */
				f[rnd() % 8] = (uint8_t)rnd();
				break;
			}
			if (len < 2)
				len = 2;
		}
		struct st_header *h = NULL;
		int rc = st_parse_mem(f, len, len, "fuzz", &h, &err);
		if (rc == 0) {
			accepted++;
			uint64_t cur = 0;
			for (size_t i = 0; i < h->n; i++) {
				if (h->t[i].begin != cur || st_find(h, h->t[i].name) != (long)i)
					broken++;
				cur = h->t[i].end;
			}
			if (h->data_start + cur != len)
				broken++;
			st_header_free(h);
		} else if (rc == -EPROTO && !strncmp(err.msg, "fuzz: ", 6)) {
			refused++;
		} else {
			other++;
		}
		free(f);
	}
	free(base);
	TAP_OK(other == 0 && broken == 0 && refused > 10000,
	       "20000 mutated files: %d accepted, %d refused with -EPROTO, %d other, %d broken",
	       accepted, refused, other, broken);
}

int main(void)
{
	test_dtypes();
	test_layout_golden();
	test_layout_refusals();
	test_round_trip();
	test_refusals();
	test_files();
	test_fuzz();
	return tap_done();
}
