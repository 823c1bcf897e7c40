/* jinja_ops.c — the operators on values: arithmetic (+ - * / // % ** ~ and
 * sequence repetition) with Python's rules on 64-bit integers, checked (a
 * result that does not fit is refused: jinja2 would give a big integer),
 * ordering (<, <=, >, >=, sort keys) and `in`. Each charges the work budget
 * for what it touches (jinja_int.h). */
#include "engine/chat/jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_OUT (256u << 20)   /* as jinja_eval.c's bound on the output */

static void need_defined(struct jctx *c, size_t pos, struct jv v)
{
	if (v.kind == JV_UNDEF)
		jfail(jctx_state(c), pos, -EINVAL, "%s", v.u.s.p);
}

static int isnum(struct jv v) { return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL; }
static double fnum(struct jv v) { return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b; }
static int64_t inum(struct jv v) { return v.kind == JV_INT ? v.u.i : v.u.b; }

_Noreturn static void bad_operands(struct jctx *c, const struct jx *x, struct jv a, struct jv b)
{
	need_defined(c, x->pos, a);
	need_defined(c, x->pos, b);
	jfail(jctx_state(c), x->pos, -EINVAL, "unsupported operand type(s) for %s: '%s' and '%s'", x->name,
	      jv_type(a), jv_type(b));
}

static struct jv repeat(struct jctx *c, const struct jx *x, struct jv seq, int64_t k)
{
	size_t unit = seq.kind == JV_STR ? seq.u.s.n : seq.u.l->n * 16;
	if (k > 0 && unit && (uint64_t)k > MAX_OUT / unit)
		jfail(jctx_state(c), x->pos, -EINVAL, "'*' would make a value larger than %u bytes", MAX_OUT);
	if (!unit || k <= 0)   /* empty, however many times */
		k = 0;
	if (seq.kind == JV_STR) {   /* one copy, then doubling: the bytes written once */
		size_t n = seq.u.s.n * (size_t)k, have = seq.u.s.n;
		char *p = ja_alloc(jctx_state(c), n + 1);
		if (!n)
			return jv_cstr("");
		memcpy(p, seq.u.s.p, have);
		for (; have < n; have *= 2)
			memcpy(p + have, p, have < n - have ? have : n - have);
		return (struct jv){.kind = JV_STR, .u.s = {p, n}};
	}
	struct jv r = jv_list(jctx_state(c));
	r.tuple = seq.tuple;
	for (int64_t i = 0; i < k; i++)
		for (size_t j = 0; j < seq.u.l->n; j++)
			jl_push(jctx_state(c), r.u.l, seq.u.l->v[j]);
	return r;
}

/* a ** b: exact for ints (refused past 64 bits), Python's float rules otherwise. */
static struct jv power(struct jctx *c, const struct jx *x, struct jv a, struct jv b)
{
	if (a.kind != JV_FLOAT && b.kind != JV_FLOAT && inum(b) >= 0) {
		int64_t base = inum(a), e = inum(b), r = 1;
		while (e) {   /* square and multiply: at most 63 rounds */
			if ((e & 1) && __builtin_mul_overflow(r, base, &r))
				joverflow(jctx_state(c), x->pos, x->name);
			e >>= 1;
			if (e && __builtin_mul_overflow(base, base, &base))
				joverflow(jctx_state(c), x->pos, x->name);
		}
		return jv_int(r);
	}
	double f = fnum(a), g = fnum(b), r;
	if (f == 0 && g < 0)
		jfail(jctx_state(c), x->pos, -EINVAL, "0.0 cannot be raised to a negative power");
	if (f < 0 && g != floor(g))
		jfail(jctx_state(c), x->pos, -EINVAL, "a negative number to a fractional power is complex: not supported");
	r = pow(f, g);
	if (isinf(r) && isfinite(f) && isfinite(g))
		jfail(jctx_state(c), x->pos, -EINVAL, "'**' overflows a float (Python: OverflowError)");
	return jv_float(r);
}

