/* jinja_parse.c — tokens to a statement tree, with Jinja's grammar:
 *
 *   expr    := or ['if' or ['else' expr]]
 *   or      := and ('or' and)*          and := not ('and' not)*
 *   not     := 'not' not | compare      compare := sum (cmp-op sum)*
 *   sum     := concat (('+'|'-') concat)*
 *   concat  := product ('~' product)*   product := pow (('*'|'/'|'//'|'%') pow)*
 *   pow     := unary ('**' unary)*
 *   unary   := ('-'|'+') unary | primary postfix*, then ('|' filter | 'is' test | call)*
 *
 * Statements: if/elif/else, for (targets, `if` filter, else), set (value,
 * ns.attr, tuple targets, block), macro, break/continue (loopcontrols) and
 * generation (transformers' AssistantTracker). Any other tag is refused by
 * name; so is any token the grammar does not expect, with its position. */
#include "engine/chat/jinja_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct parser {
	struct jstate *st;
	const struct jtok *t;
	size_t i, n;
	int depth;               /* nesting of expressions and blocks, bounded */
};

#define MAX_NEST 200

/* Enters one level of nesting (the C stack is finite; templates are shallow). */
static void enter(struct parser *P)
{
	if (++P->depth > MAX_NEST)
		jfail(P->st, P->t[P->i].pos, -EINVAL, "expressions or blocks nested deeper than %d", MAX_NEST);
}

static const struct jtok *cur(struct parser *P) { return &P->t[P->i]; }

static int is_op(const struct jtok *t, const char *op)
{
	return t->kind == JT_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}

static int is_name(const struct jtok *t, const char *name)
{
	return t->kind == JT_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}

static const char *describe(struct parser *P, const struct jtok *t)
{
	switch (t->kind) {
	case JT_EOF: return "end of template";
	case JT_VAR_END: return "'}}'";
	case JT_BLOCK_END: return "'%}'";
	case JT_STRING: return "a string";
	case JT_INT: case JT_FLOAT: return "a number";
	case JT_DATA: return "text";
	default: {
		struct jbuf b = {0};
		jb_puts(P->st, &b, "'");
		jb_put(P->st, &b, t->p, t->n);
		jb_puts(P->st, &b, "'");
		return b.s;
	}
	}
}

_Noreturn static void expected(struct parser *P, const char *what)
{
	jfail(P->st, cur(P)->pos, -EINVAL, "expected %s, got %s", what, describe(P, cur(P)));
}

static void want_op(struct parser *P, const char *op)
{
	if (!is_op(cur(P), op)) {
		char w[16];
		snprintf(w, sizeof w, "'%s'", op);
		expected(P, w);
	}
	P->i++;
}

static const char *take_name(struct parser *P)
{
	if (cur(P)->kind != JT_NAME)
		expected(P, "a name");
	const struct jtok *t = &P->t[P->i++];
	return ja_strndup(P->st, t->p, t->n);
}

static void want_block_end(struct parser *P)
{
	if (cur(P)->kind != JT_BLOCK_END)
		expected(P, "'%}'");
	P->i++;
}

static struct jx *node(struct parser *P, enum jx_kind k, size_t pos)
{
	struct jx *x = ja_alloc(P->st, sizeof *x);
	x->kind = k;
	x->pos = pos;
	return x;
}

/* A growable array of pointers in the arena. */
static void push(struct parser *P, void ***v, int *n, void *item)
{
	if ((*n & (*n - 1)) == 0 || *n == 0) {   /* grow at powers of two */
		int cap = *n ? *n * 2 : 4;
		void **nv = ja_alloc(P->st, (size_t)cap * sizeof *nv);
		if (*n)
			memcpy(nv, *v, (size_t)*n * sizeof *nv);
		*v = nv;
	}
	(*v)[(*n)++] = item;
}

static struct jx *expr(struct parser *P);
static struct jx *expr_nocond(struct parser *P);
static struct jx *unary(struct parser *P, int with_filter);
static struct jx *tuple(struct parser *P, int with_cond);

