/* st_write.c — dtypes and the canonical safetensors layout (SPEC.md §4).
 *
 * st_layout reproduces safetensors' `prepare()` (safetensors/src/tensor.rs):
 * tensors sorted by dtype descending in enum order, then by name bytewise;
 * offsets contiguous from 0; the header is serde_json's compact output of
 * {"__metadata__": <raw>, name: {"dtype","shape","data_offsets"}, ...} padded
 * with spaces to a multiple of 8. Strings are escaped as serde_json does:
 * '"' and '\\', \b \t \n \f \r in short form, other bytes below 0x20 as
 * \u00xx (lowercase hex); everything else, UTF-8 included, is copied. */
#include "st/st.h"
#include "st/st_internal.h"

#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
	const char *name;
	unsigned bits;
} dtypes[ST_NDTYPES] = {
	[ST_BOOL] = {"BOOL", 8},
	[ST_F4] = {"F4", 4},
	[ST_F6_E2M3] = {"F6_E2M3", 6},
	[ST_F6_E3M2] = {"F6_E3M2", 6},
	[ST_U8] = {"U8", 8},
	[ST_I8] = {"I8", 8},
	[ST_F8_E5M2] = {"F8_E5M2", 8},
	[ST_F8_E4M3] = {"F8_E4M3", 8},
	[ST_F8_E8M0] = {"F8_E8M0", 8},
	[ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
	[ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
	[ST_I16] = {"I16", 16},
	[ST_U16] = {"U16", 16},
	[ST_F16] = {"F16", 16},
	[ST_BF16] = {"BF16", 16},
	[ST_I32] = {"I32", 32},
	[ST_U32] = {"U32", 32},
	[ST_F32] = {"F32", 32},
	[ST_C64] = {"C64", 64},
	[ST_F64] = {"F64", 64},
	[ST_I64] = {"I64", 64},
	[ST_U64] = {"U64", 64},
};

const char *st_dtype_name(enum st_dtype d)
{
	return (unsigned)d < ST_NDTYPES ? dtypes[d].name : "?";
}

unsigned st_dtype_bits(enum st_dtype d)
{
	return (unsigned)d < ST_NDTYPES ? dtypes[d].bits : 0;
}

int st_dtype_parse(const char *s, size_t len, enum st_dtype *out)
{
	for (int d = 0; d < ST_NDTYPES; d++)
		if (strlen(dtypes[d].name) == len && !memcmp(dtypes[d].name, s, len)) {
			*out = (enum st_dtype)d;
			return 0;
		}
	return -EINVAL;
}

/* Bytes of a tensor, or UINT64_MAX when the size overflows or is not a whole
 * number of bytes. */
uint64_t st_spec_bytes(const struct st_spec *s)
{
	uint64_t n = 1, bits;
	if ((unsigned)s->dtype >= ST_NDTYPES || s->ndim < 0 || s->ndim > ST_MAX_DIMS)
		return UINT64_MAX;
	for (int i = 0; i < s->ndim; i++)
		if (__builtin_mul_overflow(n, s->shape[i], &n))
			return UINT64_MAX;
	if (__builtin_mul_overflow(n, (uint64_t)dtypes[s->dtype].bits, &bits) || bits % 8)
		return UINT64_MAX;
	return bits / 8;
}

struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

static void sb_put(struct sbuf *b, const void *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n > b->cap) {
		size_t nc = b->cap ? b->cap : 4096;
		while (nc < b->len + n)
			nc *= 2;
		char *np = realloc(b->p, nc);
		if (!np) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = nc;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

static void sb_u64(struct sbuf *b, uint64_t v)
{
	char tmp[24];
	int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
	sb_put(b, tmp, (size_t)n);
}

/* serde_json's format_escaped_str. */
static void sb_jstr(struct sbuf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	sb_put(b, "\"", 1);
	const char *run = s;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		const char *esc = NULL;
		char u[6];
		switch (c) {
		case '"': esc = "\\\""; break;
		case '\\': esc = "\\\\"; break;
		case '\b': esc = "\\b"; break;
		case '\f': esc = "\\f"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		case '\t': esc = "\\t"; break;
		default:
			if (c < 0x20) {
				memcpy(u, "\\u00", 4);
				u[4] = hex[c >> 4];
				u[5] = hex[c & 15];
			}
			break;
		}
		if (!esc && c >= 0x20)
			continue;
		sb_put(b, run, (size_t)(s - run));
		if (esc)
			sb_str(b, esc);
		else
			sb_put(b, u, 6);
		run = s + 1;
	}
	sb_put(b, run, (size_t)(s - run));
	sb_put(b, "\"", 1);
}

static int data_order(const void *a, const void *b, void *ctx)
{
	const struct st_spec *s = ctx, *x = &s[*(const size_t *)a], *y = &s[*(const size_t *)b];
	if (x->dtype != y->dtype)
		return x->dtype > y->dtype ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int name_order(const void *a, const void *b, void *ctx)
{
	const struct st_spec *s = ctx;
	return strcmp(s[*(const size_t *)a].name, s[*(const size_t *)b].name);
}

int st_layout(const struct st_spec *specs, size_t n, const char *metadata_raw,
              uint8_t **hdr, size_t *hdr_len, size_t *order, uint64_t *begin,
              uint64_t *data_size, struct rq_err *err)
{
	for (size_t i = 0; i < n; i++) {
		const struct st_spec *s = &specs[i];
		if (!s->name)
			return rq_errf(err, -EINVAL, "safetensors layout: tensor #%zu has no name", i);
		if ((unsigned)s->dtype >= ST_NDTYPES)
			return rq_errf(err, -EINVAL, "safetensors layout: tensor '%s': bad dtype %d",
			               s->name, (int)s->dtype);
		if (s->ndim < 0 || s->ndim > ST_MAX_DIMS)
			return rq_errf(err, -EINVAL, "safetensors layout: tensor '%s': %d dimensions "
			               "(0..%d supported)", s->name, s->ndim, ST_MAX_DIMS);
		if (st_spec_bytes(s) == UINT64_MAX)
			return rq_errf(err, -EINVAL, "safetensors layout: tensor '%s': size overflows "
			               "or is not a whole number of bytes", s->name);
	}
	if (metadata_raw && st_metadata_check(metadata_raw, strlen(metadata_raw)))
		return rq_errf(err, -EINVAL, "safetensors layout: __metadata__ is not a JSON object "
		               "of strings: %.200s", metadata_raw);

	size_t *idx = malloc((n ? n : 1) * sizeof *idx);
	if (!idx)
		return rq_errf(err, -ENOMEM, "safetensors layout: out of memory");
	for (size_t i = 0; i < n; i++)
		idx[i] = i;
	qsort_r(idx, n, sizeof *idx, name_order, (void *)specs);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(specs[idx[i]].name, specs[idx[i - 1]].name)) {
			int rc = rq_errf(err, -EINVAL, "safetensors layout: duplicate tensor name '%s'",
			                 specs[idx[i]].name);
			free(idx);
			return rc;
		}
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++)
		if (__builtin_add_overflow(total, st_spec_bytes(&specs[i]), &total)) {
			free(idx);
			return rq_errf(err, -EINVAL, "safetensors layout: total size overflows");
		}
	qsort_r(idx, n, sizeof *idx, data_order, (void *)specs);

	struct sbuf b = {0};
	static const uint8_t zero8[8];
	sb_put(&b, zero8, 8);
	sb_put(&b, "{", 1);
	int first = 1;
	/* serde_json's null metadata is None: safetensors writes no key at all */
	if (metadata_raw && strcmp(metadata_raw, "null")) {
		sb_str(&b, "\"__metadata__\":");
		sb_str(&b, metadata_raw);
		first = 0;
	}
	uint64_t off = 0;
	for (size_t i = 0; i < n; i++) {
		const struct st_spec *s = &specs[idx[i]];
		uint64_t sz = st_spec_bytes(s);
		if (!first)
			sb_put(&b, ",", 1);
		first = 0;
		sb_jstr(&b, s->name);
		sb_str(&b, ":{\"dtype\":\"");
		sb_str(&b, dtypes[s->dtype].name);
		sb_str(&b, "\",\"shape\":[");
		for (int d = 0; d < s->ndim; d++) {
			if (d)
				sb_put(&b, ",", 1);
			sb_u64(&b, s->shape[d]);
		}
		sb_str(&b, "],\"data_offsets\":[");
		sb_u64(&b, off);
		sb_put(&b, ",", 1);
		sb_u64(&b, off + sz);
		sb_str(&b, "]}");
		if (order)
			order[i] = idx[i];
		if (begin)
			begin[idx[i]] = off;
		off += sz;
	}
	sb_put(&b, "}", 1);
	while ((b.len - 8) % 8)
		sb_put(&b, " ", 1);
	free(idx);
	if (b.oom) {
		free(b.p);
		return rq_errf(err, -ENOMEM, "safetensors layout: out of memory");
	}
	uint64_t hn = b.len - 8;
	if (hn > ST_MAX_HEADER) {
		free(b.p);
		return rq_errf(err, -EINVAL, "safetensors layout: header of %llu bytes exceeds the "
		               "100,000,000-byte limit", (unsigned long long)hn);
	}
	for (int i = 0; i < 8; i++)
		b.p[i] = (char)(hn >> (8 * i));
	*hdr = (uint8_t *)b.p;
	*hdr_len = b.len;
	if (data_size)
		*data_size = off;
	return 0;
}
