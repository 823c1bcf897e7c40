/* utf8_stream.h — text streamed in pieces, printed as valid UTF-8 only.
 *
 * A token's bytes need not end on a character boundary (byte-fallback
 * tokens carry one byte of a character each). The stream holds the first
 * bytes of a character until the rest arrive, and replaces each ill-formed
 * sequence by U+FFFD, one per maximal subpart as Unicode recommends (what
 * Python's decode(errors="replace") does): "\xC3" waits; "\xC3" then "A"
 * gives U+FFFD "A"; "\xED\xA0\x80" (a surrogate) gives three. */
#ifndef RQ_TOOLS_UTF8_STREAM_H
#define RQ_TOOLS_UTF8_STREAM_H

#include <stddef.h>

struct utf8_stream {
	unsigned char pend[4];  /* the start of a character not complete yet */
	int npend;              /* bytes in pend (0..3) */
	int need;               /* the length of that character (2..4) */
	unsigned char lo, hi;   /* the range its next byte must be in */
};

/* Bytes a push of len bytes may write at most. */
#define UTF8_STREAM_OUT_MAX(len) (3 * (len) + 3)

/* Appends in[0..len) to the stream: writes what is now complete, valid or
 * replaced, to out (UTF8_STREAM_OUT_MAX(len) bytes of room); returns the
 * bytes written. u starts zeroed. */
size_t utf8_stream_push(struct utf8_stream *u, const char *in, size_t len, char *out);

/* The end of the stream: an incomplete character left becomes one U+FFFD
 * (3 bytes written to out, which has room for 3); returns 0 or 3. */
size_t utf8_stream_end(struct utf8_stream *u, char *out);

#endif
