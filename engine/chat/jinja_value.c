/* jinja_value.c — the arena, the jump out, and the values of the Jinja
 * interpreter: Python's truthiness, ==, str(), repr() and json.dumps as
 * transformers' tojson calls it (ensure_ascii=False unless asked). */
#include "engine/chat/jinja_int.h"
#include "base/err.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jchunk {
	struct jchunk *next;
	size_t used, cap;
	max_align_t data[];
};

#define CHUNK (64u << 10)
#define ARENA_MAX (1024u << 20)   /* bytes one render may use */

void *ja_alloc(struct jstate *st, size_t n)
{
	n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
	struct jchunk *c = st->chunks;
	if (!c || c->cap - c->used < n) {
		size_t cap = n > CHUNK ? n : CHUNK;
		if (st->arena_bytes + cap > ARENA_MAX)
			jfail(st, st->at, -EINVAL, "rendering needs more than %u MiB", ARENA_MAX >> 20);
		st->arena_bytes += cap;
		c = malloc(sizeof *c + cap);
		if (!c)
			jfail(st, (size_t)-1, -ENOMEM, "out of memory");
		c->next = st->chunks;
		c->used = 0;
		c->cap = cap;
		st->chunks = c;
	}
	void *p = (char *)c->data + c->used;
	c->used += n;
	jwork(st, n);
	memset(p, 0, n);
	return p;
}

char *ja_strndup(struct jstate *st, const char *s, size_t n)
{
	char *p = ja_alloc(st, n + 1);
	memcpy(p, s, n);
	return p;
}

void ja_free(struct jstate *st)
{
	while (st->chunks) {
		struct jchunk *c = st->chunks;
		st->chunks = c->next;
		free(c);
	}
}

void jfail(struct jstate *st, size_t pos, int code, const char *fmt, ...)
{
	char msg[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (pos != (size_t)-1 && st->src) {
		int line = 1, col = 1;
		for (size_t i = 0; i < pos && i < st->src_len; i++, col++)
			if (st->src[i] == '\n')
				line++, col = 0;
		rq_errf(st->err, code, "chat template line %d col %d: %s", line, col, msg);
	} else {
		rq_errf(st->err, code, "chat template: %s", msg);
	}
	st->code = code;
	longjmp(st->fail, 1);
}

void jwork_fail(struct jstate *st)
{
	jfail(st, st->at, -EINVAL, "work budget of %llu exceeded: the template loops, copies or compares "
	      "far more than a chat template needs (real ones use well under 1%% of it)",
	      (unsigned long long)st->work_max);
}

void joverflow(struct jstate *st, size_t pos, const char *op)
{
	jfail(st, pos, -EINVAL, "integer overflow in '%s': jinja2 would give an exact big integer; not "
	      "supported (integers here are 64-bit)", op);
}

void jb_put(struct jstate *st, struct jbuf *b, const char *s, size_t n)
{
	jwork(st, n + 8);   /* a call costs more than a byte */
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = ja_alloc(st, cap);
		if (b->n)
			memcpy(p, b->s, b->n);
		b->s = p;
		b->cap = cap;
	}
	memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = 0;
}

void jb_puts(struct jstate *st, struct jbuf *b, const char *s)
{
	jb_put(st, b, s, strlen(s));
}

/* ---- constructors -------------------------------------------------------- */

struct jv jv_str(struct jstate *st, const char *s, size_t n)
{
	struct jv v = {.kind = JV_STR};
	v.u.s.p = ja_strndup(st, s, n);
	v.u.s.n = n;
	return v;
}

struct jv jv_cstr(const char *s)
{
	struct jv v = {.kind = JV_STR};
	v.u.s.p = s;
	v.u.s.n = strlen(s);
	return v;
}

struct jv jv_int(int64_t i) { return (struct jv){.kind = JV_INT, .u.i = i}; }
struct jv jv_float(double f) { return (struct jv){.kind = JV_FLOAT, .u.f = f}; }
struct jv jv_bool(int b) { return (struct jv){.kind = JV_BOOL, .u.b = !!b}; }
struct jv jv_none(void) { return (struct jv){.kind = JV_NONE}; }

struct jv jv_undef(const char *name)
{
	struct jv v = {.kind = JV_UNDEF};
	v.u.s.p = name;
	return v;
}

