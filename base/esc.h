/* esc.h — text from input made safe to print in a one-line message.
 *
 * Names and values read from files (tensor names, JSON keys, refs contents,
 * hub answers) may hold bytes a terminal acts on (ESC [ ... sequences, CR,
 * newlines that fake another line) or that are not UTF-8 at all. rq_esc
 * writes such a string with those bytes spelled out:
 *   \n \r \t, other C0 controls and DEL as \xNN; bytes that are not valid
 *   UTF-8 as \xNN (each byte); the C1 controls U+0080..U+009F and the
 *   bidirectional overrides/isolates (U+202A..U+202E, U+2066..U+2069, which
 *   reorder what a terminal shows) as \u{XXXX}.
 * Valid printable UTF-8 is kept as is. The backslash itself is NOT escaped,
 * so escaping twice changes nothing (messages are escaped again by rq_errf;
 * see err.h). */
#ifndef RQ_BASE_ESC_H
#define RQ_BASE_ESC_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Escapes at most n bytes of s (stops early at a NUL) into out (size cap >=
 * 1), always NUL-terminated; a result that does not fit ends in "...".
 * Returns out. s may be NULL ("(null)"). */
char *rq_esc_n(char *out, size_t cap, const char *s, size_t n);
char *rq_esc(char *out, size_t cap, const char *s);

/* The length (1..4) of the valid UTF-8 character at s[0, n) (n >= 1), its
 * code point in *cp; 0 when the bytes there are not one (overlong forms,
 * surrogates, values above U+10FFFF, a sequence cut short). */
size_t rq_utf8_char(const unsigned char *s, size_t n, uint32_t *cp);

/* 1 when s[0, n) holds nothing rq_esc would change. */
int rq_esc_clean(const char *s, size_t n);

/* vsnprintf into buf[cap] (cap >= 4), except that every %s argument is
 * escaped with rq_esc_n (its precision counting input bytes); the format's
 * own text is copied as is. A result that does not fit ends in "...". What
 * rq_errf and the mount's log use. */
void rq_vfmt_esc(char *buf, size_t cap, const char *fmt, va_list ap);

/* For a message argument: RQ_ESC(name) is the escaped copy in a buffer that
 * lives until the end of the enclosing block. */
#define RQ_ESC_MAX 512
#define RQ_ESC(s) rq_esc((char[RQ_ESC_MAX]){0}, RQ_ESC_MAX, (s))

#endif
