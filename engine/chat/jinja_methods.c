/* jinja_methods.c — the Python methods chat templates call on strings and
 * dicts, and the globals transformers gives them: namespace (no attribute
 * names starting with _), dict, range, raise_exception, strftime_now.
 * Methods that change a list or dict are refused, as jinja2's
 * ImmutableSandboxedEnvironment refuses them. obj.name (jctx_getattr) is
 * resolved here, for the evaluator and the filters (map, sort by
 * attribute); so are the string methods the filters share (jstrip, jcase,
 * jreplace) and their argument picker (jarg). Case mapping (upper, lower,
 * capitalize, title) covers ASCII, Latin-1, Latin Extended-A, Greek and
 * Cyrillic; other characters pass unchanged. */
#include "engine/chat/jinja_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct jv jarg(struct jv *args, int nargs, const char **kwn, struct jv *kwv, int nkw, int idx,
               const char *name, struct jv def)
{
	if (idx >= 0 && idx < nargs)
		return args[idx];
	for (int k = 0; k < nkw; k++)
		if (name && !strcmp(kwn[k], name))
			return kwv[k];
	return def;
}

#define ARG(i, n, d) jarg(args, nargs, kwn, kwv, nkw, i, n, d)

static const char *const str_methods[] = {
	"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "replace", "upper",
	"lower", "title", "capitalize", "find", "rfind", "count", "join", "splitlines", "isdigit",
	"isalpha", "isspace", "isalnum", "isupper", "islower", NULL};
static const char *const dict_methods[] = {
	"items", "keys", "values", "get", "copy", "pop", "popitem", "update", "setdefault", "clear",
	"fromkeys", NULL};
static const char *const list_methods[] = {
	"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "index", "count",
	"copy", NULL};
static const char *const mutating[] = {
	"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "popitem", "update",
	"setdefault", NULL};

static int in_list(const char *const *l, const char *name)
{
	for (; *l; l++)
		if (!strcmp(*l, name))
			return 1;
	return 0;
}

int jb_has_method(struct jv self, const char *name)
{
	switch (self.kind) {
	case JV_STR: return in_list(str_methods, name);
	case JV_DICT: return !self.u.d->ns && in_list(dict_methods, name);
	case JV_LIST: return in_list(list_methods, name);
	default: return 0;
	}
}

/* ---- attributes ---------------------------------------------------------- */

/* Fails when v is undefined: the one thing default Undefined refuses. */
static void need_defined(struct jctx *c, size_t pos, struct jv v)
{
	if (v.kind == JV_UNDEF)
		jfail(c->st, pos, -EINVAL, "%s", v.u.s.p);
}

struct jv jctx_no_attr(struct jctx *c, struct jv obj, const char *name)
{
	struct jbuf b = {0};
	jb_puts(c->st, &b, "'");
	jb_puts(c->st, &b, jv_type(obj));
	jb_puts(c->st, &b, " object' has no attribute '");
	jb_puts(c->st, &b, name);
	jb_puts(c->st, &b, "'");
	return jv_undef(b.s);
}

struct jv jctx_method(struct jctx *c, struct jv self, const char *name)
{
	struct jmethod *m = ja_alloc(c->st, sizeof *m);
	m->self = self;
	m->name = name;
	return (struct jv){.kind = JV_METHOD, .u.meth = m};
}

/* obj.name as Jinja's sandboxed getattr does it: the attribute (a method),
 * else the item, else undefined. */
struct jv jctx_getattr(struct jctx *c, size_t pos, struct jv obj, const char *name)
{
	need_defined(c, pos, obj);
	if (obj.kind == JV_DICT && !obj.u.d->ns && jb_has_method(obj, name))
		return jctx_method(c, obj, name);
	if (obj.kind == JV_DICT) {
		struct jv *v = jd_getc(c->st, obj.u.d, name);
		return v ? *v : jctx_no_attr(c, obj, name);
	}
	if (jb_has_method(obj, name))
		return jctx_method(c, obj, name);
	return jctx_no_attr(c, obj, name);
}

/* ---- the string methods filters share ------------------------------------- */

static struct jv sv(struct jbuf *b)
{
	return (struct jv){.kind = JV_STR, .u.s = {b->s ? b->s : "", b->n}};
}