struct jv jv_list(struct jstate *st)
{
	struct jv v = {.kind = JV_LIST};
	v.u.l = ja_alloc(st, sizeof *v.u.l);
	return v;
}

struct jv jv_dict(struct jstate *st)
{
	struct jv v = {.kind = JV_DICT};
	v.u.d = ja_alloc(st, sizeof *v.u.d);
	return v;
}

/* The nesting depth v adds to a container holding it (JV_MAX_DEPTH bounds it). */
static void nest(struct jstate *st, int *depth, struct jv v)
{
	int d = v.kind == JV_LIST ? v.u.l->depth + 1 : v.kind == JV_DICT && !v.u.d->ns ? v.u.d->depth + 1 : 0;
	if (d > JV_MAX_DEPTH)
		jfail(st, st->at, -EINVAL, "a value nested deeper than %d lists or dicts (chat templates do not "
		      "need more)", JV_MAX_DEPTH);
	if (d > *depth)
		*depth = d;
}

void jl_push(struct jstate *st, struct jlist *l, struct jv v)
{
	jwork(st, sizeof v);
	nest(st, &l->depth, v);
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		struct jv *p = ja_alloc(st, cap * sizeof *p);
		if (l->n)
			memcpy(p, l->v, l->n * sizeof *p);
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = v;
}

struct jv *jd_get(struct jstate *st, const struct jdict *d, struct jv k)
{
	for (size_t i = 0; i < d->n; i++)
		if (jv_equal(st, d->k[i], k))
			return &d->v[i];
	return NULL;
}

struct jv *jd_getc(struct jstate *st, const struct jdict *d, const char *key)
{
	return jd_get(st, d, jv_cstr(key));
}

void jd_set(struct jstate *st, struct jdict *d, struct jv k, struct jv v)
{
	if (!d->ns) {
		nest(st, &d->depth, k);
		nest(st, &d->depth, v);
	}
	struct jv *old = jd_get(st, d, k);
	if (old) {
		*old = v;
		return;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 8;
		struct jv *nk = ja_alloc(st, cap * sizeof *nk), *nv = ja_alloc(st, cap * sizeof *nv);
		if (d->n) {
			memcpy(nk, d->k, d->n * sizeof *nk);
			memcpy(nv, d->v, d->n * sizeof *nv);
		}
		d->k = nk;
		d->v = nv;
		d->cap = cap;
	}
	d->k[d->n] = k;
	d->v[d->n++] = v;
}

void jd_copy(struct jstate *st, struct jdict *d, const struct jdict *from)
{
	if (d->n) {
		for (size_t i = 0; i < from->n; i++)
			jd_set(st, d, from->k[i], from->v[i]);
		return;
	}
	/* into an empty dict: from's keys are distinct already, no lookups */
	size_t cap = from->n ? from->n : 1;
	d->k = ja_alloc(st, cap * sizeof *d->k);
	d->v = ja_alloc(st, cap * sizeof *d->v);
	d->cap = cap;
	for (size_t i = 0; i < from->n; i++) {
		if (!d->ns) {
			nest(st, &d->depth, from->k[i]);
			nest(st, &d->depth, from->v[i]);
		}
		d->k[i] = from->k[i];
		d->v[i] = from->v[i];
	}
	d->n = from->n;
}

/* ---- Python semantics ---------------------------------------------------- */

int jv_truthy(struct jv v)
{
	switch (v.kind) {
	case JV_UNDEF: case JV_NONE: return 0;
	case JV_BOOL: return v.u.b;
	case JV_INT: return v.u.i != 0;
	case JV_FLOAT: return v.u.f != 0;
	case JV_STR: return v.u.s.n != 0;
	case JV_LIST: return v.u.l->n != 0;
	case JV_DICT: return v.u.d->ns || v.u.d->n != 0;
	default: return 1;
	}
}

static int numeric(struct jv v)
{
	return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}

/* An int against a float, exactly (Python compares the mathematical values). */
static int int_float_cmp(int64_t i, double f)
{
	if (isnan(f))
		return 2;
	if (f >= 9223372036854775808.0)
		return -1;
	if (f < -9223372036854775808.0)
		return 1;
	double t = trunc(f);
	int64_t k = (int64_t)t;   /* in range: |t| < 2**63, or t == -2**63 */
	if (i != k)
		return i < k ? -1 : 1;
	return t == f ? 0 : f > t ? -1 : 1;
}