/* Positional and keyword arguments up to ')' (the '(' is taken). */
static void call_args(struct parser *P, struct jx *x)
{
	while (!is_op(cur(P), ")")) {
		if (x->nargs + x->nkw)
			want_op(P, ",");
		if (is_op(cur(P), ")"))
			break;
		if (is_op(cur(P), "*") || is_op(cur(P), "**"))
			jfail(P->st, cur(P)->pos, -EINVAL, "*args and **kwargs in calls are not supported");
		if (cur(P)->kind == JT_NAME && is_op(&P->t[P->i + 1], "=")) {
			const char *k = take_name(P);
			P->i++;
			int n = x->nkw;
			push(P, (void ***)&x->kwn, &n, (void *)k);
			push(P, (void ***)&x->kwv, &x->nkw, expr(P));
		} else {
			if (x->nkw)
				jfail(P->st, cur(P)->pos, -EINVAL, "a positional argument follows a keyword argument");
			push(P, (void ***)&x->args, &x->nargs, expr(P));
		}
	}
	P->i++;
}

static struct jx *primary(struct parser *P)
{
	const struct jtok *t = cur(P);
	struct jx *x;
	if (t->kind == JT_NAME) {
		P->i++;
		x = node(P, JX_LIT, t->pos);
		if (is_name(t, "true") || is_name(t, "True"))
			x->lit = jv_bool(1);
		else if (is_name(t, "false") || is_name(t, "False"))
			x->lit = jv_bool(0);
		else if (is_name(t, "none") || is_name(t, "None"))
			x->lit = jv_none();
		else {
			x->kind = JX_NAME;
			x->name = ja_strndup(P->st, t->p, t->n);
		}
		return x;
	}
	if (t->kind == JT_STRING) {
		struct jbuf b = {0};
		size_t pos = t->pos;
		for (; cur(P)->kind == JT_STRING; P->i++)
			jb_put(P->st, &b, cur(P)->p, cur(P)->n);
		x = node(P, JX_LIT, pos);
		x->lit = jv_str(P->st, b.s ? b.s : "", b.n);
		return x;
	}
	if (t->kind == JT_INT || t->kind == JT_FLOAT) {
		P->i++;
		x = node(P, JX_LIT, t->pos);
		x->lit = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
		return x;
	}
	if (is_op(t, "(")) {
		P->i++;
		if (is_op(cur(P), ")")) {
			P->i++;
			x = node(P, JX_LIST, t->pos);
			x->tuple = 1;
			return x;
		}
		x = tuple(P, 1);
		want_op(P, ")");
		return x;
	}
	if (is_op(t, "[") || is_op(t, "{")) {
		int dict = t->p[0] == '{';
		const char *close = dict ? "}" : "]";
		P->i++;
		x = node(P, dict ? JX_DICT : JX_LIST, t->pos);
		int items = 0;
		while (!is_op(cur(P), close)) {
			if (items++)
				want_op(P, ",");
			if (is_op(cur(P), close))
				break;
			push(P, (void ***)&x->args, &x->nargs, expr(P));
			if (dict) {
				want_op(P, ":");
				push(P, (void ***)&x->args, &x->nargs, expr(P));
			}
		}
		P->i++;
		return x;
	}
	expected(P, "an expression");
}

static struct jx *subscript(struct parser *P, struct jx *obj, size_t pos)
{
	struct jx *parts[3] = {0};
	int k = 0, slice = 0;
	for (;;) {
		if (!is_op(cur(P), ":") && !is_op(cur(P), "]"))
			parts[k] = expr(P);
		if (is_op(cur(P), ":") && k < 2) {
			P->i++;
			slice = 1;
			k++;
			continue;
		}
		break;
	}
	want_op(P, "]");
	struct jx *x = node(P, slice ? JX_SLICE : JX_ITEM, pos);
	x->a = obj;
	if (!slice) {
		if (!parts[0])
			jfail(P->st, pos, -EINVAL, "empty subscript []");
		x->b = parts[0];
		return x;
	}
	x->b = parts[0];
	x->c = parts[1];
	x->args = ja_alloc(P->st, sizeof *x->args);
	x->args[0] = parts[2];
	return x;
}

