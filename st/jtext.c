/* jtext.c — JSON spans and a Python-compatible writer. */
#include "st/jtext.h"
#include "st/jcheck.h"
#include "base/err.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t jt_ws(const char *s, size_t n, size_t i)
{
	while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
		i++;
	return i;
}

static size_t string_end(const char *s, size_t n, size_t i)
{
	/* s[i] == '"' */
	for (i++; i < n; i++) {
		if (s[i] == '\\')
			i++;
		else if (s[i] == '"')
			return i + 1;
	}
	return 0;
}

size_t jt_value_end(const char *s, size_t n, size_t i)
{
	i = jt_ws(s, n, i);
	if (i >= n)
		return 0;
	if (s[i] == '"')
		return string_end(s, n, i);
	if (s[i] == '{' || s[i] == '[') {
		int depth = 0;
		for (; i < n; i++) {
			char c = s[i];
			if (c == '"') {
				size_t e = string_end(s, n, i);
				if (!e)
					return 0;
				i = e - 1;
			} else if (c == '{' || c == '[') {
				depth++;
			} else if (c == '}' || c == ']') {
				if (--depth == 0)
					return i + 1;
			}
		}
		return 0;
	}
	/* number, true, false, null */
	size_t b = i;
	while (i < n && !strchr(" \t\r\n,]}", s[i]))
		i++;
	return i > b ? i : 0;
}

static int hex4(const char *s, uint32_t *v)
{
	*v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
		      : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (h < 0)
			return -1;
		*v = *v << 4 | (uint32_t)h;
	}
	return 0;
}

/* Whether the JSON string s[b, e) (quotes excluded) decodes to key: the key
 * is compared as every JSON reader sees it, so "quantization\u005fconfig"
 * is found as quantization_config, exactly as cJSON finds it. */