int jv_numcmp(struct jv a, struct jv b)
{
	if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
		int64_t i = a.kind == JV_INT ? a.u.i : a.u.b, j = b.kind == JV_INT ? b.u.i : b.u.b;
		return i < j ? -1 : i > j;
	}
	if (a.kind == JV_FLOAT && b.kind == JV_FLOAT)
		return isnan(a.u.f) || isnan(b.u.f) ? 2 : a.u.f < b.u.f ? -1 : a.u.f > b.u.f;
	if (a.kind == JV_FLOAT) {
		int r = int_float_cmp(b.kind == JV_INT ? b.u.i : b.u.b, a.u.f);
		return r == 2 ? 2 : -r;
	}
	return int_float_cmp(a.kind == JV_INT ? a.u.i : a.u.b, b.u.f);
}

/* Recursive, but values are at most JV_MAX_DEPTH deep (jl_push, jd_set). */
int jv_equal(struct jstate *st, struct jv a, struct jv b)
{
	jwork(st, JW_STEP);
	if (numeric(a) && numeric(b))
		return jv_numcmp(a, b) == 0;
	if (a.kind != b.kind)
		return 0;
	switch (a.kind) {
	case JV_UNDEF: case JV_NONE: return 1;
	case JV_STR:
		if (a.u.s.n != b.u.s.n)
			return 0;
		jwork(st, a.u.s.n);
		return !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
	case JV_LIST:
		if (a.u.l->n != b.u.l->n || a.tuple != b.tuple)
			return 0;
		for (size_t i = 0; i < a.u.l->n; i++)
			if (!jv_equal(st, a.u.l->v[i], b.u.l->v[i]))
				return 0;
		return 1;
	case JV_DICT:
		if (a.u.d->ns || b.u.d->ns)
			return a.u.d == b.u.d;
		if (a.u.d->n != b.u.d->n)
			return 0;
		for (size_t i = 0; i < a.u.d->n; i++) {
			struct jv *o = jd_get(st, b.u.d, a.u.d->k[i]);
			if (!o || !jv_equal(st, a.u.d->v[i], *o))
				return 0;
		}
		return 1;
	case JV_MACRO: return a.u.m == b.u.m;
	case JV_FUNC: return !strcmp(a.u.fn, b.u.fn);
	default: return 0;
	}
}

const char *jv_type(struct jv v)
{
	static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float", "str",
		"list", "dict", "Macro", "function", "method"};
	if (v.kind == JV_LIST && v.tuple)
		return "tuple";
	if (v.kind == JV_DICT && v.u.d->ns)
		return "Namespace";
	return names[v.kind];
}

/* Python's repr(float): the shortest digits that read back, in fixed
 * notation when the exponent is in [-5, 16), else d.ddde+XX. */
