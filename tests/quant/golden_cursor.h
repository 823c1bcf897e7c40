/* golden_cursor.h — the read position in a golden file held in memory, for the peer tests
 * that walk one (test_scheme_peer.c, test_observer_peer.c): the test sets buf and end to
 * the file's bytes; take() consumes n of them (into dst unless NULL), -1 past the end. */
#ifndef RQ_TESTS_QUANT_GOLDEN_CURSOR_H
#define RQ_TESTS_QUANT_GOLDEN_CURSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static const uint8_t *buf, *end;

static int take(void *dst, size_t n)
{
	if ((size_t)(end - buf) < n)
		return -1;
	if (dst)
		memcpy(dst, buf, n);
	buf += n;
	return 0;
}

#endif
