/* jtext.h — JSON as text: find the byte span of values without
 * re-serializing (config.json must keep every other byte), and write JSON
 * exactly like Python's json.dumps(obj, indent=2, sort_keys=True). */
#ifndef RQ_ST_JTEXT_H
#define RQ_ST_JTEXT_H

#include <stddef.h>
#include <cjson/cJSON.h>

/* Index of the first non-whitespace byte at or after i. */
size_t jt_ws(const char *s, size_t n, size_t i);
/* One past the end of the JSON value that starts at s[i], or 0 if malformed. */
size_t jt_value_end(const char *s, size_t n, size_t i);
/* In the object whose '{' is at s[obj], finds the first member `key`
 * (compared after decoding escapes, as cJSON and Python compare; text that
 * passed jc_check has no key twice); *val gets the index of its value.
 * -ENOENT / -EPROTO. */
int jt_member(const char *s, size_t n, size_t obj, const char *key, size_t *val);
/* Spans [start[k], end[k]) of the elements of the array whose '[' is at
 * s[arr]; at most cap. *count = number of elements. -EPROTO if malformed. */
int jt_elements(const char *s, size_t n, size_t arr, size_t *start, size_t *end, size_t cap,
                size_t *count);

/* A growable byte buffer. */
struct jt_buf {
	char *p;
	size_t len, cap;
	int oom;
};
void jt_put(struct jt_buf *b, const char *s, size_t n);
/* Appends s[0, n) without element k of the array whose '[' is at s[arr],
 * taking with it the comma and whitespace that follow it, or (the last
 * element) that precede it; every other byte kept. -EPROTO (no such
 * element), -ENOMEM. */
int jt_cut_element(struct jt_buf *out, const char *s, size_t n, size_t arr, size_t k);
void jt_puts(struct jt_buf *b, const char *s);
void jt_printf(struct jt_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Python's repr of a float ("1e-06", "500000.0", "0.1"). */
void jt_py_float(char out[32], double d);

/* Appends json.dumps(v, indent=2, sort_keys=True) (ensure_ascii=True).
 * Integral numbers are written as ints; a cJSON raw item is written as is
 * (use it for floats that must keep their ".0"). */
void jt_dump_python(struct jt_buf *b, const cJSON *v, int depth);

struct rq_err;
/* A model.safetensors.index.json: checks text (len bytes; freed here) with
 * jc_check (st/jcheck.h: strict JSON, no duplicate keys), parses it and
 * returns the document with *weight_map its "weight_map" object, or NULL
 * (nothing to free) with err naming file and the reason: not strict JSON
 * (-EPROTO), no "weight_map" object (-EPROTO), out of memory (-ENOMEM). */
cJSON *jt_index_parse(char *text, size_t len, const char *file, cJSON **weight_map,
                      struct rq_err *err);

#endif