static void float_repr(struct jstate *st, struct jbuf *b, double f)
{
	char t[64], out[80];
	if (isnan(f))
		return jb_puts(st, b, "nan");
	if (isinf(f))
		return jb_puts(st, b, f < 0 ? "-inf" : "inf");
	int p;
	for (p = 1; p < 17; p++) {
		snprintf(t, sizeof t, "%.*e", p - 1, f);
		if (strtod(t, NULL) == f)
			break;
	}
	snprintf(t, sizeof t, "%.*e", p - 1, f);
	/* t: [-]d[.ddd]e[+-]XX -> sign, digits, decimal exponent */
	const char *s = t;
	int neg = *s == '-', k = 0, o = 0;
	char dig[32];
	if (neg)
		s++;
	for (; *s && *s != 'e'; s++)
		if (*s != '.')
			dig[k++] = *s;
	int e = atoi(s + 1), dp = e + 1;   /* digits = 0.DIG * 10^dp */
	while (k > 1 && dig[k - 1] == '0')
		k--;
	if (neg)
		out[o++] = '-';
	if (dp > -4 && dp <= 16) {
		if (dp <= 0) {
			out[o++] = '0', out[o++] = '.';
			for (int i = 0; i < -dp; i++)
				out[o++] = '0';
			for (int i = 0; i < k; i++)
				out[o++] = dig[i];
		} else {
			for (int i = 0; i < dp; i++)
				out[o++] = i < k ? dig[i] : '0';
			out[o++] = '.';
			if (k > dp)
				for (int i = dp; i < k; i++)
					out[o++] = dig[i];
			else
				out[o++] = '0';
		}
		out[o] = 0;
	} else {
		out[o++] = dig[0];
		if (k > 1) {
			out[o++] = '.';
			for (int i = 1; i < k; i++)
				out[o++] = dig[i];
		}
		snprintf(out + o, sizeof out - o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
	}
	jb_puts(st, b, out);
}

static void str_repr(struct jstate *st, struct jbuf *b, const char *s, size_t n)
{
	int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
	char q = sq && !dq ? '"' : '\'';
	jb_put(st, b, &q, 1);
	for (size_t i = 0; i < n;) {
		size_t at = i;
		uint32_t c = jutf8_next(s, n, &i);
		char e[16];
		if (c == (uint32_t)q || c == '\\')
			snprintf(e, sizeof e, "\\%c", (char)c);
		else if (c == '\n' || c == '\r' || c == '\t')
			snprintf(e, sizeof e, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
		else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0xa0) || c == 0xad)
			snprintf(e, sizeof e, "\\x%02x", c);
		else if ((jpy_space(c) && c > 0xff) || (c >= 0x200b && c <= 0x200f) || c == 0xfeff ||
			 (c >= 0x202a && c <= 0x202e) || (c >= 0x2060 && c <= 0x2064))
			snprintf(e, sizeof e, "\\u%04x", c);   /* not printable in Python */
		else {
			jb_put(st, b, s + at, i - at);
			continue;
		}
		jb_puts(st, b, e);
	}
	jb_put(st, b, &q, 1);
}

static void repr(struct jstate *st, struct jbuf *b, struct jv v, int depth)
{
	if (depth > 500)
		jfail(st, (size_t)-1, -EINVAL, "a value nested deeper than 500 lists or dicts");
	switch (v.kind) {
	case JV_STR: return str_repr(st, b, v.u.s.p, v.u.s.n);
	case JV_LIST:
		jb_puts(st, b, v.tuple ? "(" : "[");
		for (size_t i = 0; i < v.u.l->n; i++) {
			if (i)
				jb_puts(st, b, ", ");
			repr(st, b, v.u.l->v[i], depth + 1);
		}
		jb_puts(st, b, v.tuple ? (v.u.l->n == 1 ? ",)" : ")") : "]");
		return;
	case JV_DICT:
		if (v.u.d->ns)
			return jb_puts(st, b, "<Namespace>");
		jb_puts(st, b, "{");
		for (size_t i = 0; i < v.u.d->n; i++) {
			if (i)
				jb_puts(st, b, ", ");
			repr(st, b, v.u.d->k[i], depth + 1);
			jb_puts(st, b, ": ");
			repr(st, b, v.u.d->v[i], depth + 1);
		}
		jb_puts(st, b, "}");
		return;
	case JV_UNDEF:
		return jb_puts(st, b, "Undefined");
	default:
		return jv_tostr(st, b, v);
	}
}

void jv_repr(struct jstate *st, struct jbuf *b, struct jv v)
{
	repr(st, b, v, 0);
}

void jv_tostr(struct jstate *st, struct jbuf *b, struct jv v)
{
	char t[32];
	switch (v.kind) {
	case JV_UNDEF: return;
	case JV_NONE: return jb_puts(st, b, "None");
	case JV_BOOL: return jb_puts(st, b, v.u.b ? "True" : "False");
	case JV_INT:
		snprintf(t, sizeof t, "%lld", (long long)v.u.i);
		return jb_puts(st, b, t);
	case JV_FLOAT: return float_repr(st, b, v.u.f);
	case JV_STR: return jb_put(st, b, v.u.s.p, v.u.s.n);
	case JV_LIST: case JV_DICT: return jv_repr(st, b, v);
	case JV_MACRO: return jb_puts(st, b, "<Macro>");
	default: return jb_puts(st, b, "<function>");
	}
}

struct jv jv_strof(struct jstate *st, struct jv v)
{
	if (v.kind == JV_STR)
		return v;
	struct jbuf b = {0};
	jv_tostr(st, &b, v);
	struct jv r = {.kind = JV_STR};
	r.u.s.p = b.s ? b.s : "";
	r.u.s.n = b.n;
	return r;
}

