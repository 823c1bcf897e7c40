/* err.c — error messages, with every string argument escaped.
 *
 * Decision (issue 17, class 6): the escaping is done here, once, rather than
 * at each of the hundreds of call sites: rq_errf formats with rq_vfmt_esc
 * (esc.h), which runs each %s argument through rq_esc_n, so a tensor name,
 * key or file content holding ESC [ or a newline can neither drive the
 * terminal nor fake a line of output. Literal text of the format (the only
 * place a deliberate "\n" may come from) is copied as is; a message that
 * wants lines made of input text builds them with rq_err_append. rq_esc
 * leaves '\' alone, so text escaped before it is passed as %s comes out
 * unchanged.
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it.
 *
 *   file.c    bounded, non-blocking reads of named files
 *   err.c     error messages, every string argument escaped
 *   pool.c    persistent workers; one parallel loop at a time
 *   sha256.c  SHA-256 (FIPS 180-4)
 *   esc.c     escaping of input text for messages
 */
#include "base/err.h"
#include "base/esc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int rq_errf(struct rq_err *e, int code, const char *fmt, ...)
{
	if (!e)
		return code;
	va_list ap;
	va_start(ap, fmt);
	rq_vfmt_esc(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	e->code = code;
	return code;
}

int rq_err_append(struct rq_err *e, const char *fmt, ...)
{
	if (!e)
		return 0;
	size_t l = strlen(e->msg);
	if (l + 1 < sizeof e->msg) {
		va_list ap;
		va_start(ap, fmt);
		rq_vfmt_esc(e->msg + l, sizeof e->msg - l, fmt, ap);
		va_end(ap);
	}
	return e->code;
}

int rq_err_prefix(struct rq_err *e, const char *fmt, ...)
{
	if (!e)
		return 0;
	char head[512], old[sizeof e->msg];
	va_list ap;
	va_start(ap, fmt);
	rq_vfmt_esc(head, sizeof head, fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof old);
	/* A message that no longer fits ends in "..." rather than mid-word. */
	if (snprintf(e->msg, sizeof e->msg, "%s: %s", head, old) >= (int)sizeof e->msg)
		memcpy(e->msg + sizeof e->msg - 4, "...", 4);
	return e->code;
}
