/* jcheck.c — strict JSON gate: what cJSON and Python's json read alike.
 *
 * One pass of a recursive-descent reader (the serde/Python grammar of
 * st_json.c: space, tab, CR, LF as whitespace; no raw control characters in
 * strings; valid escapes; no lone surrogates) that also
 *  - decodes every key of an object into an arena and, when the object
 *    closes, sorts them and refuses the first duplicate (both byte offsets
 *    named);
 *  - refuses U+0000 decoded from a \u escape (cJSON's strings are C strings);
 *  - checks that an integer literal is exactly the double cJSON makes of it
 *    (glibc's "%.0f" prints a double's exact decimal value, so comparing the
 *    digits is exact), and that no number overflows to infinity.
 * Decisions: Python also reads NaN, Infinity and lone surrogates; cJSON
 * refuses them, so they are refused here too (a file must mean the same to
 * every reader, and those readers disagree). The depth limit (128) is below
 * both cJSON's (1000) and Python's recursion limit. */
#include "st/jcheck.h"
#include "st/st_internal.h"
#include "base/err.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct key {
	size_t off, len;   /* the decoded key: arena[off, off + len) */
	size_t at;         /* byte offset of its opening quote in the text */
};

struct jc {
	struct jp j;
	char *arena;       /* [text length + 1]: decoded keys (and the string being read) */
	size_t used;       /* arena bytes held by keys of the objects still open */
	char path[320];    /* key path of the value being read: a.b[3].c */
	size_t plen;
	const char *file;
	struct rq_err *err;
	int rc;            /* nonzero: err already written (not a grammar failure) */
	int keys_only;     /* jc_check_keys: duplicates only, no value rules */
};

/* A failure that is not plain grammar: the message is written now. */
static int refuse(struct jc *c, int rc)
{
	c->rc = rc;
	return -1;
}

/* "the value at a.b[2]" / "the top-level value" */
static const char *where(const struct jc *c, char *buf, size_t len)
{
	if (!c->plen)
		return "the top-level value";
	snprintf(buf, len, "the value at %s", c->path);
	return buf;
}

/* (memcpy, not snprintf: this runs for every member of a 100 MB header) */
static void path_add(struct jc *c, const char *s, size_t n)
{
	size_t room = sizeof c->path - 1 - c->plen;
	if (n > room)
		n = room;
	memcpy(c->path + c->plen, s, n);
	c->plen += n;
	c->path[c->plen] = 0;
}

static void path_push(struct jc *c, const char *k, size_t klen, long idx, size_t *save)
{
	*save = c->plen;
	if (idx >= 0) {
		char b[24], *e = b + sizeof b, *q = e;
		*--q = ']';
		do
			*--q = (char)('0' + idx % 10);
		while ((idx /= 10) > 0);
		*--q = '[';
		path_add(c, q, (size_t)(e - q));
	} else {
		if (c->plen)
			path_add(c, ".", 1);
		path_add(c, k, klen);
	}
}

static void path_pop(struct jc *c, size_t save)
{
	c->plen = save;
	c->path[save] = 0;
}

/* Decodes the string at j->p into the arena at c->used (not taken): *len. */
static int string_at(struct jc *c, size_t *len, const char *what)
{
	struct jp *j = &c->j;
	size_t at = (size_t)(j->p - j->start);
	if (st_jstring(j, c->arena + c->used, len))
		return -1;
	if (!c->keys_only && memchr(c->arena + c->used, 0, *len))
		return refuse(c, rq_errf(c->err, -EPROTO, "%s: %s at byte %zu (in %s) holds \\u0000, "
		                         "which C strings (cJSON) would cut short; remove it", c->file,
		                         what, at, where(c, (char[400]){0}, 400)));
	return 0;
}