static int cpcmp(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return a < b ? -1 : a > b;
}

/* The characters strip removes: white space (set NULL), or set[0..n), sorted. */
static int strips(uint32_t c, const uint32_t *set, size_t n)
{
	return set ? bsearch(&c, set, n, sizeof c, cpcmp) != NULL : jpy_space(c);
}

/* The start of the code point that ends at s[end) (a bad byte: itself). */
static size_t cp_start(const char *s, size_t end)
{
	size_t i = end - 1;
	while (i > 0 && end - i < 4 && ((unsigned char)s[i] & 0xC0) == 0x80)
		i--;
	size_t k = i;
	jutf8_next(s, end, &k);
	return k == end ? i : end - 1;
}

/* Linear in the string and the set: the set is sorted once, each character
 * looked up in it; only the stripped ends are walked. */
struct jv jstrip(struct jstate *st, struct jv s, struct jv chars, int which)
{
	const char *p = s.u.s.p;
	size_t lo = 0, hi = s.u.s.n, nset = 0;
	uint32_t *set = NULL;
	if (chars.kind == JV_STR) {
		set = ja_alloc(st, (chars.u.s.n + 1) * sizeof *set);
		for (size_t k = 0; k < chars.u.s.n;)
			set[nset++] = jutf8_next(chars.u.s.p, chars.u.s.n, &k);
		qsort(set, nset, sizeof *set, cpcmp);
		jwork(st, (uint64_t)nset * JW_STEP);
	}
	while ((which & 1) && lo < hi) {
		size_t k = lo;
		if (!strips(jutf8_next(p, hi, &k), set, nset))
			break;
		lo = k;
	}
	while ((which & 2) && hi > lo) {
		size_t k = cp_start(p, hi), e = k;
		if (!strips(jutf8_next(p, hi, &e), set, nset))
			break;
		hi = k;
	}
	if (st)
		jwork(st, (lo + s.u.s.n - hi) * (set ? 4 : 1));
	return (struct jv){.kind = JV_STR, .u.s = {p + lo, hi - lo}};
}

/* Simple case mapping of one code point: ASCII, Latin-1, Latin Extended-A,
 * Greek and Cyrillic (up 1: to upper case, 0: to lower case). */
static uint32_t case1(uint32_t c, int up)
{
	int lower = (c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7) ||
		(c >= 0x3B1 && c <= 0x3C9) || (c >= 0x430 && c <= 0x45F);
	int upper = (c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) ||
		(c >= 0x391 && c <= 0x3A9 && c != 0x3A2) || (c >= 0x400 && c <= 0x42F);
	if (up && lower)
		return c == 0x3C2 ? 0x3A3 : c >= 0x450 && c <= 0x45F ? c - 0x50 : c - 0x20;
	if (!up && upper)
		return c >= 0x400 && c <= 0x40F ? c + 0x50 : c + 0x20;
	if ((c >= 0x100 && c <= 0x137 && c != 0x130 && c != 0x131) || (c >= 0x14A && c <= 0x177))
		return up ? c & ~1u : c | 1u;
	if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
		return up ? ((c & 1) ? c : c - 1) : ((c & 1) ? c + 1 : c);
	if (c == 0xFF && up)
		return 0x178;
	if (c == 0x178 && !up)
		return 0xFF;
	return c;
}

static int cased(uint32_t c)
{
	return case1(c, 0) != c || case1(c, 1) != c;
}

/* Mode 4, jinja's title filter: a word starts after white space, -, (, {, [ or <. */
struct jv jcase(struct jstate *st, struct jv s, int mode)
{
	struct jbuf b = {0};
	uint32_t prev = 0;
	int first = 1;
	jwork(st, 4 * s.u.s.n);   /* decoding and mapping each character */
	for (size_t i = 0; i < s.u.s.n;) {
		size_t from = i;
		uint32_t c = jutf8_next(s.u.s.p, s.u.s.n, &i), o;
		int up = mode == 1 || (mode == 2 && first) || (mode == 3 && !cased(prev)) ||
			(mode == 4 && (first || jpy_space(prev) || (prev && strchr("-({[<", (int)prev))));
		o = case1(c, up);
		char e[4];
		size_t n = o < 0x80 ? 1 : o < 0x800 ? 2 : 3;
		if (n == 1)
			e[0] = (char)o;
		else if (n == 2)
			e[0] = (char)(0xC0 | o >> 6), e[1] = (char)(0x80 | (o & 0x3F));
		else
			e[0] = (char)(0xE0 | o >> 12), e[1] = (char)(0x80 | ((o >> 6) & 0x3F)),
			e[2] = (char)(0x80 | (o & 0x3F));
		if (o == c)   /* unchanged: the original bytes (a bad byte too) */
			jb_put(st, &b, s.u.s.p + from, i - from);
		else
			jb_put(st, &b, e, n);
		prev = c;
		first = 0;
	}
	return sv(&b);
}

