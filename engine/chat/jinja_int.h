/* jinja_int.h — internals of the Jinja-subset interpreter (engine/jinja*.c).
 *
 * Life of one render (jinja_render in jinja_eval.c):
 *   source --jl_lex--> tokens --jp_parse--> statement tree --eval--> text
 * Everything (tokens, tree, values, output) lives in one arena, freed at the
 * end. Errors (syntax, undefined, type, raise_exception, out of memory) are
 * raised with jfail(): it formats the message ("line L col C: ...") into the
 * caller's rq_err and longjmps back to jinja_render, which frees the arena and
 * returns the code. Nothing outside these files sees the jump.
 *
 * Bounds (each an error with the template's line and column, never a hang
 * or a crash):
 *   memory  the arena (ARENA_MAX, jinja_value.c);
 *   work    every operation charges jwork() with what it touches: a byte
 *           copied, allocated, compared or scanned is one unit, a node
 *           evaluated, a statement run, a value compared or an item pushed
 *           JW_STEP; the render fails past st->work_max (jinja.h's budget).
 *           So every loop over data is paid for as it runs, and nothing is
 *           worse than linear in what it touches (substring searches use
 *           memmem or KMP, sorts are merge sorts);
 *   depth   no list or dict is nested deeper than JV_MAX_DEPTH: jl_push and
 *           jd_set refuse to build one, so every recursive walk of a value
 *           (==, in, <, sort keys, repr, tojson) is bounded by construction
 *           (a namespace is a leaf: no walk enters it, so the cycles it can
 *           hold are never followed);
 *   ints    64-bit, checked: an operation whose exact result does not fit
 *           (jinja2 would give a big integer) is refused (joverflow), never
 *           wrapped. */
#ifndef RQ_ENGINE_JINJA_INT_H
#define RQ_ENGINE_JINJA_INT_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

struct rq_err;

/* ---- arena and the jump out ---------------------------------------------- */

struct jchunk;
struct jstate {
	struct jchunk *chunks;   /* arena: every allocation of this render */
	size_t arena_bytes;      /* their total, bounded */
	jmp_buf fail;            /* jfail lands here */
	struct rq_err *err;
	int code;                /* the error jfail raised */
	const char *src;         /* the normalized template text (positions index it) */
	size_t src_len;
	size_t at;               /* the node being evaluated: where work and memory
	                            failures below eval are reported */
	uint64_t work, work_max; /* units charged so far; the budget */
};

#define JW_STEP 32               /* the units one node, statement, item or compare costs */
#define JV_MAX_DEPTH 200         /* lists and dicts nested at most this deep */

_Noreturn void jwork_fail(struct jstate *st);
/* Charges n units of work; fails at st->at past the budget. */
static inline void jwork(struct jstate *st, uint64_t n)
{
	st->work += n;
	if (st->work > st->work_max)
		jwork_fail(st);
}
/* Refuses an integer result that does not fit 64 bits (op: the operator). */
_Noreturn void joverflow(struct jstate *st, size_t pos, const char *op);

void *ja_alloc(struct jstate *st, size_t n);              /* zeroed; never NULL */
char *ja_strndup(struct jstate *st, const char *s, size_t n);
void ja_free(struct jstate *st);
/* Raises code with "line L col C: <message>" (pos is an offset into src, or
 * (size_t)-1 for no position). */
