/* jinja_eval.c — runs the statement tree (jinja_parse.c) over the variables
 * and writes the text; jinja_render, the public entry, is at the end.
 *
 * Scopes as Jinja has them: the template's top level is one frame; each
 * iteration of a for loop and each macro call get a fresh frame whose parent
 * is the enclosing one (a macro's is the top level), so `set` inside a loop
 * is gone at the next iteration, and namespace() objects carry state out. */
#include "engine/chat/jinja.h"
#include "engine/chat/jinja_int.h"
#include "base/err.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct jframe {
	struct jframe *parent;
	struct jdict vars;
};

#define MAX_DEPTH 64
#define MAX_OUT (256u << 20)
#define MAX_STEPS 1000000L

static struct jv eval(struct jctx *c, const struct jx *x);
static void exec(struct jctx *c, const struct js *s);

/* Fails when v is undefined: the one thing default Undefined refuses. */
static void need_defined(struct jctx *c, size_t pos, struct jv v)
{
	if (v.kind == JV_UNDEF)
		jfail(c->st, pos, -EINVAL, "%s", v.u.s.p);
}

static struct jv undefined_name(struct jctx *c, const char *name)
{
	struct jbuf b = {0};
	jb_puts(c->st, &b, "'");
	jb_puts(c->st, &b, name);
	jb_puts(c->st, &b, "' is undefined");
	return jv_undef(b.s);
}

static struct jv lookup(struct jctx *c, const char *name)
{
	for (struct jframe *f = c->frame; f; f = f->parent) {
		struct jv *v = jd_getc(c->st, &f->vars, name);
		if (v)
			return *v;
	}
	if (jb_is_global(name))
		return (struct jv){.kind = JV_FUNC, .u.fn = name};
	return undefined_name(c, name);
}

static void assign(struct jctx *c, const char *name, struct jv v)
{
	jd_set(c->st, &c->frame->vars, jv_cstr(name), v);
}

/* Python's index rules for a sequence of n items: i in [0, n), or -1. */
static int64_t index_of(int64_t i, size_t n)
{
	if (i < 0)
		i += (int64_t)n;
	return i >= 0 && (uint64_t)i < n ? i : -1;
}

static struct jv str_char(struct jctx *c, struct jv s, int64_t i)
{
	size_t at = 0, k = 0;
	jwork(c->st, 2 * s.u.s.n);   /* decoding: 2 units a byte */
	while (at < s.u.s.n) {
		size_t from = at;
		jutf8_next(s.u.s.p, s.u.s.n, &at);
		if ((int64_t)k++ == i)
			return jv_str(c->st, s.u.s.p + from, at - from);
	}
	return jv_undef("string index out of range");
}

static size_t str_len(struct jctx *c, struct jv s)
{
	size_t at = 0, k = 0;
	jwork(c->st, 2 * s.u.s.n);
	while (at < s.u.s.n)
		jutf8_next(s.u.s.p, s.u.s.n, &at), k++;
	return k;
}

static struct jv getitem(struct jctx *c, size_t pos, struct jv obj, struct jv key)
{
	need_defined(c, pos, obj);
	if (obj.kind == JV_DICT) {
		struct jv *v = jd_get(c->st, obj.u.d, key);
		if (v)
			return *v;
		if (key.kind == JV_STR && !obj.u.d->ns && jb_has_method(obj, key.u.s.p))
			return jctx_method(c, obj, key.u.s.p);
		struct jv k = jv_strof(c->st, key);
		return jctx_no_attr(c, obj, k.u.s.p);
	}
	if ((obj.kind == JV_LIST || obj.kind == JV_STR) && (key.kind == JV_INT || key.kind == JV_BOOL)) {
		int64_t i = key.kind == JV_INT ? key.u.i : key.u.b;
		if (obj.kind == JV_LIST) {
			i = index_of(i, obj.u.l->n);
			return i < 0 ? jv_undef("list index out of range") : obj.u.l->v[i];
		}
		i = index_of(i, str_len(c, obj));
		return i < 0 ? jv_undef("string index out of range") : str_char(c, obj, i);
	}
	if (key.kind == JV_STR)
		return jctx_getattr(c, pos, obj, key.u.s.p);
	return jctx_no_attr(c, obj, "[]");
}