struct jv jreplace(struct jstate *st, struct jv s, struct jv old, struct jv new, int64_t count)
{
	struct jbuf b = {0};
	size_t i = 0;
	int64_t done = 0;
	if (!old.u.s.n) {   /* Python inserts new between every character */
		while (i <= s.u.s.n && (count < 0 || done < count)) {
			jb_put(st, &b, new.u.s.p, new.u.s.n);
			done++;
			if (i == s.u.s.n) {
				i++;
				break;
			}
			size_t from = i;
			jutf8_next(s.u.s.p, s.u.s.n, &i);
			jb_put(st, &b, s.u.s.p + from, i - from);
		}
		if (i < s.u.s.n)
			jb_put(st, &b, s.u.s.p + i, s.u.s.n - i);
		return sv(&b);
	}
	for (int64_t at; count < 0 || done < count; done++) {
		at = jfind(st, s.u.s.p, s.u.s.n, old.u.s.p, old.u.s.n, i, 0);
		if (at < 0)
			break;
		jb_put(st, &b, s.u.s.p + i, (size_t)at - i);
		jb_put(st, &b, new.u.s.p, new.u.s.n);
		i = (size_t)at + old.u.s.n;
	}
	jb_put(st, &b, s.u.s.p + i, s.u.s.n - i);
	return sv(&b);
}

/* ---- the methods ----------------------------------------------------------- */

static struct jv sub(const char *p, size_t n)
{
	return (struct jv){.kind = JV_STR, .u.s = {p, n}};
}

/* str.split(sep, maxsplit): sep NONE splits on runs of white space. */
static struct jv split(struct jstate *st, size_t pos, struct jv s, struct jv sep, int64_t maxsplit)
{
	struct jv out = jv_list(st);
	const char *p = s.u.s.p;
	size_t n = s.u.s.n, i = 0;
	if (sep.kind == JV_STR) {
		if (!sep.u.s.n)
			jfail(st, pos, -EINVAL, "split: empty separator");
		for (int64_t done = 0, at; maxsplit < 0 || done < maxsplit; done++) {
			at = jfind(st, p, n, sep.u.s.p, sep.u.s.n, i, 0);
			if (at < 0)
				break;
			jl_push(st, out.u.l, sub(p + i, (size_t)at - i));
			i = (size_t)at + sep.u.s.n;
		}
		jl_push(st, out.u.l, sub(p + i, n - i));
		return out;
	}
	if (sep.kind != JV_NONE)
		jfail(st, pos, -EINVAL, "split: the separator must be a string or None");
	int64_t done = 0;
	while (i < n) {
		size_t j = i;
		while (j < n) {   /* skip white space */
			size_t k = j;
			if (!jpy_space(jutf8_next(p, n, &k)))
				break;
			j = k;
		}
		if (j >= n)
			break;
		if (maxsplit >= 0 && done >= maxsplit) {
			struct jv rest = jstrip(st, sub(p + j, n - j), jv_none(), 2);
			jl_push(st, out.u.l, rest);
			return out;
		}
		size_t e = j;
		while (e < n) {
			size_t k = e;
			if (jpy_space(jutf8_next(p, n, &k)))
				break;
			e = k;
		}
		jl_push(st, out.u.l, sub(p + j, e - j));
		done++;
		i = e;
	}
	return out;
}