struct jv jx_arith(struct jctx *c, const struct jx *x, struct jv a, struct jv b)
{
	char op = x->name[0];
	int two = x->name[1] != 0;
	if (op == '~') {
		struct jbuf s = {0};
		jv_tostr(jctx_state(c), &s, a);
		jv_tostr(jctx_state(c), &s, b);
		return (struct jv){.kind = JV_STR, .u.s = {s.s ? s.s : "", s.n}};
	}
	if (isnum(a) && isnum(b)) {
		int ints = a.kind != JV_FLOAT && b.kind != JV_FLOAT;
		int64_t i = inum(a), j = inum(b), r;
		double f = fnum(a), g = fnum(b);
		if ((op == '/' || op == '%') && (ints ? j == 0 : g == 0))
			jfail(jctx_state(c), x->pos, -EINVAL, "division by zero");
		switch (op) {
		case '+':
			if (ints && __builtin_add_overflow(i, j, &r))
				joverflow(jctx_state(c), x->pos, x->name);
			return ints ? jv_int(r) : jv_float(f + g);
		case '-':
			if (ints && __builtin_sub_overflow(i, j, &r))
				joverflow(jctx_state(c), x->pos, x->name);
			return ints ? jv_int(r) : jv_float(f - g);
		case '*':
			if (two)
				return power(c, x, a, b);
			if (ints && __builtin_mul_overflow(i, j, &r))
				joverflow(jctx_state(c), x->pos, x->name);
			return ints ? jv_int(r) : jv_float(f * g);
		case '/':
			if (!two)
				return jv_float(f / g);
			if (ints) {
				if (j == -1 && i == INT64_MIN)   /* -2**63 // -1 traps */
					joverflow(jctx_state(c), x->pos, x->name);
				if (j == -1)
					return jv_int(-i);
				int64_t q = i / j;
				return jv_int(q - ((i % j != 0) && ((i < 0) != (j < 0))));
			}
			return jv_float(floor(f / g));
		case '%':
			if (ints) {
				r = j == -1 ? 0 : i % j;   /* INT64_MIN % -1 traps */
				return jv_int(r && ((r < 0) != (j < 0)) ? r + j : r);
			} else {
				double r = fmod(f, g);
				return jv_float(r && ((r < 0) != (g < 0)) ? r + g : r);
			}
		}
	}
	if (op == '+' && a.kind == JV_STR && b.kind == JV_STR) {
		struct jbuf s = {0};
		jb_put(jctx_state(c), &s, a.u.s.p, a.u.s.n);
		jb_put(jctx_state(c), &s, b.u.s.p, b.u.s.n);
		return (struct jv){.kind = JV_STR, .u.s = {s.s ? s.s : "", s.n}};
	}
	if (op == '+' && a.kind == JV_LIST && b.kind == JV_LIST && a.tuple == b.tuple) {
		struct jv r = jv_list(jctx_state(c));
		r.tuple = a.tuple;
		for (size_t i = 0; i < a.u.l->n; i++)
			jl_push(jctx_state(c), r.u.l, a.u.l->v[i]);
		for (size_t i = 0; i < b.u.l->n; i++)
			jl_push(jctx_state(c), r.u.l, b.u.l->v[i]);
		return r;
	}
	if (op == '*' && !two && (a.kind == JV_STR || a.kind == JV_LIST) && (b.kind == JV_INT || b.kind == JV_BOOL))
		return repeat(c, x, a, inum(b));
	if (op == '*' && !two && (b.kind == JV_STR || b.kind == JV_LIST) && (a.kind == JV_INT || a.kind == JV_BOOL))
		return repeat(c, x, b, inum(a));
	bad_operands(c, x, a, b);
}

/* Python's ordering of a and b for op (named in the error): -1, 0, 1, or 2
 * when unordered (a NaN); numbers, strings and lists, else an error. */
static int cmp3(struct jctx *c, size_t pos, const char *op, struct jv a, struct jv b)
{
	jwork(jctx_state(c), JW_STEP);
	if (isnum(a) && isnum(b))
		return jv_numcmp(a, b);
	if (a.kind == JV_STR && b.kind == JV_STR) {
		size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
		jwork(jctx_state(c), m);
		int r = memcmp(a.u.s.p, b.u.s.p, m);
		return r ? (r < 0 ? -1 : 1) : a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
	}
	if (a.kind == JV_LIST && b.kind == JV_LIST) {   /* depth: JV_MAX_DEPTH at most */
		size_t i = 0;
		while (i < a.u.l->n && i < b.u.l->n && jv_equal(jctx_state(c), a.u.l->v[i], b.u.l->v[i]))
			i++;
		if (i < a.u.l->n && i < b.u.l->n)
			return cmp3(c, pos, op, a.u.l->v[i], b.u.l->v[i]);
		return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
	}
	need_defined(c, pos, a);
	need_defined(c, pos, b);
	jfail(jctx_state(c), pos, -EINVAL, "'%s' not supported between instances of '%s' and '%s'", op, jv_type(a),
	      jv_type(b));
}

/* <, >, <=, >= */
int jx_order(struct jctx *c, const struct jx *x, const char *op, struct jv a, struct jv b)
{
	int r = cmp3(c, x->pos, op, a, b);
	if (r == 2)   /* NaN: every ordering is false */
		return 0;
	return op[0] == '<' ? (op[1] ? r <= 0 : r < 0) : (op[1] ? r >= 0 : r > 0);
}

int jv_order(struct jctx *c, size_t pos, struct jv a, struct jv b)
{
	int r = cmp3(c, pos, "<", a, b);
	return r == 2 ? 0 : r;
}

int jv_contains(struct jctx *c, size_t pos, struct jv hay, struct jv needle)
{
	switch (hay.kind) {
	case JV_UNDEF: return 0;
	case JV_STR:
		if (needle.kind != JV_STR)
			jfail(jctx_state(c), pos, -EINVAL, "'in <string>' requires string as left operand, not %s",
			      jv_type(needle));
		return jfind(jctx_state(c), hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n, 0, 0) >= 0;
	case JV_LIST:
		for (size_t i = 0; i < hay.u.l->n; i++)
			if (jv_equal(jctx_state(c), hay.u.l->v[i], needle))
				return 1;
		return 0;
	case JV_DICT:
		return !hay.u.d->ns && jd_get(jctx_state(c), hay.u.d, needle) != NULL;
	default:
		jfail(jctx_state(c), pos, -EINVAL, "argument of type '%s' is not iterable", jv_type(hay));
	}
}