_Noreturn void jfail(struct jstate *st, size_t pos, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* A growable byte buffer in the arena. */
struct jbuf {
	char *s;
	size_t n, cap;
};
void jb_put(struct jstate *st, struct jbuf *b, const char *s, size_t n);
void jb_puts(struct jstate *st, struct jbuf *b, const char *s);

/* ---- values -------------------------------------------------------------- */

enum jv_kind {
	JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR,
	JV_LIST,    /* also tuples (tuple = 1) */
	JV_DICT,    /* insertion-ordered; also namespace() objects (ns = 1) */
	JV_MACRO,   /* a {% macro %} */
	JV_FUNC,    /* a global function (namespace, range, raise_exception, ...) */
	JV_METHOD,  /* a method bound to a value: "abc".upper, d.items, ... */
};

struct jlist;
struct jdict;
struct js;

struct jv {
	uint8_t kind;
	uint8_t tuple;           /* JV_LIST: a tuple (repr with parentheses) */
	union {
		int b;
		int64_t i;
		double f;
		struct { const char *p; size_t n; } s;  /* JV_STR; JV_UNDEF: its name */
		struct jlist *l;
		struct jdict *d;
		const struct js *m;                      /* JV_MACRO */
		const char *fn;                          /* JV_FUNC: its name */
		struct jmethod *meth;
	} u;
};

struct jlist {
	size_t n, cap;
	int depth;               /* 1 + the deepest item's (0: no lists or dicts inside) */
	struct jv *v;
};

struct jdict {
	size_t n, cap;
	int depth;               /* as jlist's (a namespace: 0, it is never walked) */
	int ns;                  /* a namespace(): attributes can be set */
	struct jv *k, *v;
};

struct jmethod {
	struct jv self;
	const char *name;
};

struct jv jv_str(struct jstate *st, const char *s, size_t n);     /* copies s */
struct jv jv_cstr(const char *s);                                  /* points at s */
struct jv jv_int(int64_t i);
struct jv jv_float(double f);
struct jv jv_bool(int b);
struct jv jv_none(void);
struct jv jv_undef(const char *name);
struct jv jv_list(struct jstate *st);
struct jv jv_dict(struct jstate *st);
void jl_push(struct jstate *st, struct jlist *l, struct jv v);
void jd_set(struct jstate *st, struct jdict *d, struct jv k, struct jv v);
/* Every item of from into d (into an empty d without lookups: linear). */
void jd_copy(struct jstate *st, struct jdict *d, const struct jdict *from);
struct jv *jd_get(struct jstate *st, const struct jdict *d, struct jv k);   /* NULL when absent */
struct jv *jd_getc(struct jstate *st, const struct jdict *d, const char *key);

int jv_truthy(struct jv v);
int jv_equal(struct jstate *st, struct jv a, struct jv b);
/* Python's ordering of two numbers (ints exactly, also against floats): -1, 0, 1; 2 when unordered (NaN). */
int jv_numcmp(struct jv a, struct jv b);
/* The first byte offset of needle in hay[from..), or -1; rev: the last
 * (overlapping hits count, as str.rfind). Linear; charges what it scans. */
int64_t jfind(struct jstate *st, const char *hay, size_t n, const char *needle, size_t m, size_t from, int rev);
const char *jv_type(struct jv v);                                  /* Python's type name */
/* str(v) as Python/Jinja prints it (undefined: ""), appended to b. */
void jv_tostr(struct jstate *st, struct jbuf *b, struct jv v);
struct jv jv_strof(struct jstate *st, struct jv v);
/* repr(v), appended to b. */
void jv_repr(struct jstate *st, struct jbuf *b, struct jv v);
/* json.dumps(v, ensure_ascii, indent=indent (<0: None), separators=(isep,
 * ksep) (NULL: Python's defaults), sort_keys). 0 or -EINVAL when v holds
 * something JSON cannot (undefined, a macro, ...). */
int jv_tojson(struct jstate *st, struct jbuf *b, struct jv v, int indent, const char *isep,
              const char *ksep, int sort_keys, int ensure_ascii);
/* Python's str.isspace() for one code point. */
int jpy_space(uint32_t c);
/* The code point at s[*i] (UTF-8; a bad byte stands for itself), advancing *i. */
uint32_t jutf8_next(const char *s, size_t n, size_t *i);

/* ---- tokens -------------------------------------------------------------- */

enum jt_kind {
	JT_DATA, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
	JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP, JT_EOF,
};

struct jtok {
	enum jt_kind kind;
	size_t pos;              /* offset in st->src, for messages */
	const char *p;           /* DATA/NAME/OP: the text; STRING: decoded */
	size_t n;
	int64_t i;
	double f;
};

/* Normalizes newlines in-place copy (st->src), drops one trailing newline and
 * tokenizes with trim_blocks and lstrip_blocks as transformers sets them. */
void jl_lex(struct jstate *st, const char *text, size_t len, struct jtok **toks, size_t *ntoks);

/* ---- the tree ------------------------------------------------------------ */

enum jx_kind {
	JX_LIT, JX_NAME, JX_LIST, JX_DICT, JX_ATTR, JX_ITEM, JX_SLICE, JX_CALL,
	JX_FILTER, JX_TEST, JX_NOT, JX_NEG, JX_POS, JX_BIN, JX_CMP, JX_AND, JX_OR, JX_COND,
};

struct jx {
	enum jx_kind kind;
	size_t pos;
	struct jv lit;           /* JX_LIT */
	const char *name;        /* NAME, ATTR, FILTER, TEST; BIN/CMP: the operator */
	struct jx *a, *b, *c;    /* operands; SLICE: a[b:c:args[0]]; COND: b if a else c */
	struct jx **args;        /* LIST/DICT items (DICT: k,v pairs), call arguments; CMP: operands */
	const char **kwn;        /* keyword argument names */
	struct jx **kwv;
	int nargs, nkw;
	int tuple;               /* LIST: a tuple */
	int neg;                 /* TEST: "is not" */
	const char **ops;        /* CMP: nargs-1 operators */
};

enum js_kind {
	JS_TEXT, JS_OUT, JS_IF, JS_FOR, JS_SET, JS_SETBLOCK, JS_MACRO, JS_BREAK, JS_CONTINUE,
	JS_BODY,                 /* {% generation %}: its body, as is */
};

struct js {
	enum js_kind kind;
	size_t pos;
	struct js *next;
	const char *text;        /* TEXT */
	size_t n;
	struct jx *x;            /* OUT, IF/FOR condition or iterable, SET value */
	struct jx *cond;         /* FOR ... if cond */
	struct js *body, *orelse;   /* IF: then/else (elif is a nested IF); FOR; MACRO */
	const char **names;      /* FOR/SET targets; MACRO parameters */
	int nnames;
	const char *attr;        /* SET ns.attr */
	const char *name;        /* MACRO name */
	struct jx **defs;        /* MACRO parameter defaults (NULL: required) */
};

struct js *jp_parse(struct jstate *st, const struct jtok *toks, size_t ntoks);

/* ---- builtins (jinja_filters.c, jinja_methods.c, jinja_ops.c) ------------ */

/* The context of one render: jinja_eval.c writes it; the builtins below the
 * evaluator read only st (jctx_state). */
struct jframe;
struct jctx {
	struct jstate *st;
	struct jframe *frame, *root;
	struct jbuf *out;
	int ctl;                 /* 1 break, 2 continue: unwinding to the loop */
	int depth;               /* macro calls in progress */
	long steps;              /* statements run, bounded by MAX_STEPS (jinja_eval.c) */
};

static inline struct jstate *jctx_state(struct jctx *c) { return c->st; }

/* f(self, args) for filter `name`: 0 and *out, or -ENOENT when no such filter. */
int jb_filter(struct jctx *c, size_t pos, const char *name, struct jv self, struct jv *args, int nargs,
              const char **kwn, struct jv *kwv, int nkw, struct jv *out);
int jb_test(struct jctx *c, size_t pos, const char *name, struct jv self, struct jv *args, int nargs,
            int *out);
int jb_method(struct jctx *c, size_t pos, const struct jmethod *m, struct jv *args, int nargs,
              const char **kwn, struct jv *kwv, int nkw, struct jv *out);
int jb_has_method(struct jv self, const char *name);
int jb_call_global(struct jctx *c, size_t pos, const char *fn, struct jv *args, int nargs,
                   const char **kwn, struct jv *kwv, int nkw, struct jv *out);
int jb_is_global(const char *name);
/* obj.name as jinja2's sandboxed getattr resolves it (jinja_methods.c). */
struct jv jctx_getattr(struct jctx *c, size_t pos, struct jv obj, const char *name);
/* self.name as a bound method value; the undefined value "'T object' has no
 * attribute 'name'" (jinja_methods.c). */
struct jv jctx_method(struct jctx *c, struct jv self, const char *name);
struct jv jctx_no_attr(struct jctx *c, struct jv obj, const char *name);
/* Python's `needle in hay`, and -1/0/1 ordering (numbers, strings, lists); both fail on other types. */
int jv_contains(struct jctx *c, size_t pos, struct jv hay, struct jv needle);
int jv_order(struct jctx *c, size_t pos, struct jv a, struct jv b);
/* The operators (jinja_ops.c): x->name's arithmetic on a and b; x->name is
 * also the operator named in errors. jx_order: a op b for <, <=, >, >=. */
struct jv jx_arith(struct jctx *c, const struct jx *x, struct jv a, struct jv b);
int jx_order(struct jctx *c, const struct jx *x, const char *op, struct jv a, struct jv b);

/* Shared by filters and methods (jinja_methods.c). */
/* Argument idx (positional) or name (keyword), else def. */
struct jv jarg(struct jv *args, int nargs, const char **kwn, struct jv *kwv, int nkw, int idx,
               const char *name, struct jv def);
/* str.strip/lstrip/rstrip: which 1 left, 2 right, 3 both; chars not a string: white space. */
struct jv jstrip(struct jstate *st, struct jv s, struct jv chars, int which);
/* mode 0 lower, 1 upper, 2 capitalize, 3 str.title, 4 jinja's title filter. */
struct jv jcase(struct jstate *st, struct jv s, int mode);
/* str.replace(old, new, count) (count < 0: all). */
struct jv jreplace(struct jstate *st, struct jv s, struct jv old, struct jv new, int64_t count);

#endif