static int affix(struct jstate *st, size_t pos, struct jv s, struct jv a, int end)
{
	if (a.kind == JV_LIST && a.tuple) {
		for (size_t i = 0; i < a.u.l->n; i++)
			if (affix(st, pos, s, a.u.l->v[i], end))
				return 1;
		return 0;
	}
	if (a.kind != JV_STR)
		jfail(st, pos, -EINVAL, "%s: the argument must be a string or a tuple of strings, not %s",
		      end ? "endswith" : "startswith", jv_type(a));
	if (a.u.s.n > s.u.s.n)
		return 0;
	jwork(st, a.u.s.n);
	return !memcmp(s.u.s.p + (end ? s.u.s.n - a.u.s.n : 0), a.u.s.p, a.u.s.n);
}

static int64_t cp_index(struct jstate *st, struct jv s, size_t byte)
{
	int64_t k = 0;
	jwork(st, byte);
	for (size_t i = 0; i < byte;)
		jutf8_next(s.u.s.p, s.u.s.n, &i), k++;
	return k;
}

static struct jv str_method(struct jstate *st, size_t pos, const char *m, struct jv s, struct jv *args,
                            int nargs, const char **kwn, struct jv *kwv, int nkw, int *found)
{
	struct jv a0 = ARG(0, NULL, jv_none());
	*found = 1;
	if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip"))
		return jstrip(st, s, a0, m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
	if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
		struct jv mx = ARG(1, "maxsplit", jv_int(-1));
		if (m[0] == 'r' && mx.kind == JV_INT && mx.u.i >= 0)
			jfail(st, pos, -EINVAL, "rsplit with maxsplit is not supported");
		return split(st, pos, s, ARG(0, "sep", jv_none()), mx.kind == JV_INT ? mx.u.i : -1);
	}
	if (!strcmp(m, "startswith") || !strcmp(m, "endswith"))
		return jv_bool(affix(st, pos, s, a0, m[0] == 'e'));
	if (!strcmp(m, "replace")) {
		struct jv o = ARG(0, "old", jv_none()), n = ARG(1, "new", jv_none()), k = ARG(2, "count", jv_int(-1));
		if (o.kind != JV_STR || n.kind != JV_STR || k.kind != JV_INT)
			jfail(st, pos, -EINVAL, "replace needs two strings (and an integer count)");
		return jreplace(st, s, o, n, k.u.i);
	}
	if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "capitalize") || !strcmp(m, "title"))
		return jcase(st, s, m[0] == 'l' ? 0 : m[0] == 'u' ? 1 : m[0] == 'c' ? 2 : 3);
	if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "count")) {
		if (a0.kind != JV_STR)
			jfail(st, pos, -EINVAL, "%s needs a string", m);
		const char *p = s.u.s.p, *q = a0.u.s.p;
		size_t n = s.u.s.n, k = a0.u.s.n;
		if (m[0] == 'c') {   /* non-overlapping hits; '' is found between every character */
			if (!k)
				return jv_int(cp_index(st, s, n) + 1);
			int64_t count = 0;
			for (int64_t at = 0; (at = jfind(st, p, n, q, k, (size_t)at, 0)) >= 0; at += (int64_t)k)
				count++;
			return jv_int(count);
		}
		int64_t at = jfind(st, p, n, q, k, 0, m[0] == 'r');
		return jv_int(at < 0 ? -1 : cp_index(st, s, (size_t)at));
	}
	if (!strcmp(m, "join")) {
		if (a0.kind != JV_LIST)
			jfail(st, pos, -EINVAL, "join needs a list of strings");
		struct jbuf b = {0};
		for (size_t i = 0; i < a0.u.l->n; i++) {
			if (a0.u.l->v[i].kind != JV_STR)
				jfail(st, pos, -EINVAL, "sequence item %zu: expected str instance, %s found", i,
				      jv_type(a0.u.l->v[i]));
			if (i)
				jb_put(st, &b, s.u.s.p, s.u.s.n);
			jb_put(st, &b, a0.u.l->v[i].u.s.p, a0.u.l->v[i].u.s.n);
		}
		return sub(b.s ? b.s : "", b.n);
	}
	if (!strcmp(m, "splitlines")) {
		struct jv out = jv_list(st);
		size_t from = 0, i = 0;
		while (i < s.u.s.n) {
			size_t at = i;
			uint32_t c = jutf8_next(s.u.s.p, s.u.s.n, &i);
			if (c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) ||
			    c == 0x85 || c == 0x2028 || c == 0x2029) {
				jl_push(st, out.u.l, sub(s.u.s.p + from, at - from));
				if (c == '\r' && i < s.u.s.n && s.u.s.p[i] == '\n')
					i++;
				from = i;
			}
		}
		if (from < s.u.s.n)
			jl_push(st, out.u.l, sub(s.u.s.p + from, s.u.s.n - from));
		return out;
	}
	if (!strncmp(m, "is", 2)) {   /* ASCII classes; isspace as Python */
		int all = s.u.s.n > 0, cased = 0;
		for (size_t i = 0; i < s.u.s.n;) {
			uint32_t c = jutf8_next(s.u.s.p, s.u.s.n, &i);
			int d = c >= '0' && c <= '9', lo = c >= 'a' && c <= 'z', up = c >= 'A' && c <= 'Z';
			cased |= lo || up;
			if (!strcmp(m, "isdigit")) all &= d;
			else if (!strcmp(m, "isalpha")) all &= lo || up;
			else if (!strcmp(m, "isalnum")) all &= lo || up || d;
			else if (!strcmp(m, "isspace")) all &= jpy_space(c);
			else if (!strcmp(m, "isupper")) all &= !lo;
			else all &= !up;
		}
		if (!strcmp(m, "isupper") || !strcmp(m, "islower"))
			all = all && cased;
		return jv_bool(all);
	}
	*found = 0;
	return jv_none();
}

