/* jinja_filters.c — the filters and tests chat templates use, with jinja2's
 * semantics (and transformers' tojson: json.dumps with ensure_ascii=False).
 * The string filters (trim, upper, lower, capitalize, title, replace) are the
 * string methods of jinja_methods.c. */
#include "engine/chat/jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ARG(i, n, d) jarg(args, nargs, kwn, kwv, nkw, i, n, d)

static struct jv sv(struct jbuf *b)
{
	return (struct jv){.kind = JV_STR, .u.s = {b->s ? b->s : "", b->n}};
}

static void need(struct jctx *c, size_t pos, struct jv v)
{
	if (v.kind == JV_UNDEF)
		jfail(jctx_state(c), pos, -EINVAL, "%s", v.u.s.p);
}

static int64_t jlen(struct jctx *c, size_t pos, struct jv v)
{
	switch (v.kind) {
	case JV_UNDEF: return 0;
	case JV_STR: {
		int64_t k = 0;
		jwork(jctx_state(c), 2 * v.u.s.n);   /* decoding: 2 units a byte */
		for (size_t i = 0; i < v.u.s.n; k++)
			jutf8_next(v.u.s.p, v.u.s.n, &i);
		return k;
	}
	case JV_LIST: return (int64_t)v.u.l->n;
	case JV_DICT: if (!v.u.d->ns) return (int64_t)v.u.d->n; break;
	default: break;
	}
	jfail(jctx_state(c), pos, -EINVAL, "object of type '%s' has no len()", jv_type(v));
}

/* A sequence's items as a list (dict: keys; string: characters; undefined: none). */
static struct jlist *items_of(struct jctx *c, size_t pos, struct jv v)
{
	struct jstate *st = jctx_state(c);
	struct jv l = jv_list(st);
	switch (v.kind) {
	case JV_UNDEF: return l.u.l;
	case JV_LIST: return v.u.l;
	case JV_DICT:
		if (v.u.d->ns)
			break;
		for (size_t i = 0; i < v.u.d->n; i++)
			jl_push(st, l.u.l, v.u.d->k[i]);
		return l.u.l;
	case JV_STR:
		for (size_t i = 0; i < v.u.s.n;) {
			size_t from = i;
			jutf8_next(v.u.s.p, v.u.s.n, &i);
			jl_push(st, l.u.l, (struct jv){.kind = JV_STR, .u.s = {v.u.s.p + from, i - from}});
		}
		return l.u.l;
	default: break;
	}
	jfail(st, pos, -EINVAL, "'%s' object is not iterable", jv_type(v));
}

/* Attribute paths as jinja's make_attrgetter reads them: "a.b.0". */
static struct jv attr_path(struct jctx *c, size_t pos, struct jv v, struct jv path)
{
	struct jstate *st = jctx_state(c);
	if (path.kind == JV_INT)
		return v.kind == JV_LIST && path.u.i >= 0 && (size_t)path.u.i < v.u.l->n ?
			v.u.l->v[path.u.i] : jv_undef("index out of range");
	if (path.kind != JV_STR)
		jfail(st, pos, -EINVAL, "an attribute name must be a string");
	const char *p = path.u.s.p, *end = p + path.u.s.n;
	while (p <= end) {
		const char *dot = memchr(p, '.', (size_t)(end - p));
		if (!dot)
			dot = end;
		char *part = ja_strndup(st, p, (size_t)(dot - p));
		char *e;
		long idx = strtol(part, &e, 10);
		if (*part && !*e && v.kind == JV_LIST)
			v = idx >= 0 && (size_t)idx < v.u.l->n ? v.u.l->v[idx] : jv_undef("index out of range");
		else
			v = jctx_getattr(c, pos, v, part);
		p = dot + 1;
	}
	return v;
}

static int run_test(struct jctx *c, size_t pos, struct jv test, struct jv item, struct jv *args, int nargs)
{
	int t;
	if (test.kind != JV_STR)
		jfail(jctx_state(c), pos, -EINVAL, "a test name must be a string");
	if (jb_test(c, pos, test.u.s.p, item, args, nargs, &t) == -ENOENT)
		jfail(jctx_state(c), pos, -EINVAL, "no test named '%s' (not supported)", test.u.s.p);
	return t;
}