/* obj[a:b:step] with Python's slice rules. */
static struct jv slice(struct jctx *c, const struct jx *x, struct jv obj)
{
	need_defined(c, x->pos, obj);
	int64_t v[3] = {0, 0, 1};
	int have[3] = {0, 0, 0};
	const struct jx *parts[3] = {x->b, x->c, x->args[0]};
	for (int k = 0; k < 3; k++) {
		if (!parts[k])
			continue;
		struct jv p = eval(c, parts[k]);
		if (p.kind == JV_NONE)
			continue;
		if (p.kind != JV_INT)
			jfail(c->st, parts[k]->pos, -EINVAL, "slice indices must be integers or None, not %s",
			      jv_type(p));
		v[k] = p.u.i;
		have[k] = 1;
	}
	if (obj.kind != JV_LIST && obj.kind != JV_STR)
		jfail(c->st, x->pos, -EINVAL, "'%s' object is not subscriptable", jv_type(obj));
	if (!v[2])
		jfail(c->st, x->pos, -EINVAL, "slice step cannot be zero");
	/* the items as an array of values (a string: its characters) */
	size_t n;
	struct jv *items;
	if (obj.kind == JV_LIST) {
		n = obj.u.l->n;
		items = obj.u.l->v;
	} else {
		n = str_len(c, obj);
		items = ja_alloc(c->st, (n + 1) * sizeof *items);
		for (size_t i = 0, at = 0; i < n; i++) {
			size_t from = at;
			jutf8_next(obj.u.s.p, obj.u.s.n, &at);
			items[i] = (struct jv){.kind = JV_STR, .u.s = {obj.u.s.p + from, at - from}};
		}
	}
	int64_t N = (int64_t)n, step = v[2], lo, hi;
	for (int k = 0; k < 2; k++) {
		if (!have[k])
			continue;
		if (v[k] < 0)
			v[k] += N;
		if (step > 0)
			v[k] = v[k] < 0 ? 0 : v[k] > N ? N : v[k];
		else
			v[k] = v[k] < 0 ? -1 : v[k] >= N ? N - 1 : v[k];
	}
	lo = have[0] ? v[0] : step > 0 ? 0 : N - 1;
	hi = have[1] ? v[1] : step > 0 ? N : -1;
	struct jv r = jv_list(c->st);
	r.tuple = obj.tuple;
	for (int64_t i = lo; step > 0 ? i < hi : i > hi;) {
		jl_push(c->st, r.u.l, items[i]);
		if (__builtin_add_overflow(i, step, &i))   /* past either end: done */
			break;
	}
	if (obj.kind == JV_LIST)
		return r;
	struct jbuf b = {0};
	for (size_t i = 0; i < r.u.l->n; i++)
		jb_put(c->st, &b, r.u.l->v[i].u.s.p, r.u.l->v[i].u.s.n);
	return (struct jv){.kind = JV_STR, .u.s = {b.s ? b.s : "", b.n}};
}

static int isnum(struct jv v) { return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL; }
static int64_t inum(struct jv v) { return v.kind == JV_INT ? v.u.i : v.u.b; }

static struct jv call_macro(struct jctx *c, size_t pos, const struct js *m, struct jv *args, int nargs,
                            const char **kwn, struct jv *kwv, int nkw)
{
	if (nargs > m->nnames)
		jfail(c->st, pos, -EINVAL, "macro '%s' takes not more than %d argument(s)", m->name, m->nnames);
	if (++c->depth > MAX_DEPTH)
		jfail(c->st, pos, -EINVAL, "macro calls nested deeper than %d", MAX_DEPTH);
	struct jframe f = {.parent = c->root}, *saved = c->frame;
	struct jbuf out = {0}, *saved_out = c->out;
	c->frame = &f;
	for (int k = 0; k < nkw; k++) {
		int found = 0;
		for (int i = 0; i < m->nnames; i++)
			found |= !strcmp(kwn[k], m->names[i]);
		if (!found)
			jfail(c->st, pos, -EINVAL, "macro '%s' has no parameter named '%s'", m->name, kwn[k]);
	}
	for (int i = 0; i < m->nnames; i++) {
		struct jv v = undefined_name(c, m->names[i]);
		int set = 0;
		if (i < nargs)
			v = args[i], set = 1;
		for (int k = 0; k < nkw; k++)
			if (!strcmp(kwn[k], m->names[i])) {
				if (set)
					jfail(c->st, pos, -EINVAL, "macro '%s' got multiple values for '%s'", m->name,
					      kwn[k]);
				v = kwv[k], set = 1;
			}
		if (!set && m->defs[i])
			v = eval(c, m->defs[i]);
		assign(c, m->names[i], v);
	}
	c->out = &out;
	exec(c, m->body);
	c->out = saved_out;
	c->frame = saved;
	c->depth--;
	return (struct jv){.kind = JV_STR, .u.s = {out.s ? out.s : "", out.n}};
}