int jb_method(struct jctx *c, size_t pos, const struct jmethod *meth, struct jv *args, int nargs,
              const char **kwn, struct jv *kwv, int nkw, struct jv *out)
{
	struct jstate *st = jctx_state(c);
	struct jv self = meth->self;
	const char *m = meth->name;
	jwork(st, 2 * JW_STEP);   /* finding the method by name */
	if ((self.kind == JV_LIST || self.kind == JV_DICT) && in_list(mutating, m))
		jfail(st, pos, -EINVAL, "%s.%s() changes the %s: not allowed in the sandbox chat templates "
		      "run in (build a new value instead)", jv_type(self), m, jv_type(self));
	if (self.kind == JV_STR) {
		int found;
		*out = str_method(st, pos, m, self, args, nargs, kwn, kwv, nkw, &found);
		return found ? 0 : -ENOENT;
	}
	if (self.kind == JV_DICT && !strcmp(m, "cycle") && jd_getc(st, self.u.d, "index0")) {   /* loop.cycle */
		if (nargs < 1)
			jfail(st, pos, -EINVAL, "loop.cycle needs at least one value");
		*out = args[jd_getc(st, self.u.d, "index0")->u.i % nargs];
		return 0;
	}
	if (self.kind == JV_DICT) {
		struct jdict *d = self.u.d;
		if (!strcmp(m, "get")) {
			struct jv *v = nargs >= 1 ? jd_get(st, d, args[0]) : NULL;
			*out = v ? *v : nargs >= 2 ? args[1] : jv_none();
			return 0;
		}
		if (!strcmp(m, "copy")) {
			*out = jv_dict(st);
			jd_copy(st, out->u.d, d);
			return 0;
		}
		int which = !strcmp(m, "keys") ? 0 : !strcmp(m, "values") ? 1 : !strcmp(m, "items") ? 2 : -1;
		if (which < 0)
			return -ENOENT;
		*out = jv_list(st);
		for (size_t i = 0; i < d->n; i++) {
			struct jv v = which == 0 ? d->k[i] : d->v[i];
			if (which == 2) {
				v = jv_list(st);
				v.tuple = 1;
				jl_push(st, v.u.l, d->k[i]);
				jl_push(st, v.u.l, d->v[i]);
			}
			jl_push(st, out->u.l, v);
		}
		return 0;
	}
	if (self.kind == JV_LIST && (!strcmp(m, "index") || !strcmp(m, "count"))) {
		int64_t count = 0, first = -1;
		for (size_t i = 0; i < self.u.l->n; i++)
			if (nargs >= 1 && jv_equal(st, self.u.l->v[i], args[0])) {
				count++;
				if (first < 0)
					first = (int64_t)i;
			}
		if (m[0] == 'i' && first < 0)
			jfail(st, pos, -EINVAL, "list.index(x): x not in list");
		*out = jv_int(m[0] == 'i' ? first : count);
		return 0;
	}
	return -ENOENT;
}