static struct jx *postfix(struct parser *P, struct jx *x)
{
	for (;;) {
		const struct jtok *t = cur(P);
		if (is_op(t, ".")) {
			P->i++;
			if (cur(P)->kind == JT_INT) {
				struct jx *k = node(P, JX_LIT, cur(P)->pos);
				k->lit = jv_int(cur(P)->i);
				P->i++;
				struct jx *y = node(P, JX_ITEM, t->pos);
				y->a = x;
				y->b = k;
				x = y;
				continue;
			}
			struct jx *y = node(P, JX_ATTR, t->pos);
			y->a = x;
			y->name = take_name(P);
			x = y;
		} else if (is_op(t, "[")) {
			P->i++;
			x = subscript(P, x, t->pos);
		} else if (is_op(t, "(")) {
			P->i++;
			struct jx *y = node(P, JX_CALL, t->pos);
			y->a = x;
			call_args(P, y);
			x = y;
		} else {
			return x;
		}
	}
}

static struct jx *filters(struct parser *P, struct jx *x)
{
	for (;;) {
		const struct jtok *t = cur(P);
		if (is_op(t, "|")) {
			P->i++;
			struct jx *y = node(P, JX_FILTER, cur(P)->pos);
			y->a = x;
			y->name = take_name(P);
			if (is_op(cur(P), ".")) 
				jfail(P->st, cur(P)->pos, -EINVAL, "dotted filter names are not supported");
			if (is_op(cur(P), "(")) {
				P->i++;
				call_args(P, y);
			}
			x = y;
		} else if (is_name(t, "is")) {
			P->i++;
			struct jx *y = node(P, JX_TEST, cur(P)->pos);
			y->a = x;
			if (is_name(cur(P), "not")) {
				P->i++;
				y->neg = 1;
			}
			y->name = take_name(P);
			const struct jtok *u = cur(P);
			if (is_op(u, "(")) {
				P->i++;
				call_args(P, y);
			} else if ((u->kind == JT_NAME || u->kind == JT_STRING || u->kind == JT_INT ||
				    u->kind == JT_FLOAT || is_op(u, "[") || is_op(u, "{")) &&
				   !is_name(u, "else") && !is_name(u, "or") && !is_name(u, "and")) {
				if (is_name(u, "is"))
					jfail(P->st, u->pos, -EINVAL, "you cannot chain multiple tests with is");
				push(P, (void ***)&y->args, &y->nargs, postfix(P, primary(P)));
			}
			x = y;
		} else if (is_op(t, "(")) {
			P->i++;
			struct jx *y = node(P, JX_CALL, t->pos);
			y->a = x;
			call_args(P, y);
			x = y;
		} else {
			return x;
		}
	}
}

static struct jx *unary(struct parser *P, int with_filter)
{
	const struct jtok *t = cur(P);
	struct jx *x;
	enter(P);
	if (is_op(t, "-") || is_op(t, "+")) {
		P->i++;
		x = node(P, t->p[0] == '-' ? JX_NEG : JX_POS, t->pos);
		x->a = unary(P, 0);
	} else {
		x = primary(P);
	}
	x = postfix(P, x);
	P->depth--;
	return with_filter ? filters(P, x) : x;
}

static struct jx *binary(struct parser *P, struct jx *a, const struct jtok *op, struct jx *b)
{
	struct jx *x = node(P, JX_BIN, op->pos);
	x->name = ja_strndup(P->st, op->p, op->n);
	x->a = a;
	x->b = b;
	return x;
}

static struct jx *power(struct parser *P)
{
	struct jx *x = unary(P, 1);
	while (is_op(cur(P), "**")) {
		const struct jtok *op = &P->t[P->i++];
		x = binary(P, x, op, unary(P, 1));
	}
	return x;
}