/* A JSON string; ascii: non-ASCII as \uXXXX (surrogate pairs past U+FFFF). */
static void json_str(struct jstate *st, struct jbuf *b, const char *s, size_t n, int ascii)
{
	jb_puts(st, b, "\"");
	for (size_t i = 0; i < n; i++) {
		size_t run = i;   /* bytes written as they are: one put */
		while (run < n && (unsigned char)s[run] >= 0x20 && s[run] != '"' && s[run] != '\\' &&
		       !(ascii && (unsigned char)s[run] >= 0x80))
			run++;
		if (run > i) {
			jb_put(st, b, s + i, run - i);
			i = run - 1;
			continue;
		}
		unsigned char c = (unsigned char)s[i];
		char e[16];
		if (ascii && c >= 0x80) {
			uint32_t u = jutf8_next(s, n, &i);
			i--;
			if (u >= 0x10000)
				snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + ((u - 0x10000) >> 10),
					 0xDC00 + ((u - 0x10000) & 0x3FF));
			else
				snprintf(e, sizeof e, "\\u%04x", u);
			jb_puts(st, b, e);
			continue;
		}
		const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" :
			c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
		if (!esc && c < 0x20) {
			snprintf(e, sizeof e, "\\u%04x", c);
			esc = e;
		}
		if (esc)
			jb_puts(st, b, esc);
		else
			jb_put(st, b, s + i, 1);
	}
	jb_puts(st, b, "\"");
}

static void json_nl(struct jstate *st, struct jbuf *b, int indent, int depth)
{
	static const char sp[64] = "                                                                ";
	jb_puts(st, b, "\n");
	for (size_t left = (size_t)indent * (size_t)depth, k; left; left -= k) {
		k = left < sizeof sp ? left : sizeof sp;
		jb_put(st, b, sp, k);
	}
}

struct skey {
	const char *p;
	size_t n, idx;           /* the key's bytes; its item's index in the dict */
};

static int keycmp(const void *x, const void *y)
{
	const struct skey *a = x, *b = y;
	size_t m = a->n < b->n ? a->n : b->n;
	int c = memcmp(a->p, b->p, m);
	return c ? c : a->n < b->n ? -1 : a->n > b->n ? 1 : a->idx < b->idx ? -1 : a->idx > b->idx;
}

struct jsonfmt {
	int indent;               /* <0: one line */
	int ascii;                /* ensure_ascii */
	const char *isep, *ksep;  /* item and key separators */
	int sort;
};

static int tojson(struct jstate *st, struct jbuf *b, struct jv v, const struct jsonfmt *f, int depth)
{
	if (depth > JV_MAX_DEPTH)   /* not reached: values are never deeper */
		return -EINVAL;
	switch (v.kind) {
	case JV_NONE: jb_puts(st, b, "null"); return 0;
	case JV_BOOL: jb_puts(st, b, v.u.b ? "true" : "false"); return 0;
	case JV_INT: jv_tostr(st, b, v); return 0;
	case JV_FLOAT:
		if (isnan(v.u.f) || isinf(v.u.f))
			jb_puts(st, b, isnan(v.u.f) ? "NaN" : v.u.f < 0 ? "-Infinity" : "Infinity");
		else
			jv_tostr(st, b, v);
		return 0;
	case JV_STR: json_str(st, b, v.u.s.p, v.u.s.n, f->ascii); return 0;
	case JV_LIST:
		jb_puts(st, b, "[");
		for (size_t i = 0; i < v.u.l->n; i++) {
			if (i)
				jb_puts(st, b, f->isep);
			if (f->indent >= 0)
				json_nl(st, b, f->indent, depth + 1);
			if (tojson(st, b, v.u.l->v[i], f, depth + 1))
				return -EINVAL;
		}
		if (f->indent >= 0 && v.u.l->n)
			json_nl(st, b, f->indent, depth);
		jb_puts(st, b, "]");
		return 0;
	case JV_DICT: {
		if (v.u.d->ns)
			return -EINVAL;
		size_t n = v.u.d->n, *ord = ja_alloc(st, (n + 1) * sizeof *ord);
		struct skey *keys = ja_alloc(st, (n + 1) * sizeof *keys);
		for (size_t i = 0; i < n; i++) {
			if (v.u.d->k[i].kind != JV_STR)
				return -EINVAL;   /* keys other than strings: not needed by templates */
			keys[i] = (struct skey){v.u.d->k[i].u.s.p, v.u.d->k[i].u.s.n, i};
		}
		if (f->sort) {   /* by key bytes (UTF-8 order == code point order) */
			size_t lg = 1;
			while ((size_t)1 << lg < n)
				lg++;
			jwork(st, (uint64_t)n * lg * JW_STEP);
			qsort(keys, n, sizeof *keys, keycmp);
		}
		for (size_t i = 0; i < n; i++)
			ord[i] = keys[i].idx;
		jb_puts(st, b, "{");
		for (size_t i = 0; i < n; i++) {
			if (i)
				jb_puts(st, b, f->isep);
			if (f->indent >= 0)
				json_nl(st, b, f->indent, depth + 1);
			json_str(st, b, v.u.d->k[ord[i]].u.s.p, v.u.d->k[ord[i]].u.s.n, f->ascii);
			jb_puts(st, b, f->ksep);
			if (tojson(st, b, v.u.d->v[ord[i]], f, depth + 1))
				return -EINVAL;
		}
		if (f->indent >= 0 && n)
			json_nl(st, b, f->indent, depth);
		jb_puts(st, b, "}");
		return 0;
	}
	default:
		return -EINVAL;
	}
}

