/* st_json.c — the JSON reader behind the safetensors header parser.
 *
 * A small recursive-descent reader that follows serde_json's grammar, which
 * is what safetensors' Rust core parses headers with: whitespace is space,
 * tab, LF and CR only; strings may not hold raw control characters; \u
 * escapes must form valid code points (no lone surrogates); numbers that
 * overflow binary64 are errors (integers beyond 64 bits are read as floats);
 * nesting is limited to 127 levels; UTF-8 is validated like Rust's
 * str::from_utf8. Every function returns 0, or -1 with j->why and j->at set
 * at the first failure. */
#include "st/st_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int st_jfail(struct jp *j, const char *why)
{
	if (!j->why) {
		j->why = why;
		j->at = (size_t)(j->p - j->start);
	}
	return -1;
}

void st_jws(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r'))
		j->p++;
}

int st_jexpect(struct jp *j, char c, const char *why)
{
	st_jws(j);
	if (j->p >= j->end || *j->p != (uint8_t)c)
		return st_jfail(j, why);
	j->p++;
	return 0;
}

int st_jbegin(struct jp *j, char close)
{
	if (st_jenter(j))
		return -1;
	st_jws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		j->depth++;
		return 0;
	}
	return 1;
}

int st_jnext(struct jp *j, char close)
{
	st_jws(j);
	if (j->p < j->end && *j->p == ',') {
		j->p++;
		return 1;
	}
	if (st_jexpect(j, close, close == ']' ? "expected ',' or ']'" : "expected ',' or '}'"))
		return -1;
	j->depth++;
	return 0;
}