static struct jx *product(struct parser *P)
{
	struct jx *x = power(P);
	while (is_op(cur(P), "*") || is_op(cur(P), "/") || is_op(cur(P), "//") || is_op(cur(P), "%")) {
		const struct jtok *op = &P->t[P->i++];
		x = binary(P, x, op, power(P));
	}
	return x;
}

static struct jx *concat(struct parser *P)
{
	struct jx *x = product(P);
	while (is_op(cur(P), "~")) {
		const struct jtok *op = &P->t[P->i++];
		x = binary(P, x, op, product(P));
	}
	return x;
}

static struct jx *sum(struct parser *P)
{
	struct jx *x = concat(P);
	while (is_op(cur(P), "+") || is_op(cur(P), "-")) {
		const struct jtok *op = &P->t[P->i++];
		x = binary(P, x, op, concat(P));
	}
	return x;
}

static struct jx *compare(struct parser *P)
{
	static const char *const cmp[] = {"==", "!=", "<", ">", "<=", ">="};
	struct jx *first = sum(P), *x = NULL;
	int nops = 0;
	for (;;) {
		const struct jtok *t = cur(P);
		const char *op = NULL;
		for (size_t k = 0; k < 6; k++)
			if (is_op(t, cmp[k]))
				op = cmp[k];
		if (op) {
			P->i++;
		} else if (is_name(t, "in")) {
			op = "in";
			P->i++;
		} else if (is_name(t, "not") && is_name(&P->t[P->i + 1], "in")) {
			op = "not in";
			P->i += 2;
		} else {
			break;
		}
		if (!x) {
			x = node(P, JX_CMP, t->pos);
			push(P, (void ***)&x->args, &x->nargs, first);
		}
		push(P, (void ***)&x->ops, &nops, (void *)op);
		push(P, (void ***)&x->args, &x->nargs, sum(P));
	}
	return x ? x : first;
}

static struct jx *not_expr(struct parser *P)
{
	if (is_name(cur(P), "not")) {
		struct jx *x = node(P, JX_NOT, cur(P)->pos);
		P->i++;
		enter(P);
		x->a = not_expr(P);
		P->depth--;
		return x;
	}
	return compare(P);
}

/* sub (KW sub)*, left-associative, as nodes of kind. */
static struct jx *keyword_chain(struct parser *P, const char *kw, enum jx_kind kind,
                                struct jx *(*sub)(struct parser *))
{
	struct jx *x = sub(P);
	while (is_name(cur(P), kw)) {
		struct jx *y = node(P, kind, cur(P)->pos);
		P->i++;
		y->a = x;
		y->b = sub(P);
		x = y;
	}
	return x;
}

static struct jx *and_expr(struct parser *P)
{
	return keyword_chain(P, "and", JX_AND, not_expr);
}

static struct jx *expr_nocond(struct parser *P)
{
	return keyword_chain(P, "or", JX_OR, and_expr);
}

static struct jx *expr(struct parser *P)
{
	enter(P);
	struct jx *x = expr_nocond(P);
	while (is_name(cur(P), "if")) {
		struct jx *y = node(P, JX_COND, cur(P)->pos);
		P->i++;
		y->b = x;
		y->a = expr_nocond(P);
		if (is_name(cur(P), "else")) {
			P->i++;
			y->c = expr(P);
		}
		x = y;
	}
	P->depth--;
	return x;
}

static int tuple_end(struct parser *P)
{
	const struct jtok *t = cur(P);
	return t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || t->kind == JT_EOF || is_op(t, ")") ||
	       is_name(t, "in") || is_name(t, "if") || is_name(t, "recursive");
}