static int cmp_key(const void *a, const void *b, void *arena)
{
	const struct key *x = a, *y = b;
	const char *s = arena;
	size_t n = x->len < y->len ? x->len : y->len;
	int r = memcmp(s + x->off, s + y->off, n);
	if (r)
		return r;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

static int dup_keys(struct jc *c, struct key *k, size_t n)
{
	if (n < 2)
		return 0;
	qsort_r(k, n, sizeof *k, cmp_key, c->arena);
	for (size_t i = 1; i < n; i++)
		if (k[i].len == k[i - 1].len && !memcmp(c->arena + k[i].off, c->arena + k[i - 1].off, k[i].len))
			return refuse(c, rq_errf(c->err, -EPROTO, "%s: key \"%.*s\" appears twice in %s%s "
			                         "(bytes %zu and %zu): cJSON reads the first, Python's json "
			                         "the last; remove one of them", c->file, (int)k[i].len,
			                         c->arena + k[i].off, c->plen ? "the object at " : "the "
			                         "top-level object", c->plen ? c->path : "", k[i - 1].at,
			                         k[i].at));
	return 0;
}

/* Integers must be exactly the double cJSON stores; no number may overflow. */
static int number(struct jc *c)
{
	struct jp *j = &c->j;
	const uint8_t *s = j->p;
	int is_float, rc0 = st_jnumber_scan(j, &is_float);
	if (rc0)
		return rc0;
	size_t len = (size_t)(j->p - s), neg = s[0] == '-';
	if (c->keys_only || (!is_float && len - neg <= 15))
		return 0;          /* below 10^15 < 2^53: exact */
	char stack[64], *tmp = len < sizeof stack ? stack : malloc(len + 1);
	if (!tmp)
		return refuse(c, -ENOMEM);
	memcpy(tmp, s, len);
	tmp[len] = 0;
	double d = strtod(tmp, NULL);
	int rc = 0;
	if (isinf(d)) {
		rc = refuse(c, rq_errf(c->err, -EPROTO, "%s: the number at byte %zu (in %s) is beyond "
		                       "the range of a double; readers disagree on what it means",
		                       c->file, (size_t)(s - j->start), where(c, (char[400]){0}, 400)));
	} else if (!is_float) {
		char exact[400];
		snprintf(exact, sizeof exact, "%.0f", fabs(d));
		if (strlen(exact) != len - neg || memcmp(exact, tmp + neg, len - neg))
			rc = refuse(c, rq_errf(c->err, -EPROTO, "%s: the integer %.40s%s at byte %zu (in %s) "
			                       "is not exactly representable as a double: cJSON would read "
			                       "%s%s, Python's json the integer as written; write a value "
			                       "that is exact", c->file, tmp, len > 40 ? "..." : "",
			                       (size_t)(s - j->start), where(c, (char[400]){0}, 400),
			                       neg ? "-" : "", exact));
	}
	if (tmp != stack)
		free(tmp);
	return rc;
}

static int value(struct jc *c);

static int object(struct jc *c)
{
	struct jp *j = &c->j;
	struct key *k = NULL;
	size_t n = 0, cap = 0, start = c->used;
	int more = st_jbegin(j, '}'), rc = 0;
	while (more > 0) {
		st_jws(j);
		size_t at = (size_t)(j->p - j->start), klen = 0, save;
		if ((rc = string_at(c, &klen, "a key")))
			break;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			struct key *nk = realloc(k, nc * sizeof *k);
			if (!nk) {
				rc = refuse(c, -ENOMEM);
				break;
			}
			k = nk;
			cap = nc;
		}
		k[n++] = (struct key){c->used, klen, at};
		c->used += klen;
		if ((rc = st_jexpect(j, ':', "expected ':'")))
			break;
		path_push(c, c->arena + c->used - klen, klen, -1, &save);
		rc = value(c);
		if (rc)
			break;          /* the path stays: it names where it failed */
		path_pop(c, save);
		more = st_jnext(j, '}');
	}
	if (!rc && more < 0)
		rc = -1;
	if (!rc)
		rc = dup_keys(c, k, n);
	free(k);
	c->used = start;
	return rc;
}

static int array(struct jc *c)
{
	struct jp *j = &c->j;
	long i = 0;
	int more = st_jbegin(j, ']');
	while (more > 0) {
		size_t save;
		path_push(c, NULL, 0, i++, &save);
		if (value(c))
			return -1;
		path_pop(c, save);
		more = st_jnext(j, ']');
	}
	return more < 0 ? -1 : 0;
}