int jv_tojson(struct jstate *st, struct jbuf *b, struct jv v, int indent, const char *isep,
              const char *ksep, int sort_keys, int ensure_ascii)
{
	struct jsonfmt f = {indent, ensure_ascii, isep ? isep : indent >= 0 ? "," : ", ", ksep ? ksep : ": ",
			    sort_keys};
	return tojson(st, b, v, &f, 0);
}

int jpy_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202F || c == 0x205F || c == 0x3000;
}

uint32_t jutf8_next(const char *s, size_t n, size_t *i)
{
	const unsigned char *u = (const unsigned char *)s + *i;
	size_t left = n - *i;
	int len = u[0] < 0x80 ? 1 : (u[0] & 0xE0) == 0xC0 ? 2 : (u[0] & 0xF0) == 0xE0 ? 3 :
		(u[0] & 0xF8) == 0xF0 ? 4 : 0;
	if (!len || (size_t)len > left) {
		(*i)++;
		return u[0];
	}
	uint32_t c = len == 1 ? u[0] : u[0] & (0x7F >> len);
	for (int k = 1; k < len; k++) {
		if ((u[k] & 0xC0) != 0x80) {
			(*i)++;
			return u[0];
		}
		c = c << 6 | (u[k] & 0x3F);
	}
	*i += len;
	return c;
}

/* The last hit of needle in hay[from..n), overlapping hits counted: KMP run
 * backwards (the failure table of the reversed needle), linear in n + m. */
static int64_t rfind_kmp(struct jstate *st, const char *hay, size_t n, const char *needle, size_t m,
                         size_t from)
{
	size_t *fail = ja_alloc(st, (m + 1) * sizeof *fail);
#define R(k) needle[m - 1 - (k)]   /* the reversed needle */
	for (size_t q = 1, k = 0; q < m; q++) {
		while (k && R(q) != R(k))
			k = fail[k - 1];
		if (R(q) == R(k))
			k++;
		fail[q] = k;
	}
	for (size_t i = n, k = 0; i > from;) {
		char c = hay[--i];
		while (k && c != R(k))
			k = fail[k - 1];
		if (c == R(k) && ++k == m)
			return (int64_t)i;
	}
#undef R
	return -1;
}

int64_t jfind(struct jstate *st, const char *hay, size_t n, const char *needle, size_t m, size_t from, int rev)
{
	jwork(st, JW_STEP);
	if (from > n || m > n - from)
		return -1;
	if (!m)
		return (int64_t)(rev ? n : from);
	if (rev) {
		jwork(st, m * (1 + sizeof(size_t)));
		int64_t at = rfind_kmp(st, hay, n, needle, m, from);
		jwork(st, at < 0 ? n - from : n - (size_t)at);
		return at;
	}
	const char *p = memmem(hay + from, n - from, needle, m);   /* glibc: linear */
	jwork(st, m + (p ? (size_t)(p - hay) - from + m : n - from));
	return p ? (int64_t)(p - hay) : -1;
}
