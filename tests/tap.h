/* tap.h — the smallest TAP producer: plan-less ok/not ok lines, a summary,
 * and an exit code meson understands. */
#ifndef RQ_TESTS_TAP_H
#define RQ_TESTS_TAP_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* xorshift64 (13, 7, 17): *state advanced and returned, test data that is
 * the same on every run and machine; tap_xorshift: its bits 16..47. */
static inline uint64_t tap_xorshift64(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *state = x;
}

static inline uint32_t tap_xorshift(uint64_t *state)
{
	return (uint32_t)(tap_xorshift64(state) >> 16);
}

/* A whole file, NUL-terminated (malloc'd; the caller frees), its length in
 * *len when len is not NULL; NULL if it cannot be opened or read. */
static inline char *tap_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = n >= 0 ? (char *)malloc((size_t)n + 1) : NULL;
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	fclose(f);
	if (s) {
		s[n] = 0;
		if (len)
			*len = (size_t)n;
	}
	return s;
}

/* Removes dir and everything under it (a test's temp dir), as far as it can. */
static inline void tap_rmtree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[4096];
	while (d && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		int n = snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		if (n > 0 && (size_t)n < sizeof p && unlink(p))
			tap_rmtree(p);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

static inline int tap_done(void)
{
	printf("1..%d\n", tap_n);
	if (tap_failed)
		printf("# %d of %d failed\n", tap_failed, tap_n);
	return tap_failed ? 1 : 0;
}

#endif