/* Evaluates a call's arguments into arrays. */
static void eval_args(struct jctx *c, const struct jx *x, struct jv **args, struct jv **kwv)
{
	*args = ja_alloc(c->st, (size_t)(x->nargs + 1) * sizeof **args);
	*kwv = ja_alloc(c->st, (size_t)(x->nkw + 1) * sizeof **kwv);
	for (int i = 0; i < x->nargs; i++)
		(*args)[i] = eval(c, x->args[i]);
	for (int i = 0; i < x->nkw; i++)
		(*kwv)[i] = eval(c, x->kwv[i]);
}

static struct jv call(struct jctx *c, const struct jx *x)
{
	struct jv f = eval(c, x->a), *args, *kwv, r;
	need_defined(c, x->pos, f);
	eval_args(c, x, &args, &kwv);
	switch (f.kind) {
	case JV_MACRO:
		return call_macro(c, x->pos, f.u.m, args, x->nargs, x->kwn, kwv, x->nkw);
	case JV_FUNC:
		jb_call_global(c, x->pos, f.u.fn, args, x->nargs, x->kwn, kwv, x->nkw, &r);
		return r;
	case JV_METHOD:
		if (jb_method(c, x->pos, f.u.meth, args, x->nargs, x->kwn, kwv, x->nkw, &r) == -ENOENT)
			jfail(c->st, x->pos, -EINVAL, "the method '%s' of %s is not supported", f.u.meth->name,
			      jv_type(f.u.meth->self));
		return r;
	default:
		jfail(c->st, x->pos, -EINVAL, "'%s' object is not callable", jv_type(f));
	}
}

static struct jv eval_node(struct jctx *c, const struct jx *x);

/* Every expression evaluated: paid for, and where failures below it point. */
static struct jv eval(struct jctx *c, const struct jx *x)
{
	size_t outer = c->st->at;
	c->st->at = x->pos;
	jwork(c->st, JW_STEP);
	struct jv r = eval_node(c, x);
	c->st->at = outer;
	return r;
}