/* expr, or a tuple when a comma follows (a, b / a,). */
static struct jx *tuple(struct parser *P, int with_cond)
{
	size_t pos = cur(P)->pos;
	struct jx *first = with_cond ? expr(P) : expr_nocond(P);
	if (!is_op(cur(P), ","))
		return first;
	struct jx *x = node(P, JX_LIST, pos);
	x->tuple = 1;
	push(P, (void ***)&x->args, &x->nargs, first);
	while (is_op(cur(P), ",")) {
		P->i++;
		if (tuple_end(P))
			break;
		push(P, (void ***)&x->args, &x->nargs, with_cond ? expr(P) : expr_nocond(P));
	}
	return x;
}

/* ---- statements ---------------------------------------------------------- */

static struct js *stmt(struct parser *P, struct js *s, size_t pos, enum js_kind k)
{
	s = ja_alloc(P->st, sizeof *s);
	s->kind = k;
	s->pos = pos;
	return s;
}

/* Statements up to a {% tag %} named in `ends` (a space-separated list,
 * with spaces around each name), which is left unread. */
static struct js *body(struct parser *P, const char *ends, const char *opener, size_t open_pos);

static const char *end_tag(struct parser *P, const char *ends)
{
	if (cur(P)->kind != JT_BLOCK_BEGIN || P->t[P->i + 1].kind != JT_NAME)
		return NULL;
	const struct jtok *t = &P->t[P->i + 1];
	char name[40];
	if (t->n + 3 > sizeof name)
		return NULL;
	snprintf(name, sizeof name, " %.*s ", (int)t->n, t->p);
	const char *hit = strstr(ends, name);
	return hit ? hit + 1 : NULL;
}

/* Takes {% name %} (the block begin is current). */
static void take_end(struct parser *P, const char *name)
{
	P->i++;
	if (!is_name(cur(P), name))
		expected(P, name);
	P->i++;
	want_block_end(P);
}

static void targets(struct parser *P, struct js *s)
{
	do {
		if (s->nnames && is_op(cur(P), ","))
			P->i++;
		push(P, (void ***)&s->names, &s->nnames, (void *)take_name(P));
	} while (is_op(cur(P), ","));
}

static struct js *block(struct parser *P)
{
	size_t pos = cur(P)->pos;
	P->i++;
	const struct jtok *t = cur(P);
	if (t->kind != JT_NAME)
		expected(P, "a statement name");
	P->i++;
	struct js *s = NULL;
	if (is_name(t, "if")) {
		s = stmt(P, s, pos, JS_IF);
		s->x = tuple(P, 1);
		want_block_end(P);
		struct js *at = s;
		for (;;) {
			at->body = body(P, " elif else endif ", "if", pos);
			const char *e = end_tag(P, " elif else endif ");
			if (!strncmp(e, "elif", 4)) {
				size_t epos = cur(P)->pos;
				P->i += 2;
				at->orelse = stmt(P, NULL, epos, JS_IF);
				at = at->orelse;
				at->x = tuple(P, 1);
				want_block_end(P);
				continue;
			}
			if (!strncmp(e, "else", 4)) {
				take_end(P, "else");
				at->orelse = body(P, " endif ", "if", pos);
			}
			take_end(P, "endif");
			return s;
		}
	}
	if (is_name(t, "for")) {
		s = stmt(P, s, pos, JS_FOR);
		targets(P, s);
		if (!is_name(cur(P), "in"))
			expected(P, "'in'");
		P->i++;
		s->x = tuple(P, 0);
		if (is_name(cur(P), "if")) {
			P->i++;
			s->cond = expr(P);
		}
		if (is_name(cur(P), "recursive"))
			jfail(P->st, cur(P)->pos, -EINVAL, "recursive for loops are not supported");
		want_block_end(P);
		s->body = body(P, " else endfor ", "for", pos);
		if (!strncmp(end_tag(P, " else endfor "), "else", 4)) {
			take_end(P, "else");
			s->orelse = body(P, " endfor ", "for", pos);
		}
		take_end(P, "endfor");
		return s;
	}
	if (is_name(t, "set")) {
		s = stmt(P, s, pos, JS_SET);
		targets(P, s);
		if (s->nnames == 1 && is_op(cur(P), ".")) {
			P->i++;
			s->attr = take_name(P);
		}
		if (cur(P)->kind == JT_BLOCK_END && s->nnames == 1 && !s->attr) {
			P->i++;
			s->kind = JS_SETBLOCK;
			s->body = body(P, " endset ", "set", pos);
			take_end(P, "endset");
			return s;
		}
		want_op(P, "=");
		s->x = tuple(P, 1);
		want_block_end(P);
		return s;
	}
	if (is_name(t, "macro")) {
		s = stmt(P, s, pos, JS_MACRO);
		s->name = take_name(P);
		want_op(P, "(");
		int nd = 0;
		while (!is_op(cur(P), ")")) {
			if (s->nnames)
				want_op(P, ",");
			push(P, (void ***)&s->names, &s->nnames, (void *)take_name(P));
			struct jx *d = NULL;
			if (is_op(cur(P), "=")) {
				P->i++;
				d = expr(P);
			} else if (nd) {
				jfail(P->st, cur(P)->pos, -EINVAL, "a macro parameter without a default follows "
				      "one with a default");
			}
			nd += d != NULL;
			int k = s->nnames - 1;
			push(P, (void ***)&s->defs, &k, d);
		}
		P->i++;
		want_block_end(P);
		s->body = body(P, " endmacro ", "macro", pos);
		take_end(P, "endmacro");
		return s;
	}
	if (is_name(t, "break") || is_name(t, "continue")) {
		s = stmt(P, s, pos, t->p[0] == 'b' ? JS_BREAK : JS_CONTINUE);
		want_block_end(P);
		return s;
	}
	if (is_name(t, "generation")) {
		want_block_end(P);
		s = stmt(P, s, pos, JS_BODY);
		s->body = body(P, " endgeneration ", "generation", pos);
		take_end(P, "endgeneration");
		return s;
	}
	jfail(P->st, t->pos, -EINVAL, "the tag {%% %.*s %%} is not supported here (supported: if, for, "
	      "set, macro, break, continue, generation)", (int)t->n, t->p);
}