static int key_is(const char *s, size_t b, size_t e, const char *key, size_t klen)
{
	size_t k = 0;
	while (b < e) {
		unsigned char u[4];
		size_t un = 1;
		if (s[b] != '\\') {
			u[0] = (unsigned char)s[b++];
		} else if (b + 1 < e && s[b + 1] != 'u') {
			const char *from = "\\\"/bfnrt", *to = "\\\"/\b\f\n\r\t";
			const char *p = strchr(from, s[b + 1]);
			if (!p || !s[b + 1])
				return 0;
			u[0] = (unsigned char)to[p - from];
			b += 2;
		} else {
			uint32_t cp, lo;
			if (b + 6 > e || hex4(s + b + 2, &cp))
				return 0;
			b += 6;
			if (cp >= 0xD800 && cp <= 0xDBFF) {
				if (b + 6 > e || s[b] != '\\' || s[b + 1] != 'u' || hex4(s + b + 2, &lo) ||
				    lo < 0xDC00 || lo > 0xDFFF)
					return 0;
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
				b += 6;
			}
			if (cp < 0x80) {
				u[0] = (unsigned char)cp;
			} else if (cp < 0x800) {
				u[0] = (unsigned char)(0xC0 | cp >> 6);
				u[1] = (unsigned char)(0x80 | (cp & 0x3F));
				un = 2;
			} else if (cp < 0x10000) {
				u[0] = (unsigned char)(0xE0 | cp >> 12);
				u[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
				u[2] = (unsigned char)(0x80 | (cp & 0x3F));
				un = 3;
			} else {
				u[0] = (unsigned char)(0xF0 | cp >> 18);
				u[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
				u[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
				u[3] = (unsigned char)(0x80 | (cp & 0x3F));
				un = 4;
			}
		}
		if (k + un > klen || memcmp(key + k, u, un))
			return 0;
		k += un;
	}
	return k == klen;
}

int jt_member(const char *s, size_t n, size_t obj, const char *key, size_t *val)
{
	size_t i = jt_ws(s, n, obj);
	if (i >= n || s[i] != '{')
		return -EPROTO;
	i = jt_ws(s, n, i + 1);
	size_t klen = strlen(key);
	while (i < n && s[i] != '}') {
		if (s[i] != '"')
			return -EPROTO;
		size_t ke = string_end(s, n, i);
		if (!ke)
			return -EPROTO;
		int match = key_is(s, i + 1, ke - 1, key, klen);
		i = jt_ws(s, n, ke);
		if (i >= n || s[i] != ':')
			return -EPROTO;
		i = jt_ws(s, n, i + 1);
		if (match) {
			*val = i;
			return 0;
		}
		size_t ve = jt_value_end(s, n, i);
		if (!ve)
			return -EPROTO;
		i = jt_ws(s, n, ve);
		if (i < n && s[i] == ',')
			i = jt_ws(s, n, i + 1);
	}
	return -ENOENT;
}

int jt_elements(const char *s, size_t n, size_t arr, size_t *start, size_t *end, size_t cap,
                size_t *count)
{
	size_t i = jt_ws(s, n, arr), k = 0;
	if (i >= n || s[i] != '[')
		return -EPROTO;
	i = jt_ws(s, n, i + 1);
	while (i < n && s[i] != ']') {
		size_t e = jt_value_end(s, n, i);
		if (!e)
			return -EPROTO;
		if (k < cap) {
			start[k] = i;
			end[k] = e;
		}
		k++;
		i = jt_ws(s, n, e);
		if (i < n && s[i] == ',')
			i = jt_ws(s, n, i + 1);
		else if (i < n && s[i] != ']')
			return -EPROTO;
	}
	if (i >= n)
		return -EPROTO;
	*count = k;
	return 0;
}

void jt_put(struct jt_buf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

void jt_puts(struct jt_buf *b, const char *s)
{
	jt_put(b, s, strlen(s));
}

void jt_printf(struct jt_buf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof tmp)
		n = sizeof tmp - 1;
	if (n > 0)
		jt_put(b, tmp, (size_t)n);
}

/* Python json string with ensure_ascii: \" \\ \n \r \t \b \f, other control
 * and non-ASCII as \uXXXX (UTF-16, surrogate pairs above the BMP). */
static void dump_string(struct jt_buf *b, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	jt_put(b, "\"", 1);
	while (*p) {
		unsigned c = *p;
		uint32_t cp;
		int len;
		if (c < 0x80) {
			cp = c;
			len = 1;
		} else if ((c & 0xE0) == 0xC0 && p[1]) {
			cp = ((c & 0x1F) << 6) | (p[1] & 0x3F);
			len = 2;
		} else if ((c & 0xF0) == 0xE0 && p[1] && p[2]) {
			cp = ((c & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
			len = 3;
		} else if ((c & 0xF8) == 0xF0 && p[1] && p[2] && p[3]) {
			cp = ((c & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
			len = 4;
		} else {
			cp = 0xFFFD;
			len = 1;
		}
		p += len;
		switch (cp) {
		case '"': jt_puts(b, "\\\""); continue;
		case '\\': jt_puts(b, "\\\\"); continue;
		case '\n': jt_puts(b, "\\n"); continue;
		case '\r': jt_puts(b, "\\r"); continue;
		case '\t': jt_puts(b, "\\t"); continue;
		case '\b': jt_puts(b, "\\b"); continue;
		case '\f': jt_puts(b, "\\f"); continue;
		default: break;
		}
		if (cp >= 0x20 && cp < 0x7F) {
			char ch = (char)cp;
			jt_put(b, &ch, 1);
		} else if (cp < 0x10000) {
			jt_printf(b, "\\u%04x", cp);
		} else {
			cp -= 0x10000;
			jt_printf(b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
		}
	}
	jt_put(b, "\"", 1);
}

/* Python's float repr: the shortest digits that round-trip, fixed notation
 * for exponents in [-4, 16), else d.ddde+XX. */
void jt_py_float(char out[32], double d)
{
	if (isnan(d)) {
		strcpy(out, "NaN");
		return;
	}
	if (isinf(d)) {
		strcpy(out, d < 0 ? "-Infinity" : "Infinity");
		return;
	}
	/* shortest round-tripping digits, as repr does */
	char e[40];
	for (int prec = 0; prec <= 17; prec++) {
		snprintf(e, sizeof e, "%.*e", prec, d);
		if (strtod(e, NULL) == d)
			break;
	}
	char digits[24];
	int nd = 0, neg = e[0] == '-';
	const char *p = e + neg;
	for (; *p && *p != 'e'; p++)
		if (*p >= '0' && *p <= '9')
			digits[nd++] = *p;
	digits[nd] = 0;
	int exp10 = atoi(p + 1);
	char *o = out;
	if (neg)
		*o++ = '-';
	if (exp10 >= -4 && exp10 < 16) {
		if (exp10 >= 0) {
			for (int i = 0; i <= exp10; i++)
				*o++ = i < nd ? digits[i] : '0';
			*o++ = '.';
			if (nd > exp10 + 1)
				for (int i = exp10 + 1; i < nd; i++)
					*o++ = digits[i];
			else
				*o++ = '0';
		} else {
			*o++ = '0';
			*o++ = '.';
			for (int i = 0; i < -exp10 - 1; i++)
				*o++ = '0';
			for (int i = 0; i < nd; i++)
				*o++ = digits[i];
		}
		*o = 0;
	} else {
		*o++ = digits[0];
		if (nd > 1) {
			*o++ = '.';
			for (int i = 1; i < nd; i++)
				*o++ = digits[i];
		}
		sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
	}
}

static void dump_number(struct jt_buf *b, double d)
{
	if (d == floor(d) && fabs(d) < 9007199254740992.0) {   /* cJSON has no int/float flag */
		jt_printf(b, "%.0f", d);
		return;
	}
	char tmp[32];
	jt_py_float(tmp, d);
	jt_puts(b, tmp);
}

static int cmp_keys(const void *a, const void *b)
{
	const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
	return strcmp(x->string, y->string);
}

static void indent(struct jt_buf *b, int depth)
{
	jt_put(b, "\n", 1);
	for (int i = 0; i < depth; i++)
		jt_put(b, "  ", 2);
}

void jt_dump_python(struct jt_buf *b, const cJSON *v, int depth)
{
	if (cJSON_IsRaw(v)) {
		jt_puts(b, v->valuestring);    /* e.g. a float already in repr form */
	} else if (cJSON_IsNull(v)) {
		jt_puts(b, "null");
	} else if (cJSON_IsTrue(v)) {
		jt_puts(b, "true");
	} else if (cJSON_IsFalse(v)) {
		jt_puts(b, "false");
	} else if (cJSON_IsNumber(v)) {
		dump_number(b, v->valuedouble);
	} else if (cJSON_IsString(v)) {
		dump_string(b, v->valuestring);
	} else if (cJSON_IsArray(v)) {
		if (!v->child) {
			jt_puts(b, "[]");
			return;
		}
		jt_put(b, "[", 1);
		for (const cJSON *c = v->child; c; c = c->next) {
			indent(b, depth + 1);
			jt_dump_python(b, c, depth + 1);
			if (c->next)
				jt_put(b, ",", 1);
		}
		indent(b, depth);
		jt_put(b, "]", 1);
	} else if (cJSON_IsObject(v)) {
		size_t n = 0;
		for (const cJSON *c = v->child; c; c = c->next)
			n++;
		if (!n) {
			jt_puts(b, "{}");
			return;
		}
		const cJSON **kids = malloc(n * sizeof *kids);
		if (!kids) {
			b->oom = 1;
			return;
		}
		n = 0;
		for (const cJSON *c = v->child; c; c = c->next)
			kids[n++] = c;
		qsort(kids, n, sizeof *kids, cmp_keys);
		jt_put(b, "{", 1);
		for (size_t i = 0; i < n; i++) {
			indent(b, depth + 1);
			dump_string(b, kids[i]->string);
			jt_put(b, ": ", 2);
			jt_dump_python(b, kids[i], depth + 1);
			if (i + 1 < n)
				jt_put(b, ",", 1);
		}
		indent(b, depth);
		jt_put(b, "}", 1);
		free(kids);
	}
}

cJSON *jt_index_parse(char *text, size_t len, const char *file, cJSON **weight_map,
                      struct rq_err *err)
{
	cJSON *j = jc_parse(text, len, file, err);
	free(text);
	if (!j)
		return NULL;
	cJSON *wm = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
	if (!cJSON_IsObject(wm)) {
		cJSON_Delete(j);
		rq_errf(err, -EPROTO, "%s is not a safetensors index: it has no \"weight_map\" object",
		        file);
		return NULL;
	}
	*weight_map = wm;
	return j;
}

int jt_cut_element(struct jt_buf *out, const char *s, size_t n, size_t arr, size_t k)
{
	size_t cnt;
	if (jt_elements(s, n, arr, NULL, NULL, 0, &cnt) || k >= cnt)
		return -EPROTO;
	size_t *st = malloc(cnt * sizeof *st), *en = malloc(cnt * sizeof *en);
	if (!st || !en) {
		free(st);
		free(en);
		return -ENOMEM;
	}
	jt_elements(s, n, arr, st, en, cnt, &cnt);
	size_t b, e;
	if (k + 1 < cnt) {           /* element, comma, blanks up to the next one */
		b = st[k];
		e = st[k + 1];
	} else if (k > 0) {          /* the last: comma and blanks after the previous one */
		b = en[k - 1];
		e = en[k];
	} else {                     /* the only one */
		b = st[k];
		e = en[k];
	}
	free(st);
	free(en);
	jt_put(out, s, b);
	jt_put(out, s + e, n - e);
	return out->oom ? -ENOMEM : 0;
}