static struct jv eval_node(struct jctx *c, const struct jx *x)
{
	struct jv a, b, *args, *kwv, r;
	switch (x->kind) {
	case JX_LIT: return x->lit;
	case JX_NAME: return lookup(c, x->name);
	case JX_LIST:
		r = jv_list(c->st);
		r.tuple = (uint8_t)x->tuple;
		for (int i = 0; i < x->nargs; i++)
			jl_push(c->st, r.u.l, eval(c, x->args[i]));
		return r;
	case JX_DICT:
		r = jv_dict(c->st);
		for (int i = 0; i + 1 < x->nargs; i += 2) {
			a = eval(c, x->args[i]);
			need_defined(c, x->args[i]->pos, a);
			jd_set(c->st, r.u.d, a, eval(c, x->args[i + 1]));
		}
		return r;
	case JX_ATTR: return jctx_getattr(c, x->pos, eval(c, x->a), x->name);
	case JX_ITEM:
		a = eval(c, x->a);
		return getitem(c, x->pos, a, eval(c, x->b));
	case JX_SLICE: return slice(c, x, eval(c, x->a));
	case JX_CALL: return call(c, x);
	case JX_FILTER:
		a = eval(c, x->a);
		eval_args(c, x, &args, &kwv);
		if (jb_filter(c, x->pos, x->name, a, args, x->nargs, x->kwn, kwv, x->nkw, &r) == -ENOENT)
			jfail(c->st, x->pos, -EINVAL, "no filter named '%s' (not supported)", x->name);
		return r;
	case JX_TEST: {
		int t;
		a = eval(c, x->a);
		eval_args(c, x, &args, &kwv);
		if (jb_test(c, x->pos, x->name, a, args, x->nargs, &t) == -ENOENT)
			jfail(c->st, x->pos, -EINVAL, "no test named '%s' (not supported)", x->name);
		return jv_bool(x->neg ? !t : t);
	}
	case JX_NOT: return jv_bool(!jv_truthy(eval(c, x->a)));
	case JX_NEG: case JX_POS:
		a = eval(c, x->a);
		if (!isnum(a)) {
			need_defined(c, x->pos, a);
			jfail(c->st, x->pos, -EINVAL, "bad operand type for unary %c: '%s'",
			      x->kind == JX_NEG ? '-' : '+', jv_type(a));
		}
		if (x->kind == JX_POS)
			return a.kind == JV_BOOL ? jv_int(a.u.b) : a;
		if (a.kind == JV_INT && a.u.i == INT64_MIN)
			joverflow(c->st, x->pos, "unary -");
		return a.kind == JV_FLOAT ? jv_float(-a.u.f) : jv_int(-inum(a));
	case JX_BIN:
		a = eval(c, x->a);
		return jx_arith(c, x, a, eval(c, x->b));
	case JX_CMP:
		a = eval(c, x->args[0]);
		for (int i = 1; i < x->nargs; i++) {
			const char *op = x->ops[i - 1];
			int t;
			b = eval(c, x->args[i]);
			if (!strcmp(op, "=="))
				t = jv_equal(c->st, a, b);
			else if (!strcmp(op, "!="))
				t = !jv_equal(c->st, a, b);
			else if (!strcmp(op, "in"))
				t = jv_contains(c, x->pos, b, a);
			else if (!strcmp(op, "not in"))
				t = !jv_contains(c, x->pos, b, a);
			else
				t = jx_order(c, x, op, a, b);
			if (!t)
				return jv_bool(0);
			a = b;
		}
		return jv_bool(1);
	case JX_AND:
		a = eval(c, x->a);
		return jv_truthy(a) ? eval(c, x->b) : a;
	case JX_OR:
		a = eval(c, x->a);
		return jv_truthy(a) ? a : eval(c, x->b);
	case JX_COND:
		if (jv_truthy(eval(c, x->a)))
			return eval(c, x->b);
		return x->c ? eval(c, x->c) : jv_undef("the conditional expression has no else");
	}
	jfail(c->st, x->pos, -EINVAL, "unknown expression");
}

/* The items a for loop walks: a list's items, a dict's keys, a string's characters. */
static struct jlist *iterate(struct jctx *c, size_t pos, struct jv v)
{
	struct jlist *l;
	switch (v.kind) {
	case JV_UNDEF: return ja_alloc(c->st, sizeof *l);
	case JV_LIST: return v.u.l;
	case JV_DICT:
		if (v.u.d->ns)
			break;
		l = ja_alloc(c->st, sizeof *l);
		for (size_t i = 0; i < v.u.d->n; i++)
			jl_push(c->st, l, v.u.d->k[i]);
		return l;
	case JV_STR: {
		struct jv s = jv_list(c->st);
		for (size_t at = 0; at < v.u.s.n;) {
			size_t from = at;
			jutf8_next(v.u.s.p, v.u.s.n, &at);
			jl_push(c->st, s.u.l, (struct jv){.kind = JV_STR, .u.s = {v.u.s.p + from, at - from}});
		}
		return s.u.l;
	}
	default: break;
	}
	jfail(c->st, pos, -EINVAL, "'%s' object is not iterable", jv_type(v));
}

static void bind(struct jctx *c, const struct js *s, struct jv v)
{
	if (s->nnames == 1) {
		assign(c, s->names[0], v);
		return;
	}
	struct jlist *l = iterate(c, s->pos, v);
	if (l->n != (size_t)s->nnames)
		jfail(c->st, s->pos, -EINVAL, "cannot unpack %zu values into %d names", l->n, s->nnames);
	for (int i = 0; i < s->nnames; i++)
		assign(c, s->names[i], l->v[i]);
}