static struct js *body(struct parser *P, const char *ends, const char *opener, size_t open_pos)
{
	struct js *head = NULL, **tail = &head;
	for (;;) {
		const struct jtok *t = cur(P);
		struct js *s;
		if (t->kind == JT_EOF) {
			if (opener)
				jfail(P->st, open_pos, -EINVAL, "this {%% %s %%} is never closed (expected {%% end%s %%})",
				      opener, opener);
			return head;
		}
		if (ends && end_tag(P, ends))
			return head;
		if (t->kind == JT_DATA) {
			s = stmt(P, NULL, t->pos, JS_TEXT);
			s->text = t->p;
			s->n = t->n;
			P->i++;
		} else if (t->kind == JT_VAR_BEGIN) {
			P->i++;
			s = stmt(P, NULL, t->pos, JS_OUT);
			s->x = tuple(P, 1);
			if (cur(P)->kind != JT_VAR_END)
				expected(P, "'}}'");
			P->i++;
		} else if (t->kind == JT_BLOCK_BEGIN) {
			const struct jtok *name = &P->t[P->i + 1];
			if (name->kind == JT_NAME && (is_name(name, "endif") || is_name(name, "endfor") ||
			    is_name(name, "else") || is_name(name, "elif") || is_name(name, "endmacro") ||
			    is_name(name, "endset") || is_name(name, "endgeneration")))
				jfail(P->st, name->pos, -EINVAL, "unexpected {%% %.*s %%}%s%s", (int)name->n,
				      name->p, opener ? " inside {% " : "", opener ? opener : "");
			enter(P);
			s = block(P);
			P->depth--;
		} else {
			expected(P, "text or a tag");
		}
		*tail = s;
		tail = &s->next;
	}
}

struct js *jp_parse(struct jstate *st, const struct jtok *toks, size_t ntoks)
{
	struct parser P = {.st = st, .t = toks, .n = ntoks};
	return body(&P, NULL, NULL, 0);
}