/* select, reject (attr 0) and selectattr, rejectattr (attr 1). */
static struct jv do_select(struct jctx *c, size_t pos, struct jv seq, struct jv *args, int nargs,
                           int attr, int keep)
{
	struct jstate *st = jctx_state(c);
	struct jlist *in = items_of(c, pos, seq);
	struct jv out = jv_list(st);
	if (attr && nargs < 1)
		jfail(st, pos, -EINVAL, "selectattr/rejectattr need an attribute name");
	for (size_t i = 0; i < in->n; i++) {
		struct jv v = attr ? attr_path(c, pos, in->v[i], args[0]) : in->v[i];
		int t = nargs > attr ? run_test(c, pos, args[attr], v, args + attr + 1, nargs - attr - 1)
				     : jv_truthy(v);
		if (t == keep)
			jl_push(st, out.u.l, in->v[i]);
	}
	return out;
}

static struct jv do_map(struct jctx *c, size_t pos, struct jv seq, struct jv *args, int nargs,
                        const char **kwn, struct jv *kwv, int nkw)
{
	struct jstate *st = jctx_state(c);
	struct jlist *in = items_of(c, pos, seq);
	struct jv out = jv_list(st), attr = ARG(-1, "attribute", jv_undef("")),
		  def = ARG(-1, "default", jv_undef(""));
	for (size_t i = 0; i < in->n; i++) {
		struct jv r;
		if (attr.kind != JV_UNDEF) {
			r = attr_path(c, pos, in->v[i], attr);
			if (r.kind == JV_UNDEF && def.kind != JV_UNDEF)
				r = def;
		} else if (nargs >= 1 && args[0].kind == JV_STR) {
			if (jb_filter(c, pos, args[0].u.s.p, in->v[i], args + 1, nargs - 1, NULL, NULL, 0, &r)
			    == -ENOENT)
				jfail(st, pos, -EINVAL, "no filter named '%s' (not supported)", args[0].u.s.p);
		} else {
			jfail(st, pos, -EINVAL, "map needs attribute= or a filter name");
		}
		jl_push(st, out.u.l, r);
	}
	return out;
}

/* Sort key as jinja's sort/dictsort use it: strings lower-cased unless case_sensitive. */
static struct jv sort_key(struct jstate *st, struct jv v, int cs)
{
	return v.kind == JV_STR && !cs ? jcase(st, v, 0) : v;
}

/* A stable sort of l (by attr, case-folded strings unless cs), as Python's sorted(). */
static struct jv sorted(struct jctx *c, size_t pos, struct jlist *l, struct jv attr, int cs, int rev, int by_value)
{
	struct jstate *st = jctx_state(c);
	size_t n = l->n;
	struct jv out = jv_list(st), *keys = ja_alloc(st, (n + 1) * sizeof *keys);
	for (size_t i = 0; i < n; i++) {
		struct jv v = l->v[i];
		if (by_value >= 0)
			v = v.u.l->v[by_value];   /* dictsort: a (key, value) pair */
		else if (attr.kind != JV_NONE)
			v = attr_path(c, pos, v, attr);
		keys[i] = sort_key(st, v, cs);
		jl_push(st, out.u.l, l->v[i]);   /* placeholders: the sorted order is written below */
	}
	/* a stable merge sort of the indexes, by key: n log n comparisons */
	size_t *ix = ja_alloc(st, (n + 1) * sizeof *ix), *tmp = ja_alloc(st, (n + 1) * sizeof *tmp);
	for (size_t i = 0; i < n; i++)
		ix[i] = i;
	for (size_t w = 1; w < n; w *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * w) {
			size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			size_t a = lo, b = mid, k = lo;
			while (a < mid && b < hi) {   /* the right one first only when strictly before */
				int r = jv_order(c, pos, keys[ix[b]], keys[ix[a]]);
				tmp[k++] = (rev ? r > 0 : r < 0) ? ix[b++] : ix[a++];
			}
			while (a < mid)
				tmp[k++] = ix[a++];
			while (b < hi)
				tmp[k++] = ix[b++];
		}
		size_t *t = ix; ix = tmp; tmp = t;
	}
	for (size_t i = 0; i < n; i++)
		out.u.l->v[i] = l->v[ix[i]];
	return out;
}

/* int(f) for a finite float; refused past 64 bits (Python: an exact big int). */
static struct jv float_int(struct jstate *st, size_t pos, double f)
{
	if (!(f > -9223372036854775809.0 && f < 9223372036854775808.0))
		joverflow(st, pos, "int");
	return jv_int((int64_t)f);
}