static void exec_for(struct jctx *c, const struct js *s)
{
	struct jlist *all = iterate(c, s->x->pos, eval(c, s->x)), *items = all;
	struct jframe *outer = c->frame;
	if (s->cond) {
		items = ja_alloc(c->st, sizeof *items);
		for (size_t i = 0; i < all->n; i++) {
			struct jframe f = {.parent = outer};
			if (++c->steps > MAX_STEPS)
				jfail(c->st, s->pos, -EINVAL, "the template ran more than %ld statements", MAX_STEPS);
			c->frame = &f;
			bind(c, s, all->v[i]);
			if (jv_truthy(eval(c, s->cond)))
				jl_push(c->st, items, all->v[i]);
			c->frame = outer;
		}
	}
	for (size_t i = 0; i < items->n; i++) {
		struct jframe f = {.parent = outer};
		if (++c->steps > MAX_STEPS)
			jfail(c->st, s->pos, -EINVAL, "the template ran more than %ld statements", MAX_STEPS);
		c->frame = &f;
		struct jv loop = jv_dict(c->st);
		struct jdict *d = loop.u.d;
		int64_t n = (int64_t)items->n, k = (int64_t)i;
		jd_set(c->st, d, jv_cstr("index"), jv_int(k + 1));
		jd_set(c->st, d, jv_cstr("index0"), jv_int(k));
		jd_set(c->st, d, jv_cstr("revindex"), jv_int(n - k));
		jd_set(c->st, d, jv_cstr("revindex0"), jv_int(n - k - 1));
		jd_set(c->st, d, jv_cstr("first"), jv_bool(k == 0));
		jd_set(c->st, d, jv_cstr("last"), jv_bool(k == n - 1));
		jd_set(c->st, d, jv_cstr("length"), jv_int(n));
		jd_set(c->st, d, jv_cstr("depth"), jv_int(1));
		jd_set(c->st, d, jv_cstr("depth0"), jv_int(0));
		if (k > 0)
			jd_set(c->st, d, jv_cstr("previtem"), items->v[k - 1]);
		if (k < n - 1)
			jd_set(c->st, d, jv_cstr("nextitem"), items->v[k + 1]);
		jd_set(c->st, d, jv_cstr("cycle"), jctx_method(c, loop, "cycle"));
		assign(c, "loop", loop);
		bind(c, s, items->v[i]);
		exec(c, s->body);
		c->frame = outer;
		int ctl = c->ctl;
		c->ctl = 0;
		if (ctl == 1)
			break;
	}
	if (!items->n && s->orelse)
		exec(c, s->orelse);
}

static void exec(struct jctx *c, const struct js *s)
{
	for (; s && !c->ctl; s = s->next) {
		if (++c->steps > MAX_STEPS)
			jfail(c->st, s->pos, -EINVAL, "the template ran more than %ld statements", MAX_STEPS);
		c->st->at = s->pos;
		jwork(c->st, JW_STEP);
		switch (s->kind) {
		case JS_TEXT:
			jb_put(c->st, c->out, s->text, s->n);
			break;
		case JS_OUT:
			jv_tostr(c->st, c->out, eval(c, s->x));
			break;
		case JS_IF:
			exec(c, jv_truthy(eval(c, s->x)) ? s->body : s->orelse);
			break;
		case JS_FOR:
			exec_for(c, s);
			break;
		case JS_SET: {
			struct jv v = eval(c, s->x);
			if (s->attr) {
				struct jv ns = lookup(c, s->names[0]);
				if (ns.kind != JV_DICT || !ns.u.d->ns)
					jfail(c->st, s->pos, -EINVAL, "cannot assign attribute on non-namespace "
					      "object '%s'", s->names[0]);
				jd_set(c->st, ns.u.d, jv_cstr(s->attr), v);
			} else {
				bind(c, s, v);
			}
			break;
		}
		case JS_SETBLOCK: {
			struct jbuf b = {0}, *saved = c->out;
			c->out = &b;
			exec(c, s->body);
			c->out = saved;
			assign(c, s->names[0], (struct jv){.kind = JV_STR, .u.s = {b.s ? b.s : "", b.n}});
			break;
		}
		case JS_MACRO:
			assign(c, s->name, (struct jv){.kind = JV_MACRO, .u.m = s});
			break;
		case JS_BREAK: case JS_CONTINUE:
			c->ctl = s->kind == JS_BREAK ? 1 : 2;
			break;
		case JS_BODY:
			exec(c, s->body);
			break;
		}
		if (c->out->n > MAX_OUT)
			jfail(c->st, s->pos, -EINVAL, "the output grew past %u bytes", MAX_OUT);
	}
}