#define RAISE_SHOWN 512   /* bytes of a raise_exception message shown (the rest: counted) */

/* The longest prefix of s no longer than max that ends on a character boundary. */
static size_t jutf8_cut(const char *s, size_t max)
{
	size_t k = max;
	while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
		k--;
	return k;
}

static const char *ellipsis(struct jstate *st, size_t n)
{
	char *t = ja_alloc(st, 48);
	snprintf(t, 48, " ... (%zu bytes in all)", n);
	return t;
}

static const char *const globals[] = {"namespace", "dict", "range", "raise_exception", "strftime_now", NULL};

int jb_is_global(const char *name)
{
	return in_list(globals, name);
}

int jb_call_global(struct jctx *c, size_t pos, const char *fn, struct jv *args, int nargs,
                   const char **kwn, struct jv *kwv, int nkw, struct jv *out)
{
	struct jstate *st = jctx_state(c);
	if (!strcmp(fn, "namespace") || !strcmp(fn, "dict")) {
		*out = jv_dict(st);
		out->u.d->ns = fn[0] == 'n';
		if (nargs > 1 || (nargs == 1 && (args[0].kind != JV_DICT || args[0].u.d->ns)))
			jfail(st, pos, -EINVAL, "%s() takes at most one mapping and keyword arguments", fn);
		if (nargs == 1)
			jd_copy(st, out->u.d, args[0].u.d);
		for (int k = 0; k < nkw; k++)
			jd_set(st, out->u.d, jv_cstr(kwn[k]), kwv[k]);
		for (size_t i = 0; out->u.d->ns && i < out->u.d->n; i++)
			if (out->u.d->k[i].kind == JV_STR && out->u.d->k[i].u.s.p[0] == '_')
				jfail(st, pos, -EINVAL, "chat templates cannot store underscore-prefixed attributes "
				      "on a namespace ('%s')", out->u.d->k[i].u.s.p);
		return 0;
	}
	if (!strcmp(fn, "range")) {
		int64_t v[3] = {0, 0, 1};
		if (nargs < 1 || nargs > 3 || nkw)
			jfail(st, pos, -EINVAL, "range() takes 1 to 3 integer arguments");
		for (int i = 0; i < nargs; i++) {
			if (args[i].kind != JV_INT)
				jfail(st, pos, -EINVAL, "range(): '%s' object cannot be interpreted as an integer",
				      jv_type(args[i]));
			v[nargs == 1 ? 1 : i] = args[i].u.i;
		}
		if (!v[2])
			jfail(st, pos, -EINVAL, "range() arg 3 must not be zero");
		*out = jv_list(st);
		for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1];) {
			if (out->u.l->n >= 100000)
				jfail(st, pos, -EINVAL, "range() longer than 100000 items");
			jl_push(st, out->u.l, jv_int(i));
			if (__builtin_add_overflow(i, v[2], &i))   /* past the end */
				break;
		}
		return 0;
	}
	if (!strcmp(fn, "raise_exception")) {
		struct jbuf b = {0};
		if (nargs >= 1 && args[0].kind == JV_STR)   /* no copy of a long message */
			b = (struct jbuf){(char *)args[0].u.s.p, args[0].u.s.n, args[0].u.s.n};
		else if (nargs >= 1)
			jv_tostr(st, &b, args[0]);
		size_t shown = b.n <= RAISE_SHOWN ? b.n : jutf8_cut(b.s, RAISE_SHOWN);
		jfail(st, pos, -EINVAL, "the template refused this conversation: raise_exception(\"%.*s\")%s",
		      (int)shown, b.s ? b.s : "", shown < b.n ? ellipsis(st, b.n) : "");
	}
	if (!strcmp(fn, "strftime_now")) {
		char buf[256];
		time_t now = time(NULL);
		struct tm tm;
		if (nargs != 1 || args[0].kind != JV_STR)
			jfail(st, pos, -EINVAL, "strftime_now needs one format string");
		size_t n = strftime(buf, sizeof buf, args[0].u.s.p, localtime_r(&now, &tm));
		*out = jv_str(st, buf, n);
		return 0;
	}
	jfail(st, pos, -EINVAL, "'%s' is not callable", fn);
}
