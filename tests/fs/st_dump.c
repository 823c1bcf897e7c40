/* st_dump — a test helper around fs/st.h for the peer tests.
 *
 *   st_dump write SPEC.json OUT   writes OUT with st_layout. SPEC.json:
 *       {"metadata": "<raw __metadata__ JSON text>" | null,
 *        "tensors": [{"name": s, "dtype": "BF16", "shape": [..], "fill": n}, ...]}
 *     byte k of a tensor's data is (fill + 13*k) & 0xFF.
 *   st_dump parse FILE...         prints one JSON line per file: {"ok": true, "header_len": N,
 *       "metadata": "<raw>" | null, "tensors": [[name, dtype, [shape], begin, end], ...]}
 *     in data order, or {"ok": false, "code": -errno, "error": "..."}.
 * Exit status: 0, or 1 when the helper itself could not run. */
#include "st/st.h"

#include "base/err.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void jstr(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, n = 0;
	char *b = malloc(cap + 1);
	size_t r;
	while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
		n += r;
		if (n == cap) {
			cap *= 2;
			b = realloc(b, cap + 1);
		}
	}
	fclose(f);
	if (b)
		b[n] = 0;
	*len = n;
	return b;
}

static int do_parse(const char *path)
{
	struct rq_err err = {0};
	struct st_header *h;
	int rc = st_parse_path(path, &h, &err);
	if (rc) {
		printf("{\"ok\": false, \"code\": %d, \"error\": ", rc);
		jstr(err.msg);
		printf("}\n");
		return 0;
	}
	printf("{\"ok\": true, \"header_len\": %llu, \"metadata\": ",
	       (unsigned long long)h->header_len);
	if (h->metadata)
		jstr(h->metadata);
	else
		printf("null");
	printf(", \"tensors\": [");
	for (size_t i = 0; i < h->n; i++) {
		const struct st_tensor *t = &h->t[i];
		printf("%s[", i ? ", " : "");
		jstr(t->name);
		printf(", \"%s\", [", st_dtype_name(t->dtype));
		for (int d = 0; d < t->ndim; d++)
			printf("%s%llu", d ? ", " : "", (unsigned long long)t->shape[d]);
		printf("], %llu, %llu]", (unsigned long long)t->begin, (unsigned long long)t->end);
		if (st_find(h, t->name) != (long)i) {
			fprintf(stderr, "st_find('%s') is wrong\n", t->name);
			return 1;
		}
	}
	printf("]}\n");
	st_header_free(h);
	return 0;
}

static int do_write(const char *spec_path, const char *out)
{
	size_t len;
	char *text = slurp(spec_path, &len);
	cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
	free(text);
	if (!root) {
		fprintf(stderr, "st_dump: cannot read %s\n", spec_path);
		return 1;
	}
	cJSON *meta = cJSON_GetObjectItem(root, "metadata");
	cJSON *ts = cJSON_GetObjectItem(root, "tensors");
	int n = cJSON_GetArraySize(ts);
	struct st_spec *specs = calloc((size_t)n + 1, sizeof *specs);
	int *fill = calloc((size_t)n + 1, sizeof *fill);
	size_t *order = calloc((size_t)n + 1, sizeof *order);
	uint64_t *begin = calloc((size_t)n + 1, sizeof *begin);
	for (int i = 0; i < n; i++) {
		cJSON *t = cJSON_GetArrayItem(ts, i);
		specs[i].name = cJSON_GetObjectItem(t, "name")->valuestring;
		const char *dt = cJSON_GetObjectItem(t, "dtype")->valuestring;
		if (st_dtype_parse(dt, strlen(dt), &specs[i].dtype)) {
			fprintf(stderr, "st_dump: unknown dtype %s\n", dt);
			return 1;
		}
		cJSON *sh = cJSON_GetObjectItem(t, "shape");
		specs[i].ndim = cJSON_GetArraySize(sh);
		for (int d = 0; d < specs[i].ndim && d < ST_MAX_DIMS; d++)
			specs[i].shape[d] = (uint64_t)cJSON_GetArrayItem(sh, d)->valuedouble;
		fill[i] = cJSON_GetObjectItem(t, "fill")->valueint;
	}
	uint8_t *hdr;
	size_t hdr_len;
	uint64_t data_size;
	struct rq_err err = {0};
	int rc = st_layout(specs, (size_t)n, cJSON_IsString(meta) ? meta->valuestring : NULL, &hdr,
	                   &hdr_len, order, begin, &data_size, &err);
	if (rc) {
		fprintf(stderr, "st_dump: %s\n", err.msg);
		return 1;
	}
	FILE *f = fopen(out, "wb");
	if (!f || fwrite(hdr, 1, hdr_len, f) != hdr_len) {
		fprintf(stderr, "st_dump: cannot write %s\n", out);
		return 1;
	}
	uint64_t pos = 0;
	for (int i = 0; i < n; i++) {
		size_t j = order[i];
		uint64_t sz = st_spec_bytes(&specs[j]);
		if (begin[j] != pos) {
			fprintf(stderr, "st_dump: order/begin disagree at '%s'\n", specs[j].name);
			return 1;
		}
		for (uint64_t k = 0; k < sz; k++)
			fputc((fill[j] + 13 * (int)(k & 0xFF)) & 0xFF, f);
		pos += sz;
	}
	if (pos != data_size || fclose(f)) {
		fprintf(stderr, "st_dump: size mismatch or write error\n");
		return 1;
	}
	free(hdr);
	free(specs);
	free(fill);
	free(order);
	free(begin);
	cJSON_Delete(root);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "parse")) {
		for (int i = 2; i < argc; i++)
			if (do_parse(argv[i]))
				return 1;
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "write"))
		return do_write(argv[2], argv[3]);
	fprintf(stderr, "usage: st_dump parse FILE... | st_dump write SPEC.json OUT\n");
	return 1;
}
