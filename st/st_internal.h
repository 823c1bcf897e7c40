/* st_internal.h — what st_parse.c, st_json.c and st_write.c share (not public). */
#ifndef RQ_ST_ST_INTERNAL_H
#define RQ_ST_ST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_HEADER 100000000ull   /* safetensors' MAX_HEADER_SIZE */

/* The JSON reader (st_json.c). */
struct jp {
	const uint8_t *start, *p, *end;
	int depth;             /* nesting levels still allowed (serde_json: 128) */
	const char *why;       /* set on failure */
	size_t at;             /* byte offset of the failure in the header JSON */
};

int st_jfail(struct jp *j, const char *why);
void st_jws(struct jp *j);
int st_jexpect(struct jp *j, char c, const char *why);
/* A container, at its opening bracket: st_jbegin enters it (the depth
 * limit) and returns 1 when an element follows, 0 when it is empty (its
 * `close` consumed); after each element st_jnext returns 1 past a ',', 0 past
 * `close` (depth restored), -1 on anything else (j says why):
 *     int more = st_jbegin(j, '}');
 *     while (more > 0) { ...element...; more = st_jnext(j, '}'); }
 *     if (more < 0) return -1; */
int st_jbegin(struct jp *j, char close);
int st_jnext(struct jp *j, char close);
/* A string at j->p; with out != NULL its decoded UTF-8 goes there (never
 * longer than the source text) and the length to *outlen. */
int st_jstring(struct jp *j, char *out, size_t *outlen);
int st_jliteral(struct jp *j, const char *lit);
/* Scans one number of JSON's grammar at j->p (nothing else): 0 with
 * *is_float set when it has a fraction or an exponent, else st_jfail. */
int st_jnumber_scan(struct jp *j, int *is_float);
int st_jenter(struct jp *j);              /* consumes '[' or '{', counts depth */
int st_jvalue_skip(struct jp *j);
/* [u, u, ...] of non-negative 64-bit integers, at most max. */
int st_juint_array(struct jp *j, uint64_t *v, int max, int *count);
/* Offset of the first byte that is not valid UTF-8, or (size_t)-1. */
size_t st_utf8_bad_at(const uint8_t *s, size_t n);

/* 0 when raw[0..len) is exactly one JSON object whose values are all strings
 * (what safetensors accepts as "__metadata__"), or the literal null.
 * -EINVAL otherwise. */
int st_metadata_check(const char *raw, size_t len);

#endif
