/* err.h — error reports that travel from library code to the CLI.
 *
 * Library functions return 0 or a negative errno and, when given a struct
 * rq_err, describe the failure in words that name the file, tensor or option
 * at fault. Only the CLI prints.
 *
 * Every %s argument is escaped (base/esc.h: control bytes, invalid UTF-8,
 * C1 and bidi controls spelled out), so names and values from input can go
 * into a message as they are; only the format's own text may hold "\n". */
#ifndef RQ_BASE_ERR_H
#define RQ_BASE_ERR_H

#include <stddef.h>

struct rq_err {
	int code;          /* the negative errno last set, 0 when none */
	char msg[1024];    /* one line, no trailing newline */
};

/* Formats into e (may be NULL) and returns code, so callers can write
 * `return rq_errf(err, -EINVAL, "...", ...);`. */
int rq_errf(struct rq_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Appends to the message already in e (a deliberate list of lines: the
 * format may hold "\n", its %s arguments are escaped). Returns e->code. */
int rq_err_append(struct rq_err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Prefixes an existing message: "<prefix>: <old message>". Returns e->code. */
int rq_err_prefix(struct rq_err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