/* jinja's int filter: int(v), else int(float(v)), else def; inf is an error
 * in jinja2 too (OverflowError), NaN the default. */
static struct jv to_int(struct jstate *st, size_t pos, struct jv v, struct jv def)
{
	if (v.kind == JV_INT)
		return v;
	if (v.kind == JV_BOOL)
		return jv_int(v.u.b);
	if (v.kind == JV_FLOAT)
		return isnan(v.u.f) ? def : float_int(st, pos, v.u.f);
	if (v.kind == JV_STR) {
		char *e;
		struct jv t = jstrip(st, v, jv_none(), 3);
		if (!t.u.s.n)
			return def;
		char *buf = ja_strndup(st, t.u.s.p, t.u.s.n);
		errno = 0;
		long long i = strtoll(buf, &e, 10);
		if (!*e && errno == ERANGE)
			joverflow(st, pos, "int");
		if (!*e)
			return jv_int(i);
		double f = strtod(buf, &e);
		return !*e && !isnan(f) ? float_int(st, pos, f) : def;
	}
	return def;
}

int jb_filter(struct jctx *c, size_t pos, const char *name, struct jv self, struct jv *args, int nargs,
              const char **kwn, struct jv *kwv, int nkw, struct jv *out)
{
	struct jstate *st = jctx_state(c);
	struct jbuf b = {0};
	jwork(st, 4 * JW_STEP);   /* finding the filter by name */
#define IS(s) (!strcmp(name, s))
	if (IS("trim") || IS("upper") || IS("lower") || IS("capitalize") || IS("title")) {
		need(c, pos, self);
		struct jv s = jv_strof(st, self);
		if (IS("trim"))
			*out = jstrip(st, s, ARG(0, "chars", jv_none()), 3);
		else
			*out = jcase(st, s, IS("lower") ? 0 : IS("upper") ? 1 : IS("capitalize") ? 2 : 4);
		return 0;
	}
	if (IS("length") || IS("count")) {
		*out = jv_int(jlen(c, pos, self));
		return 0;
	}
	if (IS("tojson")) {
		struct jv ea = ARG(0, "ensure_ascii", jv_bool(0)), ind = ARG(1, "indent", jv_none()),
			  sep = ARG(2, "separators", jv_none()), sk = ARG(3, "sort_keys", jv_bool(0));
		if (ind.kind != JV_NONE && ind.kind != JV_INT)
			jfail(st, pos, -EINVAL, "tojson: indent must be an integer");
		const char *isep = NULL, *ksep = NULL;
		if (sep.kind == JV_LIST && sep.u.l->n == 2 && sep.u.l->v[0].kind == JV_STR &&
		    sep.u.l->v[1].kind == JV_STR) {
			isep = sep.u.l->v[0].u.s.p;
			ksep = sep.u.l->v[1].u.s.p;
		} else if (sep.kind != JV_NONE) {
			jfail(st, pos, -EINVAL, "tojson: separators must be a pair of strings");
		}
		if (ind.kind == JV_INT && ind.u.i > 1000000)   /* also keeps indent x depth in an int */
			jfail(st, pos, -EINVAL, "tojson: indent %lld is too large", (long long)ind.u.i);
		/* Python: a negative indent means newlines without indentation */
		if (jv_tojson(st, &b, self, ind.kind == JV_INT ? (ind.u.i < 0 ? 0 : (int)ind.u.i) : -1, isep, ksep,
			       jv_truthy(sk),
			       jv_truthy(ea)))
			jfail(st, pos, -EINVAL, "Object of type %s is not JSON serializable", jv_type(self));
		*out = sv(&b);
		return 0;
	}
	if (IS("default") || IS("d")) {
		struct jv def = ARG(0, "default_value", jv_cstr(""));
		int boolean = jv_truthy(ARG(1, "boolean", jv_bool(0)));
		*out = self.kind == JV_UNDEF || (boolean && !jv_truthy(self)) ? def : self;
		return 0;
	}
	if (IS("join")) {
		struct jlist *l = items_of(c, pos, self);
		struct jv sep = ARG(0, "d", jv_cstr("")), attr = ARG(1, "attribute", jv_none());
		for (size_t i = 0; i < l->n; i++) {
			if (i)
				jv_tostr(st, &b, sep);
			jv_tostr(st, &b, attr.kind == JV_NONE ? l->v[i] : attr_path(c, pos, l->v[i], attr));
		}
		*out = sv(&b);
		return 0;
	}
	if (IS("first") || IS("last")) {
		struct jlist *l = items_of(c, pos, self);
		*out = !l->n ? jv_undef("No first item, sequence was empty.") : l->v[IS("first") ? 0 : l->n - 1];
		return 0;
	}
	if (IS("string")) {
		*out = jv_strof(st, self);
		return 0;
	}
	if (IS("int")) {
		*out = to_int(st, pos, self, ARG(0, "default", jv_int(0)));
		return 0;
	}
	if (IS("float")) {
		*out = self.kind == JV_FLOAT ? self : self.kind == JV_INT ? jv_float((double)self.u.i) :
			self.kind == JV_BOOL ? jv_float(self.u.b) : ARG(0, "default", jv_float(0));
		if (self.kind == JV_STR) {
			char *e, *t = ja_strndup(st, self.u.s.p, self.u.s.n);
			double f = strtod(t, &e);
			if (e != t && !*jstrip(st, jv_cstr(e), jv_none(), 3).u.s.p)
				*out = jv_float(f);
		}
		return 0;
	}
	if (IS("items")) {
		*out = jv_list(st);
		if (self.kind == JV_UNDEF)
			return 0;
		if (self.kind != JV_DICT || self.u.d->ns)
			jfail(st, pos, -EINVAL, "items: can only get item pairs from a mapping, not %s", jv_type(self));
		for (size_t i = 0; i < self.u.d->n; i++) {
			struct jv t = jv_list(st);
			t.tuple = 1;
			jl_push(st, t.u.l, self.u.d->k[i]);
			jl_push(st, t.u.l, self.u.d->v[i]);
			jl_push(st, out->u.l, t);
		}
		return 0;
	}
	if (IS("list")) {
		struct jlist *l = items_of(c, pos, self);
		*out = jv_list(st);
		for (size_t i = 0; i < l->n; i++)
			jl_push(st, out->u.l, l->v[i]);
		return 0;
	}
	if (IS("reverse")) {
		need(c, pos, self);
		struct jlist *l = items_of(c, pos, self);
		if (self.kind == JV_STR) {
			for (size_t i = l->n; i-- > 0;)
				jb_put(st, &b, l->v[i].u.s.p, l->v[i].u.s.n);
			*out = sv(&b);
			return 0;
		}
		*out = jv_list(st);
		for (size_t i = l->n; i-- > 0;)
			jl_push(st, out->u.l, l->v[i]);
		return 0;
	}
	if (IS("select") || IS("reject") || IS("selectattr") || IS("rejectattr")) {
		*out = do_select(c, pos, self, args, nargs, IS("selectattr") || IS("rejectattr"),
				 IS("select") || IS("selectattr"));
		return 0;
	}
	if (IS("sort")) {
		struct jlist *l = items_of(c, pos, self);
		*out = sorted(c, pos, l, ARG(2, "attribute", jv_none()), jv_truthy(ARG(1, "case_sensitive", jv_bool(0))),
			      jv_truthy(ARG(0, "reverse", jv_bool(0))), -1);
		return 0;
	}
	if (IS("dictsort")) {
		if (self.kind != JV_DICT || self.u.d->ns)
			jfail(st, pos, -EINVAL, "dictsort needs a mapping, not %s", jv_type(self));
		struct jv pairs, by = ARG(1, "by", jv_cstr("key"));
		jb_filter(c, pos, "items", self, NULL, 0, NULL, NULL, 0, &pairs);
		int value = by.kind == JV_STR && by.u.s.n == 5 && !memcmp(by.u.s.p, "value", 5);
		if (!value && !(by.kind == JV_STR && by.u.s.n == 3 && !memcmp(by.u.s.p, "key", 3)))
			jfail(st, pos, -EINVAL, "dictsort: by must be 'key' or 'value'");
		*out = sorted(c, pos, pairs.u.l, jv_none(), jv_truthy(ARG(0, "case_sensitive", jv_bool(0))),
			      jv_truthy(ARG(2, "reverse", jv_bool(0))), value);
		return 0;
	}
	if (IS("map")) {
		*out = do_map(c, pos, self, args, nargs, kwn, kwv, nkw);
		return 0;
	}
	if (IS("replace")) {
		need(c, pos, self);
		struct jv o = ARG(0, "old", jv_none()), n = ARG(1, "new", jv_none()), k = ARG(2, "count", jv_none());
		if (o.kind != JV_STR || n.kind != JV_STR)
			jfail(st, pos, -EINVAL, "replace needs two strings");
		*out = jreplace(st, jv_strof(st, self), o, n, k.kind == JV_INT ? k.u.i : -1);
		return 0;
	}
	if (IS("safe")) {
		*out = self.kind == JV_STR ? self : jv_strof(st, self);
		return 0;
	}
	if (IS("abs")) {
		if (self.kind == JV_INT && self.u.i == INT64_MIN)
			joverflow(st, pos, "abs");
		if (self.kind == JV_INT)
			*out = jv_int(self.u.i < 0 ? -self.u.i : self.u.i);
		else if (self.kind == JV_FLOAT)
			*out = jv_float(fabs(self.u.f));
		else
			jfail(st, pos, -EINVAL, "bad operand type for abs(): '%s'", jv_type(self));
		return 0;
	}
	if (IS("e") || IS("escape")) {
		struct jv s = jv_strof(st, self);
		for (size_t i = 0; i < s.u.s.n; i++) {
			char ch = s.u.s.p[i];
			const char *r = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" :
				ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
			if (r)
				jb_puts(st, &b, r);
			else
				jb_put(st, &b, &ch, 1);
		}
		*out = sv(&b);
		return 0;
	}
#undef IS
	return -ENOENT;
}