static int hexval(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int jhex4(struct jp *j, uint32_t *cp)
{
	if (j->end - j->p < 4)
		return st_jfail(j, "truncated \\u escape");
	uint32_t v = 0;
	for (int i = 0; i < 4; i++) {
		int h = hexval(j->p[i]);
		if (h < 0)
			return st_jfail(j, "invalid \\u escape");
		v = v << 4 | (uint32_t)h;
	}
	j->p += 4;
	*cp = v;
	return 0;
}

static size_t utf8_put(char *out, uint32_t cp)
{
	char b[4];
	size_t n;
	if (cp < 0x80) {
		b[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (char)(0xC0 | cp >> 6);
		b[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (char)(0xE0 | cp >> 12);
		b[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		b[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		b[0] = (char)(0xF0 | cp >> 18);
		b[1] = (char)(0x80 | (cp >> 12 & 0x3F));
		b[2] = (char)(0x80 | (cp >> 6 & 0x3F));
		b[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	if (out)
		memcpy(out, b, n);
	return n;
}

/* A string at j->p. With out != NULL the decoded UTF-8 is written there (it is
 * never longer than the source text) and its length to *outlen. */
int st_jstring(struct jp *j, char *out, size_t *outlen)
{
	st_jws(j);
	if (j->p >= j->end || *j->p != '"')
		return st_jfail(j, "expected a string");
	j->p++;
	size_t n = 0;
	for (;;) {
		if (j->p >= j->end)
			return st_jfail(j, "unterminated string");
		uint8_t c = *j->p;
		if (c == '"') {
			j->p++;
			break;
		}
		if (c < 0x20)
			return st_jfail(j, "control character in a string");
		if (c != '\\') {
			/* copy the run of plain bytes at once */
			const uint8_t *q = j->p;
			while (q < j->end && *q != '"' && *q != '\\' && *q >= 0x20)
				q++;
			if (out)
				memcpy(out + n, j->p, (size_t)(q - j->p));
			n += (size_t)(q - j->p);
			j->p = q;
			continue;
		}
		j->p++;
		if (j->p >= j->end)
			return st_jfail(j, "unterminated string");
		uint32_t cp = 0;
		switch (*j->p++) {
		case '"': cp = '"'; break;
		case '\\': cp = '\\'; break;
		case '/': cp = '/'; break;
		case 'b': cp = '\b'; break;
		case 'f': cp = '\f'; break;
		case 'n': cp = '\n'; break;
		case 'r': cp = '\r'; break;
		case 't': cp = '\t'; break;
		case 'u':
			if (jhex4(j, &cp))
				return -1;
			if (cp >= 0xDC00 && cp <= 0xDFFF)
				return st_jfail(j, "lone trailing surrogate in \\u escape");
			if (cp >= 0xD800 && cp <= 0xDBFF) {
				uint32_t lo = 0;
				if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
					return st_jfail(j, "lone leading surrogate in \\u escape");
				j->p += 2;
				if (jhex4(j, &lo))
					return -1;
				if (lo < 0xDC00 || lo > 0xDFFF)
					return st_jfail(j, "lone leading surrogate in \\u escape");
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			}
			break;
		default:
			j->p--;
			return st_jfail(j, "invalid escape");
		}
		n += utf8_put(out ? out + n : NULL, cp);
	}
	if (outlen)
		*outlen = n;
	return 0;
}

int st_jnumber_scan(struct jp *j, int *is_float)
{
	*is_float = 0;
	if (j->p < j->end && *j->p == '-')
		j->p++;
	if (j->p >= j->end || *j->p < '0' || *j->p > '9')
		return st_jfail(j, "invalid number");
	if (*j->p == '0') {
		j->p++;
		if (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			return st_jfail(j, "invalid number (leading zero)");
	} else {
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (j->p < j->end && *j->p == '.') {
		*is_float = 1;
		j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9')
			return st_jfail(j, "invalid number (no digit after '.')");
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		*is_float = 1;
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9')
			return st_jfail(j, "invalid number (no digit in the exponent)");
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	return 0;
}

/* A number of any JSON form; serde_json refuses only those that overflow
 * binary64 (an integer beyond u64/i64 is read as a float). */
static int jnumber_skip(struct jp *j)
{
	const uint8_t *s = j->p;
	int is_float, rc = st_jnumber_scan(j, &is_float);
	if (rc)
		return rc;
	size_t len = (size_t)(j->p - s);
	if (!is_float && len < 19)
		return 0;   /* fits an i64/u64 */
	char *tmp = malloc(len + 1);
	if (!tmp)
		return st_jfail(j, "out of memory");
	memcpy(tmp, s, len);
	tmp[len] = 0;
	double v = strtod(tmp, NULL);
	free(tmp);
	if (isinf(v))
		return st_jfail(j, "number out of range");
	return 0;
}

int st_jliteral(struct jp *j, const char *lit)
{
	size_t n = strlen(lit);
	if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n))
		return st_jfail(j, "invalid literal");
	j->p += n;
	return 0;
}

int st_jenter(struct jp *j)
{
	if (--j->depth == 0)
		return st_jfail(j, "recursion limit exceeded");
	j->p++;
	return 0;
}

int st_jvalue_skip(struct jp *j)
{
	int more;
	st_jws(j);
	if (j->p >= j->end)
		return st_jfail(j, "unexpected end of header");
	switch (*j->p) {
	case '"':
		return st_jstring(j, NULL, NULL);
	case 't':
		return st_jliteral(j, "true");
	case 'f':
		return st_jliteral(j, "false");
	case 'n':
		return st_jliteral(j, "null");
	case '[':
		more = st_jbegin(j, ']');
		while (more > 0) {
			if (st_jvalue_skip(j))
				return -1;
			more = st_jnext(j, ']');
		}
		return more < 0 ? -1 : 0;
	case '{':
		more = st_jbegin(j, '}');
		while (more > 0) {
			if (st_jstring(j, NULL, NULL) || st_jexpect(j, ':', "expected ':'") ||
			    st_jvalue_skip(j))
				return -1;
			more = st_jnext(j, '}');
		}
		return more < 0 ? -1 : 0;
	default:
		if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))
			return jnumber_skip(j);
		return st_jfail(j, "expected a value");
	}
}

/* A non-negative integer that fits in 64 bits (serde's usize). */
static int juint(struct jp *j, uint64_t *out)
{
	st_jws(j);
	if (j->p < j->end && *j->p == '-')
		return st_jfail(j, "expected a non-negative integer");
	if (j->p >= j->end || *j->p < '0' || *j->p > '9')
		return st_jfail(j, "expected a non-negative integer");
	uint64_t v = 0;
	if (*j->p == '0') {
		j->p++;
		if (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			return st_jfail(j, "invalid number (leading zero)");
	} else {
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
			if (__builtin_mul_overflow(v, 10, &v) ||
			    __builtin_add_overflow(v, (uint64_t)(*j->p - '0'), &v))
				return st_jfail(j, "integer does not fit in 64 bits");
			j->p++;
		}
	}
	if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
		return st_jfail(j, "expected an integer, found a float");
	*out = v;
	return 0;
}

/* [u, u, ...] with at most max entries; more is "too many" (-2). */
int st_juint_array(struct jp *j, uint64_t *v, int max, int *count)
{
	st_jws(j);
	if (j->p >= j->end || *j->p != '[')
		return st_jfail(j, "expected an array");
	int n = 0;
	int more = st_jbegin(j, ']');
	while (more > 0) {
		uint64_t x = 0;
		if (juint(j, &x))
			return -1;
		if (n == max)
			return st_jfail(j, "too many elements");
		v[n++] = x;
		more = st_jnext(j, ']');
	}
	if (more < 0)
		return -1;
	*count = n;
	return 0;
}

/* ---- UTF-8 (what Rust's str::from_utf8 accepts) -------------------------- */

size_t st_utf8_bad_at(const uint8_t *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		if (i + 8 <= n) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			if (!(w & 0x8080808080808080ull)) {
				i += 8;
				continue;
			}
		}
		uint8_t c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t need;
		uint8_t lo = 0x80, hi = 0xBF;
		if (c >= 0xC2 && c <= 0xDF) {
			need = 1;
		} else if (c >= 0xE0 && c <= 0xEF) {
			need = 2;
			if (c == 0xE0)
				lo = 0xA0;
			if (c == 0xED)
				hi = 0x9F;
		} else if (c >= 0xF0 && c <= 0xF4) {
			need = 3;
			if (c == 0xF0)
				lo = 0x90;
			if (c == 0xF4)
				hi = 0x8F;
		} else {
			return i;
		}
		if (i + need >= n)
			return i;
		if (s[i + 1] < lo || s[i + 1] > hi)
			return i;
		for (size_t k = 2; k <= need; k++)
			if ((s[i + k] & 0xC0) != 0x80)
				return i;
		i += need + 1;
	}
	return (size_t)-1;
}

/* ---- the header --------------------------------------------------------- */

int st_metadata_check(const char *raw, size_t len)
{
	struct jp j = {(const uint8_t *)raw, (const uint8_t *)raw, (const uint8_t *)raw + len, 128,
	               NULL, 0};
	if (st_utf8_bad_at(j.p, len) != (size_t)-1)
		return -EINVAL;
	if (len == 4 && !memcmp(raw, "null", 4))
		return 0;
	if (!len || raw[0] != '{' || st_jenter(&j))
		return -EINVAL;
	st_jws(&j);
	if (j.p < j.end && *j.p == '}') {
		j.p++;
	} else {
		for (;;) {
			if (st_jstring(&j, NULL, NULL) || st_jexpect(&j, ':', "") ||
			    st_jstring(&j, NULL, NULL))
				return -EINVAL;
			st_jws(&j);
			if (j.p < j.end && *j.p == ',') {
				j.p++;
				continue;
			}
			if (st_jexpect(&j, '}', ""))
				return -EINVAL;
			break;
		}
	}
	return j.p == j.end ? 0 : -EINVAL;
}
