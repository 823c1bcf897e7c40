#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int rq_errf(struct rq_err *e, int code, const char *fmt, ...)
{
	if (!e)
		return code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	e->code = code;
	return code;
}

int rq_err_prefix(struct rq_err *e, const char *fmt, ...)
{
	if (!e)
		return 0;
	char head[512], old[sizeof e->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(head, sizeof head, fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof old);
	/* A message that no longer fits ends in "..." rather than mid-word. */
	if (snprintf(e->msg, sizeof e->msg, "%s: %s", head, old) >= (int)sizeof e->msg)
		memcpy(e->msg + sizeof e->msg - 4, "...", 4);
	return e->code;
}
