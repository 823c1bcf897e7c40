/* tap.h — the smallest TAP producer: plan-less ok/not ok lines, a summary,
 * and an exit code meson understands. */
#ifndef RQ_TESTS_TAP_H
#define RQ_TESTS_TAP_H

#include <stdio.h>
#include <stdlib.h>

static int tap_n, tap_failed;

#define TAP_OK(cond, ...) do { \
	int tap_c_ = !!(cond); \
	printf("%s %d - ", tap_c_ ? "ok" : "not ok", ++tap_n); \
	printf(__VA_ARGS__); \
	printf("\n"); \
	if (!tap_c_) { \
		tap_failed++; \
		printf("#   at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
	} \
} while (0)

/* Skips the whole program with a reason. Meson (protocol 'tap') reports a
 * plan of "1..0 # SKIP reason" with exit 0 as SKIP; exit 77 would be an
 * ERROR under TAP, so it is only for tests run with protocol 'exitcode'. */
#define TAP_SKIP_ALL(...) do { \
	printf("1..0 # SKIP "); \
	printf(__VA_ARGS__); \
	printf("\n"); \
	fflush(stdout); \
	exit(0); \
} while (0)

static inline int tap_done(void)
{
	printf("1..%d\n", tap_n);
	if (tap_failed)
		printf("# %d of %d failed\n", tap_failed, tap_n);
	return tap_failed ? 1 : 0;
}

#endif