static int value(struct jc *c)
{
	struct jp *j = &c->j;
	size_t len;
	st_jws(j);
	if (j->p >= j->end)
		return st_jfail(j, "unexpected end of text");
	switch (*j->p) {
	case '"': return string_at(c, &len, "a string");
	case '{': return object(c);
	case '[': return array(c);
	case 't': return st_jliteral(j, "true");
	case 'f': return st_jliteral(j, "false");
	case 'n': return st_jliteral(j, "null");
	case 'N':
	case 'I':
		return st_jfail(j, "NaN and Infinity are not JSON (Python's json reads them, cJSON "
		                "does not)");
	default:
		if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))
			return number(c);
		if (*j->p < 0x20 || *j->p == 0x7F)
			return st_jfail(j, "a control byte where a value should be (JSON whitespace is "
			                "only space, tab, CR and LF)");
		return st_jfail(j, "expected a value");
	}
}

static int check(const char *text, size_t len, const char *file, int keys_only,
                 struct rq_err *err)
{
	const uint8_t *s = (const uint8_t *)text;
	if (!file)
		file = "(JSON)";
	size_t bad = st_utf8_bad_at(s, len);
	if (bad != (size_t)-1)
		return rq_errf(err, -EPROTO, "%s: not valid UTF-8 at byte %zu; JSON files must be "
		               "UTF-8", file, bad);
	if (len >= 3 && s[0] == 0xEF && s[1] == 0xBB && s[2] == 0xBF)
		return rq_errf(err, -EPROTO, "%s: begins with a UTF-8 byte-order mark, which neither "
		               "cJSON nor Python's json.loads takes; remove it", file);
	struct jc c = {.j = {s, s, s + len, JC_MAX_DEPTH + 1, NULL, 0}, .file = file, .err = err,
	               .keys_only = keys_only};
	if (!(c.arena = malloc(len + 1)))
		return rq_errf(err, -ENOMEM, "%s: out of memory checking the JSON", file);
	int rc = value(&c);
	if (!rc) {
		st_jws(&c.j);
		if (c.j.p != c.j.end) {
			c.plen = 0;
			c.path[0] = 0;
			rc = st_jfail(&c.j, "data after the JSON value (cJSON ignores it, Python's json "
			              "refuses it)");
		}
	}
	free(c.arena);
	if (!rc)
		return 0;
	if (c.rc == -ENOMEM)
		return rq_errf(err, -ENOMEM, "%s: out of memory checking the JSON", file);
	if (c.rc)
		return c.rc;
	size_t line = 1, col = 1;
	for (size_t i = 0; i < c.j.at && i < len; i++) {
		if (s[i] == '\n') {
			line++;
			col = 1;
		} else if ((s[i] & 0xC0) != 0x80) {
			col++;
		}
	}
	if (!strcmp(c.j.why ? c.j.why : "", "recursion limit exceeded"))
		c.j.why = "nested deeper than 128 levels";
	return rq_errf(err, -EPROTO, "%s: not strict JSON: %s at byte %zu (line %zu, column %zu%s%s)",
	               file, c.j.why ? c.j.why : "syntax error", c.j.at, line, col,
	               c.plen ? ", in " : "", c.plen ? c.path : "");
}

int jc_check(const char *text, size_t len, const char *file, struct rq_err *err)
{
	return check(text, len, file, 0, err);
}

int jc_check_keys(const char *text, size_t len, const char *file, struct rq_err *err)
{
	return check(text, len, file, 1, err);
}

cJSON *jc_parse(const char *text, size_t len, const char *file, struct rq_err *err)
{
	if (jc_check(text, len, file, err))
		return NULL;
	cJSON *j = cJSON_ParseWithLength(text, len);
	if (!j)
		rq_errf(err, -ENOMEM, "%s: out of memory reading the JSON", file ? file : "(JSON)");
	return j;
}