static struct jv from_json(struct jstate *st, const cJSON *j)
{
	if (cJSON_IsString(j))
		return jv_cstr(j->valuestring);
	if (cJSON_IsBool(j))
		return jv_bool(cJSON_IsTrue(j));
	if (cJSON_IsNumber(j)) {
		double d = j->valuedouble;
		if (d == floor(d) && fabs(d) < 9007199254740992.0)
			return jv_int((int64_t)d);
		return jv_float(d);
	}
	if (cJSON_IsArray(j)) {
		struct jv l = jv_list(st);
		const cJSON *e;
		cJSON_ArrayForEach(e, j)
			jl_push(st, l.u.l, from_json(st, e));
		return l;
	}
	if (cJSON_IsObject(j)) {
		struct jv d = jv_dict(st);
		const cJSON *e;
		cJSON_ArrayForEach(e, j)
			jd_set(st, d.u.d, jv_cstr(e->string), from_json(st, e));
		return d;
	}
	return jv_none();
}

static int render(struct jstate *st, const char *tmpl, size_t len, const cJSON *vars, struct jbuf *out)
{
	struct jtok *toks;
	size_t ntoks;
	jl_lex(st, tmpl, len, &toks, &ntoks);
	struct js *prog = jp_parse(st, toks, ntoks);
	struct jframe root = {0};
	struct jctx c = {.st = st, .frame = &root, .root = &root, .out = out};
	const cJSON *e;
	cJSON_ArrayForEach(e, vars)
		if (e->string)
			jd_set(st, &root.vars, jv_cstr(e->string), from_json(st, e));
	exec(&c, prog);
	if (c.ctl)
		jfail(st, (size_t)-1, -EINVAL, "{%% break %%} or {%% continue %%} outside a for loop");
	return 0;
}

/* The setjmp lives here, where nothing it would have to restore is kept in
 * a local: all state is behind st. */
static int run(struct jstate *st, const char *tmpl, size_t len, const cJSON *vars, char **out,
               size_t *out_len)
{
	struct jbuf *b;
	if (setjmp(st->fail)) {
		ja_free(st);
		return st->code ? st->code : -EINVAL;
	}
	b = ja_alloc(st, sizeof *b);
	render(st, tmpl, len, vars, b);
	char *s = malloc(b->n + 1);
	if (!s) {
		ja_free(st);
		return rq_errf(st->err, -ENOMEM, "chat template: out of memory");
	}
	if (b->n)
		memcpy(s, b->s, b->n);
	s[b->n] = 0;
	*out = s;
	*out_len = b->n;
	ja_free(st);
	return 0;
}

int jinja_render_budget(const char *tmpl, size_t len, const cJSON *vars, uint64_t budget, uint64_t *used,
                        char **out, size_t *out_len, struct rq_err *err)
{
	struct jstate st = {.err = err, .work_max = budget ? budget : JINJA_WORK_DEFAULT};
	if (vars && !cJSON_IsObject(vars))
		return rq_errf(err, -EINVAL, "chat template: the variables must be a JSON object");
	int rc = run(&st, tmpl, len, vars, out, out_len);
	if (used)
		*used = st.work;
	return rc;
}

int jinja_render(const char *tmpl, size_t len, const cJSON *vars, char **out, size_t *out_len,
                 struct rq_err *err)
{
	return jinja_render_budget(tmpl, len, vars, 0, NULL, out, out_len, err);
}