int jb_test(struct jctx *c, size_t pos, const char *name, struct jv self, struct jv *args, int nargs,
            int *out)
{
	struct jv a = nargs > 0 ? args[0] : jv_undef("the test needs an argument");
	int k = self.kind;
	jwork(jctx_state(c), 2 * JW_STEP);   /* finding the test by name */
#define IS(s) (!strcmp(name, s))
	if (IS("defined")) *out = k != JV_UNDEF;
	else if (IS("undefined")) *out = k == JV_UNDEF;
	else if (IS("none")) *out = k == JV_NONE;
	else if (IS("boolean")) *out = k == JV_BOOL;
	else if (IS("true")) *out = k == JV_BOOL && self.u.b;
	else if (IS("false")) *out = k == JV_BOOL && !self.u.b;
	else if (IS("integer")) *out = k == JV_INT;
	else if (IS("float")) *out = k == JV_FLOAT;
	else if (IS("number")) *out = k == JV_INT || k == JV_FLOAT || k == JV_BOOL;
	else if (IS("string")) *out = k == JV_STR;
	else if (IS("mapping")) *out = k == JV_DICT && !self.u.d->ns;
	else if (IS("iterable") || IS("sequence"))
		*out = k == JV_STR || k == JV_LIST || k == JV_UNDEF || (k == JV_DICT && !self.u.d->ns);
	else if (IS("callable")) *out = k == JV_MACRO || k == JV_FUNC || k == JV_METHOD;
	else if (IS("odd") || IS("even") || IS("divisibleby")) {
		if (k != JV_INT || (IS("divisibleby") && (a.kind != JV_INT || !a.u.i)))
			jfail(jctx_state(c), pos, -EINVAL, "the test '%s' needs integers", name);
		*out = IS("odd") ? (self.u.i & 1) != 0 : IS("even") ? !(self.u.i & 1) :
			a.u.i == -1 || self.u.i % a.u.i == 0;   /* INT64_MIN % -1 traps */
	} else if (IS("eq") || IS("equalto") || IS("==")) *out = jv_equal(jctx_state(c), self, a);
	else if (IS("ne") || IS("!=")) *out = !jv_equal(jctx_state(c), self, a);
	else if (IS("sameas")) *out = jv_equal(jctx_state(c), self, a) && (k <= JV_BOOL || k == a.kind);
	else if (IS("in")) *out = jv_contains(c, pos, a, self);
	else if (IS("lower") || IS("upper")) {
		int any = 0, ok = k == JV_STR;
		for (size_t i = 0; ok && i < self.u.s.n; i++) {
			char ch = self.u.s.p[i];
			any |= (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
			if (IS("lower") ? (ch >= 'A' && ch <= 'Z') : (ch >= 'a' && ch <= 'z'))
				ok = 0;
		}
		*out = ok && any;
	} else
		return -ENOENT;
#undef IS
	return 0;
}
